"""Incremental matches (sgsi/join/delta.py): the delta of two versions equals match(new) - match(old).

Until versioned stores land, two versions are two stores built from the old and the new edge set,
each with a vertex file listing ids 0..n-1, so that dense ids are original ids in both (new
vertices come last, as the store appends them); the changed pairs of a partition are computed here
from the edge lists (:func:`changed_pairs`). The oracle is brute force (tests/oracle.py): delta(+)
is the embeddings of new not in old, projected on the named vertices with multiplicity.
"""

import os
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import oracle_matches, random_graph, random_pattern, write_graph_files
from sgsi import cli
from sgsi.errors import Cancelled, PatternError, SgsiError
from sgsi.join import delta
from sgsi.join.backends import gpu_available
from sgsi.pattern import parse_pattern
from sgsi.storage.format import ANY_LABEL
from sgsi.storage.store import Store

BUDGET = "16KB"          # segments of a few hundred edges: many segments, chunks and pieces


# ---------------------------------------------------------------------------
# The stand-in of a versioned store
# ---------------------------------------------------------------------------


def partition(edges, label, direction, undirected):
    """The pairs (x, y) of partition (label or None: any, direction) of a store of ``edges``."""
    out = set()
    for s, d, lab in edges:
        if label is None or lab == label:
            if undirected or direction == "both":
                out |= {(s, d), (d, s)}
            else:
                out.add((s, d) if direction == "out" else (d, s))
    return out


def changed_pairs(new_graph, old_edges, new_edges, undirected):
    """``changed(label_id, direction)`` of :func:`sgsi.join.delta.versions`, from the edge lists."""
    names = {new_graph.store.edge_label_id(n): n for n in new_graph.store.label_names("edge")}

    def changed(label_id, direction):
        label = None if label_id == ANY_LABEL else names[label_id]
        was = partition(old_edges, label, direction, undirected)
        now = partition(new_edges, label, direction, undirected)
        added, removed = sorted(now - was), sorted(was - now)
        col = lambda pairs, i: np.array([p[i] for p in pairs], np.int32)      # noqa: E731
        return col(added, 0), col(added, 1), col(removed, 0), col(removed, 1)
    return changed


class Versions:
    """Two stores of one graph, old and new, and the changed pairs between them."""

    def __init__(self, d, old_edges, new_edges, vlabels_old, vlabels_new, undirected=False, budget=BUDGET):
        self.old_edges, self.new_edges = old_edges, new_edges
        self.vlabels_old, self.vlabels_new, self.undirected = vlabels_old, vlabels_new, undirected
        self.paths = []
        for name, edges, vl in (("old", old_edges, vlabels_old), ("new", new_edges, vlabels_new)):
            e, v = write_graph_files(d / name, edges, vl)
            self.paths.append(str(d / f"{name}.sgsi"))
            sgsi.build(self.paths[-1], edges=e, vertices=v, undirected=undirected, memory_budget=budget).close()
        self.new = sgsi.open(self.paths[1])
        self.changed = changed_pairs(self.new, old_edges, new_edges, undirected)

    def versions(self, store, since):
        """:func:`sgsi.join.delta.versions` for the new store (monkeypatched in)."""
        assert os.path.samefile(store.path, self.paths[1]) and since == 1
        old = Store(self.paths[0])
        return old, self.changed, old.close

    def expected(self, pattern, injective=True):
        """Counter of (named vertices..., sign) rows: the oracle's delta."""
        return expected_delta(pattern, self.old_edges, self.new_edges, self.vlabels_old, self.vlabels_new,
                              self.undirected, injective)

    def close(self):
        self.new.close()


def expected_delta(pattern, old_edges, new_edges, vlabels_old, vlabels_new, undirected=False, injective=True):
    """Counter of (named vertices..., sign) rows: the oracle's delta from the old edges to the new."""
    def embeddings(edges, vl):
        edges = list(edges)
        if undirected:
            edges += [(d, s, lab) for s, d, lab in edges]
        return set(oracle_matches(edges, vl, pattern, injective=injective))
    old = embeddings(old_edges, vlabels_old)
    new = embeddings(new_edges, vlabels_new)
    cols = parse_pattern(pattern).output_vertices
    rows = Counter(tuple(m[i] for i in cols) + (1,) for m in new - old)
    rows.update(tuple(m[i] for i in cols) + (-1,) for m in old - new)
    return rows


