"""Join orders from sampled counts (sgsi/join/ordering.py): the sampled levels' estimates, the
search's decision in last_stats, and counts and rows on the orders it takes against the oracle."""

import random
import time
from dataclasses import replace
from collections import Counter

import pytest

from oracle import build_stores, oracle_count, oracle_matches, random_graph, random_pattern
from sgsi.pattern import parse_pattern
from sgsi.join import engine, ordering, query
from sgsi.join.backends import gpu_available
from sgsi.join.backends.cpu import CpuBackend
from sgsi.join.engine import Engine
from sgsi.join.plan import make_plan

PATTERNS = [
    "(a)--(b)--(c)--(a)",
    "(a)--(b)--(c)--(d)--(a), (a)--(c)",
    "(a)-[:E0]->(b)-->(c)<--(d), (d)--(a), (c)--(e), (e)--(f)",
    "(a:0)--(b)--(c:1)--(d)--(a), (b)--(x)",
    "(a)--(x)--(b), (a)--(y)--(b), (x)--(z), (y)--(z), (z)--(w)",
]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("ordering")
    edges, vlabels = random_graph(random.Random(41), 26, 150, 2, 2)
    vl = {v: str(x) for v, x in vlabels.items()}
    out = build_stores(d, edges, vl)
    rng = random.Random(5)
    patterns = PATTERNS + [random_pattern(rng, k, ["0", "1"], ["E0", "E1"]) for k in (4, 5, 6, 6)]
    yield edges, vl, out, patterns
    for g in out.values():
        g.close()


