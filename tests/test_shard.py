"""Sharded queries on Dask (sgsi/shard/, sgsi/join/shard.py): the same counts and rows as one process.

Most tests share one 2-worker LocalCluster of threads (``processes=False``, started once for the
module); ``test_real_processes`` starts its own cluster of two processes through ``workers=2``.
Random graphs are checked against the oracle and the vendored HPRD benchmark against its
expected counts, at the default budget and at 16KB; then cancel, an early close, errors from
tasks, a task run twice, the interfaces' options, and sgsi without Dask.
"""

import glob
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import build_stores, oracle_matches, random_graph, random_pattern, write_edges
from sgsi.errors import BudgetError, Cancelled, PatternError, SgsiError
from sgsi.join import shard as shard_mod
from sgsi.join.query import Query
from sgsi.join.shard import restrict
from sgsi.pattern import parse_pattern
from sgsi.shard import tasks

distributed = pytest.importorskip("distributed")

BENCH = Path(__file__).parent / "data" / "benchmarks" / "hprd"
REPO = Path(__file__).resolve().parent.parent
CPU = "cpu"
HEAVY = "(a)--(b)--(c)--(d)--(e)--(f)--(g)"        # minutes on HPRD: for cancels and early closes
#: Seconds a stopped query's tasks may take to end (their latency is measured, not asserted: it is
#: the engine's own, 0.05-0.85 s on the loaded 2-core machine; see docs/architecture.md).
STOP_BOUND = 5
_MATCH = tasks.match
_COUNT = tasks.count


@pytest.fixture(autouse=True)
def sharded(monkeypatch):
    """Every query here is split into tasks, however small its estimated work (LOCAL_WORK 0), and
    no count's whole query runs as a task beside the split (WHOLE); ``test_small_queries_run_in_the_driver``
    and the tests of the whole query's task check the defaults."""
    from sgsi.shard import driver
    monkeypatch.setattr(driver, "LOCAL_WORK", 0)
    monkeypatch.setattr(driver, "WHOLE", dict.fromkeys(driver.WHOLE, False))


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                       scheduler_kwargs={"dashboard_address": ":0"})
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """A random graph (its edges, vertex labels) and its stores at the default budget and 16KB."""
    d = tmp_path_factory.mktemp("shard")
    rng = random.Random(4242)
    edges, vlabels = random_graph(rng, 60, 360, 3, 3)
    edges += [(0, v, "E0") for v in range(1, 60, 2)]       # a hub: a heavy root of its own
    out = build_stores(d, edges, vlabels)
    yield edges, vlabels, out
    for g in out.values():
        g.close()


@pytest.fixture(scope="module")
def hprd(tmp_path_factory):
    d = tmp_path_factory.mktemp("hprd")
    out = {b: sgsi.build(str(d / f"hprd-{b or 'default'}.sgsi"), graph=str(BENCH / "data.graph"), memory_budget=b)
           for b in (None, "16KB")}
    yield out
    for g in out.values():
        g.close()


def rows(reader):
    t = reader.read_all()
    return Counter(zip(*[c.to_pylist() for c in t.columns])), t.schema


def project(matches, pattern):
    cols = parse_pattern(pattern).output_vertices
    return Counter(tuple(m[i] for i in cols) for m in matches)


def scratch_dirs():
    """This process's scratch directories of sharded queries (other test processes make theirs)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"sgsi-scratch-{os.getpid()}-shard-*")))


def gone(before):
    """Whether this process's scratch directories are ``before``'s again (within a second: a task
    still stopping may write into one as it goes)."""
    t0 = time.monotonic()
    while scratch_dirs() != before and time.monotonic() - t0 < 1:
        time.sleep(0.01)
    return scratch_dirs() == before


def wait_idle(client, timeout=2 * STOP_BOUND):
    """Seconds until the cluster's workers (threads of this process) run no sgsi task (fails
    past ``timeout``): a cancelled task's thread runs on until it stops, with the scheduler's
    record of it gone."""

    t0 = time.monotonic()
    while tasks._RUNNING or any(client.processing().values()):
        assert time.monotonic() - t0 < timeout, tasks._RUNNING
        time.sleep(0.01)
    return time.monotonic() - t0


def _match_twice(*args, **kwargs):
    """A match task run twice in a row, as Dask runs it again after its worker died."""
    _MATCH(*args, **kwargs)
    return _MATCH(*args, **kwargs)


# ---------------------------------------------------------------------------
# The split
# ---------------------------------------------------------------------------


def test_shards_tile_the_ids_and_restrict_exactly(graphs, monkeypatch):
    """Each cut vertex's ranges tile [0, n); the shards take each combination of them once."""
    monkeypatch.setattr(shard_mod, "MAX_SEED_ROWS", 0)        # no split by partial matches
    _e, _v, stores = graphs
    g = stores[None]
    for p in ["(h)-[:E0]->(x)-->(y)", "(a:0)-->(b:1)-->(c:2)-->(a)"]:
        shards = Query(g.store, g._backends, p, CPU).shards(6)
        assert [s.cost for s in shards] == sorted((s.cost for s in shards), reverse=True)   # heaviest first
        levels = [v for v, _lo, _hi in shards[0].ranges]
        tiles = {v: sorted({(lo, hi) for s in shards for w, lo, hi in s.ranges if w == v}) for v in levels}
        for v, ranges in tiles.items():
            assert ranges[0][0] == 0 and ranges[-1][1] == g.store.n_vertices
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert len({s.ranges for s in shards}) == len(shards) == np.prod([len(r) for r in tiles.values()]) > 1
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**32, size=9, dtype=np.uint64).astype(np.uint32)      # 288 vertices
    want = np.unpackbits(bits.view(np.uint8), bitorder="little")
    for lo, hi in [(0, 288), (0, 0), (3, 3), (5, 37), (32, 64), (31, 33), (100, 288), (250, 300)]:
        got = np.unpackbits(restrict(np, bits, lo, hi).view(np.uint8), bitorder="little")
        keep = np.zeros(288, bool)
        keep[lo:hi] = True
        assert np.array_equal(got, want & keep), (lo, hi)


