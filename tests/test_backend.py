"""The CPU backend's own helpers: the derived-array cache, the label index and the label-first
candidate filter (the array operations every backend shares are checked in
tests/test_backend_conformance.py; the GPU's kernels against the same in tests/test_gpu.py)."""

import numpy as np
import pytest

from sgsi.join.backends import cpu as cpu_mod
from sgsi.join.backends.base import Overlaps
from sgsi.join.backends.cpu import CpuBackend, LabelIndex, bits_of_ids
from sgsi.join.memory import LruCache


def test_cpu_backend_keeps_derived_arrays_within_its_share_of_the_budget():
    """CpuBackend.derived makes an array once and keeps it (read only) for the queries after, the
    least recently used first out past 1/DERIVED_CACHE_SHARE of the memory budget; an array larger
    than that share is made every time. Counts on a store are the same with the degree masks kept."""
    be = CpuBackend("16KB")                             # keeps 2 KB of derived arrays
    assert be._derived.limit == 16384 // cpu_mod.DERIVED_CACHE_SHARE == 2048
    made = []

    def maker(key, nbytes):
        def make():
            made.append(key)
            return np.full(nbytes, len(made), np.uint8)
        return make
    a = be.derived("a", maker("a", 800))
    assert be.derived("a", maker("a", 800)) is a and made == ["a"]
    with pytest.raises(ValueError):
        a[0] = 7                                        # shared: read only
    be.derived("b", maker("b", 800))
    be.derived("a", maker("a", 800))                    # a used last: b goes first
    be.derived("c", maker("c", 800))
    assert made == ["a", "b", "c"] and be._derived.keys() == ["a", "c"] and be._derived.bytes == 1600
    be.derived("b", maker("b", 800))
    assert made[-1] == "b" and be._derived.keys() == ["c", "b"]
    big = be.derived("big", maker("big", 5000))         # past the share: not kept
    assert be.derived("big", maker("big", 5000)) is not big and made.count("big") == 2


def test_label_index_members_are_each_labels_vertices_in_order():
    """LabelIndex.members(k) is np.flatnonzero(labels == k) (as int32) for every label, -1 (no
    label) and labels absent or out of range included; the index is read only."""
    rng = np.random.default_rng(3)
    for n, top in ((0, 1), (1, 1), (500, 5), (5000, 300), (3000, 70000)):
        labels = rng.integers(-1, top, n).astype(np.int32)
        idx = LabelIndex(labels)
        for k in list(range(-1, min(top, 400) + 2)) + [-5, 1 << 20]:
            got = idx.members(k)
            assert got.dtype == np.int32 and np.array_equal(got, np.flatnonzero(labels == k))
        assert idx.nbytes == idx.order.nbytes + idx.starts.nbytes
        with pytest.raises(ValueError):
            idx.order[:1] = 0


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000, 4097])
def test_bits_of_ids_packs_sorted_ids(n):
    """bits_of_ids gives the words of np.packbits over a mask of the ids, few ids (OR-ed words)
    and many (a packed mask) alike."""
    rng = np.random.default_rng(n)
    for share in (0.0, 0.01, 0.05, 0.5, 1.0):
        ids = np.flatnonzero(rng.random(n) < share)
        mask = np.zeros(n + (-n) % 32, dtype=bool)
        mask[ids] = True
        want = np.packbits(mask, bitorder="little").view(np.uint32)
        for dtype in (np.int32, np.int64):
            got = bits_of_ids(ids.astype(dtype), n)
            assert got.dtype == np.uint32 and np.array_equal(got, want)


def test_popcount_with_and_without_bitwise_count(monkeypatch):
    """CpuBackend.popcount counts set bits by NumPy 2's bitwise_count, or by a byte table where
    NumPy has none."""
    bits = np.random.default_rng(2).integers(0, 1 << 32, 1001, dtype=np.uint64).astype(np.uint32)
    want = int(np.unpackbits(bits.view(np.uint8)).sum())
    assert CpuBackend().popcount(bits) == want
    monkeypatch.setattr(cpu_mod, "_bitwise_count", None)
    assert CpuBackend().popcount(bits) == want


