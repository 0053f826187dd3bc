"""Bounded memory: a query's intermediate results may be many times its budget; whatever ends a
query, what it took goes back; a shortage of memory runs it again on half the budget."""

import gc
import linecache
import re
import threading
import time
import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.errors import BudgetError, Cancelled
from sgsi.join.query import memory_floor
from sgsi.join.backends.cpu import CpuBackend

CYCLE = "(a)-->(b)-->(c)-->(d)-->(a)"
#: Seconds a cancel may take to stop a query (a liveness bound on a slow CI machine).
CANCEL_BOUND = 2.0


@pytest.fixture(scope="module")
def cycles(tmp_path_factory):
    """A random digraph (300 vertices, 6,000 edges) and its number of directed 4-cycles of distinct
    vertices by linear algebra: closed 4-walks, less those through a 2-cycle twice."""
    d = rh.dense_graph(tmp_path_factory.mktemp("cycles"), n=300, m=6000, budget="64KB")
    t = pq.read_table(d["efile"])
    a = np.zeros((300, 300), np.int64)
    a[t["src"].to_numpy(), t["dst"].to_numpy()] = 1
    np.fill_diagonal(a, 0)
    two = a * a.T                       # 2-cycles
    d["cycles"] = int(np.trace(np.linalg.matrix_power(a, 4)) - 2 * (two.sum(1) ** 2).sum() + two.sum())
    with sgsi.open(d["store"]) as g:
        d["floor"] = memory_floor(g.store)
    return d


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_intermediate_results_many_times_the_budget(cycles):
    """Paths a->b->c->d take some 40 MB at 16 bytes a row; the budget is 1 MB."""
    with sgsi.open(cycles["store"]) as g:
        tracemalloc.start()
        try:
            n = g.count(CYCLE, device="cpu", memory_budget="1MB")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert n == cycles["cycles"]
        assert g.last_stats["chunks"] > 20
        assert peak < (1 << 20) + (4 << 20), peak           # the budget and the fixed state
        rows = sum(b.num_rows for b in g.match(CYCLE, device="cpu", memory_budget="1MB"))
        assert rows == cycles["cycles"]


def test_memory_shortage_runs_the_query_again_on_half_the_budget(cycles, monkeypatch):
    real = CpuBackend.extend
    failures = []

    def short(self, *args, **kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise MemoryError("Unable to allocate 4.40 GiB")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(CpuBackend, "extend", short)
    with sgsi.open(cycles["store"]) as g:
        assert g.count(CYCLE, device="cpu", memory_budget="64MB") == cycles["cycles"]
        assert g.last_stats["budget_halved"] == 2
        failures.clear()
        assert sum(b.num_rows for b in g.match(CYCLE, device="cpu", memory_budget="64MB")) == cycles["cycles"]

        def never(self, *args, **kwargs):
            raise MemoryError("Unable to allocate 4.40 GiB")
        monkeypatch.setattr(CpuBackend, "extend", never)
        with pytest.raises(BudgetError, match="floor"):
            g.count(CYCLE, device="cpu", memory_budget="1MB")
        monkeypatch.setattr(CpuBackend, "extend", real)
        assert g.count(CYCLE, device="cpu", memory_budget="1MB") == cycles["cycles"]


def test_fifty_hostile_queries_leave_the_process_as_it_was(cycles, dense):
    """Cancels, budgets under the floor, bad patterns, successes and readers closed early, in one
    process on one Graph: nothing is held after them, and the next query is right."""
    g = sgsi.open(dense["store"])
    small = sgsi.open(cycles["store"])
    budget = dense["budget"]
    small.count(CYCLE, device="cpu", memory_budget="64MB")           # caches and imports warm
    g.match(rh.HUGE, device="cpu", memory_budget=budget, max_rows=10).read_all()
    latencies = []

    def cancelled(i):
        ev = threading.Event()
        timer = _Timer(0.05 + 0.01 * (i % 7), ev.set)
        timer.start()
        with pytest.raises(Cancelled):
            g.count(rh.HUGE, device="cpu", memory_budget=[budget, "64MB", None][i % 3], cancel=ev)
        latencies.append(time.monotonic() - timer.fired)

    big = sgsi.build(str(cycles["dir"] / "big-segments.sgsi"), edges=cycles["efile"], memory_budget="8MB",
                     force=True)
    floor = memory_floor(big.store)
    assert floor > 16 << 10

    def under_floor(_i):
        with pytest.raises(BudgetError, match="floor"):
            big.count(CYCLE, device="cpu", memory_budget=floor - 1)

    def bad_pattern(_i):
        with pytest.raises(sgsi.SgsiError):
            g.count("(a)-->(", device="cpu")

    def closed_early(i):
        reader = g.match(rh.HUGE, device="cpu", memory_budget=budget)
        for _ in range(1 + i % 3):
            reader.read_next_batch()
        reader.close()

    def success(_i):
        assert small.count(CYCLE, device="cpu", memory_budget="64MB") == cycles["cycles"]

    kinds = [cancelled, under_floor, bad_pattern, closed_early, success]
    gc.collect()
    rss0 = _rss()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(50):
            kinds[i % len(kinds)](i)
        linecache.clearcache()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held < 512 << 10, held
    assert _rss() - rss0 < 64 << 20
    assert max(latencies) < CANCEL_BOUND, latencies
    assert small.count(CYCLE, device="cpu") == cycles["cycles"]
    for graph in (g, small, big):
        graph.close()


class _Timer(threading.Timer):
    """A timer that records when it fired (``fired``), for the cancel latency."""

    fired = None

    def run(self):
        self.finished.wait(self.interval)
        if not self.finished.is_set():
            self.fired = time.monotonic()
            self.function(*self.args, **self.kwargs)
        self.finished.set()


def test_a_long_query_reports_its_progress(cycles, monkeypatch, capsys):
    """Past progress.AFTER seconds a query writes lines with its share of the work done and its
    rows so far: to stderr by default, to a callable, or nowhere with progress=False."""
    from sgsi.join import progress as progress_mod
    monkeypatch.setattr(progress_mod, "AFTER", 0.0)
    monkeypatch.setattr(progress_mod, "EVERY", 0.0)
    lines = []
    with sgsi.open(cycles["store"]) as g:
        assert g.count(CYCLE, device="cpu", memory_budget="1MB", progress=lines.append) == cycles["cycles"]
        shares = [float(re.search(r"(?:about|under) ([\d.]+)% done", line).group(1)) for line in lines]
        drops = sum(b < a for a, b in zip(shares, shares[1:]))      # the work starts again once if replanned
        assert len(lines) > 10 and drops <= g.last_stats["replanned"], shares
        assert 0 <= min(shares) and 0 < max(shares) <= 100, shares
        assert any("left at this pace" in line for line in lines), lines
        assert lines[-1].endswith("matches so far") and lines[0].startswith("sgsi: ")
        capsys.readouterr()
        rows = sum(b.num_rows for b in g.match(CYCLE, device="cpu", memory_budget="64MB"))
        err = capsys.readouterr().err
        assert rows == cycles["cycles"] and "rows so far" in err
        g.count(CYCLE, device="cpu", memory_budget="64MB", progress=False)
        assert capsys.readouterr().err == ""
        with pytest.raises(sgsi.SgsiError, match="progress must be"):
            g.count(CYCLE, device="cpu", progress="yes")