def test_seeded_shards_partition_the_first_steps_matches(graphs):
    """Split by partial matches: the shards' seeds are the prefix's rows, each once, in slices of
    equal size, on the first vertices of the split plan's order."""
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)-->(b)-->(c)-->(d)"
    shards = Query(g.store, g._backends, p, CPU).shards(4)
    assert shards and all(s.seed and not s.ranges for s in shards)
    vertices = [u for u, _c in shards[0].seed]
    assert vertices == list(shards[0].order[:len(vertices)]) and 2 <= len(vertices) < 4
    sizes = [s.seed[0][1].size for s in shards]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) >= shard_mod.SEED_ROWS_PER_TASK * 4
    got = Counter(tuple(int(c[i]) for _u, c in s.seed) for s in shards for i in range(s.seed[0][1].size))
    assert set(got.values()) == {1}
    # Between the prefix's own matches and the full matches' prefixes (refined sets prune some).
    names = [parse_pattern(p).vertices[u].name for u in vertices]
    path = "abcd"
    sub = ", ".join(f"({x})-->({y})" for x, y in zip(path, path[1:]) if x in names and y in names)
    at = [[v.name for v in parse_pattern(sub).vertices].index(x) for x in names]     # sub's tuples, as seeds
    seeds = {tuple(g.store.vertex_ids(np.array(row, np.int32)).to_pylist()) for row in got}
    full = {tuple(m[u] for u in vertices) for m in oracle_matches(edges, vlabels, p)}
    assert full <= seeds <= {tuple(m[i] for i in at) for m in oracle_matches(edges, vlabels, sub)}
    assert len(full) > 4


def test_seed_depth_deepens_to_ample_rows(monkeypatch):
    """The least depth with AMPLE_ROWS_PER_TASK a task; else the deepest with SEED_ROWS_PER_TASK
    within MAX_SEED_ROWS; each depth joined from the last one's rows."""
    from types import SimpleNamespace
    monkeypatch.setattr(shard_mod, "SEED_ROWS_PER_TASK", 2)
    monkeypatch.setattr(shard_mod, "AMPLE_ROWS_PER_TASK", 10)
    plan = SimpleNamespace(order=list(range(8)), factored=0)

    def run(counts):
        seen = []

        def prefix(depth, seed):
            seen.append(len(seed))
            n = counts[depth - 1]
            yield {u: np.arange(n, dtype=np.int32) for u in range(depth + 1)}
        out = shard_mod.split_rows(plan, prefix, 4)
        assert seen == [0] + list(range(2, len(seen) + 1))          # depth d from depth d - 1's rows
        return out if not out else (len(out[0].seed), sum(s.seed[0][1].size for s in out))
    assert run([3, 30, 9, 500, 7]) == (5, 500)                      # 40 rows ample: stops at 500
    assert run([3, 9, 12, 30, 20, 10]) == (7, 10)                   # none ample: the deepest with 8
    monkeypatch.setattr(shard_mod, "MAX_SEED_ROWS", 100)
    assert run([3, 12, 101]) == (3, 12)                             # too many: the depth before
    assert run([3, 101]) is None and run([3, 0]) == []


def test_a_counts_seeds_stay_together_by_the_columns_it_carries_to_its_end():
    """``group_by``: the rows equal on the seeded vertices among them go to one task (every row
    once); too few groups for GROUPS_PER_WORKER a worker: the first depth deeper with enough,
    else the groups there are; one group: shuffled, as without."""
    from types import SimpleNamespace
    plan = SimpleNamespace(order=list(range(6)), factored=0)
    rng = np.random.default_rng(5)
    n = 8000                                # ample at depth 1 for 8 tasks
    cols = {0: rng.integers(0, 3, n), 1: rng.integers(0, 40, n), 2: rng.integers(0, 50, n),
            3: np.zeros(n), 4: np.zeros(n)}
    cols = {u: c.astype(np.int32) for u, c in cols.items()}

    def prefix(depth, seed):
        yield {u: cols[u] for u in range(depth + 1)}

    def tasks_of(group_by, workers=2, depth=1):
        out = shard_mod.split_rows(plan, prefix, 8, workers, group_by)
        assert len(out[0].seed) == depth + 1
        every = Counter(zip(*(cols[u].tolist() for u in range(depth + 1))))
        assert Counter(r for s in out for r in zip(*(c.tolist() for _u, c in s.seed))) == every   # a partition
        return [{tuple(int(dict(s.seed)[u][i]) for u in sorted(group_by) if u <= depth)
                 for i in range(s.seed[0][1].size)} for s in out]

    def disjoint(groups):
        return all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1:])
    for group_by in ({0, 1}, {1}, {1, 5}):
        groups = tasks_of(group_by)
        assert len(groups) > 4 and disjoint(groups), group_by
    assert disjoint(tasks_of({0}, workers=1))           # 3 groups, enough on 1 worker
    assert disjoint(tasks_of({0, 2}, depth=2))          # 3 at depth 1 on 2 workers: depth 2's
    groups = tasks_of({0, 3})                           # never 4 within the core: depth 1's 3
    assert disjoint(groups) and len(groups) == 3
    assert not disjoint(tasks_of({3}))                  # one group: shuffled


