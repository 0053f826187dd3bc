"""GPU backend: every kernel against its NumPy reference, and the engine's
correctness suite on the GPU. Skipped where no CUDA GPU with CuPy is present."""

import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from sgsi.join.backends import gpu_available
from sgsi.join.backends.cpu import CpuBackend
from sgsi.partition import pcsr

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")]

HERE = os.path.dirname(__file__)
BENCH = os.path.join(HERE, "data", "benchmarks")


@pytest.fixture(scope="module")
def gpu():
    from sgsi.join.backends.gpu.backend import GpuBackend
    return GpuBackend("1GB")


def test_pcsr_lookup_kernel_matches_reference(gpu):
    import cupy as cp
    rng = np.random.default_rng(0)
    for theta in (2, 3, 4, 8, 16):
        for n in (1, 7, 100, 3000):
            src = np.sort(rng.integers(0, n * 2, n * 3))
            dst = rng.integers(0, n * 4, src.size)
            e = np.unique(np.stack([src, dst], 1), axis=0)
            groups, ci = pcsr.build(e[:, 0], e[:, 1], theta)
            q = np.arange(-3, n * 2 + 3).astype(np.int32)
            ref = pcsr.lookup(groups, q)
            got = gpu.pcsr_lookup(cp.asarray(groups), cp.asarray(q))
            assert np.array_equal(ref[0], cp.asnumpy(got[0]))
            assert np.array_equal(ref[1], cp.asnumpy(got[1]))


def test_bit_kernels_match_reference(gpu):
    import cupy as cp
    rng = np.random.default_rng(1)
    cpu = CpuBackend()
    for n in (1, 31, 32, 33, 1000, 4097):
        mask = rng.random(n) < 0.3
        ref = cpu.pack_bits(mask)
        got = cp.asarray(ref)
        v = rng.integers(0, n, 500).astype(np.int32)
        assert np.array_equal(cpu.test_bits(ref, v), cp.asnumpy(gpu.test_bits(got, cp.asarray(v))))
        assert np.array_equal(cpu.bits_to_ids(ref, n), cp.asnumpy(gpu.bits_to_ids(got, n)))
        assert np.array_equal(cpu.bits_to_ids(ref, n), cp.asnumpy(gpu.bits_to_ids(got, n, int(mask.sum()))))
        for cut in (n, max(0, n - 40), n - n % 32):          # bits at and past n are not ids
            want = cpu.bits_to_ids(~ref, cut)
            assert np.array_equal(want, cp.asnumpy(gpu.bits_to_ids(~got, cut)))
            assert np.array_equal(want, cp.asnumpy(gpu.bits_to_ids(~got, cut, int(want.size))))
            # a count short of the bits: the first ``count`` ids, nothing written past them
            assert np.array_equal(want[:3], cp.asnumpy(gpu.bits_to_ids(~got, cut, min(3, int(want.size)))))
        assert cpu.popcount(ref) == gpu.popcount(got) == int(mask.sum())
        assert gpu.popcounts([got, cp.zeros_like(got), ~got]) == cpu.popcounts([ref, np.zeros_like(ref), ~ref])
    counts = rng.integers(0, 5, 1000)
    counts[:3] = 0
    assert np.array_equal(cpu.repeat_index(counts), cp.asnumpy(gpu.repeat_index(cp.asarray(counts))))


def test_overlaps_kernel_matches_reference(gpu):
    """GpuOverlaps (one launch per batch of new bitsets) against Overlaps (pair by pair), with
    bitsets appended between questions, as the planner's blocks of leaves are."""
    import cupy as cp
    from sgsi.join.backends.base import Overlaps
    rng = np.random.default_rng(11)
    for words in (1, 3, 2049, 70001):
        def bitset():
            b = np.zeros(words, np.uint32)
            hot = rng.integers(0, words, rng.integers(0, 4))          # a few set bits, maybe none
            b[hot] = np.uint32(1) << rng.integers(0, 32, hot.size).astype(np.uint32)
            return b
        host = [bitset() for _ in range(7)]
        dev = [cp.asarray(b) for b in host]
        ref, got = Overlaps(np, host), gpu.overlaps(dev)
        answers = 0
        for more in (0, 3, 1):
            for _ in range(more):
                b = bitset()
                host.append(b)
                dev.append(cp.asarray(b))
            for u in range(len(host)):
                for w in range(len(host)):
                    assert got(u, w) == ref(u, w) == bool((host[u] & host[w]).any())
                    answers += ref(u, w)
        assert answers > 0


def test_counts_and_overlaps_match_reference(gpu):
    """GpuBackend.counts_and_overlaps (the popcounts and every pair's overlap in one read) against
    the CPU's, then against the pairs of bitsets appended after it (learnt by later launches)."""
    import cupy as cp
    rng = np.random.default_rng(12)
    for words in (1, 3, 2049, 70001):
        host = [np.where(rng.random(words) < p, rng.integers(0, 2**32, words), 0).astype(np.uint32)
                for p in (0.0, 0.001, 0.01, 0.5, 0.001)]
        dev = [cp.asarray(b) for b in host]
        counts, got = gpu.counts_and_overlaps(dev)
        want_counts, ref = CpuBackend().counts_and_overlaps(host)
        assert counts == want_counts == [int(np.unpackbits(b.view(np.uint8)).sum()) for b in host]
        for b in (host[1] | host[2], np.zeros(words, np.uint32)):
            host.append(b)
            dev.append(cp.asarray(b))
        for u in range(len(host)):
            for w in range(len(host)):
                assert got(u, w) == ref(u, w) == bool((host[u] & host[w]).any())
        # With refine_cost's jobs: the union degrees in the same read.
        host, dev = host[:5], dev[:5]
        deg = rng.integers(0, 1000, words * 32 - 5).astype(np.int32)
        jobs = [([0, 3], deg), ([2], deg[::-1].copy()), ([1, 2, 3, 4], deg)]
        counts, got, cost = gpu.counts_and_overlaps(dev, [(u, cp.asarray(d)) for u, d in jobs])
        want_counts, _ref, want = CpuBackend().counts_and_overlaps(host, jobs)
        assert counts == want_counts and got(1, 2) == bool((host[1] & host[2]).any())
        assert cost == want == sum(int(d[np.flatnonzero(np.unpackbits(np.bitwise_or.reduce([host[x] for x in u]).view(
            np.uint8), bitorder="little")[:d.size])].sum()) for u, d in jobs)


def test_small_reads_and_copies_match_cupy(gpu):
    """gpu.read_small / read_last (a pinned buffer of the thread's) against cp.asnumpy, for empty,
    small, 0-d and strided arrays and one past the buffer; to_device_small (the thread's pinned
    staging halves, taken again once their copies are done) against the host arrays it was given,
    for thousands of tables queued with no synchronisation between them (12 MB through 64 KB)."""
    import cupy as cp
    from sgsi.join.backends.gpu import transfers as g
    rng = np.random.default_rng(3)
    for a in (cp.zeros(0, cp.int64), cp.arange(7, dtype=cp.int64), cp.asarray(rng.random(33)),
              cp.arange(100, dtype=cp.int32)[::3], cp.asarray(np.int64(5)), cp.arange(g._READ_SMALL_MAX, dtype=cp.int32)):
        got = g.read_small(a)
        want = cp.asnumpy(a)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    ends = cp.asarray(np.cumsum(rng.integers(0, 9, 50)))
    assert g.read_last(ends) == int(cp.asnumpy(ends)[-1])
    host, dev = [], []
    for i in range(5000):
        a = (np.arange(int(rng.integers(0, 300))) * i).astype(np.int64 if i % 2 else np.uint32)
        host.append(a)
        dev.append(g.to_device_small(a))
    big = np.arange(g._Staging.HALF // 4 + 1, dtype=np.uint32)       # past a half: CuPy's copy
    assert np.array_equal(cp.asnumpy(g.to_device_small(big)), big)
    for a, d in zip(host, dev):
        assert d.dtype == a.dtype and np.array_equal(cp.asnumpy(d), a)


def test_own_hits_match_reference(gpu):
    """GpuBackend.own_hits (a thread a row searching its tuple's set) finds, per column, the rows
    whose vertex is in their tuple's set that the CPU's (every entry keyed and searched) finds:
    sets empty, of one entry and long, rows whose vertex lies below, inside and past their set."""
    import cupy as cp
    rng = np.random.default_rng(8)
    cpu = CpuBackend()
    found = 0
    for n_tuples, n_rows in [(2, 5), (50, 2000), (3000, 100_000)]:
        scount = rng.integers(0, 40, n_tuples)
        scount[::7] = 0
        scount[1::11] = 1
        sets = [np.sort(rng.choice(5000, size=int(c), replace=False)).astype(np.int32) for c in scount]
        evals = np.concatenate(sets + [np.zeros(0, np.int32)])
        sstart = np.cumsum(scount) - scount
        etuple = np.repeat(np.arange(n_tuples), scount)
        row_tuple = rng.integers(0, n_tuples, n_rows)
        cols = [rng.integers(0, 5000, n_rows).astype(np.int32) for _ in range(2)]
        inside = [sets[t][rng.integers(0, len(sets[t]))] if len(sets[t]) else 0 for t in row_tuple]
        cols.append(np.array(inside, np.int32))       # mostly in their set
        want = [(sel[hit], x[hit]) for sel, hit, x in cpu.own_hits(row_tuple, etuple, evals, sstart, scount, cols)]
        got = [(cp.asnumpy(sel), cp.asnumpy(hit), cp.asnumpy(x)) for sel, hit, x in gpu.own_hits(
            cp.asarray(row_tuple), cp.asarray(etuple), cp.asarray(evals), cp.asarray(sstart), cp.asarray(scount),
            [cp.asarray(c) for c in cols])]
        want = [w for w in want if w[0].size]
        assert len(got) == len(want)
        for (wsel, wx), (gsel, ghit, gx) in zip(want, got):
            assert ghit.all() and np.array_equal(np.sort(wsel), gsel) and np.array_equal(wx[np.argsort(wsel)], gx)
            found += int(gsel.size)
    assert found > 50_000


def test_stack_rows_and_read_ints_match_numpy(gpu):
    """gpu.stack_rows (a launch for every 8 arrays of 4- or 8-byte elements, cp.stack for other
    sizes) and backend.stack against numpy.stack, views and empty arrays included; take_columns against numpy.take;
    gpu.read_ints (gathering up to 8 scalars a launch, any integer dtype) against the scalars
    read one by one; backend.row_numbers against numpy.arange."""
    import cupy as cp
    from sgsi.join.backends.gpu import primitives as g
    rng = np.random.default_rng(13)
    for dtype in (np.int32, np.uint32, np.int64, np.int8):
        for n in (0, 1, 255, 70001):
            for k in (1, 2, 3, 8, 9, 17):
                host = [rng.integers(0, 100, 2 * n).astype(dtype)[::2] for _ in range(k)]     # strided views
                dev = [cp.asarray(rng.integers(0, 100, 2 * n).astype(dtype))[::2] for _ in range(k)]
                for h, d in zip(host, dev):
                    d[...] = cp.asarray(h)
                got = g.stack_rows(dev)
                assert got.dtype == dtype and got.shape == (k, n)
                assert np.array_equal(cp.asnumpy(got), np.stack(host))
                assert np.array_equal(cp.asnumpy(gpu.stack(dev)), np.stack(host))
    # Gathered at an index (take_columns: one launch per dtype for up to 8 arrays), mixed dtypes
    # and sizes, repeated and unsorted indices, int32 and int64 indices, none at all.
    for k in (1, 2, 3, 9, 17):
        host = [rng.integers(-2**31, 2**31 - 1, int(rng.integers(1, 3000))).astype(
            (np.int32, np.int64, np.uint32, np.int8)[i % 4]) for i in range(k)]
        m = min(a.size for a in host)
        for idx in (rng.integers(0, m, 777), rng.integers(0, m, 5000).astype(np.int32), np.zeros(0, np.int64)):
            want = [np.take(a, idx) for a in host]
            got = gpu.take_columns([cp.asarray(a) for a in host], cp.asarray(idx))
            assert [g.dtype for g in got] == [w.dtype for w in want]
            assert all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(got, want))
            assert all(np.array_equal(a, b) for a, b in zip(CpuBackend().take_columns(host, idx), want))
    for k in (1, 2, 5, 8, 9):
        arrays = [cp.asarray(rng.integers(-2**40, 2**40, 50)) for _ in range(k)]
        scalars = [a.max() if i % 3 == 0 else a[i % 50] if i % 3 == 1 else (a[:7] > 0).sum().astype(cp.int32)
                   for i, a in enumerate(arrays)]
        want = [int(s) for s in scalars]
        assert g.read_ints(scalars) == want
        assert gpu.host_ints(*scalars) == want
    assert g.read_ints([]) == []
    # More scalars and reductions than a ring of result slots holds (20,315 once, at 1B edges).
    many = g.RESULT_SLOTS * 2 + 3
    values = cp.asarray(rng.integers(-2**40, 2**40, many))
    assert g.read_ints([values[i] for i in range(many)]) == cp.asnumpy(values).tolist()
    pairs = [("sum", values[i:i + 2]) for i in range(many)]
    assert g.read_reductions(pairs) == [int(cp.asnumpy(values[i:i + 2]).sum()) for i in range(many)]
    for n in (0, 1, 1000, 70001):
        got = gpu.row_numbers(n)
        assert got.dtype == np.int64 and np.array_equal(cp.asnumpy(got), np.arange(n))
        assert np.array_equal(CpuBackend().row_numbers(n), np.arange(n))


