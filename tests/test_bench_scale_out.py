"""bench/scale_out.py --walks: random walks of a generated R-MAT graph as a set, sharded and checked."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "scale_out.py"


def test_walks_are_a_set_of_their_own(tmp_path):
    """The walks of each size are written as query_walk<k>_<i>.graph beside the generated graph (a
    run's old walks removed), the graph's store is built, and every screened walk is counted on
    the cluster as in one process (the bench asserts the counts agree)."""
    folder = tmp_path / "rmat-small-3000-walks" / "queries"
    folder.mkdir(parents=True)
    (folder / "query_walk9_0.graph").write_text("(a)-->(b)\n")          # another run's
    out = tmp_path / "out.md"
    got = subprocess.run([sys.executable, str(BENCH), "--walks", "--edges", "3000", "--shape", "small",
                          "--sizes", "3", "4", "--queries", "2", "--graphs", str(tmp_path), "--workers", "1",
                          "--long", "4", "--short", "0", "--min-seconds", "0", "--repeat", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == [f"query_walk{k}_{i}.graph" for k in (3, 4) for i in (0, 1)]
    assert (tmp_path / "rmat-small-3000.sgsi").is_dir()
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert len(rows) == 4 and {r["set"] for r in rows} == {"walks"}
    assert all(int(r["count"]) > 0 for r in rows)          # a walk matches at least itself