def _dense_candidates(n, parts, ands):
    """candidate_bits' reference: every vertex's label, words and degree tests, as bool arrays."""
    out = []
    for i, masks in enumerate(ands):
        mask = np.ones(n, dtype=bool)
        for start, count, tests in parts:
            labels, label, pairs = tests[i]
            part = mask[start:start + count]
            if labels is not None:
                part &= labels == label
            for col, q in pairs:
                part &= (col & np.uint32(q)) == np.uint32(q)
        for m in masks:
            mask &= m
        out.append(mask)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_label_first_candidate_bits_match_every_vertex_tested(seed):
    """CpuBackend.candidate_bits (the label's vertices only, test after test) against every
    vertex's label, words and degree tests: over three vertex segments, the labels given as
    arrays and as LabelIndexes, pattern vertices with no label, no words, a query word of 0 and no
    degree tests."""
    rng = np.random.default_rng(seed)
    n, sizes = 3000, (1000, 1000, 1000)
    starts = np.cumsum((0,) + sizes[:-1])
    labels = rng.integers(-1, 6, n).astype(np.int32)
    cols = [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32) | np.uint32(rng.integers(0, 1 << 32))
            for _ in range(4)]
    degree = [rng.random(n) < p for p in (0.9, 0.5, 0.99)]
    specs = []          # (label or None, [(column, query word)], degree masks)
    for u in range(9):
        label = None if u % 4 == 3 else int(rng.integers(-1, 7))
        pairs = [(int(c), int(rng.integers(0, 1 << 32)) & int(rng.integers(0, 1 << 32)) & int(rng.integers(0, 1 << 32)))
                 for c in rng.choice(4, int(rng.integers(0, 4)), replace=False)]
        if u == 1:
            pairs.append((3, 0))                # a query word of 0 tests nothing
        specs.append((label, pairs, [degree[k] for k in rng.choice(3, int(rng.integers(0, 3)), replace=False)]))
    ands = [m for _l, _p, m in specs]

    def parts(indexed):
        out = []
        for s, c in zip(starts, sizes):
            seg = labels[s:s + c]
            tests = [((LabelIndex(seg) if indexed else seg) if lab is not None else None, lab,
                      [(cols[k][s:s + c], q) for k, q in pairs]) for lab, pairs, _m in specs]
            out.append((int(s), c, tests))
        return out
    want = _dense_candidates(n, parts(False), ands)
    be = CpuBackend()
    for indexed in (False, True):
        got = be.candidate_bits(n, parts(indexed), ands)
        for g, w in zip(got, want):
            assert np.array_equal(be.bits_to_ids(g, n), np.flatnonzero(w))
    assert any(w.any() for w in want) and not all(w.all() for w in want)
    # candidate_sets: the same sets, their sizes, and overlaps that agree with the sets, also where
    # the pattern vertices' labels answer them (as the planner gives them).
    bits, counts, meets, cost = be.candidate_sets(n, parts(True), ands)
    assert cost is None and counts == [int(w.sum()) for w in want]
    meets.labels = [lab for lab, _p, _m in specs]
    for u in range(len(want)):
        for w in range(len(want)):
            assert meets(u, w) == bool((want[u] & want[w]).any()), (u, w)


def test_overlaps_answer_pairs_of_different_labels_unread():
    """Overlaps given the sets' labels: a pair of different labels shares nothing (the bitsets are
    not read: here they would say otherwise); a pair with no label or the same label, and a
    bitset appended past the labels, are read."""
    ones = np.full(4, 0xFFFFFFFF, dtype=np.uint32)
    bits = [ones, ones, ones, ones]
    meets = Overlaps(np, bits)
    meets.labels = [3, 5, None, 3]                       # as the planner sets them
    assert not meets(0, 1) and not meets(1, 3)
    assert meets(0, 2) and meets(0, 3) and meets(1, 2)
    bits.append(ones)
    assert meets(4, 1) and meets(4, 4)
    assert Overlaps(np, bits)(0, 1)          # no labels: every pair read


def test_cpu_vertex_labels_index_kept_where_it_fits():
    """CpuBackend.vertex_labels gives a segment's LabelIndex, made once and kept; where the index
    would take more than a quarter of the derived arrays' share of the budget, the label array."""
    class Store:
        path = "s"
        token = ("s", 0)
        reads = 0

        def vertex_labels(self, seg):
            Store.reads += 1
            return np.arange(1000, dtype=np.int32) % 7 - 1
    be = CpuBackend("1MB")
    a = be.vertex_labels(Store(), 0)
    assert isinstance(a, LabelIndex) and be.vertex_labels(Store(), 0) is a
    assert np.array_equal(a.members(2), np.flatnonzero(np.arange(1000) % 7 == 3))
    small = CpuBackend("64KB")                  # 8 KB for derived arrays: the index takes 4 KB
    got = small.vertex_labels(Store(), 0)
    assert isinstance(got, np.ndarray) and got.size == 1000 and not small._derived.keys()


def test_lru_cache_keeps_values_within_its_limit():
    """LruCache: a value put again replaces the old one (its bytes counted once), the least
    recently used (got or put) goes first past the limit, one larger than the limit is not kept,
    clear empties it."""
    c = LruCache(100)
    assert c.put("a", 1, 40) and c.put("b", 2, 40) and c.get("a") == 1
    assert c.put("b", 3, 50) and c.bytes == 90 and c.keys() == ["a", "b"] and c.get("b") == 3
    assert c.put("c", 4, 30)                    # 120 bytes: a, the least recently used, goes
    assert c.keys() == ["b", "c"] and c.bytes == 80 and c.get("a") is None and "a" not in c
    assert not c.put("d", 5, 101) and "d" not in c and c.bytes == 80
    c.clear()
    assert c.keys() == [] and c.bytes == 0


