"""Graph stores: build with sgsi.build from Parquet, read every piece back.

Everything read back through the Store API (partition / segment /
pcsr.lookup / index_batch / vertex_ids / signature_columns) is compared
with what the deduplicated input says it should be, at several memory
budgets. Also: damaged stores, atomic writes, and the soundness of the
candidate filter (signatures, labels, degrees) against the oracle.
"""

import json
import os
import random
import shutil
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import oracle_matches, random_graph, random_pattern
from sgsi.errors import InputError, StoreError
from sgsi.join.backends.cpu import CpuBackend
from sgsi.join.plan import make_plan
from sgsi.join.stream import spanning
from sgsi.partition import pcsr, signatures
from sgsi.partition.segments import plan as size_plan
from sgsi.pattern import parse_pattern
from sgsi.storage.store import Store

BUDGETS = ["16KB", "64KB", "1MB", None]
DIRECTIONS = ("out", "in", "both")


# ---------------------------------------------------------------------------
# Input graphs
# ---------------------------------------------------------------------------


def write_edges(path, edges, label=True, src="src", dst="dst", label_col="label"):
    cols = {src: [e[0] for e in edges], dst: [e[1] for e in edges]}
    if label:
        cols[label_col] = [e[2] for e in edges]
    pq.write_table(pa.table(cols), path)


def write_vertices(path, vlabels):
    pq.write_table(pa.table({"id": list(vlabels), "label": list(vlabels.values())}), path)


class Dataset:
    """A graph as given to sgsi.build, with what the store must hold."""

    def __init__(self, name, edges, vlabels, *, undirected=False, labeled=True, with_vertices=True):
        self.name = name
        self.edges = list(edges)                  # (src, dst, label) records, repeats allowed
        self.vlabels = dict(vlabels)              # the vertex file: id -> label
        self.undirected = undirected
        self.labeled = labeled
        self.with_vertices = with_vertices
        if not labeled:
            self.edges = [(s, d, None) for s, d, _ in self.edges]

    def files(self, directory):
        e = os.path.join(directory, f"{self.name}-edges.parquet")
        write_edges(e, self.edges, label=self.labeled)
        kw = {"edges": e, "undirected": self.undirected}
        if self.with_vertices:
            v = os.path.join(directory, f"{self.name}-vertices.parquet")
            write_vertices(v, self.vlabels)
            kw["vertices"] = v
        return kw

    # -- what the store must say ------------------------------------------------
    def all_ids(self):
        ids = {s for s, _, _ in self.edges} | {d for _, d, _ in self.edges}
        if self.with_vertices:
            ids |= set(self.vlabels)
        return ids

    def vertex_label(self, v):
        return self.vlabels.get(v) if self.with_vertices else None

    def distinct_edges(self):
        """Distinct directed (src, dst, label) edges as stored."""
        e = {(s, d, l) for s, d, l in self.edges}
        if self.undirected:
            e |= {(d, s, l) for s, d, l in e}
        return e

    def edge_labels(self):
        return sorted({l for _, _, l in self.edges}, key=lambda x: (x is None, x))


def unlabel_some(vl, rng, k):
    """Drop k vertices from the vertex file: they are then unlabeled."""
    drop = set(rng.sample(sorted(vl, key=repr), k))
    return {v: l for v, l in vl.items() if v not in drop}


def make_datasets():
    rng = random.Random(20240601)
    out = {}
    e, vl = random_graph(rng, 300, 2200, 4, 3)
    vl = unlabel_some(vl, rng, 10)
    vl.update({10_000: 2, 10_001: 7})          # isolated vertices, one with a label of its own
    out["directed_int"] = Dataset("directed_int", e, vl)
    e, vl = random_graph(rng, 300, 2200, 4, 3, string_ids=True)
    vl = unlabel_some(vl, rng, 10)
    vl["zz_isolated"] = 1
    out["directed_str"] = Dataset("directed_str", e, vl)
    e, vl = random_graph(rng, 250, 1500, 3, 1)
    out["single_label"] = Dataset("single_label", e, vl, labeled=False)
    e, vl = random_graph(rng, 250, 1500, 3, 3)
    out["undirected"] = Dataset("undirected", e, vl, undirected=True)
    e, vl = random_graph(rng, 200, 1200, 0, 2, string_ids=True)
    out["no_vertex_file"] = Dataset("no_vertex_file", e, vl, with_vertices=False)
    # Enough vertices for several signature vertex segments and degree-index batches at 16KB.
    e, vl = random_graph(rng, 1300, 3000, 5, 2)
    out["many_vertices"] = Dataset("many_vertices", e, unlabel_some(vl, rng, 50))
    # Int ids far outside int32 (and negative) still map to dense ids and back.
    big = [-7, 0, 3, 2**31, 2**40, 2**62, -(2**50)]
    e = [(big[i], big[(i * 3 + 1) % 7], "K" if i % 2 else "L") for i in range(7)] + [(big[0], big[1], "K")]
    out["big_ids"] = Dataset("big_ids", e, {**{v: "A" for v in big[:4]}, 2**33: "B"})
    return out


