"""Symmetry breaking for counts (sgsi/join/symmetry.py): the stabilizer chain's constraints and
group order, and counts that join one embedding per orbit against the oracle, on both backends."""

import random

import pytest

from oracle import build_stores, oracle_count, oracle_matches, random_graph
from sgsi.join import query, symmetry
from sgsi.join.backends import gpu_available
from sgsi.pattern import parse_pattern

K4 = "(a)--(b), (a)--(c), (a)--(d), (b)--(c), (b)--(d), (c)--(d)"
K23 = "(a)--(x), (a)--(y), (a)--(z), (b)--(x), (b)--(y), (b)--(z)"


@pytest.mark.parametrize("pattern, fixed, size", [
    ("(a)--(b)--(c)--(a)", [], 6),
    ("(a)--(b)--(c)--(a)", [2], 2),                  # c factored: only a and b swap
    (K4, [], 24),
    ("(a)--(b)--(c)--(d)--(a)", [], 8),
    ("(a)-->(b)-->(c)-->(a)", [], 3),                # a directed cycle turns, it does not flip
    ("(a)-->(b)-->(c)-->(d)-->(a)", [], 4),
    ("(a:X)--(b:Y)--(c:X)", [], 2),
    ("(a:X)--(b:Y)--(c:Z)", [], 1),                  # labels break it
    ("(a)-[:E]->(b)--(c)--(a)", [], 1),              # so do edge labels...
    ("(a)-[:E]->(b)-[:E]->(c), (a)-[:F]->(c)", [], 1),
    ("(a)-->(b), (b)-->(a), (a)--(c), (b)--(c)", [], 2),    # ...and directions, two edges a pair
    ("(a)--(b)--(c)--(a), (a)--(x), (b)--(y)", [3, 4], 1),  # a and b keep their fixed leaves
    (K23, [], 12),
])
def test_group_order_of_the_chain(pattern, fixed, size):
    pat = parse_pattern(pattern)
    order = [u for u in range(len(pat.vertices)) if u not in fixed]
    pairs, got = symmetry.constraints(pat, order, fixed)
    assert got == size
    assert len(set(pairs)) == len(pairs) and all(v != w for v, w in pairs)
    pos = {u: i for i, u in enumerate(order)}
    assert all(pos[v] < pos[w] for v, w in pairs)       # v joined first; its orbit after it


def test_filters_sit_where_both_ends_are_joined():
    fs = symmetry.filters([(2, 0), (2, 1)], [2, 1, 0])
    assert [(f.level, f.u, f.w) for f in fs] == [(2, 2, 0), (1, 2, 1)]
    import numpy as np
    chunk = {0: np.array([5, 1, 9]), 2: np.array([3, 3, 3])}
    assert fs[0].mask(np, chunk).tolist() == [True, False, True]


def test_a_search_past_its_budget_stops_the_chain(monkeypatch):
    """Out of search nodes, the chain keeps what it found (fewer constraints, a smaller group)."""
    monkeypatch.setattr(symmetry, "MAX_NODES", 1)
    pairs, size = symmetry.constraints(parse_pattern(K4), [0, 1, 2, 3], [])
    assert size < 24 and len(pairs) == size - 1 if size > 1 else pairs == []


# ---------------------------------------------------------------------------
# Counts against the oracle
# ---------------------------------------------------------------------------

PATTERNS = [
    "(a)--(b)--(c)--(a)",
    "(a)--(b)--(c)--(d)--(a)",
    "(a)--(b)--(c)--(d)--(a), (a)--(c)",
    K4,
    K23,
    "(a)-[:E0]->(b)-[:E0]->(c)-[:E0]->(a)",
    "(a)-->(b)-->(c)-->(d)-->(a)",
    "(a:0)--(b:1)--(c:0)--(d:1)--(a)",
    "(a)-->(b), (b)-->(a), (a)--(c), (b)--(c)",
    "(a)--(b)--(c)--(a), (a)--(x), (b)--(y)",
    "(a)--(b)--(c)--(d)--(e)--(a)",
    "(a)--(x)--(b), (a)--(y)--(b), (x)--(z), (y)--(z)",
]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("symmetry")
    edges, vlabels = random_graph(random.Random(77), 26, 170, 2, 2)
    vl = {v: str(x) for v, x in vlabels.items()}
    out = build_stores(d, edges, vl)
    yield edges, vl, out
    for g in out.values():
        g.close()


def _counts(graph, device, budgets=(None, "16KB")):
    edges, vl, stores = graph
    broken = 0
    for p in PATTERNS:
        want = oracle_count(edges, vl, p)
        for budget in budgets:
            g = stores[budget]
            assert g.count(p, device=device, memory_budget=budget, progress=False) == want, (p, budget)
            broken += g.last_stats["symmetry"] > 1
    return broken


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")])])
def test_counts_of_symmetric_patterns_vs_oracle(graph, device):
    assert _counts(graph, device) >= 2 * 8        # most of them ran with their symmetry broken


def test_without_symmetry_the_same_counts(graph, monkeypatch):
    monkeypatch.setattr(query, "SYMMETRY", False)
    assert _counts(graph, "cpu", budgets=(None,)) == 0


def test_homomorphisms_and_rows_are_not_broken(graph):
    """Homomorphisms (not a free action) and match()'s rows (every embedding) join everything."""
    edges, vl, stores = graph
    g = stores[None]
    p = "(a)--(b)--(c)--(a)"
    assert g.count(p, device="cpu", homomorphism=True, progress=False) == oracle_count(edges, vl, p, injective=False)
    assert g.last_stats["symmetry"] == 1
    rows = g.match(p, device="cpu", progress=False).read_all()
    assert rows.num_rows == len(oracle_matches(edges, vl, p))