def test_groups_of_wide_columns_are_exact():
    """The groups of rows equal on their key columns, past int64's range of the ranks' product."""
    rng = np.random.default_rng(9)
    n = 70000
    key = [rng.integers(0, 1 << 30, n).astype(np.int32) for _ in range(5)]     # ranks' product ~2^80
    for c in key:
        c[:n // 2:2] = c[1:n // 2:2]                    # a quarter of the rows equal to their next on every column
    perm, starts = shard_mod._grouped(key, n)
    assert sorted(perm.tolist()) == list(range(n)) and starts[0] == 0 and starts[-1] == n
    rows = list(zip(*(c[perm].tolist() for c in key)))
    groups = [set(rows[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    assert all(len(g) == 1 for g in groups) and len(set().union(*groups)) == len(groups)
    assert len(groups) == len(set(zip(*(c.tolist() for c in key))))


def test_sharded_counts_do_not_merge_one_state_twice(graphs, client):
    """A count's tasks, seeded by groups of the vertices it carries to its end, count the oracle's
    matches (ring patterns: their middle columns are dropped and merged)."""
    edges, vlabels, stores = graphs
    for budget in (None, "16KB"):
        for p in ("(a)--(b)--(c)--(d)--(e), (e)--(a)", "(a)-->(b)-->(c)-->(d), (d)-->(a)"):
            n = stores[budget].count(p, device=CPU, client=client, memory_budget=budget, progress=False)
            assert n == len(oracle_matches(edges, vlabels, p)), (p, budget)


def test_row_cuts_come_in_rounds_of_shrinking_slices():
    """Slices tile [0, n); one round (no workers) cuts equal ones; with workers, each round of
    one slice a worker is ROUND_RATIO times smaller than the one before, the largest first."""
    for n, k, workers in [(1000, 8, 4), (1000, 12, 4), (997, 7, 3), (5, 8, 2), (1000, 4, None)]:
        cuts = shard_mod.row_cuts(n, k, workers)
        assert cuts[0] == 0 and cuts[-1] == n and len(cuts) == k + 1
        sizes = np.diff(cuts)
        assert (sizes >= 0).all() and (np.diff(sizes) <= 1).all()         # never growing (but rounding)
    sizes = np.diff(shard_mod.row_cuts(7000, 12, 4))
    assert sizes.tolist() == [1000] * 4 + [500] * 4 + [250] * 4
    assert np.diff(shard_mod.row_cuts(800, 8)).tolist() == [100] * 8


# ---------------------------------------------------------------------------
# Exact: counts and rows
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("budget,split", [(None, "rows"), ("16KB", "ranges")], ids=["default-rows", "16KB-ranges"])
def test_counts_and_rows_vs_oracle(graphs, client, budget, split, monkeypatch):
    if split == "ranges":
        monkeypatch.setattr(shard_mod, "MAX_SEED_ROWS", 0)
    edges, vlabels, stores = graphs
    g = stores[budget]
    rng = random.Random(7 if budget else 8)
    nonzero = 0
    for i in range(8):
        p = random_pattern(rng, rng.randint(2, 4), [0, 1, 2], ["E0", "E1", "E2"])
        injective = i % 3 != 2
        matches = oracle_matches(edges, vlabels, p, injective=injective)
        kw = {"device": CPU, "memory_budget": budget, "homomorphism": not injective}
        assert g.count(p, client=client, **kw) == len(matches), p
        assert g.last_stats["tasks"] >= 1
        if parse_pattern(p).output_names:
            got, schema = rows(g.match(p, client=client, **kw))
            assert got == project(matches, p), p
            assert schema == g.match(p, **kw).schema
        nonzero += bool(matches)
    assert nonzero >= 4


def test_shards_restrict_their_refined_plans(graphs, client, monkeypatch):
    """A task plans on refined sets at once, restricted before the refinement, in the split plan's
    order; its counts and rows stay the oracle's."""
    from sgsi.join import query
    seen = []
    make_plan = query.make_plan

    def recording(*args, shard=None, **kwargs):
        if shard is not None:
            # On the driver's refined sets: refined again only where candidate ranges cut them.
            seen.append(kwargs.get("refine_rounds", query.REFINE_ROUNDS) == (0 if shard.seed else query.REFINE_ROUNDS))
            assert kwargs.get("filtered") is not None
            plan = make_plan(*args, shard=shard, **kwargs)
            assert plan.order[:len(plan.order) - plan.factored] == \
                [u for u in shard.order if u in plan.order[:len(plan.order) - plan.factored]]
            assert [u for u, _c in shard.seed] == plan.order[:len(shard.seed)]
            return plan
        return make_plan(*args, **kwargs)
    monkeypatch.setattr(query, "make_plan", recording)      # the workers are threads of this process
    edges, vlabels, stores = graphs
    g = stores["16KB"]
    for p in ["(h:0)-[:E0]->(x)-->(y)-->(h)", "(a)-->(b)-->(c), (a)-->(c)", "(a:1)-->(b)<--(c:2)-->(d)"]:
        want = oracle_matches(edges, vlabels, p)
        assert g.count(p, device=CPU, memory_budget="16KB", client=client) == len(want), p
        assert rows(g.match(p, device=CPU, memory_budget="16KB", client=client))[0] == project(want, p), p
    assert seen and set(seen) == {True}


HPRD_QUERIES = ["query_dense_16_1.graph", "query_dense_16_2.graph", "query_dense_16_63.graph",
                "query_dense_16_81.graph", "query_dense_16_117.graph", "query_dense_16_153.graph"]


@pytest.mark.parametrize("budget", [None, "16KB"], ids=["default", "16KB"])
def test_hprd_benchmark_queries(hprd, client, budget):
    expected = {q: int(n) for q, n in (line.split() for line in (BENCH / "expected.txt").read_text().splitlines())}
    g = hprd[budget]
    for q in HPRD_QUERIES:
        path = str(BENCH / "queries" / q)
        assert g.count(path, device=CPU, memory_budget=budget, client=client) == expected[q], q
    for q in HPRD_QUERIES[-2:]:
        got, _ = rows(g.match(str(BENCH / "queries" / q), device=CPU, memory_budget=budget, client=client))
        assert sum(got.values()) == expected[q] and max(got.values()) == 1, q


def test_max_rows_overall(graphs, client):
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)-->(b)-->(c)"
    every = project(oracle_matches(edges, vlabels, p), p)
    for n in (0, 1, 7, 1000):
        got, _ = rows(g.match(p, device=CPU, max_rows=n, client=client))
        assert sum(got.values()) == n and not got - every
    got, _ = rows(g.match(p, device=CPU, max_rows=10**9, client=client))
    assert got == every


def test_real_processes(graphs):
    """workers=2 starts two worker processes (the parts come from other processes), and closes
    them and leaves nothing behind."""
    import psutil
    edges, vlabels, stores = graphs
    g = stores["16KB"]
    p = "(h)-[:E0]->(x)-->(y)"
    before = scratch_dirs()
    got, _ = rows(g.match(p, device=CPU, memory_budget="16KB", workers=2, progress=False))
    assert got == project(oracle_matches(edges, vlabels, p), p)
    assert g.last_stats["tasks"] > 2
    assert scratch_dirs() == before
    workers = [c for c in psutil.Process().children(recursive=True)
               if c.is_running() and c.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(c.cmdline())]
    assert not workers


# ---------------------------------------------------------------------------
# Bounded and stoppable
# ---------------------------------------------------------------------------


def _count_cancelled(g, client):
    """A count cancelled after 0.5 s stops within STOP_BOUND, its tasks and scratch directory gone."""
    before = scratch_dirs()
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        g.count(HEAVY, device=CPU, client=client, cancel=stop, progress=False)
    assert time.monotonic() - t0 < STOP_BOUND
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)
    return before


def test_cancel_stops_every_task(hprd, client):
    g = hprd[None]
    before = _count_cancelled(g, client)
    stop = threading.Event()
    reader, failure = g._match(HEAVY, device=CPU, client=client, cancel=stop, progress=False)
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(pa.ArrowInvalid, match="cancelled"):
        reader.read_all()
    assert isinstance(failure[0], Cancelled)
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)


def _count_but_whole(path, pattern, options, shard, *args, **kwargs):
    """A count task that fails where it is the whole query's (module level: Dask pickles it)."""
    if shard is None:
        raise MemoryError("the whole query's task fails")
    return _COUNT(path, pattern, options, shard, *args, **kwargs)


def _whole_on(monkeypatch):
    from sgsi.shard import driver
    monkeypatch.setattr(driver, "WHOLE", {"cpu": True, "gpu": False})
    return driver


def _split_until_stopped(driver, monkeypatch, seconds=10.0):
    """The driver's split waits at its cancel (the caller's, or the whole task's answer) before it splits."""
    split = driver._split

    def waiting(planner, *args, **kwargs):
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            planner.check()
            time.sleep(0.005)
        return split(planner, *args, **kwargs)
    monkeypatch.setattr(driver, "_split", waiting)


def test_a_counts_whole_task_answers_before_the_split(graphs, client, monkeypatch):
    """On a running cluster, a count's whole query runs as one task while the driver splits it;
    ending first, its count is the answer and the split stops. The task and its directory go."""
    driver = _whole_on(monkeypatch)
    _split_until_stopped(driver, monkeypatch)
    edges, vlabels, stores = graphs
    before = scratch_dirs()
    for budget, p in ((None, "(a)-[:E0]->(b)-->(c), (c)-->(a)"), ("16KB", "(a)--(b)--(c)--(d)")):
        t0 = time.monotonic()
        n = stores[budget].count(p, device=CPU, client=client, memory_budget=budget, progress=False)
        assert n == len(oracle_matches(edges, vlabels, p)), p
        assert time.monotonic() - t0 < 10                       # the split did not run
        s = stores[budget].last_stats
        assert s["whole_task"] == 1 and s["tasks"] == 1 and s["split_s"] < 10
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)