@pytest.mark.parametrize("block,per,most", [(256, 16, 264), (32, 1, 3)], ids=["default", "few-blocks"])
def test_read_reductions_match_numpy(gpu, block, per, most, monkeypatch):
    """GpuBackend.host_reductions (reduce_ints: up to 4 arrays a launch, blocks' partials
    combined by the launch's last block) against NumPy: sums, maxima and minima of negative, huge
    and empty arrays, int64 and int32 (read as they are), one array and several, past 4 (two
    launches), sizes a thread's share does and does not divide; then again, the counter set back
    by the last block. Also with 32-thread blocks of 1 element a thread, at most 3 blocks an array
    (each thread loops)."""
    import cupy as cp
    from sgsi.join.backends.gpu import primitives as g
    monkeypatch.setattr(g, "_REDUCE_BLOCK", block)
    monkeypatch.setattr(g, "_REDUCE_PER_THREAD", per)
    monkeypatch.setattr(g, "_REDUCE_BLOCKS", most)
    rng = np.random.default_rng(block)
    arrays = [rng.integers(-2**50, 2**50, n) for n in (1, 31, 4097, 300_001, 0, 2_000_003)]
    arrays += [-rng.integers(1, 2**40, 999), np.full(5000, 2**40)]
    narrow = [rng.integers(-2**31, 2**31, n).astype(np.int32) for n in (1, 5000, 300_001, 0)]
    for pairs in ([("sum", arrays[0])], [("max", arrays[4])], [("sum", arrays[4])], [("min", arrays[4])],
                  [(("sum", "max", "min")[i % 3], a) for i, a in enumerate(arrays)],
                  [("max", arrays[6]), ("sum", arrays[7]), ("min", arrays[5]), ("sum", arrays[3])],
                  [("min", narrow[2]), ("max", narrow[2]), ("sum", narrow[1]), ("min", arrays[6]),
                   ("max", narrow[0]), ("min", narrow[3])]):
        want = CpuBackend().host_reductions(*pairs)
        assert want == [int(a.sum()) if op == "sum" else (int(getattr(np, op)(a)) if a.size else 0)
                        for op, a in pairs]
        for _ in range(2):
            assert gpu.host_reductions(*[(op, cp.asarray(a)) for op, a in pairs]) == want


def _hub_ids(rng, n, high):
    """n ids below ``high``: runs of one hub, a few other hubs spread out, and rare ids."""
    ids = rng.integers(0, high, n)
    ids[rng.random(n) < 0.4] = high // 2                          # one hub, spread out
    ids[n // 3: n // 3 + min(n // 4, 5000)] = high - 1            # a long run
    ids[rng.random(n) < 0.1] = rng.integers(0, 3)                 # a few small hubs
    return ids


@pytest.mark.parametrize("n", [1, 31, 32, 33, 1000, 100_003])
def test_warp_aggregated_writes_match_numpy(gpu, n):
    """distinct_index (mark_bits, distinct_of_bits and their int64 kernels), pair_key, scatter_equal,
    bincount (count_ids) and add_at (add_ids) against NumPy on ids with hubs and runs."""
    import cupy as cp
    from sgsi.join.backends.gpu import primitives as gpu_mod
    cpu = CpuBackend()
    rng = np.random.default_rng(n)
    high = max(4, n // 3)
    ids = _hub_ids(rng, n, high)
    for dtype in (np.int32, np.int64):            # int32: mark_bits and distinct_of_bits
        for shift in (0, 1000):                    # lo at 0 and past it
            got = gpu.distinct_index(cp.asarray((ids + shift).astype(dtype)))
            want = cpu.distinct_index((ids + shift).astype(dtype))
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and np.array_equal(cp.asnumpy(a), b)
    big = ids.astype(np.int64) + (1 << 40)                        # int64 past int32: mark_bits_i64, lo past 2^32
    for a, b in zip(gpu.distinct_index(cp.asarray(big)), cpu.distinct_index(big)):
        assert a.dtype == b.dtype and np.array_equal(cp.asnumpy(a), b)
    # pair_key: two int32 columns' int64 keys, and whether they ascend (sorted, one descent, equal rows)
    c0 = np.sort(rng.integers(-3, 40, n)).astype(np.int32)
    c1 = rng.integers(0, (1 << 31) - 1, n).astype(np.int32)
    seen = set()
    for x1 in (c1, np.full(n, 5, np.int32), -c1):
        order = np.lexsort((x1, c0))
        for a0, a1 in ((c0, x1), (c0[order], x1[order])):
            key, asc = gpu.pair_key(cp.asarray(a0), cp.asarray(a1))
            want_key, want_asc = cpu.pair_key(a0, a1)
            assert np.array_equal(cp.asnumpy(key), want_key) and asc == want_asc
            seen.add(asc)
    assert seen == {True, False} or n == 1
    sparse = np.array([5, 1 << 30, 5, 7], dtype=np.int32)       # a range too wide: sort and search
    for a, b in zip(gpu.distinct_index(cp.asarray(sparse)), cpu.distinct_index(sparse)):
        assert np.array_equal(cp.asnumpy(a), b)
    # Past 16 a value but within DISTINCT_DENSE_RANGE: the bits on the GPU (sort and search on the CPU).
    wide = np.array([5, gpu_mod.DISTINCT_DENSE_RANGE - 1 + 5, 5, 7, 900_001, 7], dtype=np.int32)
    for a, b in zip(gpu.distinct_index(cp.asarray(wide)), cpu.distinct_index(wide)):
        assert a.dtype == b.dtype and np.array_equal(cp.asnumpy(a), b)
    weight = rng.integers(0, 1 << 40, high)                       # equal values at equal indices
    out = cp.full(high, -7, cp.int64)
    gpu.scatter_equal(out, cp.asarray(ids.astype(np.int64)), cp.asarray(weight[ids]))
    ref = np.full(high, -7, np.int64)
    ref[ids] = weight[ids]
    assert np.array_equal(cp.asnumpy(out), ref)
    for dtype in (np.int32, np.int64):
        got = gpu.bincount(cp.asarray(ids.astype(dtype)), high)
        assert np.array_equal(cp.asnumpy(got), np.bincount(ids, minlength=high))
    w = rng.integers(-(1 << 40), 1 << 40, n)
    total = cp.asarray(np.arange(high, dtype=np.int64))
    gpu.add_at(total, cp.asarray(ids), cp.asarray(w))
    ref = np.arange(high, dtype=np.int64)
    np.add.at(ref, ids, w)
    assert np.array_equal(cp.asnumpy(total), ref)


@pytest.mark.parametrize("starts,counts", [
    ([], []), ([0, 0, 0], [0, 0, 0]), ([3, 10, 2], [0, 0, 4]), ([3, 10, 2], [2, 0, 0]),
    ([9, 1, 1, 7], [2, 3, 0, 1]), ([4, 4, 4], [2, 2, 2]), ([0], [1]), ([2**40], [3]),
    ([5, 6, 7, 8, 9], [0, 3, 0, 0, 2]),
])
def test_row_scan_matches_reference(gpu, starts, counts):
    """The row_marks kernel and its scan: repeat_index and ragged_indices as NumPy gives them
    (empty rows first, last and in between, rows going backwards, past int32)."""
    import cupy as cp
    s, c = np.array(starts, np.int64), np.array(counts, np.int64)
    assert cp.asnumpy(gpu.ragged_indices(cp.asarray(s), cp.asarray(c))).tolist() == \
        pcsr.ragged_indices(s, c).tolist()
    assert cp.asnumpy(gpu.repeat_index(cp.asarray(c))).tolist() == CpuBackend().repeat_index(c).tolist()


def test_row_scan_random(gpu):
    import cupy as cp
    rng = np.random.default_rng(12)
    for n in (1, 7, 1000, 100000):
        c = rng.integers(0, 6, n) * (rng.random(n) < 0.6)
        s = rng.integers(0, 10**6, n)
        assert np.array_equal(cp.asnumpy(gpu.ragged_indices(cp.asarray(s), cp.asarray(c))),
                              pcsr.ragged_indices(s, c))
        assert np.array_equal(cp.asnumpy(gpu.repeat_index(cp.asarray(c))), CpuBackend().repeat_index(c))


@pytest.mark.parametrize("table", [None, 40], ids=["tables", "small-tables"])
def test_candidate_bits_kernel_matches_reference(gpu, table, monkeypatch):
    """The candidate sets of several pattern vertices at once (label test, signature words, degree
    masks) equal the NumPy reference's, over vertex segments that start off a word boundary; 4, 6,
    9 and 40 pattern vertices (past 32: two launches a segment), up to 9 signature words (past the 4
    loaded together) and 3 masks each; then with tables of at most 40 entries (a launch for every
    few pattern vertices)."""
    import cupy as cp

    from sgsi.join.backends.gpu import filter as gpu_mod
    if table is not None:
        monkeypatch.setattr(gpu_mod, "_CANDIDATE_TABLE", table)
    rng = np.random.default_rng(2)
    cpu = CpuBackend()
    n = 10_000
    cuts = [0, 1000, 1037, 6000, n]             # vertex segments; 1000 and 1037 are not multiples of 32
    cols = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(10)]
    labels = rng.integers(0, 5, n).astype(np.int32)
    masks = [rng.random(n) < 0.8 for _ in range(3)]
    launches = set()
    for trial in range(12):
        specs = []
        k = (4, 6, 9, 40)[trial % 4]
        for u in range(k):
            tests = rng.choice(10, size=int(rng.integers(0, 10)), replace=False)    # past SIG_UNROLL too
            q = [np.uint32(1 << int(rng.integers(0, 32))) for _ in tests]
            lab = int(rng.integers(0, 5)) if (trial + u) % 2 else None
            ands = [int(a) for a in rng.choice(3, size=int(rng.integers(0, 4)), replace=False)]
            specs.append((tests, q, lab, ands))

        def parts(xp):
            return [(a, b - a, [(xp.asarray(labels[a:b]) if lab is not None else None, lab,
                                 [(xp.asarray(cols[c][a:b]), qc) for c, qc in zip(tests, q)])
                                for tests, q, lab, _ands in specs])
                    for a, b in zip(cuts[:-1], cuts[1:])]
        ref = cpu.candidate_bits(n, parts(np), [[masks[a] for a in s[3]] for s in specs])
        got = gpu.candidate_bits(n, parts(cp), [[cp.asarray(masks[a]) for a in s[3]] for s in specs])
        assert len(got) == len(ref) == k
        for r, g in zip(ref, got):
            assert np.array_equal(r, cp.asnumpy(g))
        assert sum(int(np.unpackbits(r.view(np.uint8)).sum()) for r in ref) > 0
        launches.add(len(gpu_mod._filter_launches([gpu_mod._filter_record_length(s[0], s[3]) for s in specs])))
    assert max(launches) > (2 if table else 1)


def test_candidate_sets_match_reference(gpu):
    """GpuBackend.candidate_sets (the filter adding up the sets' sizes and overlaps as it writes
    them, the cost in the same read) against the CPU's candidate_bits + counts_and_overlaps: 5, 12
    and 32 pattern vertices (32: every bit of the overlap words), and 33 (past them: the separate
    reductions), over vertex segments that start off a word boundary, with and without the cost's
    jobs; bitsets appended afterwards are learnt against them."""
    import cupy as cp
    rng = np.random.default_rng(5)
    cpu = CpuBackend()
    n = 9_000
    cuts = [0, 1000, 1037, 5000, n]
    cols = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(6)]
    labels = rng.integers(0, 4, n).astype(np.int32)
    masks = [rng.random(n) < 0.7 for _ in range(2)]
    deg = rng.integers(0, 100, n).astype(np.int32)
    for trial, k in enumerate((5, 12, 32, 33, 12)):
        specs = []
        for u in range(k):
            tests = rng.choice(6, size=int(rng.integers(0, 3)), replace=False)
            q = [np.uint32(1 << int(rng.integers(0, 4))) for _ in tests]          # words that often pass
            lab = int(rng.integers(0, 4)) if (trial + u) % 3 else None
            ands = [int(a) for a in rng.choice(2, size=int(rng.integers(0, 2)), replace=False)]
            specs.append((tests, q, lab, ands))
        if trial == 4:                  # a set no vertex is in
            specs[3] = (np.array([0]), [np.uint32(0)], 9, [])

        def parts(xp):
            return [(a, b - a, [(xp.asarray(labels[a:b]) if lab is not None else None, lab,
                                 [(xp.asarray(cols[c][a:b]), qc) for c, qc in zip(tests, q)])
                                for tests, q, lab, _ands in specs])
                    for a, b in zip(cuts[:-1], cuts[1:])]
        jobs = [([0, 2], deg), ([1], deg[::-1].copy())] if trial % 2 == 0 else None
        ref_bits, ref_counts, ref_meets, ref_cost = cpu.candidate_sets(
            n, parts(np), [[masks[a] for a in s[3]] for s in specs], None if jobs is None else lambda: jobs)
        bits, counts, meets, cost = gpu.candidate_sets(
            n, parts(cp), [[cp.asarray(masks[a]) for a in s[3]] for s in specs],
            None if jobs is None else lambda: [(u, cp.asarray(d)) for u, d in jobs])
        assert (cost is None) == (jobs is None) and (cost is None or callable(cost))   # read when asked
        assert len(bits) == k and counts == ref_counts and (cost and cost()) == ref_cost
        for r, g in zip(ref_bits, bits):
            assert np.array_equal(r, cp.asnumpy(g))
        host = list(ref_bits)
        for b in (host[0] | host[1], np.zeros_like(host[0])):      # learnt by later launches
            host.append(b)
            ref_bits.append(b)
            bits.append(cp.asarray(b))
        pairs = [(u, w) for u in range(len(host)) for w in range(len(host))]
        assert [meets(u, w) for u, w in pairs] == [ref_meets(u, w) for u, w in pairs] == \
            [bool((host[u] & host[w]).any()) for u, w in pairs]
        assert 0 < sum(counts) < k * n and not all(meets(u, w) for u, w in pairs)