DATASETS = make_datasets()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(dataset name, budget) -> opened Graph; built lazily, once per module."""
    base = tmp_path_factory.mktemp("stores")
    cache = {}

    def get(name, budget):
        key = (name, budget)
        if key not in cache:
            ds = DATASETS[name]
            d = base / f"{name}-{budget or 'default'}"
            d.mkdir()
            g = sgsi.build(str(d / "g.sgsi"), memory_budget=budget, **ds.files(str(d)))
            cache[key] = g
        return cache[key]

    yield get
    for g in cache.values():
        g.close()


# ---------------------------------------------------------------------------
# Reading a store back
# ---------------------------------------------------------------------------


def dense_maps(store):
    ids = store.vertex_ids(np.arange(store.n_vertices)).to_pylist()
    return ids, {v: i for i, v in enumerate(ids)}


def label_ids(store):
    """original edge label -> store edge label id (None when unlabeled store)."""
    m = store.manifest["edge_labels"]
    if not m["present"]:
        return {None: 0}
    return {v: store.edge_label_id(str(v)) for v in m["values"]}


def expected_adjacency(ds, dense, lid_of, label, direction):
    """{src: sorted dsts} of partition (label or 'any', direction), dense ids."""
    adj = defaultdict(set)
    for s, d, l in ds.distinct_edges():
        if label != "any" and lid_of[l] != label:
            continue
        a, b = dense[s], dense[d]
        if direction in ("out", "both"):
            adj[a].add(b)
        if direction in ("in", "both"):
            adj[b].add(a)
    return {v: sorted(x) for v, x in adj.items()}


def read_partition(store, label_id, direction):
    """Read a partition segment by segment; returns ({v: list}, per-segment info)."""
    p = store.partition(label_id, direction)
    allv = np.arange(store.n_vertices, dtype=np.int64)
    adj = defaultdict(list)
    seg_of = defaultdict(list)
    flat = []                      # (src, dst) in storage order
    for x, seg in enumerate(p.seg_ids.tolist()):
        groups, ci = store.segment(seg)
        assert groups.shape[1:] == (store.theta, 2)
        assert len(ci) == p.seg_edges[x]
        st, en = pcsr.lookup(groups, allv)
        present = np.flatnonzero(en > st)
        assert present.size, f"segment {seg} holds no vertex"
        # Exactly the sources in [first_src, last_src] are present; the table
        # holds exactly those vertices.
        assert present.min() == p.first_src[x] and present.max() == p.last_src[x]
        in_table = groups[:, :store.theta - 1, 0].reshape(-1)
        assert sorted(in_table[in_table != -1].tolist()) == present.tolist()
        assert int((en - st).sum()) == len(ci)
        for v in present.tolist():
            lst = ci[st[v]:en[v]].tolist()
            assert lst == sorted(lst) and len(set(lst)) == len(lst)
            adj[v].extend(lst)
            seg_of[v].append(x)
            flat.extend((v, w) for w in lst)
    # A list spanning several segments lies in consecutive ones.
    for v, xs in seg_of.items():
        assert xs == list(range(xs[0], xs[0] + len(xs))), f"vertex {v} in segments {xs}"
    assert flat == sorted(flat), "segments are not sorted by (src, dst)"
    # stream.spanning (binary searches in the sorted ranges) finds the segments a mask finds.
    rng = np.random.default_rng(len(flat))
    top = int(p.last_src.max()) + 3 if p.last_src.size else 3
    for lo, hi in np.sort(rng.integers(-2, top, (30, 2)), axis=1).tolist():
        assert spanning(p, lo, hi).tolist() == np.flatnonzero((p.first_src <= hi) & (p.last_src >= lo)).tolist()
    return dict(adj), p


def read_degree_index(store, p):
    vs, ds = [], []
    for k, b in enumerate(p.idx_batches.tolist()):
        v, d = store.index_batch(b)
        assert len(v) and v.tolist() == sorted(v.tolist())
        assert v[0] == p.idx_first[k] and v[-1] == p.idx_last[k]
        vs.extend(v.tolist())
        ds.extend(d.tolist())
    assert vs == sorted(vs) and len(set(vs)) == len(vs)
    return dict(zip(vs, ds))


def partition_keys(store, ds):
    lids = sorted(set(label_ids(store).values()))
    return [(l, d) for l in lids + ["any"] for d in DIRECTIONS]


# ---------------------------------------------------------------------------
# Partitions, segments, PCSR and the degree index
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", list(DATASETS))
def test_partitions_read_back(stores, name, budget):
    ds = DATASETS[name]
    g = stores(name, budget)
    store = g.store
    ids, dense = dense_maps(store)
    lid_of = label_ids(store)
    for label, direction in partition_keys(store, ds):
        want = expected_adjacency(ds, dense, lid_of, label, direction)
        store_label = -1 if label == "any" else label
        got, p = read_partition(store, store_label, direction)
        assert got == want, f"partition {label}:{direction} of {name} at {budget}"
        assert p.edges == sum(len(x) for x in want.values())
        assert p.vertices == len(want)
        assert p.max_degree == max((len(x) for x in want.values()), default=0)
        assert int(p.seg_edges.sum()) == p.edges
        # Segments of equal edge count (the last one may be shorter).
        per = store.manifest["parameters"]["segment_edges"]
        if p.seg_ids.size:
            assert (p.seg_edges[:-1] == per).all() and 0 < p.seg_edges[-1] <= per
            assert p.seg_ids.size == -(-p.edges // per)
        # Degree index = true degrees.
        deg = read_degree_index(store, p)
        assert deg == {v: len(x) for v, x in want.items()}


@pytest.mark.parametrize("name", ["directed_int", "undirected", "many_vertices"])
def test_tiny_budget_many_segments(stores, name):
    store = stores(name, "16KB").store
    big = stores(name, None).store
    params = store.manifest["parameters"]
    budget = params["memory_budget"]
    assert budget == 16 * 1024
    assert params == {**params, **{k: v for k, v in vars(size_plan(budget, store.theta, 4)).items()
                                   if k in params and k != "budget"}}
    p = store.partition(-1, "both")
    assert p.seg_ids.size >= 20
    assert big.partition(-1, "both").seg_ids.size == 1
    # Every segment fits its eighth of the budget; the index comes in several batches.
    for s in range(len(store._seg_edges)):
        assert store.segment_bytes(s) <= budget // 8
    assert store.max_segment_bytes <= budget // 8
    assert p.idx_batches.size == -(-p.vertices // params["index_batch_rows"])
    if name == "many_vertices":
        assert p.idx_batches.size >= 3


def test_star_hub_spans_segments(tmp_path):
    """A hub of degree >> segment size: its list comes back whole, in order,
    across consecutive segments; each middle segment holds only the hub."""
    rng = random.Random(5)
    hub = 500
    leaves = rng.sample(range(1000, 100_000), 1500)
    edges = [(hub, x, "S") for x in leaves]
    edges += [(x, hub, "S") for x in leaves[:300]]
    edges += [(rng.randrange(0, 400), rng.randrange(0, 400), "T") for _ in range(300)]
    edges = [e for e in edges if e[0] != e[1]]
    e = tmp_path / "e.parquet"
    write_edges(e, edges)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=str(e), memory_budget="16KB")
    store = g.store
    ids, dense = dense_maps(store)
    s_id = store.edge_label_id("S")
    h = dense[hub]
    for label in (s_id, -1):
        adj, p = read_partition(store, label, "out")
        want = sorted(dense[x] for x in leaves)
        assert adj[h] == want
        segs = [x for x in range(p.seg_ids.size) if p.first_src[x] <= h <= p.last_src[x]]
        per = store.manifest["parameters"]["segment_edges"]
        assert len(segs) >= len(leaves) // per
        assert segs == list(range(segs[0], segs[-1] + 1))
        for x in segs[1:-1]:
            assert p.first_src[x] == p.last_src[x] == h
        assert read_degree_index(store, p)[h] == len(leaves)
    # Both directions: hub's out ∪ in neighbours.
    adj, p = read_partition(store, s_id, "both")
    assert adj[h] == sorted(dense[x] for x in leaves)
    adj, p = read_partition(store, s_id, "in")
    assert adj[h] == sorted(dense[x] for x in leaves[:300])
    assert g.count("(h)-[:S]->(x)", device="cpu", memory_budget="16KB") == len(leaves) + 300


# ---------------------------------------------------------------------------
# Partition aliases
# ---------------------------------------------------------------------------


def test_aliases_single_label_and_undirected(stores):
    m = stores("single_label", "64KB").store.manifest["partitions"]
    for d in DIRECTIONS:
        assert m[f"any:{d}"] == {"alias": f"0:{d}"}
    assert "alias" not in m["0:out"] and "alias" not in m["0:in"] and "alias" not in m["0:both"]
    mu = stores("undirected", "64KB").store.manifest["partitions"]
    for key, info in mu.items():
        if not key.endswith(":out"):
            assert info == {"alias": key.split(":")[0] + ":out"}, key
    s = stores("undirected", "64KB").store
    for l in (0, 1, 2, -1):
        keys = {s.partition(l, d).key for d in DIRECTIONS}
        assert len(keys) == 1


def test_unknown_labels_resolve_to_none(stores):
    s = stores("directed_int", None).store
    assert s.edge_label_id("nope") is None and s.vertex_label_id("nope") is None
    assert s.edge_label_id("E0") is not None and s.vertex_label_id("0") is not None
    su = stores("single_label", None).store
    assert not su.has_edge_labels
    assert su.edge_label_id("None") is None and su.edge_label_id("0") is None


# ---------------------------------------------------------------------------
# Vertex ids, vertices.parquet, manifest
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DATASETS))
def test_vertex_id_round_trip(stores, name):
    ds = DATASETS[name]
    store = stores(name, "64KB").store
    ids, dense = dense_maps(store)
    assert store.n_vertices == len(ds.all_ids())
    assert sorted(ids, key=repr) == sorted(ds.all_ids(), key=repr) and len(set(ids)) == len(ids)
    want_type = pa.string() if isinstance(ids[0], str) else pa.int64()
    assert store.vertex_id_type in ((want_type,) if want_type == pa.int64() else
                                    (pa.string(), pa.large_string(), pa.string_view()))
    # Arbitrary order and repeats.
    rng = np.random.default_rng(1)
    q = rng.integers(0, store.n_vertices, size=200)
    assert store.vertex_ids(q).to_pylist() == [ids[i] for i in q.tolist()]
    # vertices.parquet: row i = (original id, label) of dense id i.
    t = pq.read_table(os.path.join(store.path, "vertices.parquet"))
    assert t.column_names[:2] == ["id", "label"]
    assert t.column("id").to_pylist() == ids
    assert t.column("label").to_pylist() == [ds.vertex_label(v) for v in ids]
    # vertex_labels.arrow: label ids, -1 for none.
    values = store.manifest["vertex_labels"]["values"]
    lab = np.concatenate([store.vertex_labels(k) for _, _, k in store.vertex_segments()])
    want = [values.index(ds.vertex_label(v)) if ds.vertex_label(v) is not None else -1 for v in ids]
    assert lab.tolist() == want


@pytest.mark.parametrize("name", list(DATASETS))
def test_manifest_contents(stores, name):
    ds = DATASETS[name]
    store = stores(name, "64KB").store
    m = store.manifest
    ids, dense = dense_maps(store)
    assert m["format"] == "sgsi-store" and m["version"] == 1
    assert m["vertices"] == len(ds.all_ids())
    dist = ds.distinct_edges()
    assert m["edges"] == len(dist)
    assert m["input_rows"] == len(ds.edges)
    assert m["undirected"] is ds.undirected
    # Edge labels: sorted values, frequency = distinct stored edges per label.
    el = m["edge_labels"]
    assert el["present"] is ds.labeled
    freq = Counter(l for _, _, l in dist)
    if ds.labeled:
        assert el["values"] == ds.edge_labels()
        assert el["frequency"] == [freq[v] for v in el["values"]]
    else:
        assert el["values"] == [None] and el["frequency"] == [len(dist)]
    # Vertex labels.
    vl = m["vertex_labels"]
    vfreq = Counter(ds.vertex_label(v) for v in ds.all_ids())
    unl = vfreq.pop(None, 0)
    assert vl["values"] == sorted(vfreq)
    assert vl["frequency"] == [vfreq[v] for v in vl["values"]]
    assert vl["unlabeled"] == unl
    # Files: every file of the store is listed with its size and checksum.
    listed = set(m["files"])
    on_disk = set(os.listdir(store.path)) - {"manifest.json"}
    assert listed == on_disk
    assert {"vertices.parquet", "vertex_ids.arrow", "vertex_labels.arrow", "signatures.arrow", "segments.arrow",
            "pcsr_groups.arrow", "pcsr_ci.arrow", "vindex.arrow", "vindex_batches.arrow"} <= listed
    for f, info in m["files"].items():
        assert info["bytes"] == os.path.getsize(os.path.join(store.path, f))
        assert len(info["crc32"]) == 8
    store.verify()
    p = m["parameters"]
    assert p["memory_budget"] == 64 * 1024 and p["theta"] == store.theta
    assert p["signature_segment_vertices"] % 32 == 0


# ---------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------


def reference_signatures(store, ds):
    """S(v) of every dense vertex, from the input edges and the documented encoding."""
    ids, dense = dense_maps(store)
    vvals = store.manifest["vertex_labels"]["values"]
    lid = [vvals.index(ds.vertex_label(v)) if ds.vertex_label(v) is not None else -1 for v in ids]
    elid = label_ids(store)
    n_bits, k_bits = store.signature_bits, store.label_bits
    n_grp = signatures.n_groups(n_bits, k_bits)
    words = np.zeros((store.n_vertices, n_bits // 32), np.uint32)
    for v in range(store.n_vertices):
        if lid[v] >= 0:
            b = signatures.label_bit(lid[v], k_bits)
            assert 0 <= b < k_bits
            words[v, b // 32] |= np.uint32(1 << (b % 32))
    cnt = Counter()
    for s, d, l in ds.distinct_edges():
        a, b = dense[s], dense[d]
        if ds.undirected:
            cnt[(a, signatures.pair_group(elid[l], "u", lid[b], n_grp))] += 1
        else:
            cnt[(a, signatures.pair_group(elid[l], "o", lid[b], n_grp))] += 1
            cnt[(b, signatures.pair_group(elid[l], "i", lid[a], n_grp))] += 1
    for (v, g), c in cnt.items():
        bit = k_bits + 2 * g
        words[v, bit // 32] |= np.uint32((3 if c > 1 else 1) << (bit % 32))
    return words


def stored_signatures(store):
    cols = store.bucket_columns
    out = np.zeros((store.n_vertices, store.n_signature_words), np.uint32)
    for start, count, k in store.vertex_segments():
        for b in range(store.n_buckets):
            c = store.signature_columns(k, b)
            assert len(c) == cols
            for j, col in enumerate(c):
                assert len(col) == count
                out[start:start + count, b * cols + j] = col
    return out


@pytest.mark.parametrize("budget", ["16KB", None])
@pytest.mark.parametrize("name", ["directed_int", "directed_str", "single_label", "undirected", "no_vertex_file",
                                  "many_vertices", "big_ids"])
def test_signature_table(stores, name, budget):
    store = stores(name, budget).store
    if budget == "16KB":
        assert store.n_buckets > 1   # the columns are cut into buckets
    if name == "many_vertices" and budget == "16KB":
        assert len(list(store.vertex_segments())) > 1
    got = stored_signatures(store)
    want = reference_signatures(store, DATASETS[name])
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} vertices with wrong signatures, e.g. {bad[:5]}"


def test_signature_segments_multiple_of_32(stores):
    store = stores("many_vertices", "16KB").store
    segs = list(store.vertex_segments())
    assert len(segs) > 1
    for start, count, k in segs[:-1]:
        assert count % 32 == 0
    assert sum(c for _, c, _ in segs) == store.n_vertices


def candidate_set(bits, n):
    v = np.arange(n)
    return set(np.flatnonzero((bits[v >> 5] >> (v & 31).astype(np.uint32)) & 1).tolist())


def check_candidates_cover_oracle(g, edges, vlabels, pattern, injective):
    store = g.store
    ids, dense = dense_maps(store)
    pat = parse_pattern(pattern)
    plan = make_plan(store, pat, CpuBackend(), injective=injective)
    matches = oracle_matches(edges, vlabels, pat, injective=injective)
    if plan.empty:
        assert not matches
        return 0
    cands = [candidate_set(b, store.n_vertices) for b in plan.candidates]
    for u, c in enumerate(cands):
        assert plan.candidate_counts[u] == len(c)
    for m in matches:
        for u, x in enumerate(m):
            assert dense[x] in cands[u], (
                f"{pattern!r} (injective={injective}): data vertex {x!r} of an embedding is not in C(u{u})")
    return len(matches)


@pytest.fixture(scope="module")
def filter_graphs(tmp_path_factory):
    base = tmp_path_factory.mktemp("filter")
    rng = random.Random(77)
    out = {}
    for kind, undirected, sid in [("dir", False, False), ("dir_str", False, True), ("undir", True, False)]:
        edges, vl = random_graph(rng, 40, 160, 3, 2, string_ids=sid)
        d = base / kind
        d.mkdir()
        write_edges(d / "e.parquet", edges)
        write_vertices(d / "v.parquet", vl)
        g = sgsi.build(str(d / "g.sgsi"), edges=str(d / "e.parquet"), vertices=str(d / "v.parquet"),
                       undirected=undirected, memory_budget="16KB")
        all_edges = edges + ([(b, a, l) for a, b, l in edges] if undirected else [])
        out[kind] = (g, all_edges, vl)
    yield out
    for g, _, _ in out.values():
        g.close()


@pytest.mark.parametrize("injective", [True, False])
@pytest.mark.parametrize("kind", ["dir", "dir_str", "undir"])
def test_candidates_contain_every_oracle_vertex(filter_graphs, kind, injective):
    g, edges, vl = filter_graphs[kind]
    rng = random.Random(["dir", "dir_str", "undir"].index(kind) * 10 + injective)
    total = 0
    for _ in range(30):
        k = rng.randint(1, 4)
        p = random_pattern(rng, k, vl.values(), ["E0", "E1"], p_vertex_label=0.8, p_edge_label=0.8)
        total += check_candidates_cover_oracle(g, edges, vl, p, injective)
    assert total > 0      # the patterns did find embeddings


# Two pattern edges between the same pair of vertices: on an undirected store
# both map onto one stored undirected edge, which gives ONE signature pair.
PARALLEL_PATTERNS = [
    "(a:0)-[:E0]->(b:1), (b)-[:E0]->(a)",
    "(a:0)-[:E0]->(b:1), (a)-[:E0]-(b)",
    "(a:0)-[:E0]->(b:1), (a)-[:E1]->(b)",
    "(a:1)<-[:E1]-(b:2), (a)-[:E1]->(b)",
    "(a:0)-[:E0]-(b:1), (a)-->(b)",
]


@pytest.mark.parametrize("kind, injective", [("dir", True), ("dir", False), ("undir", False)])
@pytest.mark.parametrize("pattern", PARALLEL_PATTERNS)
def test_candidates_parallel_pattern_edges(filter_graphs, kind, pattern, injective):
    g, edges, vl = filter_graphs[kind]
    check_candidates_cover_oracle(g, edges, vl, pattern, injective)


@pytest.mark.parametrize("pattern", PARALLEL_PATTERNS)
def test_bug_undirected_signature_parallel_pattern_edges(filter_graphs, pattern):
    """BUG (see below): injective filtering on an undirected store drops true
    candidates when two pattern edges join the same pair of vertices."""
    g, edges, vl = filter_graphs["undir"]
    check_candidates_cover_oracle(g, edges, vl, pattern, True)


def test_bug_undirected_store_two_pattern_edges_one_data_edge(tmp_path):
    """BUG probe (sgsi/join/plan.py _candidates + signatures.query_signature):
    on an undirected store, ``(a:X)-[:L]->(b:Y), (b)-[:L]->(a)`` puts the key
    (L, 'u', Y) twice into S(a), so the query asks for 11 in that group, but a
    data vertex with a single L-edge to a Y vertex has only 01 there. Every
    true match is filtered out and count() returns 0."""
    write_edges(tmp_path / "e.parquet", [(1, 2, "L")])
    write_vertices(tmp_path / "v.parquet", {1: "X", 2: "Y"})
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "e.parquet"),
                   vertices=str(tmp_path / "v.parquet"), undirected=True)
    pattern = "(a:X)-[:L]->(b:Y), (b)-[:L]->(a)"
    edges = [(1, 2, "L"), (2, 1, "L")]
    assert len(oracle_matches(edges, {1: "X", 2: "Y"}, pattern)) == 1
    check_candidates_cover_oracle(g, edges, {1: "X", 2: "Y"}, pattern, True)
    assert g.count(pattern, device="cpu") == 1


# ---------------------------------------------------------------------------
# Damaged stores
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine")
    ds = DATASETS["directed_int"]
    g = sgsi.build(str(d / "g.sgsi"), memory_budget="64KB", **ds.files(str(d)))
    g.close()
    return d / "g.sgsi"


@pytest.fixture
def damaged(pristine, tmp_path):
    dst = tmp_path / "copy.sgsi"
    shutil.copytree(pristine, dst)
    return dst


STORE_FILES = ["vertices.parquet", "vertex_ids.arrow", "vertex_labels.arrow", "signatures.arrow",
               "segments.arrow", "pcsr_groups.arrow", "pcsr_ci.arrow", "vindex.arrow", "vindex_batches.arrow"]


@pytest.mark.parametrize("name", STORE_FILES)
def test_truncated_file(damaged, name):
    p = damaged / name
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(StoreError, match=name.replace(".", r"\.")):
        sgsi.open(str(damaged))


@pytest.mark.parametrize("name", STORE_FILES)
def test_deleted_file(damaged, name):
    (damaged / name).unlink()
    with pytest.raises(StoreError, match=name.replace(".", r"\.")):
        Store(str(damaged))


@pytest.mark.parametrize("name", STORE_FILES)
def test_flipped_byte_caught_by_verify(damaged, name):
    p = damaged / name
    data = bytearray(p.read_bytes())
    pos = len(data) // 2
    data[pos] ^= 0x5A
    p.write_bytes(bytes(data))
    try:
        s = Store(str(damaged))
    except StoreError as e:              # opening may already notice; it must name the file
        assert name in str(e)
        return
    with pytest.raises(StoreError, match=name.replace(".", r"\.")):
        s.verify()


def test_verify_clean_store(damaged):
    Store(str(damaged)).verify()


def test_bad_manifest_json(damaged):
    (damaged / "manifest.json").write_text('{"format": "sgsi-store", "version": 1,')
    with pytest.raises(StoreError, match="manifest.json"):
        sgsi.open(str(damaged))


def test_manifest_not_a_dict(damaged):
    (damaged / "manifest.json").write_text("[1, 2, 3]")
    with pytest.raises(StoreError, match="manifest.json"):
        sgsi.open(str(damaged))


def test_missing_manifest(damaged):
    (damaged / "manifest.json").unlink()
    with pytest.raises(StoreError, match="manifest.json"):
        sgsi.open(str(damaged))


@pytest.mark.parametrize("version", [0, 2, 99, "1", None])
def test_wrong_version(damaged, version):
    m = json.loads((damaged / "manifest.json").read_text())
    m["version"] = version
    (damaged / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError, match="version"):
        sgsi.open(str(damaged))


def test_wrong_size_in_manifest(damaged):
    m = json.loads((damaged / "manifest.json").read_text())
    m["files"]["pcsr_ci.arrow"]["bytes"] += 8
    (damaged / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError, match=r"pcsr_ci\.arrow"):
        sgsi.open(str(damaged))


def test_not_a_store(tmp_path):
    with pytest.raises(StoreError):
        sgsi.open(str(tmp_path / "nothing.sgsi"))
    f = tmp_path / "file.sgsi"
    f.write_text("x")
    with pytest.raises(StoreError, match="file"):
        sgsi.open(str(f))
    with pytest.raises(StoreError, match="manifest.json"):
        sgsi.open(str(tmp_path))


def test_replaced_arrow_file_with_garbage_same_size(damaged):
    """A file overwritten by junk of the same size: open or first read names it."""
    p = damaged / "segments.arrow"
    p.write_bytes(b"\x00" * p.stat().st_size)
    with pytest.raises(StoreError, match=r"segments\.arrow"):
        Store(str(damaged))


# ---------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------


def leftovers(directory):
    return sorted(n for n in os.listdir(directory) if ".tmp-" in n or n.startswith("sgsi-spill-")
                  or n.endswith(".old"))


def test_build_leaves_no_temp_dirs(tmp_path):
    ds = DATASETS["directed_int"]
    kw = ds.files(str(tmp_path))
    before = set(os.listdir(tmp_path))
    sgsi.build(str(tmp_path / "g.sgsi"), memory_budget="16KB", **kw).close()
    assert set(os.listdir(tmp_path)) == before | {"g.sgsi"}
    assert leftovers(tmp_path) == []


def test_force_replaces_store(tmp_path):
    ds1, ds2 = DATASETS["directed_int"], DATASETS["directed_str"]
    kw1, kw2 = ds1.files(str(tmp_path)), ds2.files(str(tmp_path))
    out = str(tmp_path / "g.sgsi")
    sgsi.build(out, **kw1).close()
    with pytest.raises(InputError, match="exists"):
        sgsi.build(out, **kw2)
    assert Store(out).n_vertices == len(ds1.all_ids())     # untouched
    g = sgsi.build(out, force=True, **kw2)
    assert g.store.n_vertices == len(ds2.all_ids())
    assert isinstance(g.store.vertex_ids([0]).to_pylist()[0], str)
    g.store.verify()
    g.close()
    assert leftovers(tmp_path) == []
    names = {os.path.basename(x) for x in os.listdir(tmp_path)}
    assert names == {os.path.basename(v) for v in list(kw1.values()) + list(kw2.values())
                     if isinstance(v, str)} | {"g.sgsi"}


def test_crash_before_rename_leaves_nothing(tmp_path, monkeypatch):
    """A failure after the files are written (here: writing the manifest)
    leaves neither a store nor a temp dir; with force, the old store survives."""
    from sgsi.storage import build
    ds = DATASETS["directed_int"]
    kw = ds.files(str(tmp_path))
    before = set(os.listdir(tmp_path))

    def boom(directory, manifest):
        assert os.listdir(directory)      # the files were written by now
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(build.fmt, "write_manifest", boom)
    with pytest.raises(OSError, match="simulated"):
        sgsi.build(str(tmp_path / "g.sgsi"), **kw)
    assert set(os.listdir(tmp_path)) == before
    monkeypatch.undo()

    sgsi.build(str(tmp_path / "g.sgsi"), **kw).close()
    crc = Store(str(tmp_path / "g.sgsi")).manifest["files"]
    monkeypatch.setattr(build.fmt, "write_manifest", boom)
    with pytest.raises(OSError, match="simulated"):
        sgsi.build(str(tmp_path / "g.sgsi"), force=True, **kw)
    monkeypatch.undo()
    assert set(os.listdir(tmp_path)) == before | {"g.sgsi"}
    s = Store(str(tmp_path / "g.sgsi"))
    assert s.manifest["files"] == crc
    s.verify()


def test_crash_in_builder_leaves_nothing(tmp_path, monkeypatch):
    from sgsi.storage import build
    ds = DATASETS["directed_int"]
    kw = ds.files(str(tmp_path))
    before = set(os.listdir(tmp_path))

    def boom(self, *a, **k):
        raise RuntimeError("crash while writing segments (simulated)")

    monkeypatch.setattr(build._Builder, "_write_signatures", boom)
    with pytest.raises(RuntimeError, match="simulated"):
        sgsi.build(str(tmp_path / "g.sgsi"), **kw)
    assert set(os.listdir(tmp_path)) == before


# ---------------------------------------------------------------------------
# Direct segment reads (pread into a buffer, as the GPU backend stages them)
# ---------------------------------------------------------------------------


def _groups_offset(store, seg):
    """File offset of segment ``seg``'s groups in pcsr_groups.arrow."""
    mm, base = store._maps["pcsr_groups.arrow"]
    arr = store._batch("pcsr_groups.arrow", seg).column(0)
    return arr.buffers()[1].address + 4 * arr.offset - base