def test_the_whole_task_stops_when_the_shards_start(graphs, hprd, client, monkeypatch):
    """A whole task not ended when the split is done is stopped (its worker free for the shards);
    one that fails leaves the query to the shards. The counts stay the oracle's."""
    from sgsi.shard import whole
    driver = _whole_on(monkeypatch)
    g = hprd[None]
    before = scratch_dirs()
    w = whole.Whole(client, (os.path.abspath(g.path), parse_pattern(HEAVY), {"device": CPU, "memory_budget": None,
                                                                           "injective": True}))
    t0 = time.monotonic()
    while not tasks._RUNNING:                   # it runs (minutes, whole)
        assert time.monotonic() - t0 < STOP_BOUND
        time.sleep(0.01)
    w.stop()
    assert not w.answered()
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)
    edges, vlabels, stores = graphs
    p = "(a)-->(b)-->(c)"
    answered = whole.Whole.answered
    monkeypatch.setattr(whole.Whole, "answered", lambda self: False)       # as if never ending first
    assert stores[None].count(p, device=CPU, client=client) == len(oracle_matches(edges, vlabels, p))
    assert stores[None].last_stats["whole_task"] == 0 and stores[None].last_stats["tasks"] > 1
    monkeypatch.setattr(whole.Whole, "answered", answered)
    _split_until_stopped(driver, monkeypatch, seconds=1.0)
    monkeypatch.setattr(tasks, "count", _count_but_whole)
    assert stores[None].count(p, device=CPU, client=client) == len(oracle_matches(edges, vlabels, p))
    assert stores[None].last_stats["whole_task"] == 0 and stores[None].last_stats["tasks"] > 1
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)


def test_a_cancel_during_the_split_stops_the_whole_task(hprd, client, monkeypatch):
    driver = _whole_on(monkeypatch)
    _split_until_stopped(driver, monkeypatch)
    _count_cancelled(hprd[None], client)


