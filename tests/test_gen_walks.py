"""bench/gen.py, run as a command: random-walk queries and the R-MAT generator.

Checks that walk queries are subgraphs of the data graph (edges with their labels and
directions, vertex labels), that one seed still gives the queries recorded before the
loader was rewritten for large graphs, and that the generator writes the same graph on
one core as on several (its threads draw the numbers of the serial definition).
"""

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

GEN = Path(__file__).resolve().parents[1] / "bench" / "gen.py"


def _gen(*args, preexec_fn=None):
    """``python bench/gen.py ARGS``; its standard output."""
    return subprocess.run([sys.executable, str(GEN), *map(str, args)], capture_output=True, text=True,
                          check=True, preexec_fn=preexec_fn).stdout


def _walks(graph, k, n, seed, *extra):
    return _gen("queries", graph, "--k", k, "--n", n, "--seed", seed, *extra).splitlines()


_PART = re.compile(r"\((v\d+)(?::([^)]*))?\)(<?)-(?:\[:([^\]]*)\])?-(>?)\((v\d+)(?::([^)]*))?\)")


def _has_match(pattern, edges, vertex_label):
    """Whether ``pattern`` (as gen.py writes it) maps injectively into the graph of ``edges``
    ((src, dst, label) triples) and ``vertex_label`` (id -> label); a pattern edge or vertex
    written without a label takes any."""
    want_label, want_edges = {}, []
    for part in pattern.split(", "):
        a, la, back, le, fwd, b, lb = _PART.fullmatch(part).groups()
        assert bool(back) != bool(fwd), part
        for v, lab in ((a, la), (b, lb)):
            if lab is not None:
                want_label[v] = lab
        want_edges.append((b, a, le) if back else (a, b, le))
    labels, nbrs = defaultdict(set), defaultdict(set)
    for s, d, lab in edges:
        if s != d:
            labels[s, d].add(str(lab))
            nbrs[s].add(d)
            nbrs[d].add(s)
    order = list(dict.fromkeys(v for a, b, _ in want_edges for v in (a, b)))

    def fits(v, x, m):
        if v in want_label and str(vertex_label(x)) != want_label[v]:
            return False
        for a, b, lab in want_edges:
            if v in (a, b) and (b if a == v else a) in m:
                s, d = (x, m[b]) if a == v else (m[a], x)
                if not labels[s, d] or (lab is not None and lab not in labels[s, d]):
                    return False
        return True

    def extend(m):
        if len(m) == len(order):
            return True
        v = order[len(m)]
        cands = set(nbrs)
        for a, b, _ in want_edges:           # every vertex after the first touches one already placed
            if v in (a, b) and (b if a == v else a) in m:
                cands &= nbrs[m[b if a == v else a]]
        used = set(m.values())
        return any(extend({**m, v: x}) for x in cands if x not in used and fits(v, x, m))

    return extend({})


@pytest.fixture(scope="module")
def rmat_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rmat")
    _gen("rmat", "--edges", 20000, "--shape", "small", "--seed", 1, "--device", "cpu", "--out", d)
    return d


def test_walks_follow_edges_int_ids(rmat_dir):
    et = pq.read_table(rmat_dir / "edges.parquet")
    vt = pq.read_table(rmat_dir / "vertices.parquet")
    edges = list(zip(et["src"].to_pylist(), et["dst"].to_pylist(), et["label"].to_pylist()))
    vlab = dict(zip(vt["id"].to_pylist(), vt["label"].to_pylist()))
    walks = _walks(rmat_dir, 7, 12, 5, "--device", "cpu")
    assert len(walks) == 12
    for p in walks:
        assert _has_match(p, edges, vlab.get), p


def test_walks_follow_edges_string_ids_and_nulls(tmp_path):
    rng = np.random.default_rng(2)
    n, e = 300, 2000
    src = [f"v{x}" for x in rng.zipf(1.4, e) % n]
    dst = [f"v{x}" for x in rng.integers(0, n, e)]
    dst[:50] = src[:50]                                     # self-loops: never walked
    elabel = [None if x == 3 else int(x) for x in rng.integers(0, 4, e)]
    vid = [f"v{x}" for x in range(0, n, 2)]                 # odd vertices: no label row
    vlab = {v: f"L{i % 3}" for i, v in enumerate(vid)}
    pq.write_table(pa.table({"src": src, "dst": dst, "label": pa.array(elabel, pa.int64())}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"id": vid, "label": [vlab[v] for v in vid]}), tmp_path / "v.parquet")
    walks = _walks(tmp_path / "e.parquet", 5, 12, 5, "--vertices", tmp_path / "v.parquet", "--device", "cpu")
    assert len(walks) == 12
    assert any("-->" in p or "<--" in p for p in walks)     # a walked edge with a null label
    for p in walks:
        assert _has_match(p, list(zip(src, dst, elabel)), vlab.get), p


def test_same_queries_as_before(rmat_dir):
    # recorded with the bench/gen.py of before the large-graph loader (dictionary-encoded ids,
    # object label arrays, np.argsort CSR): the loader must keep giving these for these seeds
    got = [p for k in (4, 6) for p in _walks(rmat_dir, k, 2, 3)]
    assert got == [
        "(v0:L2)-[:E1]->(v1:L0), (v1)-[:E0]->(v2:L6), (v2)-[:E2]->(v3:L3)",
        "(v0:L0)-[:E3]->(v1:L0), (v1)<-[:E1]-(v2:L6), (v2)<-[:E2]-(v3:L0)",
        "(v0:L2)-[:E1]->(v1:L0), (v1)-[:E0]->(v2:L6), (v2)-[:E2]->(v3:L3), (v3)-[:E1]->(v4:L0), "
        "(v4)-[:E2]->(v5:L0)",
        "(v0:L2)-[:E0]->(v1:L4), (v1)<-[:E0]-(v2:L2), (v2)<-[:E3]-(v3:L2), (v3)-[:E1]->(v4:L1), "
        "(v4)-[:E1]->(v5:L0)",
    ]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores")
def test_one_core_writes_the_graph_of_several(tmp_path):
    """The generator splits a chunk's draws among its threads, one per core it may use (pieces of
    at least 2^18 draws): pinned to one core it must write the same graph."""
    core = min(os.sched_getaffinity(0))
    args = ["rmat", "--edges", 600000, "--shape", "small", "--seed", 12345, "--device", "cpu", "--out"]
    _gen(*args, tmp_path / "one", preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    _gen(*args, tmp_path / "all")
    for name in ("edges.parquet", "vertices.parquet"):
        assert pq.read_table(tmp_path / "one" / name).equals(pq.read_table(tmp_path / "all" / name))
