"""bench/gen.py: random-walk queries and the R-MAT generator's threaded CPU path.

Checks that walk queries are subgraphs of the data graph (edges with their labels and
directions, vertex labels), that one seed still gives the queries recorded before the
loader was rewritten for large graphs, and that the threaded sort and generator give
exactly the numbers of their serial definitions.
"""

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gen  # noqa: E402


def _check_walks(graph, src, dst, elabel, vertex_label):
    """Walks on ``graph`` (a _WalkGraph of the edge list src, dst, elabel) use data edges only."""
    first_seen = list(dict.fromkeys(list(src) + list(dst)))     # dense id -> original id
    edges = set(zip(src, dst, elabel))
    rng = np.random.default_rng(5)
    walks = 0
    for k in (2, 4, 7):
        for _ in range(20):
            r = graph.walk(rng, k, 50 * k)
            if r is None:
                continue
            walks += 1
            order, qedges = r
            ids = [first_seen[graph.dense_id(v)] for v in order]
            assert len(set(ids)) == k
            for v, i in zip(order, ids):
                assert graph.vertex_label(v) == vertex_label(i)
            for i, j, lab in qedges:
                assert (ids[i], ids[j], lab) in edges
    assert walks > 10


def test_walks_follow_edges_int_ids(tmp_path):
    gen.rmat(tmp_path, 3000, shape="small", seed=4, device="cpu")
    g = gen._load_walk_graph(str(tmp_path))
    et = pq.read_table(tmp_path / "edges.parquet")
    vt = pq.read_table(tmp_path / "vertices.parquet")
    vlab = dict(zip(vt["id"].to_pylist(), vt["label"].to_pylist()))
    _check_walks(g, et["src"].to_pylist(), et["dst"].to_pylist(), et["label"].to_pylist(), vlab.get)


def test_walks_follow_edges_string_ids_and_nulls():
    rng = np.random.default_rng(2)
    n, e = 300, 2000
    src = [f"v{x}" for x in rng.zipf(1.4, e) % n]
    dst = [f"v{x}" for x in rng.integers(0, n, e)]
    dst[:50] = src[:50]                                     # self-loops: never walked
    elabel = [None if x == 3 else int(x) for x in rng.integers(0, 4, e)]
    vid = [f"v{x}" for x in range(0, n, 2)]                 # odd vertices: no label row
    vlab = {v: f"L{i % 3}" for i, v in enumerate(vid)}
    g = gen._load_walk_graph({"src": src, "dst": dst, "label": pa.array(elabel, pa.int64())},
                             {"id": vid, "label": [vlab[v] for v in vid]})
    _check_walks(g, src, dst, elabel, vlab.get)


@pytest.mark.parametrize("ids", [(9, 7, 1, 2, 3, 4, 5), ("z", "y", "a", "b", "c", "d", "e")])
def test_dense_ids_are_first_appearance_with_self_loops(ids):
    # vertices 9 and 7 appear first, in self-loops only: they keep their dense ids 0 and 1
    # (as when the ids were dictionary-encoded) but are no walk's start
    m = dict(zip((9, 7, 1, 2, 3, 4, 5), ids))
    edges = [(9, 9), (7, 7), (1, 2), (2, 3), (3, 1), (7, 7), (4, 5), (5, 1), (2, 2)]
    g = gen._load_walk_graph({"src": [m[a] for a, _ in edges], "dst": [m[b] for _, b in edges]})
    assert [g.dense_id(v) for v in g.starts] == [2, 3, 4, 5, 6]
    assert sorted(g.dense_id(v) for v in set(g.keys.tolist())) == list(range(7))