def test_early_close_stops_the_tasks_and_removes_the_parts(hprd, client):
    g = hprd[None]
    before = scratch_dirs()
    reader = g.match("(a)--(b)--(c), (a)--(c)--(d)", device=CPU, client=client, progress=False)   # 7.4M rows
    assert reader.read_next_batch().num_rows > 0     # one task's part: 15 are still to run
    assert len(scratch_dirs() - before) == 1
    reader.close()
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)
    reader = g.match(HEAVY, device=CPU, client=client, progress=False)
    del reader                              # never read
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)


def test_errors_keep_their_type(graphs, hprd, client, monkeypatch):

    _e, _v, stores = graphs
    g = stores[None]
    with pytest.raises(PatternError, match="unknown vertex label Nope"):
        g.count("(a:Nope)-->(b)", client=client)
    with pytest.raises(BudgetError, match="below this store's floor"):
        hprd[None].count("(a)--(b)", memory_budget="16KB", client=client)

    class Failing(Query):                   # one shard's task fails: the caller gets its error
        def count(self):
            if self.shard.index == 1:
                raise BudgetError("the task's own budget error")
            return super().count()
    monkeypatch.setattr(tasks, "Query", Failing)
    with pytest.raises(BudgetError, match="the task's own budget error"):
        g.count("(a)-->(b)-->(c)", device=CPU, client=client)
    assert wait_idle(client) < STOP_BOUND


def test_a_task_run_twice_replaces_its_part(graphs, client, monkeypatch, tmp_path):
    """A retried task (its worker died) writes the same part again: no row twice."""
    from sgsi.shard import parts
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)-->(b)-->(c)"
    shards = Query(g.store, g._backends, p, CPU).shards(4)
    opts = {"device": CPU, "memory_budget": None, "injective": True}
    d = str(tmp_path)
    open(parts.marker(d), "w").close()
    for s in shards + shards[:2]:           # two shards twice
        tasks.match(g.path, p, opts, s, "q", d, None)
    (tmp_path / ".part-00000.parquet.tmp-1-dead").write_bytes(b"a killed worker's temporary")
    assert sorted(os.listdir(d)) == sorted([".part-00000.parquet.tmp-1-dead", parts.MARKER]
                                           + [os.path.basename(parts.path(d, s.index)) for s in shards])
    got = Counter()
    for s in shards:
        got.update(rows(pq.read_table(parts.path(d, s.index)).to_reader())[0])
    assert got == project(oracle_matches(edges, vlabels, p), p)

    monkeypatch.setattr(tasks, "match", _match_twice)      # through Dask: each task runs twice in a row
    assert rows(g.match(p, device=CPU, client=client))[0] == got


# ---------------------------------------------------------------------------
# Interfaces
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("split,budget", [("rows", None), ("ranges", "16KB")], ids=["rows-default", "ranges-16KB"])
def test_symmetric_counts_share_the_drivers_constraints(graphs, client, budget, split, monkeypatch):
    """Every task of a count joins one embedding per orbit of the driver's plan's automorphisms
    (constraints among seeded vertices too) and multiplies by |H|: the sum is the oracle's."""
    if split == "ranges":
        monkeypatch.setattr(shard_mod, "MAX_SEED_ROWS", 0)        # no split by partial matches
    edges, vlabels, stores = graphs
    g = stores[budget]
    broken = 0
    for p in ["(a)--(b)--(c)--(a)", "(a)--(b)--(c)--(d)--(a)", "(a)-->(b)-->(c)-->(a)",
              "(a)--(b), (a)--(c), (a)--(d), (b)--(c), (b)--(d), (c)--(d)"]:
        want = len(oracle_matches(edges, vlabels, p))
        assert g.count(p, device="cpu", client=client, memory_budget=budget, progress=False) == want, p
        assert g.last_stats["tasks"] > 1
        broken += g.last_stats["symmetry"] > 1
    assert broken >= 3


@pytest.mark.parametrize("split", ["rows", "ranges"])
def test_split_on_a_searched_order_vs_oracle(graphs, client, split, monkeypatch):
    """A split plan on the order its sampled search finds (every one taken): its tasks join in
    that order, with the symmetry of that plan, and sum to the oracle's counts and rows."""
    from sgsi.join import ordering
    from sgsi.join.backends.cpu import CpuBackend
    monkeypatch.setattr(CpuBackend, "reorder_work", 0)
    monkeypatch.setattr(CpuBackend, "search_work", 0)
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    if split == "ranges":
        monkeypatch.setattr(shard_mod, "MAX_SEED_ROWS", 0)
    edges, vlabels, stores = graphs
    g = stores[None]
    reordered = 0
    for p in ["(a)--(b)--(c)--(d)--(a), (a)--(c)", "(a:0)-->(b)-->(c)<--(d), (d)--(a), (c)--(e)",
              "(a)-[:E0]->(b)-->(c), (c)--(a), (b)--(x)"]:
        matches = oracle_matches(edges, vlabels, p)
        assert g.count(p, device=CPU, client=client) == len(matches), p
        reordered += g.last_stats["reordered"]
        got, _schema = rows(g.match(p, device=CPU, client=client))
        assert got == project(matches, p), p
    assert reordered >= 2