def rows_of(table):
    return Counter(zip(*[c.to_pylist() for c in table.columns]))


def signs(rows):
    return {"added": sum(n for r, n in rows.items() if r[-1] == 1),
            "removed": sum(n for r, n in rows.items() if r[-1] == -1)}


@pytest.fixture
def patched(monkeypatch):
    """``use(versions)``: Graph's delta methods see ``versions.new`` as version 2 of a store whose version 1 is old."""
    def use(v):
        monkeypatch.setattr(delta, "versions", v.versions)
        return v.new
    return use


def random_versions(d, rng, undirected=False, n=24, m=90, n_elabels=3, grow=3):
    """Versions of a random graph: a batch deletes some edges, re-inserts some of them, inserts new
    ones (some to ``grow`` new vertices) and parallel edges of other labels."""
    edges, vl = random_graph(rng, n, m, 2, n_elabels)
    edges = list(dict.fromkeys(edges))
    gone = rng.sample(edges, len(edges) // 5)
    back = gone[: len(gone) // 3]                                   # deleted and inserted again: no change
    new_vl = {**vl, **{v: rng.randrange(2) for v in range(n, n + grow)}}
    added, _ = random_graph(rng, n + grow, m // 5, 2, n_elabels)
    parallel = [(s, t, f"E{(int(lab[1:]) + 1) % n_elabels}") for s, t, lab in rng.sample(edges, 4)]
    old = edges
    new = [e for e in edges if e not in gone] + back + added + parallel
    # every label in both versions: the stand-in's label ids are its dictionary's ranks
    labels = {f"E{i}" for i in range(n_elabels)}
    assert {lab for *_x, lab in old} == labels == {lab for *_x, lab in new}
    return Versions(d, old, new, vl, new_vl, undirected)


def check(v, pattern, device="cpu", injective=True, budget="64KB"):
    """count_delta and match_delta of ``pattern`` on ``v`` against the oracle, and against the counts."""
    g = v.new
    want = v.expected(pattern, injective)
    got = g.count_delta(pattern, since=1, device=device, memory_budget=budget, homomorphism=not injective,
                        progress=False)
    assert got == signs(want), pattern
    named = parse_pattern(pattern).output_vertices
    if named:
        t = g.match_delta(pattern, since=1, device=device, memory_budget=budget, homomorphism=not injective,
                          progress=False).read_all()
        assert t.schema.field("sign").type == "int8"
        assert rows_of(t) == want, pattern
    return got


# ---------------------------------------------------------------------------
# Exactness
# ---------------------------------------------------------------------------


PATTERNS = [
    "(a)-[:E0]->(b)",
    "(a)-->(b)",                                       # any label: flips per pair, not per edge
    "(a)--(b)",                                        # undirected
    "(a)-[:E1]-(b)-->(c)",
    "(a:0)-[:E0]->(b)-[:E1]->(c), (a)-->(c)",
    "(a)--(b)--(c)--(a)",                              # automorphic
    "(a)-->(b)<--(c), (c)-[:E2]->()",                  # anonymous: rows project embeddings
    "(a)-[:E0]->(b)-[:E0]->(a)",
    "(a)--(b)--(c)--(d)--(a)",                         # a count joins one of each 8 automorphic
    "(a)-->(b)-->(c)-->(a), (a)--(x)",                 # a leaf fixed: no symmetry left
    "(a)<--(b)-->(c), (b)-[:E1]->(d)",                # a star: its leaves counted, not joined
]


@pytest.mark.parametrize("undirected", [False, True])
def test_fixed_patterns_on_random_batches(tmp_path, patched, undirected):
    v = random_versions(tmp_path, random.Random(7 + undirected), undirected)
    patched(v)
    try:
        totals = {p: check(v, p) for p in PATTERNS}
        v.new.count_delta("(a)--(b)--(c)--(d)--(a)", since=1, device="cpu")
        assert v.new.last_stats["symmetry"] == 8                # the anchored counts break it too
        v.new.match_delta(PATTERNS[-1], since=1, device="cpu").read_all()
        rows_queries = v.new.last_stats["anchored_queries"]
        v.new.count_delta(PATTERNS[-1], since=1, device="cpu")
        assert v.new.last_stats["leaves_factored"] > 0          # where no row filter reads the leaves
        assert v.new.last_stats["anchored_queries"] > rows_queries      # inclusion-exclusion over leaf edges
        assert any(t["added"] and t["removed"] for t in totals.values())       # the batch did something
        for p in PATTERNS[:4]:
            check(v, p, injective=False)
        g, old = v.new, sgsi.open(v.paths[0])
        for p in PATTERNS:            # added - removed is the change of the count
            assert totals[p]["added"] - totals[p]["removed"] == g.count(p, device="cpu") - old.count(p, device="cpu")
        old.close()
    finally:
        v.close()


def test_random_patterns_and_batches(tmp_path, patched):
    rng = random.Random(2024)
    for k in range(4):
        v = random_versions(tmp_path / f"g{k}", rng, undirected=k == 3, n_elabels=2 + k % 2)
        patched(v)
        try:
            for _ in range(5):
                p = random_pattern(rng, rng.randrange(2, 5), vertex_labels=("0", "1"),
                                   edge_labels=tuple(f"E{i}" for i in range(2 + k % 2)), p_vertex_label=0.2)
                check(v, p, injective=rng.random() < 0.8, budget=rng.choice(["16KB", "64KB", None]))
        finally:
            v.close()


def test_partitions_flip_not_edges(tmp_path, patched):
    """An edge deleted with a parallel one of another label left, one added beside its reverse, one
    deleted and inserted again: the unlabeled and undirected partitions do not flip."""
    old = [(0, 1, "E0"), (0, 1, "E1"), (2, 3, "E0"), (4, 5, "E1"), (5, 6, "E0"), (6, 0, "E1")]
    new = [(0, 1, "E1"), (2, 3, "E0"), (3, 2, "E0"), (4, 5, "E1"), (5, 6, "E0"), (6, 0, "E1")]
    vl = {i: 0 for i in range(7)}
    v = Versions(tmp_path, old, new, vl, vl)
    g = patched(v)
    try:
        assert g.count_delta("(a)-[:E0]->(b)", since=1, device="cpu") == {"added": 1, "removed": 1}
        assert g.count_delta("(a)-->(b)", since=1, device="cpu") == {"added": 1, "removed": 0}     # (3, 2)
        assert g.count_delta("(a)--(b)", since=1, device="cpu") == {"added": 0, "removed": 0}
        assert g.count_delta("(a)-[:E0]-(b)", since=1, device="cpu") == {"added": 0, "removed": 2}  # (0,1), (1,0)
        for p in ["(a)-->(b)-->(c)", "(a)--(b)--(c)", "(a)-[:E0]->(b)<-[:E0]-(c)", "(a)-[:E0]-(b)--(c)"]:
            check(v, p)
    finally:
        v.close()


def test_refined_anchored_queries(tmp_path, patched, monkeypatch):
    """Anchored queries planned again on refined sets (the engine's replan, at once here) keep
    their anchors, orders and filters."""
    from sgsi.join import engine
    for name in ("REPLAN_MIN_WORK", "REPLAN_FACTOR", "REPLAN_COST_FACTOR"):
        monkeypatch.setattr(engine, name, 0)
    v = random_versions(tmp_path, random.Random(5))
    g = patched(v)
    try:
        for p in PATTERNS[3:]:
            check(v, p, budget="16KB")
            assert g.last_stats["replanned"] >= 1
    finally:
        v.close()


DEVICES = ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")])]


@pytest.mark.parametrize("device", DEVICES)
def test_searched_and_unpinned_anchored_counts(tmp_path, patched, monkeypatch, device):
    """Anchored queries past their work at once: a count that excludes earlier edges is counted
    again without them, less its matches with a changed pair there (``_unpinned``); the others
    search their order from their pairs (the greedy one taken)."""
    from sgsi.join import engine, ordering
    from sgsi.join.backends.cpu import CpuBackend
    for name in ("REPLAN_MIN_WORK", "REPLAN_FACTOR", "REPLAN_COST_FACTOR"):
        monkeypatch.setattr(engine, name, 0)
    monkeypatch.setattr(CpuBackend, "reorder_work", 0)
    monkeypatch.setattr(CpuBackend, "search_work", 0)
    if device == "gpu":
        from sgsi.join.backends.gpu.backend import GpuBackend
        monkeypatch.setattr(GpuBackend, "reorder_work", 0)
        monkeypatch.setattr(GpuBackend, "search_work", 0)
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    rng = random.Random(11)
    unpinned = reordered = 0
    for k, undirected in enumerate((False, True)):
        v = random_versions(tmp_path / f"g{k}", rng, undirected)
        g = patched(v)
        try:
            extra = [random_pattern(rng, rng.randrange(3, 6), vertex_labels=("0", "1"),
                                    edge_labels=("E0", "E1", "E2"), p_vertex_label=0.2) for _ in range(4)]
            for p in PATTERNS[3:] + extra:
                for budget in ("16KB", None):
                    check(v, p, device=device, budget=budget)
                g.count_delta(p, since=1, device=device, progress=False)
                unpinned += g.last_stats["anchors_unpinned"]
                reordered += g.last_stats["reordered"]
        finally:
            v.close()
    assert unpinned > 0 and reordered > 0


def test_anchored_orders_of_the_second_stream(tmp_path, patched, monkeypatch):
    """Anchored queries whose search samples its second stream of draws (a search cost next to
    nothing) keep their anchors' pairs first and their filters' vertices joined, as on the first."""
    from sgsi.join import engine, ordering
    from sgsi.join.backends.cpu import CpuBackend
    for name in ("REPLAN_MIN_WORK", "REPLAN_FACTOR", "REPLAN_COST_FACTOR"):
        monkeypatch.setattr(engine, name, 0)
    monkeypatch.setattr(CpuBackend, "reorder_work", 0)
    monkeypatch.setattr(CpuBackend, "search_work", 1e-9)
    monkeypatch.setattr(ordering, "GAIN", 0.0)
    monkeypatch.setattr(ordering, "SAMPLE_ROWS", 8)
    seeded = []
    init = ordering._Sampler.__init__

    def spy(self, store, backend, plan, budget, symmetric=False, seed=(), keep=(), draws=ordering.SEED):
        seeded.append((draws, bool(seed)))
        init(self, store, backend, plan, budget, symmetric, seed, keep, draws)
    monkeypatch.setattr(ordering._Sampler, "__init__", spy)
    v = random_versions(tmp_path, random.Random(13))
    patched(v)
    try:
        for p in PATTERNS[3:]:
            check(v, p, budget="16KB")
    finally:
        v.close()
    assert (ordering.SEED + 1, True) in seeded          # an anchored query's second stream ran


@pytest.mark.parametrize("device", DEVICES)
def test_counts_by_recounting_both_versions(tmp_path, patched, monkeypatch, device):
    """The race's other path alone (:mod:`sgsi.join.race`): a delta counted as the new count less
    the old, with the side of fewer anchored queries counted by them where both sides flipped. (The
    other path preferred, not alone, still won where its turn ended first: on the GPU, its blocks
    counted in one launch each.)"""
    from sgsi.join import race
    first_done = race.first_done
    monkeypatch.setattr(race, "first_done", lambda paths, cancel=None: first_done(paths[-1:], cancel))
    rng = random.Random(13)
    edges, vl = random_graph(rng, 24, 90, 2, 3)
    edges = list(dict.fromkeys(edges))
    more, _ = random_graph(rng, 24, 20, 2, 3)
    gone = rng.sample(edges, 15)
    batches = {"mixed": None,
               "insert": (edges, edges + [e for e in more if e not in edges]),
               "delete": (edges, [e for e in edges if e not in gone])}
    sides = set()
    for k, (kind, pair) in enumerate(batches.items()):
        v = random_versions(tmp_path / kind, rng) if pair is None else Versions(tmp_path / kind, *pair, vl, vl)
        g = patched(v)
        try:
            for p in PATTERNS[3:] + ["(a)-[:E0]->(b)-[:E1]->(c)"]:
                got = g.count_delta(p, since=1, device=device, memory_budget="16KB", progress=False)
                assert got == signs(v.expected(p)), (kind, p)
                if g.last_stats["anchored_queries"] or g.last_stats.get("delta_path"):
                    assert g.last_stats["delta_path"] == "recount"
                    sides.add((kind, bool(got["added"]), bool(got["removed"])))
        finally:
            v.close()
    assert {k for k, *_ in sides} == {"mixed", "insert", "delete"}
    assert ("mixed", True, True) in sides


def test_a_batch_that_changes_nothing(tmp_path, patched):
    edges, vl = random_graph(random.Random(3), 20, 60, 2, 2)
    v = Versions(tmp_path, edges, list(reversed(edges)), vl, vl)
    g = patched(v)
    try:
        for p in PATTERNS[:6]:
            assert g.count_delta(p, since=1, device="cpu") == {"added": 0, "removed": 0}
            assert g.match_delta(p, since=1, device="cpu").read_all().num_rows == 0
            assert g.last_stats["anchored_queries"] == 0
    finally:
        v.close()


@pytest.mark.skipif(not hasattr(sgsi.Graph, "update"), reason="no versioned store (Graph.update) yet")
@pytest.mark.parametrize("undirected", [False, True])
def test_versions_of_one_store(tmp_path, undirected, device="cpu"):
    """The versioned store itself: two batches, deltas since each earlier version, then a batch after
    compaction; rows and counts against the oracle."""
    rng = random.Random(31 + undirected)
    n = 22
    # an undirected store keeps an edge once, either way round: deleting (s, d) deletes (d, s)
    canon = (lambda es: [(min(s, d), max(s, d), lab) for s, d, lab in es]) if undirected else list  # noqa: E731
    edges, vl = random_graph(rng, n, 80, 2, 3)
    edges = canon(edges)
    e, v = write_graph_files(tmp_path / "v0", edges, vl)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, undirected=undirected, memory_budget=BUDGET)
    state = {g.version: (set(edges), dict(vl))}
    cur, labels = set(edges), dict(vl)
    for k in range(3):
        gone = rng.sample(sorted(cur), 8)
        grow = {n + 2 * k + i: rng.randrange(2) for i in range(2)}          # new vertices, on new edges
        labels = {**labels, **grow}
        new = canon(random_graph(random.Random(k), n + 2 * k + 2, 12, 2, 3)[0])
        new += gone[:2] + [(s, d, "E2" if lab != "E2" else "E0") for s, d, lab in gone[2:4]]   # back; parallel
        d = tmp_path / f"b{k}"
        d.mkdir()
        ins, dele, vfile = (str(d / f) for f in ("ins.parquet", "del.parquet", "v.parquet"))
        pq.write_table(pa.table({"src": [x[0] for x in new], "dst": [x[1] for x in new],
                                 "label": [x[2] for x in new]}), ins)
        pq.write_table(pa.table({"src": [x[0] for x in gone], "dst": [x[1] for x in gone],
                                 "label": [x[2] for x in gone]}), dele)
        pq.write_table(pa.table({"id": list(grow), "label": list(grow.values())}), vfile)
        if k == 2:
            g.compact()
            state = {g.version: state[max(state)]}
        g.update(insert=ins, delete=dele, vertices=vfile)
        cur = (cur - set(gone)) | set(new)
        state[g.version] = (set(cur), dict(labels))
        for since, (old_edges, old_labels) in state.items():
            if since == g.version:
                continue
            for p in ["(a)-[:E0]->(b)-->(c)", "(a)--(b)--(c)--(a)", "(a:1)-[:E2]-(b)<--(c)"]:
                want = expected_delta(p, old_edges, cur, old_labels, labels, undirected)
                assert g.count_delta(p, since=since, device=device, memory_budget="64KB") == signs(want)
                got = g.match_delta(p, since=since, device=device, memory_budget="64KB").read_all()
                assert rows_of(got) == want, (k, since, p)
    g.close()


# ---------------------------------------------------------------------------
# The interfaces
# ---------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path, patched):
    v = random_versions(tmp_path, random.Random(11))
    patched(v)
    yield v
    v.close()


def test_match_delta_stream(small):
    g = small.new
    p = "(a)--(b)--(c)"
    want = small.expected(p)
    assert len(want) > 10
    t = g.match_delta(p, since=1, device="cpu", max_rows=7).read_all()
    assert t.num_rows == 7 and not rows_of(t) - want
    assert g.match_delta(p, since=1, device="cpu", max_rows=0).read_all().num_rows == 0
    reader = g.match_delta(p, since=1, device="cpu", memory_budget="16KB")
    first = reader.read_next_batch()
    reader.close()                                   # early: the engine and the old version go
    assert first.schema.names == ["a", "b", "c", "sign"]
    assert g.last_stats["anchored_queries"] >= 1 and g.last_stats["device"] == "cpu"
    g.count_delta(p, since=1, device="cpu")
    assert g.last_stats["delta_changed_s"] > 0 and g.last_stats["delta_filter_s"] > 0
    with pytest.raises(Cancelled):
        g.count_delta(p, since=1, device="cpu", cancel=lambda: True)
    calls = []
    reader = g.match_delta(p, since=1, device="cpu", memory_budget="16KB", cancel=lambda: calls.append(1) or
                           len(calls) > 40)        # cancelled while the batches are read
    with pytest.raises(Exception, match="cancelled"):
        reader.read_all()
    with pytest.raises(PatternError, match="sign"):
        g.match_delta("(sign)-->(b)", since=1)
    with pytest.raises(PatternError, match="names no vertex"):
        g.match_delta("()-->()", since=1)
    with pytest.raises(PatternError, match="E9"):
        g.count_delta("(a)-[:E9]->(b)", since=1)
    with pytest.raises(SgsiError, match="since"):
        g.count_delta("(a)-->(b)", since=-1)
    with pytest.raises(TypeError):
        g.count_delta("(a)-->(b)")


def test_command_line(small, tmp_path, capsys):
    p = "(a)-[:E0]->(b)-->(c)"
    want = small.expected(p)
    path = small.paths[1]
    assert cli.main(["count-delta", path, p, "--since", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"added {signs(want)['added']}", f"removed {signs(want)['removed']}"]
    f = str(tmp_path / "d.parquet")
    assert cli.main(["match-delta", path, p, "--since", "1", "--device", "cpu", "-o", f,
                     "--memory-budget", "64KB"]) == 0
    assert rows_of(pq.read_table(f)) == want
    assert cli.main(["match-delta", path, p, "--since", "1", "-o", f]) == 1            # exists: --force
    assert "exists" in capsys.readouterr().err


def test_sql(small):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    p = "(a)-->(b)-[:E1]-(c)"
    want = small.expected(p)
    path = small.paths[1]
    got = con.execute(f"SELECT * FROM match_delta('{path}', '{p}', since := 1)").fetchall()
    assert Counter(got) == want
    (n,), = con.execute(f"SELECT match_count_delta('{path}', '{p}', since := 1)").fetchall()
    assert n == signs(want)
    (a,), = con.execute(f"SELECT match_count_delta('{path}', '{p}', since := 1).added").fetchall()
    assert a == signs(want)["added"]
    with pytest.raises(duckdb.Error, match="since"):
        con.execute(f"SELECT match_count_delta('{path}', '{p}')").fetchall()
    con.close()


# ---------------------------------------------------------------------------
# The GPU (skipped without CuPy)
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")
@pytest.mark.parametrize("undirected", [False, True])
def test_gpu_matches_the_oracle(tmp_path, patched, undirected):
    rng = random.Random(99 + undirected)
    v = random_versions(tmp_path, rng, undirected)
    patched(v)
    try:
        for p in PATTERNS:
            check(v, p, device="gpu")
            check(v, p, device="gpu", budget="16KB")
        for _ in range(6):
            p = random_pattern(rng, rng.randrange(2, 5), vertex_labels=("0", "1"), edge_labels=("E0", "E1", "E2"))
            check(v, p, device="gpu", injective=rng.random() < 0.8)
    finally:
        v.close()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")
@pytest.mark.skipif(not hasattr(sgsi.Graph, "update"), reason="no versioned store (Graph.update) yet")
def test_gpu_versions_of_one_store(tmp_path):
    test_versions_of_one_store(tmp_path, False, device="gpu")


def test_seeded_and_unseeded_anchors(tmp_path, patched):
    """Anchored joins start from their pairs (the engine's seed), but not where another pattern edge
    joins the same two vertices; data loops (pairs x == x: homomorphisms only), at a tiny budget."""
    rng = random.Random(13)
    v = random_versions(tmp_path, rng)
    loops = [(3, 3, "E0"), (5, 5, "E1"), (7, 7, "E0")]
    v.close()
    v = Versions(tmp_path / "l", v.old_edges + loops[:2], v.new_edges + loops[1:], v.vlabels_old, v.vlabels_new)
    patched(v)
    try:
        for p in ["(a)-[:E0]->(b)<-[:E1]-(a)", "(a)-[:E0]->(b)-->(a), (b)-->(c)", "(a)-[:E0]->(b)-->(c)",
                  "(a)-->(b)-->(c)-->(a), (c)-[:E1]->(d)"]:
            check(v, p, budget="16KB")
            check(v, p, injective=False, budget="16KB")
    finally:
        v.close()