@pytest.fixture
def search_at_once(monkeypatch):
    """Every query plans again at once, searches its order at once and takes the greedy one."""
    monkeypatch.setattr(engine, "REPLAN_MIN_WORK", 0)
    monkeypatch.setattr(engine, "REPLAN_FACTOR", 0)
    monkeypatch.setattr(engine, "REPLAN_COST_FACTOR", 0)
    monkeypatch.setattr(CpuBackend, "reorder_work", 0)
    monkeypatch.setattr(CpuBackend, "search_work", 0)
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)           # estimates from samples, not whole levels
    if gpu_available():
        from sgsi.join.backends.gpu.backend import GpuBackend
        monkeypatch.setattr(GpuBackend, "reorder_work", 0)
        monkeypatch.setattr(GpuBackend, "search_work", 0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")])])
def test_counts_and_rows_on_searched_orders_vs_oracle(graph, device, search_at_once):
    edges, vl, stores, patterns = graph
    reordered = 0
    for p in patterns:
        matches = oracle_matches(edges, vl, p)
        for budget, g in stores.items():
            assert g.count(p, device=device, memory_budget=budget, progress=False) == len(matches), (p, budget)
            reordered += g.last_stats["reordered"]
        g = stores[None]
        assert g.count(p, device=device, homomorphism=True, progress=False) == \
            oracle_count(edges, vl, p, injective=False), p
        if parse_pattern(p).output_names and len(matches) < 20000:
            t = stores["16KB"].match(p, device=device, memory_budget="16KB", progress=False).read_all()
            cols = parse_pattern(p).output_vertices
            assert Counter(zip(*[c.to_pylist() for c in t.columns])) == \
                Counter(tuple(m[i] for i in cols) for m in matches), p
    assert reordered >= len(patterns)          # most queries ran on the greedy order


@pytest.fixture
def second_stream(search_at_once, monkeypatch):
    """As search_at_once, with a search cost so small that every search samples its second stream
    of draws; returns the list of the seeds of the samplers made (one a stream searched)."""
    monkeypatch.setattr(CpuBackend, "search_work", 1e-9)
    if gpu_available():
        from sgsi.join.backends.gpu.backend import GpuBackend
        monkeypatch.setattr(GpuBackend, "search_work", 1e-9)
    draws = []
    init = ordering._Sampler.__init__

    def spy(self, store, backend, plan, budget, symmetric=False, seed=(), keep=(), draws_=ordering.SEED):
        draws.append(draws_)
        init(self, store, backend, plan, budget, symmetric, seed, keep, draws_)
    monkeypatch.setattr(ordering._Sampler, "__init__", spy)
    return draws


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")])])
def test_counts_on_orders_of_the_second_stream_vs_oracle(graph, device, second_stream):
    """Counts (at the default and a 16KB budget) and rows on orders found on either stream of draws."""
    edges, vl, stores, patterns = graph
    for p in patterns:
        matches = oracle_matches(edges, vl, p)
        for budget, g in stores.items():
            assert g.count(p, device=device, memory_budget=budget, progress=False) == len(matches), (p, budget)
        if parse_pattern(p).output_names and len(matches) < 20000:
            t = stores["16KB"].match(p, device=device, memory_budget="16KB", progress=False).read_all()
            cols = parse_pattern(p).output_vertices
            assert Counter(zip(*[c.to_pylist() for c in t.columns])) == \
                Counter(tuple(m[i] for i in cols) for m in matches), p
    assert second_stream.count(ordering.SEED + 1) >= len(patterns)


def test_no_second_stream_below_its_gate(graph, second_stream, monkeypatch):
    """The second stream is sampled only where the cheapest order leaves EXPLORE times ``least``."""
    edges, vl, stores, patterns = graph
    monkeypatch.setattr(ordering, "EXPLORE", 1e300)
    for p in patterns:
        assert stores[None].count(p, progress=False) == oracle_count(edges, vl, p), p
    assert second_stream and set(second_stream) == {ordering.SEED}


def test_the_search_is_recorded_and_kept_without_gain(graph, search_at_once, monkeypatch):
    monkeypatch.setattr(ordering, "GAIN", 1e300)          # no order is that much cheaper
    edges, vl, stores, patterns = graph
    g = stores[None]
    assert g.count(patterns[1], device="cpu", progress=False) == oracle_count(edges, vl, patterns[1])
    s = g.last_stats
    assert s["replanned"] == 1 and s["reordered"] == 0
    assert set(s["order_search"]) == {"planned_cost", "greedy_cost", "steps", "seconds", "switched", "deferred"}
    assert s["order_search"]["switched"] is False
    assert s["order_search"]["steps"] > 0 and s["order_search"]["planned_cost"] > 0


def test_without_the_switch_no_search(graph, search_at_once, monkeypatch):
    monkeypatch.setattr(query, "REORDER", False)
    edges, vl, stores, patterns = graph
    g = stores[None]
    assert g.count(patterns[1], device="cpu", progress=False) == oracle_count(edges, vl, patterns[1])
    assert g.last_stats["reordered"] == 0 and "order_search" not in g.last_stats


@pytest.mark.parametrize("pattern", PATTERNS)
def test_levels_unsampled_are_the_partial_matches(graph, pattern, monkeypatch):
    """With every row kept, a level's estimate is its number of partial matches (those the
    engine's join of the order's prefix makes), for the plan's order and the greedy one."""
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 1 << 30)
    monkeypatch.setattr(ordering, "MATERIALISE_ROWS", 1 << 30)
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    pat = query.load(pattern)
    plan = make_plan(g.store, pat, backend, refine_rounds=2)
    sampler = ordering._Sampler(g.store, backend, plan, 1 << 28)
    order, _work = sampler.greedy(plan.order[0], plan.order)
    assert sorted(order) == sorted(plan.order)
    seen = 0
    for o in (plan.order, order):
        full = make_plan(g.store, pat, backend, refine_rounds=2, order=o)
        assert full.order == list(o)
        level = sampler._roots(o[0])
        for depth in range(1, len(o)):
            level = sampler._next(level, o[depth])
            want = sum(len(c[o[0]]) for c in Engine(g.store, full, backend, 1 << 28).prefix(depth))
            assert level.estimate == want, (o, depth)
            seen += want
            if level.rows is None:
                break
            assert len(level.rows[o[0]]) == want
    assert seen > 0


def test_no_greedy_search_where_the_plan_has_run_its_estimate(graph, monkeypatch):
    """A plan that has done the work its estimate holds keeps its order, unsearched; with nothing
    done, the greedy order is searched and taken at any gain."""
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    plan = make_plan(g.store, query.load(PATTERNS[2]), backend, refine_rounds=2)
    fresh = ordering.choose(g.store, backend, plan, 1 << 28, True, done=0)
    assert fresh.switch and fresh.planned_cost > 0
    late = ordering.choose(g.store, backend, plan, 1 << 28, True, done=fresh.planned_cost)
    leaves = ordering._Sampler(g.store, backend, plan, 1 << 28).leaves
    kept = [u for u in plan.order if u not in leaves] + [u for u in plan.order if u in leaves]
    assert not late.switch and late.order == kept and late.cost == late.planned_cost
    assert late.tried < fresh.tried             # the plan's levels only