@pytest.mark.parametrize("case", ["kept", "switched", "greedy"])
def test_gpu_tasks_of_the_plan_run_while_the_driver_searches(graphs, client, case, monkeypatch):
    """Where the driver's search for GPU tasks finds a first order that leaves it undecided, the
    plan's own tasks are submitted then, and run on where it keeps the plan's order ("kept");
    where it later finds one to switch to ("switched"), they are stopped at once (before the search
    ends) and the searched order's run. Where the first order decides a switch ("greedy"), and for
    CPU tasks, none runs before the search ends. Counts and rows are the oracle's every time, and
    ``early_tasks`` says which ran."""
    from sgsi.join import ordering
    from sgsi.shard import driver
    monkeypatch.setattr(driver, "search_gate", lambda _kind: (1, 1))
    monkeypatch.setattr(ordering, "EXPLORE", 0)         # a second stream wherever the first leaves > 0
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    calls = []
    greedy, cost = ordering._Sampler.greedy, ordering._Sampler.cost

    def greedy_from(sampler, start, core):              # each stream's path from its own vertex
        calls.append("greedy")
        return greedy(sampler, core[(calls.count("greedy") - 1) % len(core)], core)

    def scripted(sampler, *a, **k):                     # the plan's cost, then the orders'
        cost(sampler, *a, **k)
        calls.append("cost")
        n = calls.count("cost")
        return 1e9 if n == 1 or (case != "greedy" and (n == 2 or case == "kept")) else 1.0
    monkeypatch.setattr(ordering._Sampler, "greedy", greedy_from)
    monkeypatch.setattr(ordering._Sampler, "cost", scripted)
    events = []
    submit, drop, choose = driver._Run.submit, driver._Tasks.drop, ordering.choose
    monkeypatch.setattr(driver._Run, "submit", lambda *a, **k: (events.append("submit"), submit(*a, **k))[1])
    monkeypatch.setattr(driver._Tasks, "drop", lambda tasks: (events.append("drop"), drop(tasks))[1])
    monkeypatch.setattr(ordering, "choose", lambda *a, **k: (lambda c: (events.append("searched"), c)[1])(
        choose(*a, **k)))
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)--(b)--(c)--(d)--(a), (a)--(c)"
    matches = oracle_matches(edges, vlabels, p)
    count = lambda: g.count(p, device=CPU, client=client, progress=False)        # noqa: E731
    match = lambda: rows(g.match(p, device=CPU, client=client, progress=False))[0]     # noqa: E731
    want = {"kept": ["submit", "searched"], "switched": ["submit", "drop", "searched", "submit"],
            "greedy": ["searched", "submit"]}[case]
    for kind in ("gpu", "cpu"):
        monkeypatch.setattr(driver, "task_device", lambda _d, kind=kind: kind)
        for run in (count, match):
            events.clear()
            calls.clear()
            assert run() in (len(matches), project(matches, p))
            early = kind == "gpu" and case != "greedy"
            assert events == (want if early else ["searched", "submit"])
            assert g.last_stats["early_tasks"] == early and g.last_stats["reordered"] == (case != "kept")
            assert wait_idle(client) < STOP_BOUND


def test_a_cancel_during_the_search_stops_the_early_tasks(graphs, client, monkeypatch):
    """A cancel that comes while the driver searches, its plan's GPU tasks running, stops the
    search and those tasks, and removes the query's scratch directory."""
    from sgsi.join import ordering
    from sgsi.shard import driver
    monkeypatch.setattr(driver, "task_device", lambda _d: "gpu")
    monkeypatch.setattr(driver, "search_gate", lambda _kind: (1, 1))
    monkeypatch.setattr(ordering, "EXPLORE", 0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    monkeypatch.setattr(ordering._Sampler, "cost", lambda *a, **k: 1e9)     # no order decides
    stop = threading.Event()
    start = driver._Tasks.start
    monkeypatch.setattr(driver._Tasks, "start", lambda tasks, *a: (start(tasks, *a), stop.set())[0])
    before = scratch_dirs()
    with pytest.raises(Cancelled):
        graphs[2][None].count("(a)--(b)--(c)--(d)--(a), (a)--(c)", device=CPU, client=client, cancel=stop,
                              progress=False)
    assert stop.is_set()
    assert wait_idle(client) < STOP_BOUND
    assert gone(before)


def test_a_task_its_query_stopped_returns_none(graphs, client, monkeypatch, tmp_path):
    """A task whose query stopped it ends quietly with None (no error in a worker's log); a driver
    that gets None from a run it did not stop raises Cancelled, never a short count."""
    _e, _v, stores = graphs
    g = stores[None]
    p = "(a)-->(b)-->(c)"
    shard = Query(g.store, g._backends, p, CPU).shards(2)[0]
    opts = {"device": CPU, "memory_budget": None, "injective": True}
    assert tasks.count(g.path, p, opts, shard, "q", str(tmp_path), None)[0] is None      # no marker: stopped
    assert tasks.match(g.path, p, opts, shard, "q", str(tmp_path), None)[0] is None
    monkeypatch.setattr(tasks, "count", lambda *a, **k: (None, {}))
    with pytest.raises(Cancelled, match="stopped on its worker"):
        g.count(p, device=CPU, client=client, progress=False)


def test_the_drivers_search_is_gated_by_the_tasks_backend_and_cancelled(graphs, client, monkeypatch):
    """The driver searches its plan's order as the tasks' backend would (a GPU's gate: no search
    on these graphs), its cost counted once per worker, says so in ``last_stats``, and a cancel
    stops that search before any task is submitted."""
    import threading
    from sgsi.join import ordering
    from sgsi.join.backends.cpu import CpuBackend
    from sgsi.shard import driver
    monkeypatch.setattr(CpuBackend, "reorder_work", 0)
    monkeypatch.setattr(CpuBackend, "search_work", 0)
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)--(b)--(c)--(d)--(a), (a)--(c)"
    want = len(oracle_matches(edges, vlabels, p))
    for kind, reordered in (("cpu", 1), ("gpu", 0)):
        monkeypatch.setattr(driver, "task_device", lambda _d, kind=kind: kind)
        assert g.count(p, device=CPU, client=client) == want
        assert g.last_stats["reordered"] == reordered
        assert g.last_stats["split_s"] > 0           # the driver's seconds before its tasks
        assert g.last_stats["order_search"]["switched"] == reordered
    # A search's cost counts once per worker: 2 workers need twice the work left that one would.
    monkeypatch.setattr(driver, "task_device", lambda _d: "cpu")
    assert g.count(p, device=CPU, client=client) == want
    planned = g.last_stats["order_search"]["planned_cost"]
    monkeypatch.setattr(CpuBackend, "search_work", planned / 3)      # 2/3 of it: one process searches
    assert g.count(p, device=CPU, client=client) == want            # 2 workers: 4/3 of it, none
    assert g.last_stats["reordered"] == 0
    monkeypatch.setattr(CpuBackend, "search_work", 0)
    monkeypatch.setattr(driver, "task_device", lambda _d: "cpu")
    submitted, searched = [], []
    monkeypatch.setattr(driver._Run, "submit", lambda *a, **k: submitted.append(a))
    choose = ordering.choose
    monkeypatch.setattr(ordering, "choose", lambda *a, **k: (searched.append(1), choose(*a, **k))[1])
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        g.count(p, device=CPU, client=client, cancel=stop)
    assert searched and not submitted


