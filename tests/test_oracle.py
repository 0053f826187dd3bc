"""Tests of the brute-force oracle itself: hand-counted cases, a check
against exhaustive enumeration, and the benchmark reference counts."""

import itertools
import random
from pathlib import Path

import pytest

from oracle import oracle_count, oracle_matches, random_graph, random_pattern
from sgsi.pattern import parse_pattern, read_query_file

BENCH = Path(__file__).parent / "data" / "benchmarks"


# ---------------------------------------------------------------------------
# Hand-drawn graphs
# ---------------------------------------------------------------------------

#   1 --K--> 2
#   ^        |
#   K        K
#   |        v
#   +-- 3 <--+
TRIANGLE = [(1, 2, "K"), (2, 3, "K"), (3, 1, "K")]


@pytest.mark.parametrize("pattern, count", [
    ("(a)-[:K]->(b)-[:K]->(c)-[:K]->(a)", 3),    # the three rotations
    ("(a)-[:K]->(b)<-[:K]-(c)-[:K]->(a)", 0),    # not a directed cycle
    ("(a)--(b)--(c)--(a)", 6),                   # undirected: all 3! maps
    ("(a)-[:K]->(b)-[:K]->(c)", 3),
    ("(a)-[:K]->(b)", 3),
    ("(a)<-[:K]-(b)", 3),
    ("(a)-[:L]->(b)", 0),                        # no edge has label L
    ("(a)-->(b), (b)-->(a)", 0),                 # no 2-cycle
    ("(a)", 3),
])
def test_directed_triangle(pattern, count):
    assert oracle_count(TRIANGLE, {}, pattern) == count


def test_directed_triangle_mapping():
    assert sorted(oracle_matches(TRIANGLE, {}, "(a)-[:K]->(b)-[:K]->(c)-[:K]->(a)")) == [
        (1, 2, 3), (2, 3, 1), (3, 1, 2)]


#   0(A) --- 1(B)
#    |        |
#   3(B) --- 2(A)       stored one direction each: 0->1, 1->2, 2->3, 3->0
CYCLE4 = [(0, 1, "E"), (1, 2, "E"), (2, 3, "E"), (3, 0, "E")]
CYCLE4_LABELS = {0: "A", 1: "B", 2: "A", 3: "B"}


@pytest.mark.parametrize("pattern, count", [
    ("(a)--(b)--(c)--(d)--(a)", 8),          # the 8 symmetries of a square
    ("(a)-->(b)-->(c)-->(d)-->(a)", 4),      # only the 4 rotations
    ("(a)--(b)--(c)", 8),                    # middle vertex x ordered pair of its neighbours
    ("(a)--(b)--(c)--(a)", 0),               # no triangle
    ("(a)--(b)", 8),
    ("(a)-[:E]-(b)", 8),
    ("(a:A)--(b:B)--(c:A)", 4),              # a, c = (0,2) or (2,0); b = 1 or 3
    ("(a:A)--(b:A)", 0),                     # A vertices are not adjacent
    ("(a:A)-->(b:B)", 2),                    # 0->1, 2->3
    ("(a:B)-->(b:A)", 2),                    # 1->2, 3->0
    ("(a:A)--(:B)--(c:A)--(:B)--(a)", 4),    # a, c: 2 orders x the two Bs: 2 orders
])
def test_undirected_four_cycle(pattern, count):
    assert oracle_count(CYCLE4, CYCLE4_LABELS, pattern) == count


def test_four_cycle_both_directions_counts_each_map_once():
    both = CYCLE4 + [(d, s, l) for s, d, l in CYCLE4]
    assert oracle_count(both, {}, "(a)--(b)") == 8
    assert oracle_count(both, {}, "(a)-->(b)") == 8
    assert oracle_count(both, {}, "(a)--(b)--(c)--(d)--(a)") == 8
    assert oracle_count(both, {}, "(a)-->(b)-->(c)-->(d)-->(a)") == 8


#   0 -X-> 1 -Y-> 2 -X-> 3
PATH = [(0, 1, "X"), (1, 2, "Y"), (2, 3, "X")]


@pytest.mark.parametrize("pattern, matches", [
    ("(a)-[:X]->(b)-->(c)", [(0, 1, 2)]),              # 3 has no out-edge
    ("(a)-->(b)-->(c)", [(0, 1, 2), (1, 2, 3)]),
    ("(a)-[:Y]-(b)", [(1, 2), (2, 1)]),
    ("(a)<--(b)", [(1, 0), (2, 1), (3, 2)]),
    ("(a)-[:X]->(b)-[:X]->(c)", []),
    ("(a)-[]->()-[:Y]->(c)", [(0, 1, 2)]),             # anonymous vertex is in the tuple
    ("(a)-->(b)-->(c)-->(d)", [(0, 1, 2, 3)]),
    ("(a)--(b)--(c)--(d)", [(0, 1, 2, 3), (3, 2, 1, 0)]),
])
def test_path_with_unlabeled_edges(pattern, matches):
    assert sorted(oracle_matches(PATH, {}, pattern)) == matches