@pytest.mark.parametrize("thresholds", [None, (10**9, 10**9), (-1, 10**9), (-1, 31), (-1, -1), (1, 3), (1, 40),
                                        (40, 40)],
                         ids=["cost-model", "all-warp", "pool-and-block", "pool-and-own", "all-own", "mixed",
                              "four-ways", "warp-and-own"])
@pytest.mark.parametrize("longest", [80, 12], ids=["lists", "short-lists"])
def test_expand_rows_matches_reference(gpu, thresholds, longest):
    """Every load-balance strategy (warp, task pool, block, own launch) writes what the NumPy reference
    writes: the same entries, in the same order, and the same fill counts. Lists of up to 80 and of
    up to 12 entries (the warp way writes those of at most 8 a lane each), with 3 and 17 conflict
    columns (past the 16 a lane keeps in registers)."""
    import cupy as cp
    rng = np.random.default_rng(3 + longest)
    cpu = CpuBackend()
    n_rows, n_dist = 700, 90
    fcnt = rng.integers(0, longest, n_dist)
    fcnt[:6] = [0, 31, 32, 1023, 1025, 5000]             # bin edges and heavy rows
    flist = rng.integers(0, 400 if longest > 12 else 40, int(fcnt.sum())).astype(np.int32)
    fstart = np.cumsum(fcnt) - fcnt
    run = np.sort(rng.integers(0, n_dist, n_rows))
    run[:6] = np.arange(6)
    rows = rng.permutation(n_rows)
    conflicts = [rng.integers(0, 400 if longest > 12 else 40, n_rows).astype(np.int32)
                 for _ in range(3 if longest > 12 else 17)]
    deg = np.bincount(rows, weights=fcnt[run], minlength=n_rows).astype(np.int64)
    F = np.r_[0, np.cumsum(deg)].astype(np.int64)
    fill0 = np.zeros(n_rows, np.int64)
    gba_ref = np.full(int(F[-1]), -7, np.int32)
    cpu.expand_rows(rows, run, flist, fstart, fcnt, conflicts, F, fill0, gba_ref)
    fill1 = cp.zeros(n_rows, cp.int64)
    gba = cp.full(int(F[-1]), -7, cp.int32)
    gpu.stats.clear()
    gpu.expand_rows(cp.asarray(rows), cp.asarray(run), cp.asarray(flist), cp.asarray(fstart), cp.asarray(fcnt),
                    [cp.asarray(c) for c in conflicts], cp.asarray(F), fill1, gba, thresholds=thresholds)
    assert np.array_equal(fill0, cp.asnumpy(fill1))
    assert np.array_equal(gba_ref, cp.asnumpy(gba))
    gpu.synchronize()
    assert gpu.stats["expand_seconds"] > 0          # CUDA events around the expansion
    if thresholds == (1, 40):
        assert {"rows_warp", "rows_pool", "rows_block", "rows_own"} <= set(gpu.stats)
    if thresholds == (-1, 31):      # every row below 1024 entries in pools: several blocks, several rounds
        heavy = int((fcnt[run] >= 1024).sum())
        assert heavy >= 2 and gpu.stats["rows_pool"] == n_rows - heavy and gpu.stats["rows_own"] == heavy


@pytest.mark.parametrize("heavy", [False, True], ids=["light", "heavy"])
def test_expand_rows_given_the_heaviest_row(gpu, heavy):
    """``heaviest`` given: the reference's output; with rows under 1024 entries every row on a
    warp when balance.warps_suffice says so (the measured t_split outweighs any gain there),
    with heavier ones the histogram sized by it."""
    import cupy as cp
    from sgsi.join import balance
    rng = np.random.default_rng(4)
    n_rows, n_dist = 500, 60
    fcnt = rng.integers(0, 1024, n_dist)
    if heavy:
        fcnt[:2] = [3000, 70000]
    flist = rng.integers(0, 300, int(fcnt.sum())).astype(np.int32)
    fstart = np.cumsum(fcnt) - fcnt
    run = np.sort(rng.integers(0, n_dist, n_rows))
    rows = np.arange(n_rows)
    conflicts = [rng.integers(0, 300, n_rows).astype(np.int32)]
    F = np.r_[0, np.cumsum(fcnt[run])].astype(np.int64)
    fill0 = np.zeros(n_rows, np.int64)
    gba_ref = np.full(int(F[-1]), -7, np.int32)
    CpuBackend().expand_rows(rows, run, flist, fstart, fcnt, conflicts, F, fill0, gba_ref)
    fill1 = cp.zeros(n_rows, cp.int64)
    gba = cp.full(int(F[-1]), -7, cp.int32)
    gpu.stats.clear()
    heaviest = int(fcnt[run].max())
    gpu.expand_rows(cp.asarray(rows), cp.asarray(run), cp.asarray(flist), cp.asarray(fstart), cp.asarray(fcnt),
                    [cp.asarray(c) for c in conflicts], cp.asarray(F), fill1, gba, heaviest=heaviest)
    assert np.array_equal(fill0, cp.asnumpy(fill1)) and np.array_equal(gba_ref, cp.asnumpy(gba))
    ways = {w: gpu.stats.get(f"rows_{w}", 0) for w in balance.WAYS}
    assert sum(ways.values()) == n_rows
    assert not (heavy and balance.warps_suffice(heaviest, gpu.costs()))
    if balance.warps_suffice(heaviest, gpu.costs()):
        assert ways["warp"] == n_rows


def test_gather_segment_matches_reference(gpu):
    """The first-edge gather kernels (a warp per vertex, a block per long list) append what the
    NumPy reference appends to each vertex's buffer, in order, after the entries already there,
    and count them in ``fill``; vertices absent from the segment are left alone."""
    import cupy as cp
    rng = np.random.default_rng(5)
    cpu = CpuBackend()
    for theta in (4, 16):
        deg = rng.integers(0, 40, 300)
        deg[[3, 50, 51]] = [1024, 1025, 6000]               # the warp's limit and past it
        src = np.repeat(np.arange(deg.size), deg)
        dst = rng.integers(0, 20000, src.size)
        e = np.unique(np.stack([src, dst], 1), axis=0)
        groups, ci = pcsr.build(e[:, 0], e[:, 1], theta)
        verts = np.sort(rng.choice(np.arange(-2, deg.size + 40), 250, replace=False)).astype(np.int32)
        verts = verts[verts >= 0]
        verts = np.union1d(verts, [3, 50, 51]).astype(np.int32)
        cbits = cpu.pack_bits(rng.random(20032) < 0.6)
        before = rng.integers(0, 5, verts.size).astype(np.int64)     # entries from earlier segments
        room = np.bincount(e[:, 0], minlength=deg.size + 40)[verts] + before
        start = np.r_[0, np.cumsum(room)[:-1]].astype(np.int64)
        fill_ref = before.copy()
        gba_ref = np.full(int(room.sum()), -7, np.int32)
        cpu.gather_segment(groups, ci, verts, cbits, start, fill_ref, gba_ref)
        fill = cp.asarray(before)
        gba = cp.full(int(room.sum()), -7, cp.int32)
        gpu.gather_segment(cp.asarray(groups), cp.asarray(ci), cp.asarray(verts), cp.asarray(cbits),
                           cp.asarray(start), fill, gba)
        assert np.array_equal(fill_ref, cp.asnumpy(fill))
        assert np.array_equal(gba_ref, cp.asnumpy(gba))
        assert (fill_ref > before).sum() > 100 and fill_ref[np.searchsorted(verts, 51)] > 3000


@pytest.mark.parametrize("n", [1, 33, 300_001])
def test_bits_weight_matches_reference(gpu, n):
    import cupy as cp
    rng = np.random.default_rng(n)
    cpu = CpuBackend()
    bits = cpu.pack_bits(rng.random(1 << 20) < 0.3)
    v = rng.integers(0, 1 << 20, n).astype(np.int32)
    d = rng.integers(0, 10**6, n).astype(np.int32)
    want, got = np.full(1, 5, np.int64), cp.full(1, 5, cp.int64)        # added to what is there
    cpu.add_bits_weight(want, bits, v, d)
    gpu.add_bits_weight(got, cp.asarray(bits), cp.asarray(v), cp.asarray(d))
    assert int(got[0]) == int(want[0]) and (n == 1 or want[0] > 5)


