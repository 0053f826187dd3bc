"""Candidate filtering and refinement on the device (launchers of ``cuda/filter.cu``): the
candidate bitsets of every pattern vertex in a launch per vertex segment, their sizes and
overlaps, refinement rounds, and the weights the planner asks of the sets.
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np

from ...stream import segment_ranges
from ..base import Overlaps, sets_then_summary
from .launch import BLOCK, Kernels, grid
from .primitives import pointer, pointers, record_table
from .transfers import read_last, read_small, to_device_small

kernel = Kernels("filter")


#: Blocks a bitset's ``popcount_rows`` takes at most (each strides over its words).
_POPCOUNT_BLOCKS = 64


def popcount_rows(bitsets, out):
    """Queue ``out[i] += `` the set bits of ``bitsets[i]`` (equal sizes; ``out`` int64, zeroed):
    one launch, a grid row a bitset."""
    words = int(bitsets[0].size) if bitsets else 0
    if words:
        kernel("popcount_rows")((min(_POPCOUNT_BLOCKS, grid(words)[0]), len(bitsets)), (BLOCK,),
                                (pointers(bitsets), words, out))
    return out


#: Blocks of a ``candidate_bits`` launch an SM (the kernel's CB_BLOCKS_PER_SM): a launch has at most
#: this many times the SMs, one wave of blocks, each striding over the vertices (fewer blocks, fewer
#: atomics adding the sets' sizes and overlaps).
_CANDIDATE_BLOCKS_PER_SM = 8
#: Most entries of a ``candidate_bits`` argument table (copied to shared memory, 16 KB): pattern
#: vertices past it, or past 32, take more launches.
_CANDIDATE_TABLE = 2048


#: Vertices whose refinement hits (4 bytes each) one pass of ``GpuBackend.refine_round`` holds:
#: 64 MB, whatever the graph (a multiple of 32: a window's bitset words are its own).
REFINE_WINDOW = 1 << 24


def _filter_record_length(pairs, masks):
    """Entries of a pattern vertex's record in a ``candidate_bits`` table: label, label column,
    the number of tests, a column and a query word per test, the number of masks, the masks."""
    return 4 + 2 * len(pairs) + len(masks)


def _filter_launches(lengths):
    """The launches of ``candidate_bits`` for pattern vertices whose records are ``lengths`` long:
    (first, past the last) ranges of at most 32, each table (a start and a record each) at most
    ``_CANDIDATE_TABLE`` entries, or one pattern vertex's record where that alone is longer (a
    record has 4 entries, 2 a signature word and 1 a degree mask: a few hundred at most, far
    inside the 48 KB of shared memory a launch may take)."""
    launches, first, size = [], 0, 0
    for u, length in enumerate(lengths):
        if u > first and (u - first == 32 or size + 1 + length > _CANDIDATE_TABLE):
            launches.append((first, u))
            first, size = u, 0
        size += 1 + length
    return launches + [(first, len(lengths))] if lengths else launches


class GpuOverlaps(Overlaps):
    """:class:`~sgsi.join.backends.base.Overlaps` with one launch and one host read per question
    that finds bitsets not seen yet: those bitsets against every bitset of the list
    (``bitset_overlaps``), where asking pair by pair cost two launches and a host sync each.
    The answers are kept as a matrix over the bitsets seen."""

    def __init__(self, bits):
        super().__init__(cp, bits)
        self.seen = 0                   # bits[:seen] are known against each other
        self.matrix = np.zeros((0, 0), dtype=bool)

    def __call__(self, u, w):
        if max(u, w) >= self.seen:
            self._learn(None)
        return bool(self.matrix[u, w])

    def _learn(self, key):
        out = cp.zeros((len(self.bits) - self.seen) * len(self.bits), cp.int32)
        self._launch(out)
        self._record(read_small(out))

    def _launch(self, out):
        """Queue ``bitset_overlaps`` of the bitsets not seen yet against every bitset, into ``out``
        (int32, zeroed, a row of ``len(bits)`` per new bitset)."""
        new, every = self.bits[self.seen:], self.bits
        words = int(every[0].size)
        if not words:
            return
        per_pair = max(1, min(64, (words + 8 * BLOCK - 1) // (8 * BLOCK)))
        table = pointers(every)
        kernel("bitset_overlaps")((len(new) * len(every) * per_pair,), (BLOCK,),
                                  (table[self.seen:], table, len(every), words, per_pair, out))

    def _record(self, hits):
        """Keep the answers ``hits`` (on the host: a row of ``len(bits)`` per bitset not seen yet,
        nonzero where they meet) of a :meth:`_launch`: the new bitsets are seen."""
        total, seen = len(self.bits), self.seen
        hits = np.asarray(hits).reshape(total - seen, total) != 0
        matrix = np.zeros((total, total), dtype=bool)
        matrix[:seen, :seen] = self.matrix
        matrix[seen:, :] = hits
        matrix[:, seen:] |= hits.T
        self.matrix, self.seen = matrix, total




class FilterSteps:
    """The candidate filter, refinement and what the planner asks of the sets (reference: CpuBackend's
    methods of the same names), mixed into :class:`~sgsi.join.backends.gpu.backend.GpuBackend`."""

    def overlaps(self, bits):
        """:class:`GpuOverlaps` of the candidate bitsets ``bits`` (a list that may grow)."""
        return GpuOverlaps(bits)

    def popcount(self, bits):
        return self.popcounts([bits])[0]

    def counts_and_overlaps(self, bits, cost_jobs=None):
        """(:meth:`popcounts` of ``bits``, their :meth:`overlaps` with every pair known[, the
        union degrees of ``cost_jobs``]) in one read (reference: CpuBackend.counts_and_overlaps):
        the popcount reduction, the ``bitset_overlaps`` launch and the ``union_degrees`` launch
        write one buffer, where each took a read of its own."""
        k = len(bits)
        meets = GpuOverlaps(bits)
        pairs = (k * k + 1) // 2
        buf = cp.zeros(k + pairs + 1, cp.int64)      # the counts, k * k int32 answers, the cost
        popcount_rows(bits, buf[:k])
        meets._launch(buf[k:k + pairs].view(cp.int32)[:k * k])
        if cost_jobs is not None:
            self.add_union_degrees(buf[k + pairs:], bits, cost_jobs)
        host = read_small(buf)
        meets._record(host[k:k + pairs].view(np.int32)[:k * k])
        counts = [int(x) for x in host[:k]]
        return (counts, meets) if cost_jobs is None else (counts, meets, int(host[-1]))

    def popcounts(self, bitsets):
        """The set bits of each bitset (equal sizes), as Python integers: one reduction, one read."""
        if not bitsets:
            return []
        return read_small(popcount_rows(bitsets, cp.zeros(len(bitsets), cp.int64))).tolist()


    def refine_drop(self, store, p, bits, keep, users, ends, needs):
        """One partition's part of a refinement round (reference: CpuBackend.refine_drop):
        :meth:`refine_round` of that one job."""
        self.refine_round(store, bits, keep, [(p, users, ends, needs)])

    def refine_round(self, store, bits, keep, jobs):
        """A refinement round's jobs (partition, users, ends, needs) (reference:
        CpuBackend.refine_round), with no id list, a window of ``REFINE_WINDOW`` vertices at a
        time (its hit words, 4 bytes a vertex, bounded): per job, one ``refine_hits`` launch per
        segment over its source range in the window, then one ``refine_drop`` for every user
        over the window's words; where one segment holds the window's lists, one
        ``refine_fused`` launch does both, with no hit words (on the 100M graph's walks every
        job: half the round's launches, and their device time over the window's words). A
        partition of several segments not all on the device reads only those meeting the users'
        candidates (one ``segments_meeting`` launch a job, one read
        for the round); one on the device reads them all (a launch costs less than the read).
        The jobs' arguments (users, ends, needs) go to the device as one array. A segment
        spanning two windows is read in both."""
        if not jobs:
            return
        words = int(bits.shape[1])
        records = [list(users) + list(ends) + [int(x) for x in needs] for _p, users, ends, needs in jobs]
        at = np.cumsum([0] + [len(r) for r in records])
        table = to_device_small(np.array([x for r in records for x in r], dtype=np.uint32))
        args = [table[at[j]:at[j + 1]] for j in range(len(jobs))]
        sels = [np.arange(p.seg_ids.size) for p, *_rest in jobs]
        asks = [j for j, (p, *_rest) in enumerate(jobs) if p.seg_ids.size > 1 and not self._resident(store, p.seg_ids)]
        if asks:
            fat = np.cumsum([0] + [jobs[j][0].seg_ids.size for j in asks])
            flags = cp.zeros(int(fat[-1]), cp.uint8)
            for j, f0, f1 in zip(asks, fat[:-1], fat[1:]):
                p, users = jobs[j][0], jobs[j][1]
                kernel("segments_meeting")(grid(words), (BLOCK,),
                                                   (bits, words, args[j], len(users),
                                                    segment_ranges(store, self, p), f1 - f0, flags[f0:f1]))
            meets = self.to_host(flags)
            for j, f0, f1 in zip(asks, fat[:-1], fat[1:]):
                sels[j] = np.flatnonzero(meets[f0:f1])
        # Bit k of hit[v - base]: v has a neighbour in bits[ends[k]]. refine_drop zeroes the
        # words it has read: one array serves every job and window of the round.
        hit = cp.zeros(min(store.n_vertices, REFINE_WINDOW), cp.uint32)
        for (p, users, ends, _needs), a, sel in zip(jobs, args, sels):
            self._refine_partition(store, p, bits, keep, a, len(users), len(ends), sel, hit)

    def _refine_partition(self, store, p, bits, keep, args, nu, ne, sel, hit):
        """One job of :meth:`refine_round` over the segments ``sel`` of partition ``p`` (``hit``:
        the round's zeroed hit words)."""
        n = store.n_vertices
        words = int(bits.shape[1])
        first, last = p.first_src[sel], p.last_src[sel]
        for base in range(0, n, REFINE_WINDOW):
            top = min(n, base + REFINE_WINDOW) - 1                # the window's vertices: [base, top]
            here = sel[(first <= top) & (last >= base)]
            w0, w1 = base >> 5, (top >> 5) + 1
            if here.size == 1:
                # Every list of the window's candidates in one segment (a list continuing into
                # another would have it meet the candidates too): hits and drop in one launch.
                for _i, groups, ci in self.segments(store, p.seg_ids[here]):
                    lo, hi = max(base, int(p.first_src[here[0]])), min(top, int(p.last_src[here[0]]))
                    kernel("refine_fused")(grid((w1 - w0) * 32), (BLOCK,),
                                                   (groups, groups.shape[0], groups.shape[1],
                                                    ci, bits, words, args, nu, ne, lo,
                                                    hi, w0, w1 - w0, n,
                                                    keep))
                continue
            for i, groups, ci in self.segments(store, p.seg_ids[here]):
                lo, hi = max(base, int(p.first_src[here[i]])), min(top, int(p.last_src[here[i]]))
                kernel("refine_hits")(grid(((hi >> 5) - (lo >> 5) + 1) * 32), (BLOCK,),
                                              (groups, groups.shape[0], groups.shape[1], ci,
                                               bits, words, args, nu, ne, lo, hi,
                                               base, hit))
            kernel("refine_drop")(grid((w1 - w0) * 32), (BLOCK,),
                                          (keep, words, w0, w1 - w0, args, nu, ne, hit,
                                           base, n))


    def add_bits_weight(self, out, bits, v, d):
        """out[0] += Σ d[i] over the i whose vertex v[i] is in ``bits`` (reference:
        CpuBackend.add_bits_weight): one ``bits_weight`` kernel, where a test, a select and a
        sum took five launches."""
        n = int(v.size)
        if n == 0:
            return
        kernel("bits_weight")((min(grid(n)[0], 1024),), (BLOCK,),
                                      (bits, cp.ascontiguousarray(v.astype(cp.int32, copy=False)),
                                       cp.ascontiguousarray(d.astype(cp.int64, copy=False)), n, out))


    def add_union_degrees(self, out, bits, jobs):
        """out[0] += Σ over ``jobs`` (users, deg) of Σ deg[v] over the union of the users' bitsets
        (reference: CpuBackend.add_union_degrees): one ``union_degrees`` launch for all, its
        arguments (the bitsets' and degrees' addresses, the users) in one table."""
        if not jobs:
            return
        k = len(bits)
        n = int(jobs[0][1].size)            # every job's degrees: one a vertex
        words = min(int(bits[0].size), (n + 31) // 32)
        if words == 0:
            return
        held = []
        records = [[pointer(deg, cp.int32, held), len(users)] + [int(u) for u in users] for users, deg in jobs]
        args = record_table([pointer(b, cp.uint32, held) for b in bits], records)
        kernel("union_degrees")((min(grid(words)[0], 1024), len(jobs)), (BLOCK,),
                                        (args, k, words, n, out))


    def candidate_bits(self, n, parts, ands, stats=None):
        """C(u) of several pattern vertices (reference: CpuBackend.candidate_bits): a
        ``candidate_bits`` launch per vertex segment for up to 32 of them (more in more launches,
        :func:`_filter_launches`), a thread per vertex, its arguments (the labels, the tests'
        columns and query words, the degree masks) in one table. ``stats`` (int64, 2k zeros;
        one launch a segment, :meth:`filter_in_one_launch`): where the launches add each set's
        size and OR the sets it meets (:meth:`candidate_sets`)."""
        k = len(ands)
        words = (n + 31) // 32
        out = cp.zeros((k, words), dtype=cp.uint32)
        for start, count, tests in parts:
            if count == 0:
                continue
            held, records = [], []
            for (labels, label, pairs), masks in zip(tests, ands):
                record = [label if labels is not None else -1, pointer(labels, cp.int32, held), len(pairs)]
                for col, q in pairs:
                    record += [pointer(col, cp.uint32, held), int(q)]
                records.append(record + [len(masks)] + [pointer(m, cp.bool_, held) for m in masks])
            threads = count + start % 32
            blocks = min((threads + BLOCK - 1) // BLOCK, _CANDIDATE_BLOCKS_PER_SM * self.sms())
            launches = _filter_launches([len(r) for r in records])     # _filter_record_length each
            if stats is not None and len(launches) > 1:
                raise ValueError("candidate_bits: the sets' stats need one launch a segment")
            for u0, u1 in launches:
                args = record_table([], records[u0:u1])
                kernel("candidate_bits")((blocks,), (BLOCK,),
                                                 (args, args.size, u1 - u0, start,
                                                  count, words, out[u0:],
                                                  0 if stats is None else stats),
                                                 shared_mem=8 * int(args.size))
        return [out[i] for i in range(k)]

    @staticmethod
    def filter_in_one_launch(parts, ands):
        """Whether :meth:`candidate_bits` filters each segment in one launch (at most 32 pattern
        vertices, a table that fits), as its stats need."""
        return len(ands) <= 32 and all(
            len(_filter_launches([_filter_record_length(pairs, masks)
                                  for (_l, _b, pairs), masks in zip(tests, ands)])) == 1
            for _s, _c, tests in parts)

    def candidate_sets(self, n, parts, ands, cost_jobs=None):
        """:meth:`candidate_bits` with what the planner asks of the sets (reference:
        CpuBackend.candidate_sets): where each segment takes one launch, the filter's launches
        add up the sets' sizes and the overlaps of the pairs as they write them, and
        ``union_degrees`` the cost, all read in one read; a stack, a reduction and a launch
        reading every pair of bitsets found them (:meth:`counts_and_overlaps`), as they still do
        past 32 pattern vertices. The cost is summed by a ``union_degrees`` launch after the read
        (off its path: the read waited some 75 us for it on the 100M graph's walks, one H100)
        and given as a function that reads it when asked, which most counts never do."""
        k = len(ands)
        if not self.filter_in_one_launch(parts, ands):
            return sets_then_summary(self, n, parts, ands, cost_jobs)
        stats = cp.zeros(2 * k + 1, cp.int64)        # the counts, the overlaps' bits, the cost
        bits = self.candidate_bits(n, parts, ands, stats)
        jobs = cost_jobs() if cost_jobs is not None else None       # built while the filter runs
        host = read_small(stats[:2 * k])
        cost = None
        if jobs is not None:
            self.add_union_degrees(stats[2 * k:], bits, jobs)
            cost = functools.partial(read_last, stats[2 * k:])
        hits = (host[k:2 * k, None] >> np.arange(k)) & 1        # the kernel's pairs, u != w
        hits[np.arange(k), np.arange(k)] = host[:k] > 0          # a set meets itself where not empty
        meets = GpuOverlaps(bits)
        meets._record(hits)
        return bits, [int(x) for x in host[:k]], meets, cost