def test_homomorphism_versus_injective():
    # two edges into 2: injectively a and c must differ
    edges = [(1, 2, "K"), (3, 2, "K")]
    pattern = "(a)-[:K]->(b)<-[:K]-(c)"
    assert sorted(oracle_matches(edges, {}, pattern)) == [(1, 2, 3), (3, 2, 1)]
    assert sorted(oracle_matches(edges, {}, pattern, injective=False)) == [
        (1, 2, 1), (1, 2, 3), (3, 2, 1), (3, 2, 3)]
    # on the triangle, a -> b <- c has no injective match but 3 homomorphic ones
    assert oracle_count(TRIANGLE, {}, "(a)-->(b)<--(c)") == 0
    assert oracle_count(TRIANGLE, {}, "(a)-->(b)<--(c)", injective=False) == 3
    # walks of length 2 on the square: 4 middles x 2 x 2 ends
    assert oracle_count(CYCLE4, {}, "(a)--(b)--(c)", injective=False) == 16


def test_homomorphism_uses_data_self_loops():
    edges = [(1, 1, "K"), (1, 2, "K")]
    assert sorted(oracle_matches(edges, {}, "(a)-[:K]->(b)")) == [(1, 2)]
    assert sorted(oracle_matches(edges, {}, "(a)-[:K]->(b)", injective=False)) == [
        (1, 1), (1, 2)]


def test_parallel_edges_are_one_edge():
    assert oracle_count([(1, 2, "K")] * 3, {}, "(a)-[:K]->(b)") == 1
    edges = [(1, 2, "K"), (1, 2, "L"), (2, 1, "K")]
    assert sorted(oracle_matches(edges, {}, "(a)-->(b)")) == [(1, 2), (2, 1)]
    assert oracle_count(edges, {}, "(a)-[:K]->(b), (a)-[:L]->(b)") == 1
    assert oracle_count(edges, {}, "(a)-[:L]-(b)") == 2


def test_vertex_labels_missing_none_and_str():
    edges = [("x", "y", 7), ("y", "z", 7)]
    labels = {"x": 5, "y": None}              # y: no label; z: missing
    assert oracle_matches(edges, labels, "(a:5)-[:7]->(b)") == [("x", "y")]
    assert oracle_count(edges, labels, "(a)-[:7]->(b:5)") == 0
    assert oracle_count(edges, labels, "(a)-[:`7`]->(b)") == 2
    # vertices only in vertex_labels are data vertices too
    assert sorted(oracle_matches([], {1: "A", 2: "A", 3: "B"}, "(a:A)")) == [(1,), (2,)]


def test_pattern_object_accepted():
    p = parse_pattern("(a)-[:K]->(b)")
    assert oracle_count(TRIANGLE, {}, p) == 3


# ---------------------------------------------------------------------------
# The oracle against exhaustive enumeration of every map
# ---------------------------------------------------------------------------


def _exhaustive(edges, vertex_labels, pattern, injective):
    """Try every map of pattern vertices to data vertices; keep those that fit."""
    triples = {(s, d, str(l)) for s, d, l in edges}
    vertices = sorted({v for e in edges for v in e[:2]} | set(vertex_labels))

    def edge_ok(x, y, e):
        fits = [(x, y)] if e.directed else [(x, y), (y, x)]
        return any((s, d, lab) in triples for s, d in fits for lab in
                   ([e.label] if e.label is not None else [str(l) for *_, l in edges]))

    def label_ok(x, pv):
        return pv.label is None or (vertex_labels.get(x) is not None
                                    and str(vertex_labels[x]) == pv.label)

    k = len(pattern.vertices)
    maps = (itertools.permutations(vertices, k) if injective
            else itertools.product(vertices, repeat=k))
    return sorted(m for m in maps
                  if all(label_ok(m[i], pv) for i, pv in enumerate(pattern.vertices))
                  and all(edge_ok(m[e.src], m[e.dst], e) for e in pattern.edges))