def test_cpu_dense_degrees_kept_where_they_fit(tmp_path):
    """CpuBackend.dense_degrees: every vertex's degree in a partition (the degree index's, zero
    elsewhere), made once and kept; None where the array would take more than a quarter of the
    derived arrays' share (the engine searches the index batches then). Counts agree both ways."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import sgsi
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    keep = src != dst
    pq.write_table(pa.table({"src": src[keep], "dst": dst[keep],
                             "label": np.where(src[keep] % 2 == 0, "a", "b")}), tmp_path / "e.parquet")
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "e.parquet"), memory_budget="16KB")
    store = g.store
    be = CpuBackend("64MB")
    for lab in (store.edge_label_id("a"), store.edge_label_id("b")):
        for direction in ("out", "in", "both"):
            p = store.partition(lab, direction)
            want = np.zeros(store.n_vertices, np.int64)
            for bid in p.idx_batches:
                v, d = store.index_batch(bid)
                want[np.asarray(v)] = np.asarray(d)
            got = be.dense_degrees(store, p)
            assert got.dtype == np.int32 and np.array_equal(got, want) and want.any()
            assert be.dense_degrees(store, p) is got
    small = CpuBackend("16KB")                  # a quarter of its 2 KB share: 512 bytes, under 4 a vertex
    assert 4 * store.n_vertices > 512 and small.dense_degrees(store, p) is None
    pattern = "(x)-[:a]->(y)-[:b]->(z)<-[:a]-(x)"
    assert g.count(pattern, device="cpu") == g.count(pattern, device="cpu", memory_budget="16KB") > 0
    g.close()


@pytest.mark.parametrize("n", [1, 31, 33, 4096, 100003])
def test_bits_to_ids_sparse_and_dense(n):
    """CpuBackend.bits_to_ids (a sparse set's nonzero words unpacked alone, a dense set's all)
    gives the sorted int32 ids of the set bits below n, bits past n ignored."""
    rng = np.random.default_rng(n)
    be = CpuBackend()
    words = (n + 31) // 32 + 1                  # a word past n, its bits set: not vertices
    for share in (0.0, 0.0005, 0.02, 0.3, 1.0):
        mask = rng.random(32 * words) < share
        mask[n:] = True
        bits = np.packbits(mask, bitorder="little").view(np.uint32)
        got = be.bits_to_ids(bits, n)
        assert got.dtype == np.int32 and np.array_equal(got, np.flatnonzero(mask[:n]))


@pytest.mark.parametrize("universe", [60, 1 << 30])
def test_own_hits_by_table_and_by_search_agree(monkeypatch, universe):
    """own_hits and sizes_less_own look a row's vertex up in a (tuple, rank) table where it fits,
    else search sorted keys: the same hits and sizes either way, those of Python sets (values dense,
    and spread over 2^30: a rank array that wide takes the search)."""
    rng = np.random.default_rng(universe % 97)
    sets = [np.unique(rng.integers(0, universe, rng.integers(0, 9))).astype(np.int32) for _ in range(50)]
    scount = np.array([len(s) for s in sets], np.int64)
    evals = np.concatenate(sets)
    sstart, etuple = np.cumsum(scount) - scount, np.repeat(np.arange(len(sets)), scount)
    row_tuple = rng.integers(0, len(sets), 5000)
    pool = np.concatenate([evals, rng.integers(0, universe, 200)]).astype(np.int32)
    cols = [rng.choice(pool, row_tuple.size) for _ in range(3)]
    be = CpuBackend()
    table = list(be.own_hits(row_tuple, etuple, evals, sstart, scount, cols))
    monkeypatch.setattr(cpu_mod, "OWN_TABLE_BYTES", 1)
    searched = list(be.own_hits(row_tuple, etuple, evals, sstart, scount, cols))
    assert len(table) == len(searched) == 3
    for col, (sel, hit, x), (sel2, hit2, x2) in zip(cols, table, searched):
        want = [i for i, t in enumerate(row_tuple) if col[i] in set(sets[t].tolist())]
        assert sel[hit].tolist() == sel2[hit2].tolist() == want and len(want) > 20
        assert np.array_equal(x[hit], col[want]) and np.array_equal(x2[hit2], col[want])
    sizes = be.sizes_less_own(row_tuple, etuple, evals, sstart, scount, cols)
    monkeypatch.setattr(cpu_mod, "OWN_SEARCH_ROWS", 700)             # each column searched in 8 blocks
    assert np.array_equal(sizes, be.sizes_less_own(row_tuple, etuple, evals, sstart, scount, cols))
    monkeypatch.setattr(cpu_mod, "OWN_TABLE_BYTES", 1 << 24)
    assert np.array_equal(sizes, be.sizes_less_own(row_tuple, etuple, evals, sstart, scount, cols))
    empty = np.zeros(len(sets), np.int64)                  # sets not packed, all empty: gaps only
    assert not be.sizes_less_own(row_tuple, None, np.arange(5, dtype=np.int32), empty, empty, cols).any()
    own = [set(sets[t].tolist()) for t in row_tuple]
    assert sizes.tolist() == [len(own[i]) - sum(int(c[i]) in own[i] for c in cols) for i in range(row_tuple.size)]
