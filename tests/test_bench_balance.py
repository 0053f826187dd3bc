"""bench/balance.py runs end to end (on the CPU: both settings count alike there)."""

import csv
import subprocess
import sys
from pathlib import Path

BALANCE = Path(__file__).resolve().parents[1] / "bench" / "balance.py"


def test_balance_bench_writes_one_row_per_query_and_mode(tmp_path):
    subprocess.run([sys.executable, str(BALANCE), "--edges", "3e4", "--sizes", "3", "--queries", "2", "--runs", "1",
                    "--device", "cpu", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")], check=True)
    with open(tmp_path / "out" / "balance.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["mode"] for r in rows) == ["count", "count", "match", "match"]
    for r in rows:
        assert int(r["matches"]) > 0 and float(r["wall_s"]) > 0 and float(r["wall_warp_only_s"]) > 0
    text = (tmp_path / "out" / "balance.md").read_text()
    assert "warp-only / balanced" in text and "R-MAT a=0.57" in text