@pytest.mark.parametrize("n", [1, 33, 300_001])
def test_union_degrees_matches_reference(gpu, n):
    """Σ deg[v] over the union of each job's users' bitsets, all jobs summed (refine_cost with
    degrees kept per vertex, one launch for every partition) equals the reference, which equals
    the same sums over (vertex, degree) pairs (add_bits_weight)."""
    import cupy as cp
    rng = np.random.default_rng(n)
    cpu = CpuBackend()
    bits = [cpu.pack_bits(rng.random(n) < density) for density in (0.3, 0.01, 0.5, 0.0)]
    degs = [rng.integers(0, 10**6, n).astype(np.int32) for _ in range(3)]
    jobs = [([0], degs[0]), ([1, 2], degs[1]), ([3], degs[2]), ([0, 1, 3], degs[0])]
    want, got, pairs = np.full(1, 5, np.int64), cp.full(1, 5, cp.int64), np.full(1, 5, np.int64)
    cpu.add_union_degrees(want, bits, jobs)
    for users, deg in jobs:
        union = np.bitwise_or.reduce([bits[u] for u in users])
        cpu.add_bits_weight(pairs, union, np.arange(n, dtype=np.int32), deg)
    gpu.add_union_degrees(got, [cp.asarray(b) for b in bits], [(u, cp.asarray(d)) for u, d in jobs])
    assert int(got[0]) == int(want[0]) == int(pairs[0]) and (n == 1 or want[0] > 5)
    cpu.add_union_degrees(want, bits, [])
    gpu.add_union_degrees(got, [cp.asarray(b) for b in bits], [])
    assert int(got[0]) == int(want[0])


@pytest.mark.parametrize("n", [1, 33, 1000, 300_001])
def test_distinct_sum_matches_reference(gpu, n):
    """Σ deg over a column's distinct values (rows of one value carry its degree): the kernel
    (a bit a value, set by one row) against the reference and a set, rows in any order and
    sorted, with a hub repeated over a third of them, over a span wider than the values."""
    import cupy as cp
    rng = np.random.default_rng(n)
    degree = rng.integers(0, 10**9, 70_000)
    col = (rng.integers(0, 50_000, n) + 1_000).astype(np.int32)
    col[rng.random(n) < 0.3] = 4_321
    want = int(sum(int(degree[v]) for v in set(col.tolist())))
    for c in (col, np.sort(col)):
        deg = degree[c]
        span = (int(c.min()) - 7, int(c.max()) + 40)
        assert CpuBackend().distinct_sum(c, deg, span) == want
        assert gpu.distinct_sum(cp.asarray(c), cp.asarray(deg), span) == want


@pytest.mark.parametrize("rounds", [(4, 1024), (3, 7)], ids=["default-tiles", "small-tiles"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 1025, 4096, 4097, 65_537, 300_001])
def test_piece_summary_matches_reference(gpu, n, rounds, monkeypatch):
    """Both paths of the summary (one block up to 4,096 rows; past that the single-pass
    ``piece_pass``, in its default tiles and in tiles of at least 768 rows, at most 7; with the
    offsets ``piece_pass_offsets``, tiles of 4,096 rows: 74 for 300,001 rows), against the
    reference, with the rows' offsets (the degrees' exclusive prefix sum) and zeros (a light step's
    fill, in memory the pool had handed out before) up to ``_OFFSETS_MAX`` rows, and none past it."""
    import cupy as cp
    from sgsi.join.backends.gpu import join as gpu_mod
    monkeypatch.setattr(gpu_mod, "_SUMMARY_ROUNDS_SUM", rounds[0])
    monkeypatch.setattr(gpu_mod, "_SUMMARY_TILES", rounds[1])
    monkeypatch.setattr(gpu_mod, "_OFFSETS_MAX", 1 << 22)
    rng = np.random.default_rng(n)
    deg = rng.integers(0, 10**9, n).astype(np.int64)
    col = rng.integers(0, 2**31 - 1, n).astype(np.int32)
    got = {}
    for order, c in (("as drawn", col), ("sorted", np.sort(col))):
        want = CpuBackend().piece_summary(deg, c)
        assert list(gpu.piece_summary(cp.asarray(deg), cp.asarray(c))) == list(want)
        got[order] = want
    assert got["sorted"][4] == 0 and (n == 1 or got["as drawn"][4] > 0)       # descents
    assert got["sorted"][0] >= got["sorted"][1] >= 0
    # The degrees gathered from every vertex's (piece_degrees), rows repeating vertices.
    dense = rng.integers(0, 2**31 - 1, 5000).astype(np.int32)
    v = rng.integers(0, 5000, n).astype(np.int32)
    want_deg, want, none, no_zeros = CpuBackend().piece_degrees(dense, v)
    assert none is None and no_zeros is None
    for _ in range(2):                      # twice: the second launch on the same state
        junk = cp.full(3 * n, 7, cp.int64)  # the pool hands this memory out again: no zero comes free
        del junk
        deg, summary, offsets, zeros = gpu.piece_degrees(cp.asarray(dense), cp.asarray(v))
        assert deg.dtype == cp.int64 and np.array_equal(cp.asnumpy(deg), want_deg) and list(summary) == list(want)
        assert offsets.dtype == cp.int64 and offsets.shape == (n,)
        assert np.array_equal(cp.asnumpy(offsets), np.cumsum(want_deg) - want_deg)
        assert zeros.dtype == cp.int64 and zeros.shape == (n,) and not cp.asnumpy(zeros).any()
    monkeypatch.setattr(gpu_mod, "_OFFSETS_MAX", n - 1)
    deg, summary, offsets, zeros = gpu.piece_degrees(cp.asarray(dense), cp.asarray(v))
    assert offsets is None and zeros is None and list(summary) == list(want)
    assert np.array_equal(cp.asnumpy(deg), want_deg)


@pytest.mark.parametrize("way", ["warps", "threads", "threads-few-blocks"])
@pytest.mark.parametrize("n_conflicts", [0, 1, 2, 17])
def test_row_lists_and_pack_rows_match_reference(gpu, n_conflicts, way, monkeypatch):
    """The light pieces' kernels: ``row_lists`` appends to each row's buffer (rows unsorted, with
    repeated and absent vertices) what the NumPy reference appends, after the entries already
    there, without the row's own vertices; ``pack_rows`` packs the buffers as the reference does.
    17 conflict columns pass the kernel's 16 kept in registers. "warps": a warp a row; "threads":
    a thread a row first (``row_lists_short``), then the rows of longer lists; "threads-few-blocks":
    those rows in several rounds of the launch's blocks."""
    import cupy as cp

    from sgsi.join.backends.gpu import join as gpu_mod
    monkeypatch.setattr(gpu_mod, "_ROW_THREAD_ROWS", 1 << 40 if way == "warps" else 0)
    if way == "threads-few-blocks":
        monkeypatch.setattr(gpu_mod, "_ROW_REST_BLOCKS_PER_SM", 1)
        monkeypatch.setattr(gpu, "sms", lambda: 2)
    rng = np.random.default_rng(11)
    cpu = CpuBackend()
    for theta in (4, 16):
        deg = rng.integers(0, 40, 300)
        deg[[3, 50]] = [700, 2000]                              # lists of many warp rounds
        src = np.repeat(np.arange(deg.size), deg)
        dst = rng.integers(0, 3000, src.size)
        e = np.unique(np.stack([src, dst], 1), axis=0)
        groups, ci = pcsr.build(e[:, 0], e[:, 1], theta)
        v = rng.integers(-1, deg.size + 40, 2000).astype(np.int32)      # unsorted, repeats, absent, -1
        v[:5] = 50
        n = v.size
        conflicts = [np.where(rng.random(n) < 0.5, ci[rng.integers(0, ci.size, n)], 5000).astype(np.int32)
                     for _ in range(n_conflicts)]
        cbits = cpu.pack_bits(rng.random(3008) < 0.6)
        before = rng.integers(0, 5, n).astype(np.int64)             # entries from earlier segments
        room = np.bincount(e[:, 0], minlength=deg.size + 40)[np.maximum(v, 0)] * (v >= 0) + before
        F = np.r_[0, np.cumsum(room)[:-1]].astype(np.int64)
        fill_ref, gba_ref = before.copy(), np.full(int(room.sum()), -7, np.int32)
        cpu.row_lists(groups, ci, v, cbits, conflicts, F, fill_ref, gba_ref)
        fill, gba = cp.asarray(before), cp.full(int(room.sum()), -7, cp.int32)
        gpu.row_lists(cp.asarray(groups), cp.asarray(ci), cp.asarray(v), cp.asarray(cbits),
                      [cp.asarray(c) for c in conflicts], cp.asarray(F), fill, gba)
        assert np.array_equal(fill_ref, cp.asnumpy(fill))
        assert np.array_equal(gba_ref, cp.asnumpy(gba))
        assert (fill_ref > before).sum() > 500 and fill_ref[0] > 500
        counted, counted_ref = cp.asarray(before), before.copy()         # no GBA: counts only
        cpu.row_lists(groups, ci, v, cbits, conflicts, F, counted_ref, None)
        gpu.row_lists(cp.asarray(groups), cp.asarray(ci), cp.asarray(v), cp.asarray(cbits),
                      [cp.asarray(c) for c in conflicts], cp.asarray(F), counted, None)
        assert np.array_equal(counted_ref, fill_ref) and np.array_equal(cp.asnumpy(counted), fill_ref)
        counted = cp.asarray(before)                                     # counts only need no offsets
        gpu.row_lists(cp.asarray(groups), cp.asarray(ci), cp.asarray(v), cp.asarray(cbits),
                      [cp.asarray(c) for c in conflicts], None, counted, None)
        assert np.array_equal(cp.asnumpy(counted), fill_ref)
        if n_conflicts:           # the conflicts dropped entries
            free = before.copy()
            cpu.row_lists(groups, ci, v, cbits, [], F, free, np.full(int(room.sum()), -7, np.int32))
            assert (free > fill_ref).any()
        erow_ref, vals_ref = cpu.pack_rows(gba_ref, F, fill_ref)
        erow, vals = gpu.pack_rows(gba, cp.asarray(F), fill)
        assert np.array_equal(erow_ref, cp.asnumpy(erow)) and np.array_equal(vals_ref, cp.asnumpy(vals))
        assert erow.dtype == cp.int64 and vals.dtype == cp.int32
        for k4, k8 in ((0, 0), (1, 0), (3, 1), (6, 2), (7, 0), (0, 3)):     # the last two: a take after
            cols = [rng.integers(-9, 1 << 30, n).astype(np.int32 if j % 2 else np.uint32) for j in range(k4)]
            cols += [rng.integers(-9, 1 << 60, n) for _ in range(k8)]
            rng.shuffle(cols)
            taken_ref, vals_ref2 = cpu.pack_rows(gba_ref, F, fill_ref, take=cols)
            taken, vals2 = gpu.pack_rows(gba, cp.asarray(F), fill, take=[cp.asarray(c) for c in cols])
            assert np.array_equal(vals_ref2, vals_ref) and np.array_equal(vals_ref, cp.asnumpy(vals2))
            assert len(taken) == len(cols)
            for c, t_ref, t in zip(cols, taken_ref, taken):
                assert t.dtype == c.dtype and np.array_equal(t_ref, np.take(c, erow_ref))
                assert np.array_equal(t_ref, cp.asnumpy(t))