def test_small_queries_run_in_the_driver(graphs, client, monkeypatch):
    """A query of CPU tasks whose estimated work is under LOCAL_WORK runs in the driver's process:
    no task, no cluster started for ``workers``; the same counts and rows. Above it, tasks."""
    from sgsi.shard import driver
    monkeypatch.setattr(driver, "LOCAL_WORK", 1 << 21)
    submitted = []
    submit = driver._Run.submit
    monkeypatch.setattr(driver._Run, "submit", lambda run, shards, *a, **k: (
        submitted.append(len(shards)), submit(run, shards, *a, **k))[1])
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a)-[:E0]->(b)-->(c)"
    matches = oracle_matches(edges, vlabels, p)
    assert g.count(p, device=CPU, client=client) == len(matches)
    assert g.last_stats["tasks"] == 0 and g.last_stats["split_s"] > 0 and not submitted
    got, _schema = rows(g.match(p, device=CPU, client=client))
    assert got == project(matches, p) and g.last_stats["tasks"] == 0 and not submitted
    monkeypatch.setattr(driver, "connect", lambda *a, **k: pytest.fail("a cluster was started"))
    assert g.count(p, device=CPU, workers=2) == len(matches)
    got, _schema = rows(g.match(p, device=CPU, workers=2))
    assert got == project(matches, p)
    monkeypatch.undo()
    monkeypatch.setattr(driver, "LOCAL_WORK", 1)            # every estimate above it: tasks
    monkeypatch.setattr(driver, "WHOLE", dict.fromkeys(driver.WHOLE, False))
    assert g.count(p, device=CPU, client=client) == len(matches) and g.last_stats["tasks"] > 1
    wait_idle(client)


def test_tasks_keep_their_memory_until_the_query_ends(graphs, client, monkeypatch):
    """A task that ends well leaves its free memory to the query's next task on its worker (no
    trim at its end); the driver has the workers give it back when the query ends."""
    import threading
    from sgsi.join.backends import cpu
    trims = []          # per trim: (a task running, on a worker's thread: not the driver's)
    monkeypatch.setattr(cpu, "trim_heap", lambda: trims.append(
        (bool(tasks._RUNNING), threading.current_thread() is not threading.main_thread())))
    edges, vlabels, stores = graphs
    p = "(a)-->(b)-->(c)"
    assert stores[None].count(p, device="cpu", client=client, progress=False) == len(oracle_matches(edges, vlabels, p))
    assert stores[None].last_stats["tasks"] > 2
    t0 = time.monotonic()
    while sum(worker for _running, worker in trims) < 2 and time.monotonic() - t0 < STOP_BOUND:
        time.sleep(0.01)                        # tasks.release runs on the workers, not awaited
    assert not any(running for running, _worker in trims), trims        # none at a task's end
    assert sum(worker for _running, worker in trims) >= 2, trims        # each worker's, at the end


def test_workers_let_a_querys_data_go_when_it_ends(graphs, client):
    """The scattered sets and the tasks' results leave the workers when a count or a match ends,
    not when the driver's garbage collector finds the run (its tasks' callbacks hold it)."""
    import gc
    edges, vlabels, stores = graphs
    p = "(a)-->(b)-->(c)"

    def held():
        return {k for keys in client.run(lambda dask_worker: list(dask_worker.data)).values() for k in keys}
    gc.collect()
    before = held()                             # earlier tests' (a cancelled task's result, say)
    gc.disable()
    try:
        assert stores[None].count(p, device="cpu", client=client, progress=False) == len(oracle_matches(edges, vlabels, p))
        assert stores[None].last_stats["tasks"] > 2
        reader = stores[None].match(p, device="cpu", client=client, progress=False)
        assert rows(reader)[0] == project(oracle_matches(edges, vlabels, p), p)
        t0 = time.monotonic()
        while held() - before and time.monotonic() - t0 < STOP_BOUND:
            time.sleep(0.01)                    # the scheduler's releases are messages, not awaited
        assert not held() - before
    finally:
        gc.enable()


def test_a_worker_gets_the_next_task_when_it_ends_one(graphs, client, monkeypatch):
    """At most one task a worker thread is out at once (none queued on a worker behind a running
    one, where another worker may idle), the first shards first; the count is the oracle's."""
    lock, out, most, order = threading.Lock(), [0], [0], []
    submit = client.submit

    def counted(fn, *args, **kwargs):
        future = submit(fn, *args, **kwargs)
        with lock:
            out[0] += 1
            most[0] = max(most[0], out[0])
            order.append(kwargs["priority"])

        def ended(_f):
            with lock:
                out[0] -= 1
        future.add_done_callback(ended)         # before the driver's: its next task comes after
        return future
    monkeypatch.setattr(client, "submit", counted)
    edges, vlabels, stores = graphs
    p = "(a)-->(b)-->(c)"
    assert stores[None].count(p, device="cpu", client=client, progress=False) == len(oracle_matches(edges, vlabels, p))
    n = stores[None].last_stats["tasks"]
    assert n > 2 and len(order) == n
    assert most[0] == sum(client.nthreads().values()) == 2
    assert order == sorted(order, reverse=True)


