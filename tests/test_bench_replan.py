"""bench/replan.py runs end to end on the CPU: three ways per query, equal counts, the tables written,
and sgsi's internals left as they were."""

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import replan  # noqa: E402


def test_replan_bench_writes_each_way_and_restores_the_engine(tmp_path):
    import sgsi.graph as graph_mod
    from sgsi.join import engine as engine_mod
    before = (graph_mod.make_plan, engine_mod.REPLAN_FACTOR, engine_mod.Engine.count)
    replan.main(["--edges", "3e4", "--sizes", "3", "--queries", "2", "--runs", "1", "--device", "cpu",
                 "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    assert (graph_mod.make_plan, engine_mod.REPLAN_FACTOR, engine_mod.Engine.count) == before
    with open(tmp_path / "out" / "replan.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        assert int(r["matches"]) > 0 and int(r["refine_cost"]) > 0
        assert int(r["candidates_refined"]) <= int(r["candidates"])
        assert all(float(r[f"{w}_s"]) > 0 and int(r[f"{w}_work"]) > 0 for w in ("default", "up_front", "never"))
    text = (tmp_path / "out" / "replan.md").read_text()
    assert "| k | matches | candidates |" in text and "x refine_cost" in text