@pytest.mark.parametrize("piece", [None, 256], ids=["one_read", "threads"])
def test_read_segment_gives_the_mapped_bytes(damaged, monkeypatch, piece):
    import sgsi.storage.store as store_mod
    if piece:
        monkeypatch.setattr(store_mod, "_PREAD_PIECE", piece)
    s = Store(str(damaged))
    assert s.reads_direct
    n_seg = len(s._seg_edges)
    assert n_seg > 3 and s.max_segment_bytes > 4 * 256       # several segments, some read in pieces
    for seg in range(n_seg):
        groups, ci = s.segment(seg)
        buf = np.full(groups.nbytes + ci.nbytes + 8, 0xEE, np.uint8)
        g_bytes, c_bytes, shape = s.read_segment(seg, buf)
        assert (g_bytes, c_bytes, shape) == (groups.nbytes, ci.nbytes, groups.shape)
        assert np.array_equal(buf[:g_bytes].view(np.int32).reshape(shape), groups)
        assert np.array_equal(buf[g_bytes:g_bytes + c_bytes].view(np.int32), ci)
        assert (buf[g_bytes + c_bytes:] == 0xEE).all()           # nothing written past the segment
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.read_segment(0, np.empty(16, np.uint8))


def test_segment_offsets_out_of_range_are_caught_on_first_read(damaged):
    s = Store(str(damaged))
    at = _groups_offset(s, 1) + 4           # groups[0, 0, 1]: the first pair's offset into ci
    s.close()
    with open(damaged / "pcsr_groups.arrow", "r+b") as f:
        f.seek(at)
        f.write(np.int32(2**31 - 1).tobytes())
    s = Store(str(damaged))
    s.segment(0)
    with pytest.raises(StoreError, match=r"pcsr_groups\.arrow holds values out of range in segment 1"):
        s.segment(1)
    buf = np.empty(s.max_segment_bytes, np.uint8)
    g_bytes, _c, shape = s.read_segment(1, buf)         # read as it is: checked by check_segment
    with pytest.raises(StoreError, match="out of range in segment 1"):
        s.check_segment(1, buf[:g_bytes].view(np.int32).reshape(shape))