@pytest.mark.parametrize("per_round", [1, 3, 8])
@pytest.mark.parametrize("way", ["warps", "threads"])
def test_row_lists_long_lists_match_reference(gpu, way, per_round, monkeypatch):
    """``row_lists`` on lists of up to 16K entries (``LIGHT_MAX_LIST``), ``per_round`` rows a
    block a round: the block's warps share the long lists' chunks, over several windows of the
    kernel's ROW_CHUNKS (1024 chunks of 32 entries) where a round's lists hold more (8 rows); the
    buffers and counts are the reference's."""
    import cupy as cp

    from sgsi.join.backends.gpu import join as gpu_mod
    monkeypatch.setattr(gpu_mod, "_ROW_THREAD_ROWS", 1 << 40 if way == "warps" else 0)
    monkeypatch.setattr(gpu_mod, "_ROW_LISTS_ROWS", per_round)
    monkeypatch.setattr(gpu_mod, "_ROW_REST_ROWS", per_round)
    rng = np.random.default_rng(5)
    cpu = CpuBackend()
    deg = np.array([16384, 12000, 9000, 40, 33, 5, 0, 16000, 700, 3])
    src = np.repeat(np.arange(deg.size), deg)
    dst = np.concatenate([np.sort(rng.choice(200_000, d, replace=False)) for d in deg])
    groups, ci = pcsr.build(src, dst, 8)
    v = np.r_[[0, 1, 2, 7, 0, 1, 7, 2], rng.integers(0, deg.size, 40)].astype(np.int32)
    n = v.size
    conflicts = [ci[rng.integers(0, ci.size, n)].astype(np.int32)]
    cbits = cpu.pack_bits(rng.random(200_000) < 0.7)
    before = rng.integers(0, 3, n).astype(np.int64)
    room = deg[v] + before
    F = np.r_[0, np.cumsum(room)[:-1]].astype(np.int64)
    fill_ref, gba_ref = before.copy(), np.full(int(room.sum()), -7, np.int32)
    cpu.row_lists(groups, ci, v, cbits, conflicts, F, fill_ref, gba_ref)
    dev = [cp.asarray(a) for a in (groups, ci, v, cbits)]
    fill, gba = cp.asarray(before), cp.full(int(room.sum()), -7, cp.int32)
    gpu.row_lists(*dev, [cp.asarray(c) for c in conflicts], cp.asarray(F), fill, gba)
    assert np.array_equal(fill_ref, cp.asnumpy(fill)) and np.array_equal(gba_ref, cp.asnumpy(gba))
    counted = cp.asarray(before)
    gpu.row_lists(*dev, [cp.asarray(c) for c in conflicts], None, counted, None)
    assert np.array_equal(cp.asnumpy(counted), fill_ref)
    assert fill_ref[0] - before[0] > 10000          # the 16K list, most of it kept


@pytest.mark.parametrize("n", [1, 2, 31, 1023, 1024, 1025, 5000, 65536, 65537, 300000])
def test_scan_and_flatnonzero_match_numpy(n):
    """The one-block scan and nonzero (small arrays) and the tiled ones (large) give NumPy's values
    and dtypes, on int64, int32 and bool input, and on a strided view; the exclusive scan too, and
    the sum scan_total has the kernel write into a result slot."""
    import cupy as cp
    from sgsi.join.backends.gpu.primitives import flatnonzero, scan, scan_total
    rng = np.random.default_rng(n)
    for x in (rng.integers(-5, 1 << 40, n), rng.integers(0, 7, n).astype(np.int32), rng.random(n) < 0.3):
        got = scan(cp.asarray(x))
        assert got.dtype == np.cumsum(x).dtype and np.array_equal(np.cumsum(x), cp.asnumpy(got))
        got, total = scan_total(cp.asarray(x))
        assert total == int(np.sum(x, dtype=np.int64)) and np.array_equal(np.cumsum(x), cp.asnumpy(got))
        assert np.array_equal(np.cumsum(x[::2]), cp.asnumpy(scan(cp.asarray(x)[::2])))
        assert np.array_equal(np.cumsum(x) - x, cp.asnumpy(scan(cp.asarray(x), exclusive=True)))
        got, total = scan_total(cp.asarray(x), exclusive=True)
        assert total == int(np.sum(x, dtype=np.int64)) and np.array_equal(np.cumsum(x) - x, cp.asnumpy(got))
    mask = rng.random(n) < 0.4
    for m in (mask, np.zeros(n, bool), np.ones(n, bool)):
        got = flatnonzero(cp.asarray(m))
        assert got.dtype == np.int64 and np.array_equal(np.flatnonzero(m), cp.asnumpy(got))
    assert np.array_equal(np.flatnonzero(mask[1::3]), cp.asnumpy(flatnonzero(cp.asarray(mask)[1::3])))


def test_launch_refuses_more_arguments_than_its_slots():
    """launch.Launch writes a launch's arguments into _SLOTS slots: a launch of more is refused
    with a clear error (no kernel takes that many), and one within them runs."""
    import cupy as cp
    from sgsi.join.backends.gpu import launch
    kernel = launch.Kernels("primitives")
    out = cp.zeros(5, cp.int64)
    with pytest.raises(ValueError, match="at most 64"):
        kernel("iota_i64")((1,), (32,), (5, out) + (0,) * (launch._SLOTS - 1))
    kernel("iota_i64")((1,), (32,), (5, out))
    assert cp.asnumpy(out).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", [0, 1, 33, 5000, 300000])
def test_take_matches_numpy(gpu, n):
    """primitives.take (and GpuBackend.take_values) gives np.take's values and dtype: 4- and
    8-byte values (int32, uint32, float32, int64, float64) at int32 and int64 indices, negative
    ones counting from the end, on strided views, and cast to int64 or float64 (int32 widened in
    the launch); other arrays (bool values, 2-D) through CuPy."""
    import cupy as cp
    from sgsi.join.backends.gpu.primitives import take
    rng = np.random.default_rng(n + 7)
    m = 1000
    for dtype in (np.int32, np.uint32, np.float32, np.int64, np.float64):
        a = rng.integers(-1 << 30, 1 << 30, 2 * m).astype(dtype)
        for idx in (rng.integers(-m, m, n), rng.integers(0, m, n).astype(np.int32)):
            want = np.take(a[::2], idx)
            got = take(cp.asarray(a)[::2], cp.asarray(idx))
            assert got.dtype == want.dtype and np.array_equal(cp.asnumpy(got), want), (dtype, idx.dtype)
            got = gpu.take_values(cp.asarray(a), cp.asarray(idx)[::-1])
            assert np.array_equal(cp.asnumpy(got), np.take(a, idx[::-1]))
            for to in (np.int64, np.float64):           # int32 widened in the launch; others cast
                want = np.take(a, idx).astype(to)
                got = take(cp.asarray(a), cp.asarray(idx), to)
                assert got.dtype == want.dtype and np.array_equal(cp.asnumpy(got), want), (dtype, to)
    flags = rng.random(m) < 0.5
    idx = rng.integers(0, m, n)
    assert np.array_equal(cp.asnumpy(take(cp.asarray(flags), cp.asarray(idx))), flags[idx])
    grid = rng.integers(0, 9, (4, m))
    assert np.array_equal(cp.asnumpy(take(cp.asarray(grid), cp.asarray(idx[:3]))), np.take(grid, idx[:3]))


