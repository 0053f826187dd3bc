"""The build's in-memory sort (sgsi.storage.keysort) and its agreement with DuckDB's sort.

A store built with the in-memory sort must be byte for byte the store built
with DuckDB's out-of-core ORDER BY, for every kind of store (full, lean with
either way of counting signatures, undirected, single label, no vertex
labels), and the parallel sample sort must equal np.sort whatever the
number of workers and however skewed or repeated the keys.
"""

import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import sgsi
from oracle import random_graph, write_graph_files
from sgsi.storage import build, keysort


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
@pytest.mark.parametrize("kind", ["uniform", "repeats", "skewed", "equal", "empty"])
def test_sample_sort_equals_numpy_sort(monkeypatch, workers, kind):
    monkeypatch.setattr(keysort, "_PARALLEL_MIN", 16)      # the parallel path, on small arrays
    rng = np.random.default_rng(3)
    n = 0 if kind == "empty" else 50_000
    keys = {"uniform": lambda: rng.integers(0, 2**64 - 1, n, dtype=np.uint64),
            "repeats": lambda: rng.integers(0, 40, n).astype(np.uint64) << np.uint64(40),
            "skewed": lambda: (rng.zipf(1.3, n) % 1000).astype(np.uint64),
            "equal": lambda: np.full(n, 2**63 + 5, np.uint64),
            "empty": lambda: np.zeros(0, np.uint64)}[kind]()
    want = np.sort(keys)
    got = keysort.sort_keys(keys.copy(), workers)
    assert got.dtype == np.uint64 and np.array_equal(got, want)


def test_key_layout_packs_like_duckdb_and_unpacks():
    rng = np.random.default_rng(4)
    widths = (7, 26, 26)
    cols = [rng.integers(0, 1 << w, 1000).astype(np.int32) for w in widths]
    cols[1][:3] = (1 << 26) - 1                                   # the largest values survive
    layout = keysort.KeyLayout(widths)
    keys = layout.pack(cols)
    con = duckdb.connect()
    con.register("t", pa.table({"a": cols[0], "b": cols[1], "c": cols[2]}))
    sql_keys = con.sql(f"SELECT {layout.sql(['a', 'b', 'c'])} AS k FROM t").fetchnumpy()["k"]
    assert np.array_equal(np.asarray(sql_keys, np.uint64), keys)
    assert all(np.array_equal(x, y) for x, y in zip(layout.unpack(keys), cols))
    order = np.lexsort(cols[::-1])                                # sorting keys = sorting (a, b, c)
    assert np.array_equal(np.argsort(keys, kind="stable"), order)
    full = keysort.KeyLayout((2, 31, 31))                          # 64 bits: no mask on the top column
    top = [np.array([3, 0], np.int32), np.array([2**31 - 1, 0], np.int32), np.array([5, 2**31 - 1], np.int32)]
    assert all(np.array_equal(x, y) for x, y in zip(full.unpack(full.pack(top)), top))
    assert not keysort.KeyLayout.fits((3, 31, 31))
    with pytest.raises(ValueError):
        keysort.KeyLayout((3, 31, 31))
    assert [keysort.bit_width(n) for n in (0, 1, 2, 3, 4, 5, 1 << 26)] == [1, 1, 1, 2, 2, 3, 26]


def _build(path, sort, monkeypatch, **kw):
    said = []
    monkeypatch.setattr(build._Builder, "max_sort_bytes", 1 << 40 if sort == "memory" else 0)
    monkeypatch.setattr(keysort, "_PARALLEL_MIN", 16)
    sgsi.build(path, progress=said.append, **kw).close()
    assert any(("in memory" if sort == "memory" else "with DuckDB") in m for m in said), said
    return sgsi.open(path)


CASES = {
    "full": dict(n_el=3),
    "lean": dict(n_el=3, lean=True),
    "lean-vertex-passes": dict(n_el=3, lean=True, sig_table=0),
    "undirected": dict(n_el=2, undirected=True),
    "single-label": dict(n_el=1, edge_labels=False),
    "no-vertex-labels": dict(n_el=3, vertex_labels=False),
    "sparse-ids": dict(n_el=3, sparse=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_in_memory_sort_builds_the_same_store_as_duckdb(tmp_path, monkeypatch, case):
    c = CASES[case]
    rng = random.Random(len(case))
    edges, vlabels = random_graph(rng, 80, 700, 3, c["n_el"])
    edges += edges[:50]                                               # repeated rows are dropped
    if c.get("sparse"):                                               # ids that are not a range
        edges = [(s * 1000 + 7, t * 1000 + 7, lab) for s, t, lab in edges]
        vlabels = {v * 1000 + 7: lab for v, lab in vlabels.items()}
    e, v = write_graph_files(tmp_path, edges, None if c.get("vertex_labels") is False else vlabels,
                  c.get("edge_labels", True))
    if "sig_table" in c:
        monkeypatch.setattr(build._Builder, "max_signature_table", c["sig_table"])
    kw = dict(edges=e, vertices=v, lean=c.get("lean", False), undirected=c.get("undirected", False),
              memory_budget="16KB")                                   # many segments per partition
    mem = _build(str(tmp_path / "mem.sgsi"), "memory", monkeypatch, **kw)
    duck = _build(str(tmp_path / "duck.sgsi"), "duckdb", monkeypatch, **kw)
    with mem, duck:
        files = mem.store.manifest["files"]
        assert files == duck.store.manifest["files"]
        assert mem.store.manifest["partitions"] == duck.store.manifest["partitions"]
        segments = sum(p["segments"][1] for p in mem.store.manifest["partitions"].values() if "segments" in p)
        assert len(files) >= 7 and mem.store.manifest["edges"] > 500 and segments > 10