@pytest.mark.parametrize("n_bits, label_bits", [(128, 16), (64, 8), (256, 32), (32, 2)])
def test_signature_words_from_saturated_counts_equal_the_general_ones(n_bits, label_bits):
    """A lean build makes its words from counts capped at 2 with byte operations; the words must be
    those of words_from_counts (and words_from_groups) for any counts with the same cap."""
    rng = np.random.default_rng(n_bits + label_bits)
    groups = signatures.n_groups(n_bits, label_bits)
    counts = rng.integers(0, 9, (3000, groups))
    labels = rng.integers(-1, 40, 3000).astype(np.int32)
    want = signatures.words_from_counts(counts, labels, n_bits, label_bits)
    got = signatures.words_from_saturated(np.minimum(counts, 2).astype(np.uint8), labels, n_bits, label_bits)
    assert got.dtype == np.uint32 and np.array_equal(got, want)
    v, g = np.nonzero(counts)
    assert np.array_equal(signatures.words_from_groups(v, g, counts[v, g], labels, 3000, n_bits, label_bits), want)


def test_segment_reads_through_pread_and_the_maps_agree(tmp_path):
    """read_segment (pread into a buffer) and segment_spans (offsets in the files, in the maps the
    GPU backend copies from) give each segment's groups and ci as store.segment maps them; a
    closed store calls its close hooks and gives no map."""
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "benchmarks", "hprd", "data.graph")
    g = sgsi.build(str(tmp_path / "hprd.sgsi"), graph=bench, memory_budget="64KB")
    s = g.store
    assert s.reads_direct and len(s._seg_edges) > 4
    for seg in range(len(s._seg_edges)):
        groups, ci = s.segment(seg)
        want = np.concatenate([groups.reshape(-1).view(np.uint8), ci.view(np.uint8)])
        buf = np.zeros(want.size, np.uint8)
        gb, cb, shape = s.read_segment(seg, buf)
        assert (gb, cb) == (groups.nbytes, ci.nbytes) and shape == groups.shape == s.segment_shape(seg)
        assert np.array_equal(buf, want)
        spans = s.segment_spans(seg)
        got = []
        for name, off, n in spans:
            with open(os.path.join(g.path, name), "rb") as f:
                f.seek(off)
                got.append(np.frombuffer(f.read(n), np.uint8))
        assert np.array_equal(np.concatenate(got), want)
        mapped = np.concatenate([s.map_buffer(name)[off:off + n] for name, off, n in spans])
        assert np.array_equal(mapped, want)
        assert [n for _name, _off, n in spans] == [b for b in (gb, cb) if b]
    closed = []
    s.on_close(closed.append)
    g.close()
    assert closed == [s]
    with pytest.raises(sgsi.StoreError, match="closed"):
        s.map_buffer("pcsr_groups.arrow")
    with pytest.raises(sgsi.StoreError, match="closed"):
        s.segment_spans(0)