@pytest.mark.parametrize("n", [1, 2, 40, 5000, 70000])
def test_runs_match_the_cpu(gpu, n):
    """GpuBackend.runs and run_starts (run_starts_*, run_ends) give the CPU's: sorted
    int32 and int64 values with short and long runs, one run, all distinct; uint8 through CuPy."""
    import cupy as cp
    cpu = CpuBackend()
    rng = np.random.default_rng(n)
    cases = [np.sort(rng.integers(0, max(1, n // 3), n)), np.sort(rng.integers(-5, 5, n)).astype(np.int32),
             np.zeros(n, np.int64), np.arange(n, dtype=np.int32), np.sort(rng.integers(0, 4, n)).astype(np.uint8)]
    for v in cases:
        want = cpu.runs(v)
        got = gpu.runs(cp.asarray(v))
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and np.array_equal(cp.asnumpy(g), w), v.dtype
        assert np.array_equal(cp.asnumpy(gpu.run_starts(cp.asarray(v))), cpu.run_starts(v))


@pytest.mark.parametrize("block,small", [(512, 1 << 13), (32, 1000), (64, 64)])
def test_single_pass_scan_matches_numpy(block, small, monkeypatch):
    """Scans past one block, in one single-pass launch: the default tiles, tiles of 256 values
    (blocks of 32 threads: 1,172 tiles for 300,000 values, so that a tile looks back over many
    windows of 32), and a tile that is mostly past the end; nonzero through them. Each scan runs
    twice in a row, as a second launch on the same state (a new epoch, the ticket set back)."""
    import cupy as cp
    from sgsi.join.backends.gpu import primitives as gpu_mod
    monkeypatch.setattr(gpu_mod, "_SCAN_BLOCK", block)
    monkeypatch.setattr(gpu_mod, "_SMALL_SCAN", small)
    rng = np.random.default_rng(block)
    tile = block * gpu_mod._SCAN_ROUNDS
    for n in (small + 1, 3 * tile + 1, 300000):
        for x in (rng.integers(-5, 1 << 40, n), rng.integers(0, 7, n).astype(np.int32), rng.random(n) < 0.3):
            for _ in range(2):
                got = gpu_mod.scan(cp.asarray(x))
                assert got.dtype == np.int64 and np.array_equal(np.cumsum(x), cp.asnumpy(got)), (n, x.dtype)
            before = gpu_mod.scan(cp.asarray(x), exclusive=True)
            assert np.array_equal(np.cumsum(x) - x, cp.asnumpy(before)), (n, x.dtype)
            got, total = gpu_mod.scan_total(cp.asarray(x))
            assert total == int(np.sum(x, dtype=np.int64)) and np.array_equal(np.cumsum(x), cp.asnumpy(got))
        m = rng.random(n) < 0.1
        assert np.array_equal(np.flatnonzero(m), cp.asnumpy(gpu_mod.flatnonzero(cp.asarray(m))))


@pytest.mark.parametrize("mapped", [1, 0], ids=["mapped", "device-slots"])
def test_result_slots_taken_again_give_each_read_its_values(mapped, monkeypatch):
    """Kernels writing their results into this thread's pinned ring (gpu.result_slots), read with
    no copy: with a ring of 16 slots, taken again hundreds of times, every read gets the values
    written for it: scan_total (one block and single-pass; empty, int64, int32, bool), the
    reductions of 1-6 arrays (two launches past 4), 2-12 scalars, nonzero's count, a piece's
    summary; a read of more slots than the ring holds is refused. The same with the slots in device
    memory, copied back (the switch that measures the ring's gain)."""
    import cupy as cp
    from sgsi.join.backends.gpu import primitives as g
    from sgsi.join.backends.gpu import transfers
    from sgsi.join.backends.gpu.backend import GpuBackend
    monkeypatch.setattr(transfers, "RESULT_SLOTS", 16)
    monkeypatch.setattr(g, "RESULT_SLOTS", 16)         # read_reductions and read_ints cut by it too
    monkeypatch.setattr(transfers, "_MAPPED_RESULTS", mapped)
    if hasattr(transfers._read_buffers, "ring"):
        del transfers._read_buffers.ring
    try:
        rng = np.random.default_rng(16)
        cpu, backend = CpuBackend(), GpuBackend("1GB")
        for _ in range(40):
            n = int(rng.choice([0, 1, 5, 1000, g._SMALL_SCAN, g._SMALL_SCAN + 1, 70_001]))
            for dtype in (np.int64, np.int32, np.bool_):
                x = rng.integers(0, 3, n).astype(dtype)
                out, total = g.scan_total(cp.asarray(x))
                assert total == int(np.sum(x, dtype=np.int64))
                assert np.array_equal(cp.asnumpy(out), np.cumsum(x, dtype=np.int64))
            pairs = [("sum" if j % 2 else "max", rng.integers(-5, 50, int(rng.integers(0, 3000))))
                     for j in range(int(rng.integers(1, 7)))]
            want = [int(a.sum()) if op == "sum" else (int(a.max()) if a.size else 0) for op, a in pairs]
            assert g.read_reductions([(op, cp.asarray(a)) for op, a in pairs]) == want
            values = rng.integers(-100, 100, int(rng.integers(2, 13)))
            assert g.read_ints([cp.asarray(np.int64(v)) for v in values]) == values.tolist()
            m = rng.random(int(rng.integers(1, 3000))) < 0.3
            assert np.array_equal(cp.asnumpy(g.flatnonzero(cp.asarray(m))), np.flatnonzero(m))
            col = rng.integers(0, 500, int(rng.integers(1, 9000))).astype(np.int32)
            deg = rng.integers(0, 40, col.size).astype(np.int64)
            assert backend.piece_summary(cp.asarray(deg), cp.asarray(col)) == list(cpu.piece_summary(deg, col))
        if mapped:
            with pytest.raises(ValueError, match="ring holds 16"):
                transfers.result_slots(17)
    finally:
        if hasattr(transfers._read_buffers, "ring"):
            del transfers._read_buffers.ring


def test_single_pass_state_per_thread_and_growing():
    """The single-pass state: a launch past its tiles grows it (fresh flags, the epoch restarted),
    the epoch moves on with every launch, and another thread gets a state of its own whose scans
    are right while this thread's go on."""
    import threading

    import cupy as cp
    from sgsi.join.backends.gpu import primitives as gpu_mod
    x = np.arange(1 << 20, dtype=np.int64) % 7
    want = np.cumsum(x)
    state = gpu_mod.scan_state()
    assert np.array_equal(cp.asnumpy(gpu_mod.scan(cp.asarray(x))), want)
    epoch, tiles = state.epoch, state.tiles
    assert np.array_equal(cp.asnumpy(gpu_mod.scan(cp.asarray(x))), want)
    assert state.epoch == epoch + 1 and state.tiles == tiles
    big = np.ones(tiles * gpu_mod._SCAN_BLOCK * gpu_mod._SCAN_ROUNDS + 1, dtype=np.int32)
    assert int(gpu_mod.scan(cp.asarray(big))[-1]) == big.size
    assert state.tiles > tiles and state.epoch == 1
    seen = []

    def other():
        seen.append(gpu_mod.scan_state())
        for _ in range(5):
            seen.append(np.array_equal(cp.asnumpy(gpu_mod.scan(cp.asarray(x))), want))

    th = threading.Thread(target=other)
    th.start()
    for _ in range(5):
        assert np.array_equal(cp.asnumpy(gpu_mod.scan(cp.asarray(x))), want)
    th.join()
    assert seen[0] is not state and all(seen[1:])


@pytest.mark.parametrize("pack_row_max", [1 << 16, 1000], ids=["warp-a-row", "heavy-rows-by-entry"])
@pytest.mark.parametrize("n_conflicts", [0, 1, 2])
def test_extend_matches_reference(gpu, n_conflicts, pack_row_max, monkeypatch):
    """The columnar extension gives the CPU's rows and values, in order, with and without the
    rows' own vertices to leave out (packed buffers need no compaction; the others are packed a
    warp a row, or an entry a thread where a row is heavier than ``_PACK_ROW_MAX``)."""
    import cupy as cp
    from sgsi.join.backends.gpu import expand as gpu_mod
    monkeypatch.setattr(gpu_mod, "_PACK_ROW_MAX", pack_row_max)
    rng = np.random.default_rng(10 + n_conflicts)
    n_tuples, n_rows = 300, 2000
    scount = rng.integers(0, 40, n_tuples)
    scount[:5] = [0, 1, 1500, 0, 3000]                       # empty sets and heavy rows
    sstart = np.r_[0, np.cumsum(scount)[:-1]]
    evals = rng.integers(0, 500, int(scount.sum())).astype(np.int32)
    row_tuple = rng.integers(0, n_tuples, n_rows)
    per_row = scount[row_tuple]
    conflict_cols = [rng.integers(0, 500, n_rows).astype(np.int32) for _ in range(n_conflicts)]
    ref = CpuBackend().extend(row_tuple, per_row, evals, sstart, scount, conflict_cols)
    got = gpu.extend(cp.asarray(row_tuple), cp.asarray(per_row), cp.asarray(evals), cp.asarray(sstart),
                     cp.asarray(scount), [cp.asarray(c) for c in conflict_cols])
    assert np.array_equal(ref[0], cp.asnumpy(got[0]))
    assert np.array_equal(ref[1], cp.asnumpy(got[1]))
    assert (ref[0].size < per_row.sum()) == (n_conflicts > 0)
    cum = cp.cumsum(cp.asarray(per_row))                     # sized by the caller: the same output
    again = gpu.extend(cp.asarray(row_tuple), cp.asarray(per_row), cp.asarray(evals), cp.asarray(sstart),
                       cp.asarray(scount), [cp.asarray(c) for c in conflict_cols],
                       (cum, int(per_row.sum()), int(per_row.max())))
    assert np.array_equal(ref[0], cp.asnumpy(again[0])) and np.array_equal(ref[1], cp.asnumpy(again[1]))


@pytest.mark.parametrize("window", [None, 1024], ids=["one-window", "windows"])
@pytest.mark.parametrize("budget", [None, "64KB"])
def test_refine_drop_matches_reference(tmp_path, budget, window, monkeypatch):
    """One partition's part of a refinement round clears on the GPU the bits the CPU reference
    clears: a partition of one segment and one of many (a hub's list across several), up to
    32 ends, candidates everywhere and in one narrow id range (most segments not read, unless
    they are on the device already); the vertices in one window, or in windows of 1,024 that
    segments straddle."""
    import cupy as cp
    from sgsi.join.backends.gpu import filter as gpu_mod
    from sgsi.join.backends.gpu.backend import GpuBackend
    if window is not None:
        monkeypatch.setattr(gpu_mod, "REFINE_WINDOW", window)
    rng = np.random.default_rng(41)
    n, m = 6000, 60000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    src[:5000] = 17                                      # a hub
    edges = sorted({(int(s), int(d)) for s, d in zip(src, dst) if s != d})
    e, v = str(tmp_path / "e.parquet"), str(tmp_path / "v.parquet")
    pq.write_table(pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges],
                             "label": ["ab"[(a * 7 + b) % 2] for a, b in edges]}), e)
    pq.write_table(pa.table({"id": list(range(n)), "label": ["X"] * n}), v)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=budget)
    store = g.store
    cpu, gpu = CpuBackend(), GpuBackend("1GB")
    nv = store.n_vertices
    dropped = kept = 0
    jobs = []
    for direction in ("out", "in"):
        p = store.partition(store.edge_label_id("a"), direction)
        assert (p.seg_ids.size > 4) == (budget is not None)
        for density, n_ends, narrow in [(0.3, 1, False), (0.05, 5, False), (0.6, 32, False), (0.3, 3, True)]:
            mask = rng.random((40, nv)) < density
            if narrow:
                mask[:, :2000] = mask[:, 2100:] = False
            mask[:, 17] = True                           # the hub a candidate of all
            bits = np.stack([cpu.pack_bits(row) for row in mask])
            users = sorted(int(x) for x in rng.choice(40, 3, replace=False))
            ends = sorted(int(x) for x in rng.choice(40, n_ends, replace=False))
            needs = [int(x) for x in rng.integers(1, 2 ** n_ends, 3)]
            want = bits.copy()
            cpu.refine_drop(store, p, bits, want, users, ends, needs)
            fresh = GpuBackend("1GB")                    # segments read from the store, then kept
            fresh.memory.cache.clear()                   # (the device's cache: the backends share it)
            for be in (fresh, gpu, gpu):
                got = cp.asarray(bits)
                be.refine_drop(store, p, cp.asarray(bits), got, users, ends, needs)
                assert np.array_equal(want, cp.asnumpy(got)), (direction, density, n_ends, narrow)
            if narrow and budget is not None and window is None:     # segments without candidates not read
                assert 0 < fresh.stats["segments"] < p.seg_ids.size
            assert np.array_equal(want[[i for i in range(40) if i not in users]],
                                  bits[[i for i in range(40) if i not in users]])
            dropped += int(np.unpackbits((bits ^ want).view(np.uint8)).sum())
            kept += int(np.unpackbits(want[users].view(np.uint8)).sum())
            jobs.append((p, users, ends, needs))
    assert dropped > 1000 and kept > 1000, (dropped, kept)
    # A round of every job above at once (both partitions, users overlapping): one read of the
    # segments meeting the candidates for all, then each job's launches.
    bits = np.stack([cpu.pack_bits(row) for row in rng.random((40, nv)) < 0.3])
    want = bits.copy()
    cpu.refine_round(store, bits, want, jobs)
    for be in (GpuBackend("1GB"), gpu):
        got = cp.asarray(bits)
        be.refine_round(store, cp.asarray(bits), got, jobs)
        assert np.array_equal(want, cp.asnumpy(got))
    assert (want != bits).any()
    g.close()


@pytest.mark.parametrize("budget", [None, "64KB"])
def test_member_kernel_matches_reference(tmp_path, budget):
    """Later linking edges entry by entry (``member_entries``: the entry's vertex's list found in
    each segment's PCSR, the entry binary-searched in it) against the CPU reference (membership's
    bitsets) and a set test: one segment and many, a hub whose list spans several, vertices with
    no list, entries in any order; segments read from the store and from the device cache."""
    import cupy as cp
    from sgsi.join.backends.gpu.backend import GpuBackend
    from sgsi.join.stream import neighbour_lists
    rng = np.random.default_rng(43)
    n, m = 5000, 50000
    src, dst = rng.integers(0, n, m), rng.integers(0, n - 500, m)   # the top 500 have no in-list
    src[:6000] = 17                                                  # a hub
    edges = sorted({(int(s), int(d)) for s, d in zip(src, dst) if s != d})
    e, v = str(tmp_path / "e.parquet"), str(tmp_path / "v.parquet")
    pq.write_table(pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges],
                             "label": ["ab"[(a + b) % 2] for a, b in edges]}), e)
    pq.write_table(pa.table({"id": list(range(n)), "label": ["X"] * n}), v)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=budget)
    store = g.store
    cpu, gpu = CpuBackend(), GpuBackend("1GB")
    nv = store.n_vertices
    for direction in ("out", "in"):
        link = type("L", (), {"label_id": store.edge_label_id("a"), "direction": direction})()
        p = store.partition(link.label_id, link.direction)
        assert (p.seg_ids.size > 4) == (budget is not None)
        truth = {}
        for lo, _hi, nb, owner in neighbour_lists(store, cpu, p, np.arange(nv, dtype=np.int32)):
            for o, x in zip((owner + lo).tolist(), nb.tolist()):
                truth.setdefault(o, set()).add(x)
        n_t = 500
        vcol = rng.integers(0, nv, n_t).astype(np.int32)
        vcol[::7] = max(truth, key=lambda k: len(truth[k]))     # the hub (out), or the busiest (in)
        counts = rng.integers(0, 60, n_t)
        erow = np.repeat(np.arange(n_t), counts)
        evals = rng.integers(0, nv, erow.size).astype(np.int32)
        for i in range(0, erow.size, 2):              # half the entries a true neighbour, where there is one
            lst = sorted(truth.get(int(vcol[erow[i]]), ()))
            if lst:
                evals[i] = lst[int(rng.integers(0, len(lst)))]
        want = np.array([int(x) in truth.get(int(vcol[t]), ()) for t, x in zip(erow, evals)], bool)
        ref = cpu.member(store, link, vcol, erow, evals, 1 << 20)
        assert np.array_equal(ref, want)
        fresh = GpuBackend("1GB")
        for be in (fresh, gpu, gpu):
            got = be.member(store, link, cp.asarray(vcol), cp.asarray(erow), cp.asarray(evals), 1 << 20)
            assert got.dtype == cp.bool_ and np.array_equal(cp.asnumpy(got), want), direction
        assert want.any() and not want.all()
    g.close()