def test_sharded_queries_after_updates_read_the_newest_version(client, tmp_path):
    """Workers that kept a store open read each update's new version (their opening brought to
    the newest); counts and rows as the oracle's at every version; a Graph at an older version
    is refused with its reason."""
    from sgsi.errors import StoreError
    rng = random.Random(91)
    edges, vlabels = random_graph(rng, 40, 200, 3, 3)
    g = build_stores(tmp_path, edges, vlabels, budgets=(None,))[None]
    old = sgsi.open(g.path)
    pats = ["(a)-[:E0]->(b)-->(c)", "(a:1)-[:E1]->(b), (a)-->(c:0)"]
    for step in range(3):
        for p in pats:
            assert g.count(p, device=CPU, client=client, progress=False) == \
                len(oracle_matches(edges, vlabels, p)), (step, p)
        got, _schema = rows(g.match(pats[0], device=CPU, client=client, progress=False))
        assert got == project(oracle_matches(edges, vlabels, pats[0]), pats[0])
        ins = [(rng.randrange(45), rng.randrange(45), rng.choice(["E0", "E1", "E2"])) for _ in range(30)]
        ins = [e for e in ins if e[0] != e[1]]
        gone = rng.sample(edges, 20)
        g.update(insert=write_edges(tmp_path / f"i{step}.parquet", ins),
                 delete=write_edges(tmp_path / f"d{step}.parquet", gone), label="label")
        edges = sorted(({*edges} - {*gone}) | {*ins})
        vlabels = {**{v: None for e in ins for v in e[:2]}, **vlabels}
    with pytest.raises(StoreError, match="newest"):
        old.count(pats[0], device=CPU, client=client, progress=False)
    old.close()


def test_options_are_checked(graphs, client):
    g = graphs[2][None]
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(SgsiError, match="workers must be a positive integer"):
            g.count("(a)-->(b)", workers=bad)
    with pytest.raises(SgsiError, match="give only one of workers, client"):
        g.count("(a)-->(b)", workers=2, client=client)
    with pytest.raises(SgsiError, match="client must be a dask.distributed.Client"):
        g.count("(a)-->(b)", client="tcp://x:1")
    with pytest.raises(SgsiError, match="scheduler must be a Dask scheduler's address"):
        g.match("(a)-->(b)", scheduler="")


def test_scheduler_in_sql_and_on_the_command_line(graphs, client, capsys):
    import duckdb

    from sgsi.cli import main
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(a:0)-->(b)-->(c)"
    want = len(oracle_matches(edges, vlabels, p))
    address = client.scheduler.address
    con = duckdb.connect()
    reg = sgsi.register(con, device=CPU)
    assert con.execute(f"SELECT match_count('{g.path}', '{p}', scheduler := '{address}')").fetchone()[0] == want
    assert reg.last_stats["tasks"] >= 1
    assert con.execute(f"SELECT count(*) FROM match('{g.path}', '{p}', scheduler := '{address}', "
                       f"max_rows := 5)").fetchone()[0] == min(5, want)
    with pytest.raises(duckdb.Error, match="workers must be a positive integer"):
        con.execute(f"SELECT match_count('{g.path}', '{p}', workers := 0)")
    with pytest.raises(duckdb.BinderException, match="no option 'worker' \\(did you mean workers\\?\\)"):
        con.execute(f"SELECT match_count('{g.path}', '{p}', worker := 2)")
    with pytest.raises(duckdb.BinderException, match="did you mean scheduler"):
        con.execute(f"SELECT * FROM match('{g.path}', '{p}', client := 'x')")
    con.close()
    assert main(["count", g.path, p, "--device", "cpu", "--scheduler", address]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(want)
    assert main(["count", g.path, p, "--workers", "2", "--scheduler", address]) == 1
    assert "give only one of --workers, --scheduler" in capsys.readouterr().err


def test_sgsi_without_dask(graphs, tmp_path):
    """``import sgsi`` and every one-process path import no Dask; without it, workers= says what to install."""
    g = graphs[2][None]
    code = f"""
import sys
for name in ("dask", "distributed", "dask_cuda"):
    sys.modules[name] = None            # as if not installed
import sgsi, sgsi.db, duckdb
g = sgsi.open({g.path!r})
n = g.count("(a)-->(b)", device="cpu")
assert g.match("(a)-->(b)", device="cpu").read_all().num_rows == n
con = duckdb.connect(); sgsi.register(con)
assert con.execute("SELECT match_count({g.path!r}, '(a)-->(b)')").fetchone()[0] == n
try:
    g.count("(a)-->(b)", workers=2)
except sgsi.SgsiError as e:
    print(e)
"""
    path = [str(REPO), str(REPO / "tests")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))        # a --target site of wheels kept
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'sgsi[dask]'" in out.stdout
    code = f"import sys, sgsi; sgsi.open({g.path!r}).count('(a)-->(b)', device='cpu'); print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.gpu
def test_gpu_workers(graphs):
    """One worker per GPU with dask-cuda (run on the GPU machine)."""
    pytest.importorskip("cupy")
    pytest.importorskip("dask_cuda")
    edges, vlabels, stores = graphs
    g = stores[None]
    p = "(h)-[:E0]->(x)-->(y)"
    want = oracle_matches(edges, vlabels, p)
    assert g.count(p, device="gpu", workers=1, progress=False) == len(want)
    assert rows(g.match(p, device="gpu", workers=1, progress=False))[0] == project(want, p)
