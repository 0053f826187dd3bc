"""bench/hard.py --merge: one table of a set run in parts."""

import csv
import subprocess
import sys
from pathlib import Path

HARD = Path(__file__).resolve().parents[1] / "bench" / "hard.py"
sys.path.insert(0, str(HARD.parent))
import hard  # noqa: E402


def _part(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=hard.FIELDS)
        w.writeheader()
        for query, status, seconds, expected, match in rows:
            w.writerow({"query": query, "group": hard.group_of(query), "status": status, "count": 5,
                        "expected": expected, "match": match, "seconds": seconds,
                        "cancel_latency_s": 0.05 if status == "cancelled" else None, "mem_growth_mib": 1.0})


def test_merge_counts_each_query_once_the_later_part_winning(tmp_path):
    _part(tmp_path / "a.csv", [("query_dense_8_1.graph", "ok", 0.5, 5, True),
                               ("query_dense_8_2.graph", "cancelled", 10.0, 7, None)])
    _part(tmp_path / "b.csv", [("query_dense_8_2.graph", "ok", 3.0, 5, True),       # a rerun of a.csv's
                               ("query_sparse_32_1.graph", "ok", 2.0, None, None),
                               ("query_sparse_32_2.graph", "ok", 0.2, 4, False)])
    out = subprocess.run([sys.executable, str(HARD), "--merge", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")],
                         check=True, capture_output=True, text=True).stdout
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in out.splitlines() if line.startswith("| ")}
    assert rows["**all**"][1:4] == ["4", "2 (50%)", "4 (100%)"]
    assert rows["dense_8"][1:4] == ["2", "1 (50%)", "2 (100%)"] and rows["dense_8"][6] == "0"   # none cancelled
    assert rows["with a known count"][1] == "3" and rows["without one"][1] == "1"
    assert "MISMATCH query_sparse_32_2.graph: 5 expected 4" in out


def test_the_order_search_columns_read_the_query_stats():
    """``search_s``: the search's seconds wherever one ran; ``deferred``: the vertices moved last
    only where the query switched to that order."""
    ran = {"order_search": {"seconds": 0.25, "switched": False, "deferred": 3}}
    assert hard.search_seconds(ran) == 0.25 and hard.deferred(ran) == 0
    switched = {"order_search": {"seconds": 0.5, "switched": True, "deferred": 3}}
    assert hard.search_seconds(switched) == 0.5 and hard.deferred(switched) == 3
    assert hard.search_seconds({}) is None and hard.deferred({}) == 0
    assert {"search_s", "deferred", "reordered"} <= set(hard.FIELDS)