@pytest.mark.parametrize("gaps", [True, False], ids=["gaps", "packed"])
def test_sizes_less_own_kernel_matches_reference(gpu, gaps):
    """Set sizes less the rows' own vertices: the kernel (a binary search per row and vertex)
    against the reference (sets packed, keys searched), sets with gaps and packed."""
    import cupy as cp
    from test_engine import _random_sets
    rng = np.random.default_rng(17)
    for n_cols in (1, 3, 20):
        _sets, row_tuple, evals, sstart, scount, cols = _random_sets(rng, n_rows=5000, n_cols=n_cols, gaps=gaps)
        etuple = None if gaps else np.repeat(np.arange(scount.size), scount)
        want = CpuBackend().sizes_less_own(row_tuple, etuple, evals, sstart, scount, cols)
        got = gpu.sizes_less_own(cp.asarray(row_tuple), None if etuple is None else cp.asarray(etuple),
                                 cp.asarray(evals), cp.asarray(sstart), cp.asarray(scount),
                                 [cp.asarray(c) for c in cols])
        assert np.array_equal(want, cp.asnumpy(got)), n_cols
        assert (want < scount[row_tuple]).sum() > 100


def test_dense_degrees_match_the_degree_index(tmp_path):
    """The device's per-vertex degrees of a partition are its degree index's, zero elsewhere."""
    import cupy as cp
    from sgsi.join.backends.gpu.backend import GpuBackend
    from test_engine import _two_label_graph
    g = _two_label_graph(tmp_path, n=3000, m=20000)
    gpu = GpuBackend("1GB")
    for lab in (g.store.edge_label_id("a"), g.store.edge_label_id("b")):
        for direction in ("out", "in"):
            p = g.store.partition(lab, direction)
            want = np.zeros(g.store.n_vertices, np.int64)
            for bid in p.idx_batches:
                v, d = g.store.index_batch(bid)
                want[np.asarray(v)] = np.asarray(d)
            got = cp.asnumpy(gpu.dense_degrees(g.store, p))
            assert np.array_equal(want, got) and want.sum() == p.edges
            assert gpu.dense_degrees(g.store, p) is gpu.dense_degrees(g.store, p)     # kept
    g.close()


def test_refine_on_gpu_matches_cpu(tmp_path):
    """Two rounds of refinement on the GPU leave the bitsets the CPU leaves."""
    from sgsi.join.backends.gpu.backend import GpuBackend
    from sgsi.join.plan import make_plan
    from sgsi.pattern import load_pattern
    from test_engine import _two_label_graph
    g = _two_label_graph(tmp_path, n=2000, m=12000)
    pattern = load_pattern("(x:X)-[:a]->(y:Y), (y)-[:b]->(z), (z)<-[:a]-(x), (y)-[:a]->(w:Z), (w)-[:b]->(x)")
    plans = [make_plan(g.store, pattern, be, refine_rounds=2) for be in (CpuBackend(), GpuBackend("1GB"))]
    import cupy as cp
    for a, b in zip(plans[0].candidates, plans[1].candidates):
        assert np.array_equal(a, cp.asnumpy(b))
    assert plans[0].candidate_counts == plans[1].candidate_counts
    unrefined = make_plan(g.store, pattern, CpuBackend(), refine_rounds=0)
    assert sum(plans[0].candidate_counts) < sum(unrefined.candidate_counts)
    from sgsi.join.plan import refine_cost           # the GPU sums the degrees it keeps per vertex
    gpu = GpuBackend("1GB")
    assert refine_cost(g.store, gpu, make_plan(g.store, pattern, gpu, refine_rounds=0)) == \
        refine_cost(g.store, CpuBackend(), unrefined) > 0
    g.close()


@pytest.mark.parametrize("lengths,gathered", [
    ([40, 40], None),
    ([5, 300, 5000], None),                       # a long list searched, windows over many rounds
    ([300, 3, 60, 60], [True, False, True, True]),
    ([50] * 18, None),                            # past the kernel's 16 search windows
    ([0, 10], None),
    ([2000, 2000], None),                         # lists of like size: the windows sweep like a merge
])
def test_intersect_lists_kernel_matches_reference(gpu, lengths, gathered):
    """The later-link kernel writes exactly what the CPU backend's bitset intersection gives:
    the same entries in the same order, the same links left untested."""
    import cupy as cp
    from oracle import random_gathered_lists
    from sgsi.join.sets import _Lists
    rng = np.random.default_rng(sum(lengths) + 1)
    lists, _expect = random_gathered_lists(rng, 300, lengths, gathered, universe=max(lengths) * 3 + 1)
    ref = CpuBackend().intersect_lists(lists, bitcap=1 << 30)
    dev = [None if L is None else _Lists(cp.asarray(L.of_tuple), cp.asarray(L.start), cp.asarray(L.count),
                                          cp.asarray(L.values), L.reserved) for L in lists]
    got = gpu.intersect_lists(dev)
    assert np.array_equal(ref[0], cp.asnumpy(got[0]))
    assert np.array_equal(ref[1], cp.asnumpy(got[1]))
    assert ref[3] == got[3]
    assert got[2] >= int(got[1].size)


def test_device_memory_comes_from_the_devices_limited_pool(monkeypatch):
    """Every GPU backend allocates from the device's one pool, limited to the running query's
    budget less the cache's share, plus the allowance; past the limit a run stops with a
    MemoryShortage, not a CUDA error."""
    import cupy as cp
    from sgsi.errors import MemoryShortage
    from sgsi.join.backends.gpu import backend as gpu_mod
    from sgsi.join.backends.gpu import memory as gpu_memory
    monkeypatch.setattr(gpu_memory, "POOL_ALLOWANCE", 1 << 20)
    monkeypatch.setattr(gpu_mod, "POOL_ALLOWANCE", 1 << 20)
    be, other = gpu_mod.GpuBackend(), gpu_mod.GpuBackend()
    assert be.pool is other.pool is gpu_memory.device_memory().pool
    be.memory.trim()            # the free blocks an earlier query kept (KEEP_FREE) would serve these

    class Store:
        token = ("no store", -1)
        base_token = ("no store", "base", -1)

        def on_close(self, fn):
            pass
    store = Store()
    assert be.begin(store, "1MB") == 1 << 20
    try:
        cache = be.memory.cache.limit
        assert cache == 512 << 10                                   # half the budget
        assert be.pool_limit == be.pool.get_limit() == (1 << 20) - cache + (1 << 20)
        default_before = cp.get_default_memory_pool().used_bytes()
        a = be.run(lambda: cp.zeros(1 << 20, cp.uint8))
        assert be.pool.used_bytes() >= 1 << 20
        assert cp.get_default_memory_pool().used_bytes() == default_before
        with pytest.raises(MemoryShortage, match="memory budget"):
            be.run(lambda: cp.zeros(3 << 20, cp.uint8))
        del a
    finally:
        be.end(failed=True)
    assert be.pool.total_bytes() - be.pool.used_bytes() == 0      # free blocks given back


def test_a_query_that_keeps_its_memory_gives_it_back_at_release():
    """``end(keep=True)`` after a query that ended well leaves the pool's free blocks for the next
    (a sharded query's tasks); ``release`` gives them back, but not while a query runs; a failed
    query gives them back whatever ``keep`` says."""
    import cupy as cp
    from sgsi.join.backends.gpu import backend as gpu_mod

    class Store:
        token = ("no store", -2)
        base_token = ("no store", "base", -2)

        def on_close(self, fn):
            pass

    be = gpu_mod.GpuBackend()
    mem = be.memory

    def free():
        return mem.pool.total_bytes() - mem.pool.used_bytes()

    def query(size, failed, keep):
        be.begin(Store(), "1GB")
        be.run(lambda: cp.zeros(size, cp.uint8))            # freed at once: a free block
        be.end(failed=failed, keep=keep)

    mem.trim()
    query(256 << 20, failed=False, keep=True)
    assert free() >= 256 << 20                               # kept for the next task
    other = gpu_mod.GpuBackend()
    other.begin(Store(), "1GB")                              # a query running: release waits
    be.release()
    assert free() >= 256 << 20
    other.end()                                              # keeps nothing: trims the pool
    assert free() == 0
    query(256 << 20, failed=False, keep=True)
    be.release()
    assert free() == 0
    query(256 << 20, failed=True, keep=True)
    assert free() == 0


def test_default_budget_counts_what_sgsi_holds():
    """The default budget is half of the device's free memory plus what sgsi's pool holds: blocks
    the pool keeps do not shrink it."""
    import cupy as cp
    from sgsi.join.backends.gpu import memory as gpu_memory
    mem = gpu_memory.device_memory()
    before = mem.default_budget()
    with cp.cuda.using_allocator(mem.pool.malloc):
        held = cp.zeros(256 << 20, cp.uint8)
    assert abs(mem.default_budget() - before) < 16 << 20
    del held
    mem.trim()


def _free_device_memory():
    import cupy as cp
    cp.cuda.Device().synchronize()
    return cp.cuda.runtime.memGetInfo()[0]


def test_hostile_queries_give_the_device_memory_back(tmp_path):
    """50 queries in one process that end every way (cancelled, a budget under the floor, a
    shortage run again on half the budget, a reader closed early, a success) at several budgets:
    the device's free memory comes back to within 64 MB of where it was, and the next query is right."""
    import threading
    import time
    from sgsi.errors import BudgetError, Cancelled
    from sgsi.join.query import memory_floor
    d = str(tmp_path / "y.sgsi")
    g = sgsi.build(d, graph=os.path.join(BENCH, "yeast", "data.graph"), memory_budget="2MB")
    q = os.path.join(BENCH, "yeast", "queries", "query_dense_8_1.graph")
    want = _expected("yeast")["query_dense_8_1.graph"]
    huge = "(a)--(b)--(c)--(d)--(e)--(f)--(g)--(h)--(i)"
    assert g.count(q, device="gpu") == want            # kernels compiled, caches warm
    start = _free_device_memory()
    latencies = []

    def cancelled(i):
        ev = threading.Event()
        timer = threading.Timer(0.05 + 0.02 * (i % 5), ev.set)
        timer.start()
        t = time.monotonic()
        with pytest.raises(Cancelled):
            g.count(huge, device="gpu", memory_budget=[None, "64MB", "4GB"][i % 3], cancel=ev)
        latencies.append(time.monotonic() - t - timer.interval)

    def under_floor(_i):
        with pytest.raises(BudgetError, match="floor"):
            g.count(q, device="gpu", memory_budget=memory_floor(g.store) - 1)

    def closed_early(_i):
        reader = g.match(huge, device="gpu", memory_budget="256MB")
        reader.read_next_batch()
        reader.close()

    def success(i):
        assert g.count(q, device="gpu", memory_budget=[None, "64MB", "1GB"][i % 3]) == want

    kinds = [cancelled, under_floor, closed_early, success]
    for i in range(50):
        kinds[i % len(kinds)](i)
        assert abs(_free_device_memory() - start) < 64 << 20, (i, kinds[i % len(kinds)].__name__)
    assert max(latencies) < 2.0, latencies
    assert g.count(q, device="gpu") == want
    g.close()


def test_shortage_on_the_device_runs_again_on_half_the_budget(tmp_path, monkeypatch):
    """A step that outgrows the pool's limit: the count runs again on half the budget, exact."""
    import cupy as cp
    from sgsi.join.backends.gpu.backend import GpuBackend
    d = str(tmp_path / "y.sgsi")
    g = sgsi.build(d, graph=os.path.join(BENCH, "yeast", "data.graph"))
    q = os.path.join(BENCH, "yeast", "queries", "query_dense_8_1.graph")
    real = GpuBackend.bits_to_ids
    shortages = []

    def greedy(self, *args, **kwargs):
        if len(shortages) < 2:
            shortages.append(1)
            cp.empty(self.pool_limit + 1, cp.uint8)      # past the pool's limit: OutOfMemoryError
        return real(self, *args, **kwargs)
    monkeypatch.setattr(GpuBackend, "bits_to_ids", greedy)
    assert g.count(q, device="gpu", memory_budget="256MB") == _expected("yeast")["query_dense_8_1.graph"]
    assert g.last_stats["budget_halved"] == 2
    g.close()