def test_same_queries_as_before(tmp_path):
    # recorded with the bench/gen.py of before the large-graph loader (dictionary-encoded ids,
    # object label arrays, np.argsort CSR): the loader must keep giving these for these seeds
    gen.rmat(tmp_path, 20000, shape="small", seed=1, device="cpu")   # one graph per device
    got = [(q.pattern, q.info) for k in (4, 6) for q in gen.random_walk_queries(str(tmp_path), k, 2, seed=3)]
    assert got == [
        ("(v0:L2)-[:E1]->(v1:L0), (v1)-[:E0]->(v2:L6), (v2)-[:E2]->(v3:L3)", {"start": 1293}),
        ("(v0:L0)-[:E3]->(v1:L0), (v1)<-[:E1]-(v2:L6), (v2)<-[:E2]-(v3:L0)", {"start": 377}),
        ("(v0:L2)-[:E1]->(v1:L0), (v1)-[:E0]->(v2:L6), (v2)-[:E2]->(v3:L3), (v3)-[:E1]->(v4:L0), "
         "(v4)-[:E2]->(v5:L0)", {"start": 1293}),
        ("(v0:L2)-[:E0]->(v1:L4), (v1)<-[:E0]-(v2:L2), (v2)<-[:E3]-(v3:L2), (v3)-[:E1]->(v4:L1), "
         "(v4)-[:E1]->(v5:L0)", {"start": 1277}),
    ]


@pytest.mark.parametrize("n_edges,n_keys", [(1_200_000, (1 << 17) + 5), (1000, 7), (5000, 300)])
def test_arc_csr_is_the_stable_argsort(monkeypatch, n_edges, n_keys):
    monkeypatch.setattr(gen, "_n_threads", lambda: 4)        # several chunks and buckets
    rng = np.random.default_rng(0)
    keys = (rng.zipf(1.3, 2 * n_edges) % n_keys).astype(np.int32)
    keys[n_edges:n_edges + n_edges // 20] = keys[:n_edges // 20]     # self-loops
    indptr, arcs, loops = gen._arc_csr(keys, n_edges, n_keys)
    ref_loops = np.flatnonzero(keys[:n_edges] == keys[n_edges:])
    u = keys.astype(np.int64)
    u[ref_loops] = u[ref_loops + n_edges] = n_keys                   # self-loop arcs sort last, dropped
    ref = np.argsort(u, kind="stable")[:2 * (n_edges - ref_loops.size)]
    np.testing.assert_array_equal(arcs, ref)
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(u, minlength=n_keys + 1)[:n_keys])
    np.testing.assert_array_equal(loops, ref_loops)


def _rmat_edges_reference(rng, scale, size, a=0.57, b=0.19, c=0.19):
    """The R-MAT bit loop as first written (int64, one expression per bit): the definition."""
    src = np.zeros(size, dtype=np.int64)
    dst = np.zeros(size, dtype=np.int64)
    ab, abc = a + b, a + b + c
    for bit in range(scale):
        r = rng.random(size)
        src |= (r >= ab).astype(np.int64) << bit
        dst |= (((r >= a) & (r < ab)) | (r >= abc)).astype(np.int64) << bit
    return src, dst


def test_rmat_edges_numpy_is_the_reference():
    for scale, size, abc in ((12, 5000, (0.57, 0.19, 0.19)), (34, 999, (0.45, 0.15, 0.15)), (5, 100, (0.0, 0.5, 0.0))):
        got = gen.rmat_edges(np, np.random.default_rng(9), scale, size, *abc)
        ref = _rmat_edges_reference(np.random.default_rng(9), scale, size, *abc)
        for x, y in zip(got, ref):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def test_threaded_rmat_chunk_is_the_serial_one(monkeypatch):
    monkeypatch.setattr(gen, "_n_threads", lambda: 3)        # pieces of 2**18 draws
    size, scale, seed = (1 << 19) + 77, 21, np.uint32(12345)
    consts = gen._mix_constants(seed, scale)
    ecdf = gen.zipf_cdf(86)
    src, dst, ranks = gen._rmat_chunk_numpy(seed, scale, size, 0.57, 0.19, 0.19, consts, ecdf)
    rng = np.random.default_rng(seed)                          # the serial definition
    s, d = _rmat_edges_reference(rng, scale, size)
    np.testing.assert_array_equal(src, gen.scramble(np, s, scale, consts))
    np.testing.assert_array_equal(dst, gen.scramble(np, d, scale, consts))
    np.testing.assert_array_equal(ranks, gen.zipf_sample(np, rng, ecdf, size))