@pytest.mark.parametrize("seed", range(60))
def test_oracle_equals_exhaustive_enumeration(seed):
    rng = random.Random(seed)
    edges, labels = random_graph(rng, n=7, m=rng.randrange(6, 16), n_vlabels=2,
                                 n_elabels=2, string_ids=seed % 2 == 1)
    if seed % 5 == 0:
        edges.append((edges[0][0], edges[0][0], edges[0][2]))     # a self-loop
    k = rng.randrange(1, 5)
    text = random_pattern(rng, k, set(labels.values()), {l for *_, l in edges})
    pattern = parse_pattern(text)
    for injective in (True, False):
        expected = _exhaustive(edges, labels, pattern, injective)
        assert sorted(oracle_matches(edges, labels, pattern, injective)) == expected, text
        assert oracle_count(edges, labels, pattern, injective) == len(expected), text


def test_oracle_on_random_graph_of_medium_size():
    rng = random.Random(7)
    edges, labels = random_graph(rng, n=200, m=1000, n_vlabels=3, n_elabels=2)
    total = 0
    for _ in range(10):
        text = random_pattern(rng, 5, set(labels.values()), {"E0", "E1"})
        total += oracle_count(edges, labels, text)
    assert total > 0


# ---------------------------------------------------------------------------
# The random generators
# ---------------------------------------------------------------------------


def test_random_graph_shape():
    edges, labels = random_graph(random.Random(1), 10, 30, 3, 2, string_ids=True)
    assert len(edges) == 30 and len(labels) == 10
    assert all(s != d and s in labels and d in labels and l in ("E0", "E1")
               for s, d, l in edges)
    assert set(labels.values()) <= {0, 1, 2}
    assert random_graph(random.Random(1), 10, 30, 0, 1)[1] == {}


def test_random_pattern_is_deterministic_connected_and_varied():
    seen = set()
    for seed in range(300):
        rng = random.Random(seed)
        k = rng.randrange(1, 7)
        text = random_pattern(rng, k, [0, 1, "has space"], ["E0", "E1"])
        p = parse_pattern(text)                       # parses: connected, no self-loop
        assert len(p.vertices) == k
        seen.update(("directed" if e.directed else "undirected",
                     "labeled" if e.label else "unlabeled") for e in p.edges)
        seen.update("anonymous" for v in p.vertices if v.name is None)
        seen.update("vertex label" for v in p.vertices if v.label is not None)
        seen.update(tok for tok in ("<-", "->", "[]", "`", ",") if tok in text)
    assert seen >= {("directed", "labeled"), ("directed", "unlabeled"),
                    ("undirected", "labeled"), ("undirected", "unlabeled"),
                    "anonymous", "vertex label", "<-", "->", "[]", "`", ","}
    same_seed = [random_pattern(random.Random(5), 5, [1], ["E0"]) for _ in range(2)]
    assert same_seed[0] == same_seed[1]


# ---------------------------------------------------------------------------
# The benchmark reference counts
# ---------------------------------------------------------------------------


def _read_data_graph(path):
    """A benchmark data graph as (edges, vertex labels); one edge per line."""
    edges, labels = [], {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == "v":
                labels[int(fields[1])] = int(fields[2])
            elif fields and fields[0] == "e":
                edges.append((int(fields[1]), int(fields[2]), 0))
    return edges, labels


def _expected(dataset):
    with open(BENCH / dataset / "expected.txt") as f:
        return dict((name, int(count)) for name, count in (line.split() for line in f))


@pytest.fixture(scope="module")
def hprd():
    return _read_data_graph(BENCH / "hprd" / "data.graph")


@pytest.fixture(scope="module")
def yeast():
    return _read_data_graph(BENCH / "yeast" / "data.graph")


# The three HPRD queries with the smallest count (1), and two with more.
@pytest.mark.parametrize("query", [
    "query_dense_16_116.graph", "query_dense_16_123.graph", "query_dense_16_136.graph",
    "query_dense_16_166.graph", "query_dense_16_99.graph",
])
def test_oracle_matches_hprd_reference_counts(hprd, query):
    edges, labels = hprd
    pattern = read_query_file(BENCH / "hprd" / "queries" / query)
    assert oracle_count(edges, labels, pattern) == _expected("hprd")[query]


@pytest.mark.parametrize("query", [
    "query_dense_4_155.graph", "query_dense_8_133.graph", "query_sparse_8_59.graph",
    "query_dense_16_88.graph", "query_sparse_16_140.graph",
])
def test_oracle_matches_yeast_reference_counts(yeast, query):
    edges, labels = yeast
    pattern = read_query_file(BENCH / "yeast" / "queries" / query)
    assert oracle_count(edges, labels, pattern) == _expected("yeast")[query]