def test_query_stays_inside_its_pool_limit(tmp_path):
    import cupy as cp
    d = tmp_path / "y"
    g = sgsi.build(str(d) + ".sgsi", graph=os.path.join(BENCH, "yeast", "data.graph"), memory_budget="64KB")
    q = os.path.join(BENCH, "yeast", "queries", "query_dense_8_1.graph")
    default_before = cp.get_default_memory_pool().used_bytes()
    n = g.count(q, device="gpu", memory_budget="64KB")
    st = g.last_stats
    assert n == _expected("yeast")["query_dense_8_1.graph"]
    assert 0 < st["device_peak_bytes"] <= (64 << 10) + (256 << 20)
    assert cp.get_default_memory_pool().used_bytes() == default_before
    g.close()


def test_cost_model_calibration(gpu):
    c = gpu.costs()
    assert c.sms > 0 and c.t_kl > 0 and c.t_sn >= 0 and c.t_split >= 0


def _write_graph(tmp, edges, vlabels):
    e = os.path.join(tmp, "e.parquet")
    v = os.path.join(tmp, "v.parquet")
    pq.write_table(pa.table({"src": [a for a, _, _ in edges], "dst": [b for _, b, _ in edges],
                             "label": [l for _, _, l in edges]}), e)
    pq.write_table(pa.table({"id": list(vlabels), "label": list(vlabels.values())}), v)
    return e, v


@pytest.fixture(params=["light", "tuples"])
def join_way(request, monkeypatch):
    """Light pieces joined row by row (most pieces of the small graphs here), or every piece
    by its distinct tuples."""
    if request.param == "tuples":
        from sgsi.join.backends.gpu.backend import GpuBackend
        monkeypatch.setattr(GpuBackend, "light_entries", 0)
        monkeypatch.setattr(CpuBackend, "light_entries", 0)
    return request.param


@pytest.mark.parametrize("budget", [None, "64KB"])
def test_engine_on_gpu_matches_oracle(tmp_path, budget, join_way):
    from oracle import oracle_count, random_graph, random_pattern
    rng = random.Random(11)
    for trial in range(6):
        edges, vl = random_graph(rng, 40, 160, 3, 3, string_ids=trial % 2 == 1)
        e, v = _write_graph(str(tmp_path), edges, vl)
        g = sgsi.build(str(tmp_path / f"g{trial}.sgsi"), edges=e, vertices=v, memory_budget=budget, force=True)
        for _ in range(8):
            pat = random_pattern(rng, rng.randint(2, 5), vertex_labels=sorted(set(vl.values())),
                                 edge_labels=sorted({l for _, _, l in edges}))
            for inj in (True, False):
                exp = oracle_count(edges, vl, pat, injective=inj)
                assert g.count(pat, device="gpu", memory_budget=budget, homomorphism=not inj) == exp, (pat, inj)
                assert g.count(pat, device="cpu", memory_budget=budget, homomorphism=not inj) == exp, (pat, inj)


@pytest.mark.parametrize("budget", [None, "64KB"])
def test_weighted_subtrees_on_gpu_match_oracle(tmp_path, budget, join_way, monkeypatch):
    """One-leaf subtrees counted from the root's sets and weights (every piece, however few its
    entries) give the oracle's counts on the GPU, over trees and trees with an extra edge."""
    from oracle import oracle_count, random_graph, random_pattern
    from sgsi.join import counting
    monkeypatch.setattr(counting, "WEIGHTED_FANOUT", 0)
    monkeypatch.setattr(counting, "WEIGHTED_PER_CONFLICT", 0)
    from sgsi.join.backends.gpu.backend import GpuBackend
    monkeypatch.setattr(GpuBackend, "weighted_min_entries", 0)
    rng = random.Random(29)
    weighted = 0
    for trial in range(4):
        edges, vl = random_graph(rng, 40, 200, 3, 2)
        e, v = _write_graph(str(tmp_path), edges, vl)
        g = sgsi.build(str(tmp_path / f"g{trial}.sgsi"), edges=e, vertices=v, memory_budget=budget, force=True)
        for _ in range(8):
            pat = random_pattern(rng, rng.randint(4, 7), vertex_labels=sorted(set(vl.values())),
                                 edge_labels=sorted({l for _, _, l in edges}), extra_edges=rng.choice([0, 0, 1]),
                                 p_vertex_label=0.8)
            exp = oracle_count(edges, vl, pat, injective=True)
            assert g.count(pat, device="gpu", memory_budget=budget) == exp, pat
            weighted += g.last_stats["subtrees_weighted"]
    assert weighted >= 1


def _expected(name):
    with open(os.path.join(BENCH, name, "expected.txt")) as f:
        return {a: int(b) for a, b in (line.split() for line in f if line.strip())}


@pytest.mark.parametrize("budget", [None, "64KB"])
def test_hprd_on_gpu(tmp_path, budget, join_way):
    g = sgsi.build(str(tmp_path / "hprd.sgsi"), graph=os.path.join(BENCH, "hprd", "data.graph"),
                   memory_budget=budget)
    exp = _expected("hprd")
    names = sorted(exp) if budget is None else sorted(exp)[::5]
    for q in names:
        assert g.count(os.path.join(BENCH, "hprd", "queries", q), device="gpu", memory_budget=budget) == exp[q], q


def test_yeast_on_gpu(tmp_path):
    g = sgsi.build(str(tmp_path / "yeast.sgsi"), graph=os.path.join(BENCH, "yeast", "data.graph"))
    exp = {q: c for q, c in _expected("yeast").items() if c <= 10**7}
    for q in sorted(exp)[::3]:           # a third of them, spread over every query set
        assert g.count(os.path.join(BENCH, "yeast", "queries", q), device="gpu") == exp[q], q


def test_segment_copies_are_timed_on_the_copy_stream(tmp_path, monkeypatch):
    """Segments streamed to the device through the pinned buffers are counted and their copies
    timed by CUDA events."""
    monkeypatch.setenv("SGSI_GPU_MAPPED_BYTES", "0")         # no copies straight from the maps
    g = sgsi.build(str(tmp_path / "hprd.sgsi"), graph=os.path.join(BENCH, "hprd", "data.graph"),
                   memory_budget="64KB")
    q = sorted(_expected("hprd"))[0]
    assert g.count(os.path.join(BENCH, "hprd", "queries", q), device="gpu", memory_budget="64KB") == _expected("hprd")[q]
    st = g.last_stats
    assert st["segments"] > 1 and st["h2d_bytes"] > 0
    assert st["h2d_seconds"] > 0 and st["stage_seconds"] > 0
    # The streamed steps' device time holds their copies and the join's work on the segments.
    assert st["stream_seconds"] > 0
    # h2d_seconds times the segment copies only: their bytes are counted apart from the
    # signature and label columns, which are copied too.
    assert 0 < st["h2d_segment_bytes"] <= st["segment_bytes"] and st["h2d_segment_bytes"] < st["h2d_bytes"]
    # A staged segment is on the device while it is used: the peak holds at least the mean one.
    assert st["h2d_bytes"] / st["segments"] <= st["device_peak_bytes"] <= 2**30


def _mapped_blocks_of(g):
    from sgsi.join.backends.gpu.transfers import MAPPED
    bases = {g.store.map_buffer(n).ctypes.data for n in ("pcsr_groups.arrow", "pcsr_ci.arrow")}
    return {k: v for k, v in MAPPED.blocks.items() if k[0] in bases}


def test_segments_copy_straight_from_registered_maps(tmp_path, monkeypatch):
    """Segments are copied from the store's file maps, registered with CUDA: the same counts
    as through the pinned buffers, no staging on the host, and the registered bytes stay inside
    their limit (two stores share it; the least recently used blocks go first) and are let go
    when a store is closed."""
    from sgsi.join.backends.gpu.transfers import MAPPED
    for base in list(MAPPED.maps):          # start from no registered blocks (earlier tests' stores)
        MAPPED.release(base)
    assert MAPPED.bytes == 0 and not MAPPED.blocks
    q = sorted(_expected("hprd"))[:6]
    graphs = [sgsi.build(str(tmp_path / f"hprd{i}.sgsi"), graph=os.path.join(BENCH, "hprd", "data.graph"),
                         memory_budget="64KB") for i in range(2)]
    one = sum(int(graphs[0].store.map_buffer(n).size) for n in ("pcsr_groups.arrow", "pcsr_ci.arrow"))
    monkeypatch.setenv("SGSI_GPU_MAPPED_BYTES", str(one))          # room for one store's files
    for g in graphs + graphs:
        for name in q:
            assert g.count(os.path.join(BENCH, "hprd", "queries", name), device="gpu",
                           memory_budget="64KB") == _expected("hprd")[name], name
            st = g.last_stats
            assert st["segments"] > 1 and st["h2d_mapped_bytes"] == st["h2d_segment_bytes"] > 0
            assert st["stage_seconds"] == 0 and st["h2d_seconds"] > 0
            assert MAPPED.bytes == one              # this store's blocks, the other's let go
            assert len(_mapped_blocks_of(g)) == len(MAPPED.blocks) == 2
    graphs[1].close()
    assert MAPPED.bytes == 0 and not MAPPED.blocks and not MAPPED.maps
    # No room at all: the pinned buffers take every segment.
    monkeypatch.setenv("SGSI_GPU_MAPPED_BYTES", "1")
    g = graphs[0]
    assert g.count(os.path.join(BENCH, "hprd", "queries", q[0]), device="gpu", memory_budget="64KB") == \
        _expected("hprd")[q[0]]
    assert g.last_stats["segments"] > 1
    assert g.last_stats["h2d_mapped_bytes"] == 0 and g.last_stats["stage_seconds"] > 0
    assert not MAPPED.blocks
    g.close()


def test_segment_copy_waits_for_queued_compute(gpu):
    """The pool may hand a segment's copy memory that queued compute still reads: the copy
    stream must not start before the work queued on the compute stream so far."""
    import cupy as cp
    spin = cp.RawKernel(r"""
    extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
    }""", "spin")
    spin((1,), (1,), (np.int64(2_000_000_000),))       # about a second on the compute stream
    gpu._copy_target(1 << 20)
    after = gpu.copy_stream.record()
    assert not after.done                               # the copy stream waits for the spin
    cp.cuda.get_current_stream().synchronize()
    after.synchronize()
    assert after.done


def test_damaged_segment_read_direct_is_caught_on_the_device(tmp_path):
    """The GPU backend reads segments with pread and checks their groups on the device."""
    import cupy as cp
    g = sgsi.build(str(tmp_path / "hprd.sgsi"), graph=os.path.join(BENCH, "hprd", "data.graph"),
                   memory_budget="64KB")
    s = g.store
    assert s.reads_direct
    for seg in range(len(s._seg_edges)):
        groups, ci = s.segment(seg)
        buf = np.empty(groups.nbytes + ci.nbytes, np.uint8)
        gb, _cb, shape = s.read_segment(seg, buf)
        s.check_segment(seg, cp.asarray(buf[:gb].view(np.int32).reshape(shape)), cp)   # sound: no error
    mm, base = s._maps["pcsr_groups.arrow"]
    arr = s._batch("pcsr_groups.arrow", 0).column(0)
    at = arr.buffers()[1].address + 4 * arr.offset - base + 4
    path = g.path
    g.close()
    with open(os.path.join(path, "pcsr_groups.arrow"), "r+b") as f:
        f.seek(at)
        f.write(np.int32(2**31 - 1).tobytes())
    g = sgsi.open(path)
    with pytest.raises(sgsi.StoreError, match="out of range in segment 0"):
        g.count("(a)--(b)--(c)", device="gpu", memory_budget="64KB")