@pytest.mark.parametrize("share", [0.0, 0.99])
def test_no_search_where_the_join_is_nearly_done_by_its_progress(graph, search_at_once, monkeypatch, share):
    """Where the join's progress says that what is left of its work (the work done over its share)
    is under twice ``search_work``, no order is sampled; at no share done, the search runs. The
    count is the oracle's either way."""
    from sgsi.join import progress
    monkeypatch.setattr(progress.Progress, "share", lambda self: share)
    monkeypatch.setattr(CpuBackend, "search_work", 1 << 40)     # over any work done here, under none left
    calls = []
    choose = ordering.choose
    monkeypatch.setattr(ordering, "choose", lambda *a, **k: calls.append(1) or choose(*a, **k))
    edges, vl, stores, patterns = graph
    g = stores[None]
    assert g.count(patterns[1], device="cpu", progress=False) == oracle_count(edges, vl, patterns[1])
    search = g.last_stats["order_search"]
    assert search["switched"] is False and g.last_stats["reordered"] == 0
    assert (len(calls), search["steps"] > 0) == ((0, False) if share else (1, True))
    assert progress.left_by_share(30.0, 0.25) == 90.0 and progress.left_by_share(30.0, 0.0) == float("inf")


def test_a_vertex_without_candidates_costs_nothing(graph):
    """A plan whose first vertex has no candidate (its query has no match) is kept: no level,
    no division by its empty sample."""
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    plan = make_plan(g.store, query.load(PATTERNS[1]), backend, refine_rounds=2)
    first = plan.order[0]
    bits = list(plan.candidates)
    bits[first] = bits[first] & 0
    counts = list(plan.candidate_counts)
    counts[first] = 0
    empty = replace(plan, candidates=bits, candidate_counts=counts)
    choice = ordering.choose(g.store, backend, empty, 1 << 28, True)
    assert choice.planned_cost == 0 and not choice.switch


def test_a_cancel_during_the_search_stops_the_query(graph, search_at_once, monkeypatch):
    """The search's sampled steps check the query's cancel: a cancel that comes while it runs
    stops the query, and the next query runs as before."""
    import threading

    from sgsi.errors import Cancelled
    edges, vl, stores, patterns = graph
    g = stores[None]
    ev, calls = threading.Event(), []
    real = ordering._Sampler._count
    monkeypatch.setattr(ordering._Sampler, "_count",
                        lambda self, level, u: calls.append(u) or ev.set() or real(self, level, u))
    with pytest.raises(Cancelled):
        g.count(patterns[1], device="cpu", cancel=ev, progress=False)
    assert len(calls) == 1                      # the search's first sampled step saw it
    monkeypatch.setattr(ordering._Sampler, "_count", real)
    assert g.count(patterns[1], device="cpu", progress=False) == oracle_count(edges, vl, patterns[1])


@pytest.fixture
def deferred_wins(monkeypatch):
    """The search takes an order with vertices deferred wherever it builds one (its cost 0);
    returns the deferred lists it built."""
    built = []
    real_deferred, real_cost = ordering._Sampler.deferred, ordering._Sampler.cost

    def deferred(self, order, levels, rest, wide=True):
        late = real_deferred(self, order, levels, rest, wide)
        built.append(late)
        return late

    def cost(self, order, levels, rest, count):
        moved = any(late and list(order[-len(late):]) == late for late in built)
        return 0.0 if moved else 1.0 + real_cost(self, order, levels, rest, count)
    monkeypatch.setattr(ordering._Sampler, "deferred", deferred)
    monkeypatch.setattr(ordering._Sampler, "cost", cost)
    return built


