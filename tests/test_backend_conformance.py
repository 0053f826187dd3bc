"""Every backend against one NumPy reference: the operations of the backend seam
(:class:`sgsi.join.backends.base.Backend`) that the engine calls, on small random inputs.

The CPU backend runs everywhere; the GPU backend where CuPy sees a CUDA device (its ``gpu``
parameter is skipped elsewhere, as tests/test_gpu.py is). Kernel-specific cases (launch
limits, result slots, load-balance ways) stay in tests/test_gpu.py.
"""

import inspect

import numpy as np
import pytest

from sgsi.join.backends import gpu_available
from sgsi.join.backends.base import Backend
from sgsi.join.backends.cpu import CpuBackend
from sgsi.partition import pcsr

_NO_GPU = pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, _NO_GPU])])
def backend(request):
    if request.param == "cpu":
        return CpuBackend("1GB")
    from sgsi.join.backends.gpu.backend import GpuBackend
    return GpuBackend("1GB")


def _host(backend, a):
    """A backend array (or a list, tuple or int of them) on the host."""
    if isinstance(a, (list, tuple)):
        return type(a)(_host(backend, x) for x in a)
    if a is None or isinstance(a, (int, bool, np.integer)):
        return a
    return backend.to_host(a)


def test_backends_implement_the_protocol(backend):
    """Each backend has every member of the Protocol, each method taking the Protocol's
    parameters (by name, in order)."""
    assert isinstance(backend, Backend)
    members = [m for m in vars(Backend) if not m.startswith("_") and callable(getattr(Backend, m))]
    assert len(members) > 50
    for m in members:
        want = list(inspect.signature(getattr(Backend, m)).parameters)[1:]
        got = list(inspect.signature(getattr(backend, m)).parameters)
        assert got[:len(want)] == want, m


# -- array operations ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 17, 1000])
def test_exclusive_total_and_take_values(backend, n):
    """exclusive_total: the exclusive prefix sum (int64) and the sum as a Python int, of int32,
    int64 and bool arrays, empty ones included; prefix_sum and exclusive_sum as NumPy's cumsum;
    take_values is np.take (negative indices count from the end), cast where a dtype is given."""
    rng = np.random.default_rng(5)
    for x in (rng.integers(0, 1 << 40, n), rng.integers(0, 9, n).astype(np.int32), rng.random(n) < 0.5):
        got, total = backend.exclusive_total(backend.to_device(x))
        got = _host(backend, got)
        assert got.dtype == np.int64 and np.array_equal(got, np.cumsum(x, dtype=np.int64) - x)
        assert type(total) is int and total == int(np.sum(x, dtype=np.int64))
        assert np.array_equal(_host(backend, backend.prefix_sum(backend.to_device(x))), np.cumsum(x))
        assert np.array_equal(_host(backend, backend.exclusive_sum(backend.to_device(x))), np.cumsum(x) - x)
    a = rng.integers(-50, 50, 64).astype(np.int32)
    idx = rng.integers(-64, 64, n)
    assert np.array_equal(_host(backend, backend.take_values(backend.to_device(a), backend.to_device(idx))), a[idx])
    got = _host(backend, backend.take_values(backend.to_device(a), backend.to_device(idx), np.int64))
    assert got.dtype == np.int64 and np.array_equal(got, a[idx])


