"""The engine's own resource limits: memory across the depth of a pattern,
deep patterns, and rows that share a high-degree vertex.

A query holds one piece and one output slice per join step at a time, and
each step sizes its pieces from the budget the levels above it left; the depth-first walk is driven by an explicit
stack, so patterns of many vertices neither exhaust memory nor the Python
stack; rows that join through one hub stream its list once per window of
the budget, not once per row.
"""

import inspect
import sys
import tracemalloc
from contextlib import contextmanager

import numpy as np
import pytest

import reliability_helpers as rh
import sgsi
from sgsi import budget as budget_mod
from sgsi.join.backends import get_backend
from sgsi.join.engine import Engine
from sgsi.join.plan import make_plan
from sgsi.pattern import parse_pattern


@contextmanager
def _ring(tmp_path, n, store_budget):
    """A directed cycle 0 -> 1 -> ... -> n-1 -> 0, built at ``store_budget``."""
    src = np.arange(n, dtype=np.int64)
    e = rh.write_edges(tmp_path / f"ring{n}.parquet", src, (src + 1) % n)
    with sgsi.build(str(tmp_path / f"ring{n}.sgsi"), edges=e, memory_budget=store_budget) as g:
        yield g


def _path(k):
    """A directed path of k pattern vertices."""
    return "-->".join(f"(v{i})" for i in range(k))


def test_memory_bounded_by_budget_across_depth(tmp_path):
    """Peak traced memory of a 40-vertex path on an 800-vertex cycle at a 256KB budget.

    Before the steps shared the budget, every level of the depth-first walk
    kept the whole table its join made: 6.9x the budget here. Now about 3x:
    at this budget every level is at its floor (4 rows), and what is left is
    the NumPy header of each of the ~40 columns held per level.
    """
    budget = 256 * 1024
    with _ring(tmp_path, 800, "256KB") as g:
        g.count(_path(3), device="cpu", memory_budget=budget)            # warm caches and imports
        tracemalloc.start()
        try:
            assert g.count(_path(40), device="cpu", memory_budget=budget) == 800
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak <= 4 * budget, f"peak {peak:,} bytes at a budget of {budget:,}"


def test_match_memory_bounded_by_budget_across_depth(tmp_path):
    """The same with every match materialised (the last step extends instead of counting)."""
    budget = 256 * 1024
    with _ring(tmp_path, 800, "256KB") as g:
        g.match(_path(3), device="cpu", memory_budget=budget).read_all()   # imports pyarrow.compute
        tracemalloc.start()
        try:
            n = 0
            for batch in g.match(_path(40), device="cpu", memory_budget=budget):
                n += batch.num_rows
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert n == 800
    assert peak <= 4 * budget, f"peak {peak:,} bytes at a budget of {budget:,}"


def test_deep_patterns_without_deep_recursion(tmp_path):
    """A 120-vertex path with only 100 frames of stack to spare (the engine called directly).

    The query's budget is 1MB on a store of 64KB segments: 3,000 pieces over the 120 levels
    (at 64KB, 12,000 and four times as long).
    """
    with _ring(tmp_path, 150, "64KB") as g:
        backend = get_backend("cpu")
        plan = make_plan(g.store, parse_pattern(_path(120)), backend)
        engine = Engine(g.store, plan, backend, budget_mod.parse_size("1MB"))
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(len(inspect.stack()) + 100)
        try:
            n = engine.count()
        finally:
            sys.setrecursionlimit(old)
        assert n == 150


def test_hub_rows_share_one_neighbour_stream(tmp_path):
    """Segments read for `(b)<--(a)-->(c)` on a 1,500-edge star, against the partition's segment count.

    The rows all link to the hub: they form one piece whose GBA holds the
    hub's list once (in windows when it exceeds the budget's share), where
    one-row pieces each re-read the list (10,822 reads of 28 segments).
    """
    n = 1500
    e = rh.write_edges(tmp_path / "star.parquet", np.zeros(n, np.int64), np.arange(1, n + 1, dtype=np.int64))
    with sgsi.build(str(tmp_path / "star.sgsi"), edges=e, memory_budget="64KB") as g:
        segs = len(g.store._seg_edges)
        assert g.count("(b)<--(a)-->(c)", device="cpu", memory_budget="64KB") == n * (n - 1)
        read = g.last_stats["segments"]
        rows = rh.rows_of(g.match("(b)<--(a)-->(c)", device="cpu", memory_budget="64KB"))
    assert read <= 20 * segs, f"{read:,} segment reads for a store of {segs} segments"
    assert len(rows) == n * (n - 1) and len(set(rows)) == len(rows)
    assert all(a == 0 and b != c and b > 0 and c > 0 for b, a, c in rows)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_hub_windows_with_later_links(tmp_path, device):
    """A hub whose list exceeds the budget's share is read once, in windows, while each
    window's later links read their own lists (nested segment streams, on either backend).

    Star 0 -> 1..n plus the path 1 -> 2 -> ... -> n: `(b)<--(a)-->(c), (b)-->(c)` has
    a = 0 and (b, c) = (i, i + 1), n - 1 matches.
    """
    if device == "gpu":
        from sgsi.join.backends import gpu_available
        if not gpu_available():
            pytest.skip("no CUDA GPU")
    n = 3000
    leaves = np.arange(1, n + 1, dtype=np.int64)
    src = np.concatenate([np.zeros(n, np.int64), leaves[:-1]])
    dst = np.concatenate([leaves, leaves[1:]])
    e = rh.write_edges(tmp_path / "starpath.parquet", src, dst)
    pattern = "(b)<--(a)-->(c), (b)-->(c)"
    with sgsi.build(str(tmp_path / "sp.sgsi"), edges=e, memory_budget="64KB") as g:
        assert g.count(pattern, device=device, memory_budget="64KB") == n - 1
        assert g.last_stats["chunks"] > 1                       # the hub was read in windows
        rows = rh.rows_of(g.match(pattern, device=device, memory_budget="64KB"))
        assert rows == [(i, 0, i + 1) for i in range(1, n)]
        assert g.count("(b)<--(a)-->(c)", device=device, memory_budget="64KB") == n * (n - 1)