DEFERRABLE = [
    "(a)--(x)--(b), (a)--(y)--(b), (a)--(b), (x)--(c), (c)--(a)",
    "(a)--(b)--(c)--(d)--(a), (a)--(c), (b)--(e)--(d)",
    "(a:0)--(b)--(c:1)--(d)--(a), (b)--(x)--(d), (x)--(y)",
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")])])
def test_counts_on_orders_with_deferred_vertices_vs_oracle(graph, device, search_at_once, deferred_wins):
    """Counts on orders whose expanding vertices the search moved last (factored, not joined),
    at the default and a 16KB budget."""
    edges, vl, stores, patterns = graph
    taken = 0
    for p in DEFERRABLE + patterns:
        want = oracle_count(edges, vl, p)
        for budget, g in stores.items():
            assert g.count(p, device=device, memory_budget=budget, progress=False) == want, (p, budget)
            taken += g.last_stats.get("order_search", {}).get("deferred", 0) > 0
    assert any(deferred_wins) and taken >= 4


def test_deferred_vertices_expand_are_apart_and_factored(graph):
    """:meth:`_Sampler.deferred` moves only vertices whose step grew the partial matches, no two
    adjacent, the prefix connected, and all of them factored by the count's plan."""
    from sgsi.join.plan import _factored_vertices
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    seen = 0
    for p in DEFERRABLE:
        plan = make_plan(g.store, query.load(p), backend, refine_rounds=2)
        sampler = ordering._Sampler(g.store, backend, plan, 1 << 28)
        core = [u for u in plan.order if u not in sampler.leaves]
        rest = [u for u in plan.order if u in sampler.leaves]
        levels = sampler.levels(core)
        for wide in (False, True):          # with wide subtrees factoring or not
            late = sampler.deferred(core, levels, rest, wide)
            est = {u: levels[i].estimate / max(levels[i - 1].estimate, 1.0) for i, u in enumerate(core[1:], 1)}
            head = [u for u in core if u not in late]
            assert all(est[u] > 1 for u in late)
            assert not any(sampler.adj[u] & set(late) for u in late)
            assert all(sampler.adj[v] & set(head[:i]) for i, v in enumerate(head[1:], 1))
            groups, trees = _factored_vertices(plan.pattern, plan.meets, plan.injective, head + late + rest,
                                               wide=wide)
            assert set(late) <= {v for gr in groups for v in gr} | {v for r, k in trees for gr in k for v in [r] + gr}
            assert wide or all(set(gr) <= sampler.leaves for _r, k in trees for gr in k)    # narrow: leaves only
            seen += len(late)
    assert seen > 0


def test_costs_are_over_the_core_symmetry_group(graph):
    """Where the count breaks the pattern's symmetry, an order's cost is its work over |H|."""
    from sgsi.join import symmetry
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    plan = make_plan(g.store, query.load(PATTERNS[0]), backend, refine_rounds=2, factor_leaves=True)
    plain = ordering.choose(g.store, backend, plan, 1 << 28, True, least=float("inf"))
    broken = ordering.choose(g.store, backend, plan, 1 << 28, True, least=float("inf"), symmetric=True)
    size = symmetry.of_plan(plan)[1]
    assert size > 1 and plain.planned_cost > 0
    assert broken.planned_cost * size == pytest.approx(plain.planned_cost)


def _subtree_sampler(graph, monkeypatch, pattern="(a)--(b)--(c)--(a), (c)--(r), (r)--(x)"):
    """(the refined count plan of ``pattern``, by default a triangle with a subtree (c)--(r)--(x),
    its sampler drawing every row)."""
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 1 << 30)
    monkeypatch.setattr(ordering, "MATERIALISE_ROWS", 1 << 30)
    g = graph[2][None]
    backend = CpuBackend()
    backend.begin(g.store)
    plan = make_plan(g.store, query.load(pattern), backend, refine_rounds=2, factor_leaves=True)
    return plan, ordering._Sampler(g.store, backend, plan, 1 << 28)