@pytest.mark.parametrize("starts,counts", [
    ([], []), ([0, 0, 0], [0, 0, 0]), ([3, 10, 2], [0, 0, 4]), ([9, 1, 1, 7], [2, 3, 0, 1]),
    ([4, 4, 4], [2, 2, 2]), ([2**40], [3]), ([5, 6, 7, 8, 9], [0, 3, 0, 0, 2]),
])
def test_ragged_indices_and_repeat_index(backend, starts, counts):
    """ragged_indices and repeat_index as np.repeat builds them (empty rows anywhere, past int32)."""
    s, c = np.array(starts, np.int64), np.array(counts, np.int64)
    want = np.repeat(s - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
    got = _host(backend, backend.ragged_indices(backend.to_device(s), backend.to_device(c)))
    assert got.tolist() == want.tolist() == pcsr.ragged_indices(s, c).tolist()
    assert _host(backend, backend.repeat_index(backend.to_device(c))).tolist() == np.repeat(np.arange(c.size), c).tolist()


@pytest.mark.parametrize("n", [1, 2, 40, 5000])
def test_runs_and_nonzero(backend, n):
    """run_starts and runs (distinct values, run starts, run ends) of sorted int32, int64 and uint8
    values, short and long runs; nonzero_index as np.flatnonzero."""
    rng = np.random.default_rng(n)
    for v in (np.sort(rng.integers(0, max(1, n // 3), n)), np.sort(rng.integers(-5, 5, n)).astype(np.int32),
              np.zeros(n, np.int64), np.arange(n, dtype=np.int32), np.sort(rng.integers(0, 4, n)).astype(np.uint8)):
        new = np.r_[True, v[1:] != v[:-1]]
        assert np.array_equal(_host(backend, backend.run_starts(backend.to_device(v))), new)
        start = np.flatnonzero(new)
        end = np.r_[start[1:], n]
        got = _host(backend, backend.runs(backend.to_device(v)))
        for g, w in zip(got, (v[start], start, end)):
            assert g.dtype == w.dtype and np.array_equal(g, w)
    m = rng.random(n) < 0.3
    got = _host(backend, backend.nonzero_index(backend.to_device(m)))
    assert got.dtype == np.int64 and np.array_equal(got, np.flatnonzero(m))


@pytest.mark.parametrize("n", [1, 33, 3000])
def test_distinct_index_and_pair_key(backend, n):
    """distinct_index: sorted distinct values and each element's index among them (np.unique),
    over a dense range, one past 16 a value, and int64 ids past int32; pair_key: int64 keys
    ``c0 << 32 | c1`` and whether they ascend."""
    rng = np.random.default_rng(n)
    cases = [rng.integers(0, max(2, n // 3), n), rng.integers(0, max(2, n // 3), n).astype(np.int32) + 1000,
             rng.integers(0, n, n) + (1 << 40), np.array([5, 1 << 30, 5, 7], np.int32)]
    for v in cases:
        uniq, idx = _host(backend, backend.distinct_index(backend.to_device(v)))
        want_u, want_i = np.unique(v, return_inverse=True)
        assert uniq.dtype == v.dtype and np.array_equal(uniq, want_u) and np.array_equal(idx, want_i)
        for lo, hi in ((int(v.min()), int(v.max())), (int(v.min()) - 3, int(v.max()) + 2 * n),
                       (int(v.min()) - 20 * n, int(v.max()))):      # a span may bound the values only
            got = _host(backend, backend.distinct_index(backend.to_device(v), (lo, hi)))
            assert np.array_equal(got[0], want_u) and np.array_equal(got[1], want_i)
    c0 = np.sort(rng.integers(-3, 40, n)).astype(np.int32)
    for c1 in (rng.integers(0, (1 << 31) - 1, n).astype(np.int32), np.full(n, 5, np.int32)):
        for a0, a1 in ((c0, c1), (c0.astype(np.int64), c1[::-1].copy())):
            key, asc = backend.pair_key(backend.to_device(a0), backend.to_device(a1))
            want = (a0.astype(np.int64) << 32) | a1.astype(np.int64)
            assert np.array_equal(_host(backend, key), want) and asc == bool(np.all(np.diff(want) >= 0))


@pytest.mark.parametrize("n", [1, 40, 3000])
def test_distinct_tuples(backend, n):
    """The distinct rows of 2 to 4 int32 columns, sorted first column major, and each row's
    tuple among them (np.unique over rows): few distinct values (their ranks combined), more
    (radix sorted), and values spread wide (lexsorted)."""
    from sgsi.join.sets import _distinct_tuples
    rng = np.random.default_rng(n + 7)
    for k in (2, 3, 4):
        for high in (3, max(4, n // 2), 1 << 20):
            cols = [rng.integers(0, high, n).astype(np.int32) + 100 * j for j in range(k)]
            cols[0] = cols[0][::-1].copy()          # not ascending: no sorted shortcut
            row_tuple, tuples = _distinct_tuples(backend, [backend.to_device(c) for c in cols])
            want, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
            got = np.stack([_host(backend, t) for t in tuples], axis=1)
            assert np.array_equal(got, want) and np.array_equal(_host(backend, row_tuple), inverse.ravel())


@pytest.mark.parametrize("n", [0, 1, 255, 5000])
def test_stack_take_columns_and_reads(backend, n):
    """stack (np.stack), take_columns (np.take of each, mixed dtypes), row_numbers (np.arange),
    host_ints (scalars read at once) and host_reductions (sum, max, min; 0 for the max and min of
    an empty array, int32 and int64)."""
    rng = np.random.default_rng(n + 1)
    for dtype in (np.int32, np.int64, np.uint32):
        host = [rng.integers(0, 100, n).astype(dtype) for _ in range(3)]
        got = _host(backend, backend.stack([backend.to_device(a) for a in host]))
        assert got.dtype == dtype and np.array_equal(got, np.stack(host))
    cols = [rng.integers(-2**31, 2**31 - 1, 50).astype(t) for t in (np.int32, np.int64, np.uint32, np.int8)]
    idx = rng.integers(0, 50, n)
    got = _host(backend, backend.take_columns([backend.to_device(c) for c in cols], backend.to_device(idx)))
    assert [g.dtype for g in got] == [c.dtype for c in cols]
    assert all(np.array_equal(g, np.take(c, idx)) for g, c in zip(got, cols))
    rows = _host(backend, backend.row_numbers(n))
    assert rows.dtype == np.int64 and np.array_equal(rows, np.arange(n))
    a = rng.integers(-2**40, 2**40, max(n, 1))
    d = backend.to_device(a)
    assert backend.host_ints(d.max(), d[0], (d > 0).sum()) == [int(a.max()), int(a[0]), int((a > 0).sum())]
    narrow = rng.integers(-2**31, 2**31, n).astype(np.int32)
    pairs = [("sum", a), ("max", a), ("min", a), ("max", narrow), ("min", narrow), ("sum", narrow),
             ("max", a[:0]), ("min", a[:0]), ("sum", a[:0])]
    want = [int(x.sum()) if op == "sum" else (int(getattr(x, op)()) if x.size else 0) for op, x in pairs]
    assert backend.host_reductions(*[(op, backend.to_device(x)) for op, x in pairs]) == want


@pytest.mark.parametrize("n", [1, 33, 10_000])
def test_scatter_bincount_add_at_and_sorts(backend, n):
    """scatter_equal (equal values at equal indices), bincount and add_at (repeated ids adding up,
    hubs and runs), argsort (stable) and lexsort, against NumPy."""
    rng = np.random.default_rng(n + 2)
    high = max(4, n // 3)
    ids = rng.integers(0, high, n)
    ids[rng.random(n) < 0.4] = high // 2
    weight = rng.integers(0, 1 << 40, high)
    out = backend.to_device(np.full(high, -7, np.int64))
    backend.scatter_equal(out, backend.to_device(ids.astype(np.int64)), backend.to_device(weight[ids]))
    ref = np.full(high, -7, np.int64)
    ref[ids] = weight[ids]
    assert np.array_equal(_host(backend, out), ref)
    for dtype in (np.int32, np.int64):
        got = _host(backend, backend.bincount(backend.to_device(ids.astype(dtype)), high))
        assert np.array_equal(got, np.bincount(ids, minlength=high))
    w = rng.integers(-(1 << 40), 1 << 40, n)
    total = backend.to_device(np.arange(high, dtype=np.int64))
    backend.add_at(total, backend.to_device(ids), backend.to_device(w))
    ref = np.arange(high, dtype=np.int64)
    np.add.at(ref, ids, w)
    assert np.array_equal(_host(backend, total), ref)
    keys = rng.integers(0, 5, n).astype(np.uint16)
    assert np.array_equal(_host(backend, backend.argsort(backend.to_device(keys))), np.argsort(keys, kind="stable"))
    k1, k2 = rng.integers(0, 3, n), rng.integers(0, 3, n)
    got = _host(backend, backend.lexsort([backend.to_device(k1), backend.to_device(k2)]))
    assert np.array_equal(got, np.lexsort([k1, k2]))


# -- bitsets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 31, 33, 4097])
def test_bits(backend, n):
    """test_bits, bits_to_ids (with and without the count) and the counts and overlaps of bitsets,
    against the bool masks they pack."""
    rng = np.random.default_rng(n + 3)
    masks = [rng.random(n) < p for p in (0.0, 0.01, 0.3, 1.0)]
    packed = [np.packbits(np.r_[m, np.zeros((-n) % 32, bool)], bitorder="little").view(np.uint32) for m in masks]
    bits = [backend.to_device(b) for b in packed]
    v = rng.integers(0, n, 500).astype(np.int32)
    for m, b in zip(masks, bits):
        assert np.array_equal(_host(backend, backend.test_bits(b, backend.to_device(v))), m[v])
        assert np.array_equal(_host(backend, backend.bits_to_ids(b, n)), np.flatnonzero(m))
        assert np.array_equal(_host(backend, backend.bits_to_ids(b, n, int(m.sum()))), np.flatnonzero(m))
    counts, meets = backend.counts_and_overlaps(bits)
    assert counts == [int(m.sum()) for m in masks]
    for u in range(len(masks)):
        for w in range(len(masks)):
            assert meets(u, w) == bool((masks[u] & masks[w]).any())
    deg = rng.integers(0, 1000, n).astype(np.int32)
    jobs = [([0, 2], deg), ([3], deg[::-1].copy())]
    _c, _m, cost = backend.counts_and_overlaps(bits, [(u, backend.to_device(d)) for u, d in jobs])
    assert cost == sum(int(d[np.logical_or.reduce([masks[x] for x in u])].sum()) for u, d in jobs)
    out = backend.to_device(np.zeros(1, np.int64))
    backend.add_union_degrees(out, bits, [(u, backend.to_device(d)) for u, d in jobs])
    assert int(_host(backend, out)[0]) == cost
    out = backend.to_device(np.array([5], np.int64))
    d = rng.integers(0, 100, v.size).astype(np.int64)
    backend.add_bits_weight(out, bits[2], backend.to_device(v), backend.to_device(d))
    assert int(_host(backend, out)[0]) == 5 + int(d[masks[2][v]].sum())


# -- join steps ---------------------------------------------------------------------------------


def _segment(rng, n, theta=4, edges=4):
    """A PCSR segment of a random graph on ``n`` vertices, some ``edges`` a vertex: (groups, ci,
    adjacency as sets)."""
    src = np.sort(rng.integers(0, n, n * edges))
    dst = rng.integers(0, n, src.size)
    e = np.unique(np.stack([src, dst], 1), axis=0)
    groups, ci = pcsr.build(e[:, 0], e[:, 1], theta)
    adj = [set() for _ in range(n)]
    for s, t in e.tolist():
        adj[s].add(t)
    return groups, ci, adj


def test_pcsr_lookup_gather_and_row_lists(backend):
    """pcsr_lookup (pcsr.lookup's lists), gather_segment (each vertex's list in C(u), appended to
    its buffer) and row_lists with pack_rows (each row's list in C(u) less its own vertices,
    counted only or written; taken columns in place of the rows)."""
    rng = np.random.default_rng(7)
    n = 300
    groups, ci, adj = _segment(rng, n)
    g, c = backend.to_device(groups), backend.to_device(ci)
    q = np.arange(-2, n + 3).astype(np.int32)
    st, en = _host(backend, backend.pcsr_lookup(g, backend.to_device(q)))
    assert np.array_equal(st, pcsr.lookup(groups, q)[0]) and np.array_equal(en, pcsr.lookup(groups, q)[1])
    cand = rng.random(n) < 0.6
    cbits = backend.to_device(np.packbits(np.r_[cand, np.zeros((-n) % 32, bool)], bitorder="little").view(np.uint32))
    verts = np.unique(rng.integers(0, n, 60)).astype(np.int32)
    want = [sorted(x for x in adj[v] if cand[x]) for v in verts]
    size = np.array([len(adj[v]) for v in verts], np.int64)
    start = np.cumsum(size) - size
    fill = backend.to_device(np.zeros(verts.size, np.int64))
    gba = backend.to_device(np.full(int(size.sum()) + 1, -1, np.int32))
    backend.gather_segment(g, c, backend.to_device(verts), cbits, backend.to_device(start), fill, gba)
    fill, gba = _host(backend, fill), _host(backend, gba)
    assert [gba[s:s + f].tolist() for s, f in zip(start, fill)] == want
    rows = rng.integers(0, n, 200).astype(np.int32)
    own = rng.integers(0, n, 200).astype(np.int32)
    want = [[x for x in sorted(adj[v]) if cand[x] and x != o] for v, o in zip(rows, own)]
    size = np.array([len(adj[v]) for v in rows], np.int64)
    F = backend.to_device(np.cumsum(size) - size)
    counted = backend.to_device(np.zeros(rows.size, np.int64))
    backend.row_lists(g, c, backend.to_device(rows), cbits, [backend.to_device(own)], None, counted, None)
    assert _host(backend, counted).tolist() == [len(w) for w in want]
    fill = backend.to_device(np.zeros(rows.size, np.int64))
    gba = backend.to_device(np.zeros(int(size.sum()), np.int32))
    backend.row_lists(g, c, backend.to_device(rows), cbits, [backend.to_device(own)], F, fill, gba)
    erow, vals = _host(backend, backend.pack_rows(gba, F, fill))
    assert erow.tolist() == [i for i, w in enumerate(want) for _ in w]
    assert vals.tolist() == [x for w in want for x in w]
    taken, vals2 = _host(backend, backend.pack_rows(gba, F, fill, take=[backend.to_device(own)]))
    assert np.array_equal(vals2, vals) and np.array_equal(taken[0], own[erow])


@pytest.mark.parametrize("k,n_conflicts", [(1, 0), (2, 1), (3, 2), (33, 0)])
def test_block_counts(backend, k, n_conflicts):
    """block_counts: per row, the entries of C(u) in all k of its lists (one segment each, lists of
    some 40 of 100 vertices; a hub's of 90 among them), less its own vertices; past a warp's 32
    links the GPU declines."""
    rng = np.random.default_rng(k)
    n = 100
    segs = [_segment(rng, n, edges=60) for _ in range(min(k, 4))]
    hub = np.unique(np.c_[np.zeros(90, np.int64), rng.choice(n, 90, replace=False)], axis=0)
    segs[0] = pcsr.build(hub[:, 0], hub[:, 1], 4) + ([set(hub[:, 1].tolist())] + [set()] * (n - 1),)
    cand = rng.random(n) < 0.7
    cbits = backend.to_device(np.packbits(np.r_[cand, np.zeros((-n) % 32, bool)], bitorder="little").view(np.uint32))
    m = 500
    cols = [rng.integers(0, n, m).astype(np.int32) for _ in range(k)]
    cols[0][: m // 2] = 0                               # half the rows at the hub
    own = [rng.integers(0, n, m).astype(np.int32) for _ in range(n_conflicts)]
    want = [len(_block_set(segs, cand, cols, i, k) - {o[i] for o in own}) for i in range(m)]
    assert k > 3 or sum(w > 0 for w in want) >= 100
    dev = [(backend.to_device(segs[j % len(segs)][0]), backend.to_device(segs[j % len(segs)][1]),
            backend.to_device(cols[j])) for j in range(k)]
    conf = [backend.to_device(o) for o in own]
    got = backend.block_counts(dev, cbits, conf)
    if k > 32 and backend.name == "gpu":
        assert got is None
        return
    assert _host(backend, got).tolist() == want
    empty = [(g, c, v[:0]) for g, c, v in dev]
    assert _host(backend, backend.block_counts(empty, cbits, [o[:0] for o in conf])).tolist() == []
    # The same by distinct tuples: their sets' sizes, less each row's own vertices (two own
    # columns equal on some rows: the vertex is taken off once).
    if n_conflicts == 2:
        own[1][::3] = own[0][::3]
        conf = [backend.to_device(o) for o in own]
        want = [len(_block_set(segs, cand, cols, i, k) - {o[i] for o in own}) for i in range(m)]
    tuples, row_tuple = np.unique(np.stack(cols, 1), axis=0, return_inverse=True)
    tdev = [(g, c, backend.to_device(np.ascontiguousarray(tuples[:, j]))) for j, (g, c, _v) in enumerate(dev)]
    tcount, spans = backend.block_counts(tdev, cbits, [], spans=True)
    assert _host(backend, tcount).tolist() == _host(backend, backend.block_counts(tdev, cbits, [])).tolist()
    lists = [_host(backend, backend.pcsr_lookup(g, v)) for g, _c, v in tdev]
    assert np.array_equal(_host(backend, spans), np.stack([np.stack(se, axis=1) for se in lists]))
    got = backend.rows_less_own([c for _g, c, _v in dev], cbits, conf, tcount, spans,
                                backend.to_device(row_tuple.reshape(-1)))
    assert _host(backend, got).tolist() == want


def _block_set(segs, cand, cols, i, k):
    """Row i's set of a block test: the candidates in all its k lists."""
    s = {x for x in range(len(cand)) if cand[x]}
    for j in range(k):
        s &= segs[j % len(segs)][2][cols[j][i]]
    return s


def _sets(rng, n_tuples, n_rows, universe=500):
    """Packed candidate sets of ``n_tuples`` tuples and rows pointing at them: (row_tuple, etuple,
    evals, sstart, scount, the sets as lists)."""
    scount = rng.integers(0, 30, n_tuples)
    scount[:3] = [0, 1, 200][:n_tuples]
    sets = [np.sort(rng.choice(universe, int(c), replace=False)).astype(np.int32) for c in scount]
    evals = np.concatenate(sets + [np.zeros(0, np.int32)])
    sstart = np.cumsum(scount) - scount
    etuple = np.repeat(np.arange(n_tuples), scount)
    row_tuple = rng.integers(0, n_tuples, n_rows)
    return row_tuple, etuple, evals, sstart, scount, sets


@pytest.mark.parametrize("n_conflicts", [0, 1, 2])
def test_own_vertices_and_extend(backend, n_conflicts):
    """own_hits (the rows whose own vertex is in their set), sizes_less_own (|S(t_i)| less them)
    and extend (each row's set less its own vertices, rows in order), against Python sets."""
    rng = np.random.default_rng(20 + n_conflicts)
    row_tuple, etuple, evals, sstart, scount, sets = _sets(rng, 40, 600)
    cols = [rng.integers(0, 500, row_tuple.size).astype(np.int32) for _ in range(n_conflicts)]
    if cols:
        cols[0][::3] = [sets[t][0] if len(sets[t]) else 0 for t in row_tuple[::3]]      # many in their set
    d = [backend.to_device(a) for a in (row_tuple, etuple, evals, sstart, scount)]
    dcols = [backend.to_device(c) for c in cols]
    for col, (sel, hit, x) in zip(cols, backend.own_hits(*d, dcols)):
        sel, hit, x = _host(backend, (sel, hit, x))
        found = sel[hit.astype(bool)]
        assert sorted(found.tolist()) == [i for i, t in enumerate(row_tuple) if col[i] in set(sets[t].tolist())]
        assert np.array_equal(x[hit.astype(bool)], col[found])
    want = [[x for x in sets[t].tolist() if all(x != c[i] for c in cols)] for i, t in enumerate(row_tuple)]
    got = _host(backend, backend.sizes_less_own(*d, dcols))
    assert got.dtype == np.int64 and got.tolist() == [len(w) for w in want]
    got = _host(backend, backend.sizes_less_own(d[0], None, d[2], d[3], d[4], dcols))      # not packed
    assert got.tolist() == [len(w) for w in want]
    per_row = scount[row_tuple]
    erow, vals = _host(backend, backend.extend(d[0], backend.to_device(per_row), d[2], d[3], d[4], dcols))
    assert erow.tolist() == [i for i, w in enumerate(want) for _ in w]
    assert vals.tolist() == [x for w in want for x in w]


def test_piece_summary_degrees_and_distinct_sum(backend):
    """piece_summary (Σ deg, max deg, min and max col, descents), piece_degrees (dense[col] and its
    summary; offsets and zeros where given) and distinct_sum (Σ deg over distinct values)."""
    rng = np.random.default_rng(9)
    for n in (1, 100, 5000):
        col = rng.integers(0, 400, n).astype(np.int32)
        dense = rng.integers(0, 1000, 400).astype(np.int32)
        deg = dense[col].astype(np.int64)
        want = [int(deg.sum()), int(deg.max()), int(col.min()), int(col.max()), int((col[1:] < col[:-1]).sum())]
        assert list(backend.piece_summary(backend.to_device(deg), backend.to_device(col))) == want
        got, summary, offsets, zeros = backend.piece_degrees(backend.to_device(dense), backend.to_device(col))
        assert np.array_equal(_host(backend, got), deg) and list(summary) == want
        if offsets is not None:
            assert np.array_equal(_host(backend, offsets), np.cumsum(deg) - deg)
        if zeros is not None:
            assert not _host(backend, zeros).any()
        span = (int(col.min()), int(col.max()))
        assert backend.distinct_sum(backend.to_device(col), backend.to_device(deg), span) == int(
            dense[np.unique(col)].sum())
        wide = (col.astype(np.int64) * 1000003).astype(np.int32)       # ids spread far apart
        assert backend.distinct_sum(backend.to_device(wide), backend.to_device(deg), (
            int(wide.min()), int(wide.max()))) == int(dense[np.unique(col)].sum())


@pytest.mark.parametrize("lengths,gathered", [([5, 5], None), ([300, 3, 60, 60], [True, False, True, True])])
def test_intersect_lists(backend, lengths, gathered):
    """intersect_lists: each tuple's values common to its gathered lists, sorted by tuple then
    value, links not gathered reported untested."""
    from oracle import random_gathered_lists
    from sgsi.join.sets import _Lists
    rng = np.random.default_rng(sum(lengths))
    lists, expect = random_gathered_lists(rng, 200, lengths, gathered, universe=max(lengths) * 3 + 1)
    dev = [None if L is None else _Lists(*(backend.to_device(a) for a in (L.of_tuple, L.start, L.count, L.values)),
                                         L.reserved) for L in lists]
    etuple, evals, probes, untested = backend.intersect_lists(dev, 1 << 30)
    etuple, evals = _host(backend, etuple), _host(backend, evals)
    assert untested == [j for j, L in enumerate(lists) if L is None] and probes >= evals.size
    got = [set() for _ in expect]
    for t, v in zip(etuple.tolist(), evals.tolist()):
        got[t].add(v)
    assert got == expect and len(evals) == sum(len(s) for s in expect)
    key = etuple.astype(np.int64) * 2 ** 32 + evals
    assert np.all(np.diff(key) > 0)