def test_a_counts_cost_takes_in_its_subtrees(graph, monkeypatch):
    """A subtree (a root hanging off the core, with a leaf of its own) is costed: the core's rows
    extended by the root, and its leaf counted over those; unsampled, the count's cost is at
    least the core's steps and the root's step of the same order joined outright."""
    from sgsi.join.plan import _factored_vertices
    plan, sampler = _subtree_sampler(graph, monkeypatch)
    core = [u for u in plan.order if u not in sampler.leaves]
    rest = [u for u in plan.order if u in sampler.leaves]
    trees = _factored_vertices(plan.pattern, plan.meets, plan.injective, core + rest)[1]
    assert [root for root, _kids in trees] == [core[-1]]            # r, the subtree's root
    levels = sampler.levels(core)
    joined = sum(level.work for level in levels)                     # the core's steps and r's
    assert levels[-1].work > 0
    assert sampler.cost(core, levels, rest, True) >= joined


def test_a_one_leaf_subtree_is_costed_as_the_engine_counts_it(graph, monkeypatch):
    """A subtree of one leaf is costed at its root's step over the core's rows and at most one
    more per core vertex the leaf may collide with, as the engine counts it from the root's
    sets and the leaf's weights; costed as extended (the leaf counted over every row the root
    extends) it would cost more here."""
    from sgsi.join import counting
    plan, sampler = _subtree_sampler(graph, monkeypatch)
    root, leaf = (next(i for i, v in enumerate(plan.pattern.vertices) if v.name == n) for n in "rx")
    core = [u for u in plan.order if u not in (root, leaf)]
    last = sampler.levels(core)[-1]
    weighted = sampler._subtree_work(last, root, [leaf], core)
    rooted = sampler._next(last, root)
    collisions = counting.collisions(sampler._step(tuple(core) + (root,), leaf), root)
    assert collisions >= 1 and rooted.work > 0
    assert weighted <= rooted.work * (1 + collisions)
    monkeypatch.setattr(counting, "WEIGHTED_SUBTREES", False)
    assert sampler._subtree_work(last, root, [leaf], core) > weighted


def test_a_one_kid_subtree_whose_kid_is_no_leaf_is_costed_as_extended(graph, monkeypatch):
    """A wide subtree's one kid that also joins the core (x joins r and a) is counted per row the
    root extends, as the engine counts it (no weights: they hold the kid's links to the root
    only); the weights' bound, less here, is not taken."""
    from sgsi.join import counting
    plan, sampler = _subtree_sampler(graph, monkeypatch, "(a)--(b)--(c)--(a), (c)--(r), (r)--(x), (x)--(a)")
    root, kid = (next(i for i, v in enumerate(plan.pattern.vertices) if v.name == n) for n in "rx")
    core = [u for u in plan.order if u not in (root, kid)]
    last = sampler.levels(core)[-1]
    rooted = sampler._next(last, root)
    extended = rooted.work + rooted.weight * sampler._count(rooted, kid)[1]
    collisions = counting.collisions(sampler._step(tuple(core) + (root,), kid), root)
    assert rooted.work > 0 and collisions * rooted.work < extended - rooted.work     # the bound is less
    assert sampler._subtree_work(last, root, [kid], core) == pytest.approx(extended)
    assert counting.WEIGHTED_SUBTREES


@pytest.mark.parametrize("costs,want", [
    ([100, 100, 100], ["start"]),                   # no order decides: begun, kept
    ([100, 100, 10, 1], ["start", "drop"]),         # a later order decides: begun, then dropped once
    ([10, 100, 1], []),                             # the first order decides: never begun
])
def test_what_runs_beside_the_search_starts_and_stops(costs, want, monkeypatch):
    """An :class:`ordering.Ahead` begins at the first order found that leaves the search undecided
    (its cost over GAIN above the work left) and is dropped at the first that decides a switch,
    never twice; the time it takes is not the search's."""
    monkeypatch.setattr(ordering, "GAIN", 2.0)
    calls = []

    class Ahead(ordering.Ahead):
        def start(self):
            calls.append("start")
            time.sleep(0.01)

        def drop(self):
            calls.append("drop")
    beside = ordering._Beside(Ahead(), left=40.0)
    for cost in costs:
        beside.found(cost)
    assert calls == want
    assert (beside.seconds >= 0.01) == ("start" in want)     # kept out of the search's seconds
    none = ordering._Beside(None, left=40.0)
    for cost in costs:
        none.found(cost)                            # no Ahead: nothing to call
    assert none.seconds == 0.0
