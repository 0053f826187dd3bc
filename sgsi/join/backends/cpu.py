"""The CPU backend: :class:`CpuBackend`, the backend seam (:class:`~sgsi.join.backends.base.Backend`)
on NumPy, vectorized (no Python loop over rows, edges or vertices). Segments are read in place
from the memory-mapped store; arrays derived from the store alone are kept between queries
within a share of the memory budget. Each method is the reference of the GPU backend's kernels
for the same step.
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np

from ...budget import resolve_budget
from ...partition import pcsr, signatures
from ...storage.lists import in_lists
from ..memory import LruCache, trim_heap, tune_allocator
from ..stream import dense_degrees_of, segments_of
from .base import Overlaps, cancel_point, sets_then_summary, union_bits
from .membership import intersect_ranked, member


#: The share of the memory budget (one part in this many) the CPU backend keeps derived arrays in.
DERIVED_CACHE_SHARE = 8
#: Rows of one block of :meth:`CpuBackend._own_search`'s binary searches (a column of 2^20 rows
#: searched sets of millions of entries in 0.5-1.5 s on human's sparse queries, no cancel seen).
OWN_SEARCH_ROWS = 1 << 18
#: Most bytes of own_hits' table of (tuple, distinct value) membership, and of its rank array.
OWN_TABLE_BYTES = 1 << 24


class CpuBackend:
    """NumPy backend: segments are used in place from the memory-mapped store."""

    name = "cpu"
    xp = np
    #: First-link entries under which a piece is joined row by row (``Engine._row_sets``).
    #: Low on the CPU: NumPy reads a list once per row that holds its vertex, and rows
    #: share vertices, where the distinct tuples read it once.
    light_entries = 1 << 12
    #: Whether the planner finds refine_cost with the candidate counts (plan.make_plan): where a
    #: read costs a wait on the device; here it is found only once a join outgrows its sets.
    early_refine_cost = False
    #: Most buffer entries and rows of one piece of a join step, whatever the budget: NumPy takes
    #: some 0.1-0.3 s for a step over this many, the time between two cancellation checks.
    slice_entries = 1 << 21
    slice_rows = 1 << 20
    #: Join work (entries and rows) a query's refined plan does before its order is sampled
    #: (:mod:`~sgsi.join.ordering`): some 0.12 s on 2 cores of an EPYC. 154 yeast queries of
    #: 0.3-10 s: 44 within 1 s at 2^21, 37 at 2^23, 1.12x (geometric mean), 8 slower (to 0.53x).
    reorder_work = 1 << 21
    #: Join work a 32-vertex order search costs about (no search where under twice it is left).
    search_work = 1 << 21
    #: Fewest entries of a piece's root sets its one-leaf subtree is counted from weights at
    #: (:data:`~sgsi.join.counting.WEIGHTED_SUBTREES`): the weights' fixed costs.
    weighted_min_entries = 1 << 18
    #: A count's block whose rows times its links' smallest longest list is at most this is
    #: counted by :meth:`block_counts`, past it by its distinct tuples and :meth:`rows_less_own`
    #: (``Counting._fused_sizes``): never here (row by row 1-35x slower than the tuples' gathered
    #: lists on yeast, by tuples 1.1-3x); the methods are the GPU kernels' references.
    block_count_probes = 0
    #: A count merges a level's equal rows while that cuts them by this much (``merge.Merges``):
    #: 34 yeast queries of 1-10 s, 1.5 against 1.25: 2.68x against 2.72x of unmerged, dense_32_53
    #: 0.96x against 0.52x (a 1.33x merge of 1M rows before cheap steps).
    merge_gain = 1.5
    #: A level's probe of its first rows judges its whole slice by their distinct rows grown at
    #: the rate they grew from half the probe (``merge.Merges``): a probe's own count understates
    #: what the slice merges, most in a sharded count's tasks (dense_24_61's 8 tasks one by one
    #: 10.1 -> 8.6 s; 57 yeast counts in one process 0.99x, sparse_16_134 0.87x).
    merge_probe_growth = True

    def __init__(self, memory_budget=None):
        self.stats = {"segments": 0, "segment_bytes": 0}
        tune_allocator()
        # Arrays derived from the store alone (degree masks, dense degrees, label indexes), kept
        # between queries as the GPU keeps its own, least recently used first out, within a share
        # of the memory budget.
        self.budget = resolve_budget(memory_budget)
        self._derived = LruCache(self.budget // DERIVED_CACHE_SHARE)

    def begin(self, store, memory_budget=None) -> int:
        """Start a query of ``store`` with ``memory_budget`` (None: a quarter of RAM); returns it in bytes.
        The derived arrays kept follow it."""
        self.budget = resolve_budget(memory_budget)
        self._derived.resize(self.budget // DERIVED_CACHE_SHARE)
        return self.budget

    def end(self, failed=False, keep=False):
        """The query ended (``failed``: by an error or a cancel, its arrays collected first); the
        heap's free memory goes back to the system (:func:`trim_heap`), at :meth:`release` for
        ``keep`` after one that ended well."""
        if failed:
            gc.collect()
        if failed or not keep:
            trim_heap()

    def release(self):
        trim_heap()

    def recover(self):
        """After a :class:`~sgsi.errors.MemoryShortage`: the failed run's arrays collected and
        their memory given back, before the query runs again."""
        gc.collect()
        trim_heap()

    # -- moving data ---------------------------------------------------------------
    def to_device(self, a):
        return np.asarray(a)

    def to_host(self, a):
        return np.asarray(a)

    def store_arrays(self, keys, read):
        """Store arrays (labels, signature words, degree index) where the backend computes:
        ``read()`` gives them, one per key (the GPU keeps them between queries under the keys
        and reads the store only when one is missing)."""
        return list(read())

    def derived(self, key, make):
        """An array computed from the store alone (a degree mask, a partition's dense degrees, a
        :class:`LabelIndex`), kept between queries under ``key`` while the derived arrays fit
        1/``DERIVED_CACHE_SHARE`` of the memory budget: ``make()`` runs only when it is missing.
        A degree mask took some 6 ms to make on the 100M R-MAT graph, and a query a dozen or more
        (a fifth of a light query's time on the CPU)."""
        hit = self._derived.get(key)
        if hit is not None:
            return hit
        array = make()
        if self._derived.put(key, array, int(array.nbytes)) and isinstance(array, np.ndarray):
            array.flags.writeable = False       # shared by the queries to come: read only
        return array

    def _may_keep(self, nbytes):
        """Whether a derived array of ``nbytes`` that every query remakes where it is missing (a
        label index, a partition's dense degrees) is made and kept: at most a quarter of the
        derived arrays' share, so that it does not push the others out (to be made again, query
        after query). Where not, the caller takes a path without it."""
        return nbytes <= self._derived.limit // 4

    def vertex_labels(self, store, seg):
        """The labels of vertex segment ``seg`` as :meth:`candidate_bits` takes them: here a
        :class:`LabelIndex` (each label's vertices, found by one sort and kept between queries),
        or the label array itself where the index would take more than a quarter of the derived
        arrays' share of the budget (where it would push the degree masks out, and be sorted
        again, query after query)."""
        labels = store.vertex_labels(seg)          # memory-mapped: read only where it is used
        if not self._may_keep(LabelIndex.bytes_for(labels.size)):
            return labels
        return self.derived((store.token, "label-index", seg), lambda: LabelIndex(labels))

    def dense_degrees(self, store, p):
        """|N(v, l)| of every vertex in partition ``p`` (int32, zero off the partition), made from
        its degree index batches and kept with the derived arrays between queries, as the GPU
        keeps it on the device; None where it would take more than a quarter of their share (the
        degree index batches are searched then)."""
        if not self._may_keep(4 * store.n_vertices):
            return None
        return dense_degrees_of(store, self, p)

    def measuring_memory(self):
        """Context of one query whose device memory the backend measures (none on the CPU)."""
        return contextlib.nullcontext()

    def run(self, fn, *args):
        """``fn(*args)`` where the backend computes (the GPU's memory pool; nothing on the CPU)."""
        return fn(*args)

    def segments(self, store, seg_ids):
        """Yield (position, groups, ci) for each segment of a partition, in order.

        ``seg_ids`` are global segment numbers; ``position`` is the index of
        the segment within the list given.
        """
        for i, s in enumerate(seg_ids):
            groups, ci = store.segment(int(s))
            self.stats["segments"] += 1
            self.stats["segment_bytes"] += groups.nbytes + ci.nbytes
            yield i, groups, ci

    def synchronize(self):
        pass

    # -- array operations -------------------------------------------------------------
    def ragged_indices(self, starts, counts):
        """Concatenation of ``arange(s, s + c)`` for each (s, c) (:func:`sgsi.partition.pcsr.ragged_indices`)."""
        return pcsr.ragged_indices(starts, counts)

    def run_starts(self, sorted_values):
        """Whether each value of a 1-D array starts a run of equal values (the first one does)."""
        return run_starts(sorted_values)

    def runs(self, sorted_values):
        """Distinct values of a sorted array, and where each one's run starts and ends (exclusive)."""
        n = sorted_values.size
        if n == 0:
            e = np.zeros(0, np.int64)
            return sorted_values, e, e
        start = np.flatnonzero(run_starts(sorted_values))
        end = np.empty_like(start)
        end[:-1] = start[1:]
        end[-1] = n
        return sorted_values[start], start, end

    def prefix_sum(self, a):
        """``cumsum`` of a 1-D array."""
        return np.cumsum(a)

    def exclusive_sum(self, a):
        """``cumsum(a) - a``: each value's sum before it."""
        return np.cumsum(a) - a

    def exclusive_total(self, a):
        """(:meth:`exclusive_sum` as int64, the sum of ``a`` as a Python int) of a 1-D int array."""
        cs = np.cumsum(a, dtype=np.int64)
        return cs - a, int(cs[-1]) if cs.size else 0

    def nonzero_index(self, a):
        """``flatnonzero``."""
        return np.flatnonzero(a)

    def scatter_equal(self, out, idx, values):
        """``out[idx] = values`` where equal indices carry equal values (rows of one vertex and
        their degree)."""
        out[idx] = values

    def take_values(self, a, idx, dtype=None):
        """``take(a, idx)`` of a 1-D array (``dtype``: then ``.astype(dtype)``)."""
        got = np.take(a, idx)
        return got if dtype is None else got.astype(dtype, copy=False)

    def stack(self, arrays):
        """``stack`` of 1-D arrays of one dtype and size."""
        return np.stack(arrays)

    def take_columns(self, arrays, idx):
        """``[take(a, idx) for a in arrays]`` (1-D arrays)."""
        return [np.take(a, idx) for a in arrays]

    def host_ints(self, *scalars):
        """Python ints of scalars computed where the backend computes, read in one transfer."""
        return [int(s) for s in scalars]

    def row_numbers(self, n):
        """0, 1, ..., n - 1 as int64."""
        return np.arange(n, dtype=np.int64)

    def host_reductions(self, *pairs):
        """Python ints of ("sum" | "max" | "min", int array) ``pairs``, read in one transfer; the
        max and min of an empty array are 0."""
        return [int(a.sum()) if op == "sum" else (int(getattr(a, op)()) if a.size else 0) for op, a in pairs]

    def pair_key(self, c0, c1):
        """(the int64 keys ``c0 << 32 | c1`` of two int columns, each cast to int64 first; whether
        they ascend)."""
        key = (c0.astype(np.int64) << 32) | c1.astype(np.int64)
        return key, key.size < 2 or bool((key[1:] >= key[:-1]).all())

    def distinct_index(self, values, span=None):
        """(sorted distinct values of a non-empty int array, index of each element among them).

        Vertex ids are dense: over a range not much wider than the input, a mark
        array and a prefix sum give both in linear passes; otherwise sort and search.
        ``span``: (lo, hi) bounding ``values`` where the caller knows them (their min and max, or wider).
        """
        lo, hi = span if span is not None else self.host_reductions(("min", values), ("max", values))
        r = hi - lo + 1
        if r <= 16 * int(values.size):
            v = values - lo
            mark = np.zeros(r, dtype=bool)
            mark[v] = True
            rank = np.cumsum(mark, dtype=np.int32 if r < 2 ** 31 else np.int64)
            rank -= 1
            return (np.flatnonzero(mark) + lo).astype(values.dtype), np.take(rank, v).astype(np.int64)
        u, _start, _end = self.runs(np.sort(values))
        return u, np.searchsorted(u, values)

    # -- bitsets -------------------------------------------------------------------
    def pack_bits(self, mask, ands=()):
        """Bool array (length a multiple of 32, or padded) -> uint32 words; with ``ands``, of
        ``mask`` and each bool array of ``ands`` (equal lengths)."""
        for a in ands:
            mask = mask & a
        n = mask.size
        pad = (-n) % 32
        if pad:
            mask = np.concatenate([mask, np.zeros(pad, bool)])
        return np.packbits(mask, bitorder="little").view(np.uint32)

    def bincount(self, x, n):
        return np.bincount(x, minlength=n)[:n] if x.size else np.zeros(n, np.int64)

    def add_at(self, out, idx, values):
        """out[idx] += values, repeated indices adding up (in place)."""
        np.add.at(out, idx, values)

    def bincount_weights(self, x, w, n):
        return np.bincount(x, weights=w, minlength=n)[:n] if x.size else np.zeros(n)

    def argsort(self, a):
        return np.argsort(a, kind="stable")

    def lexsort(self, keys):
        return np.lexsort(keys)

    def repeat_index(self, counts):
        """For each output slot of ``repeat(x, counts)``, the index into x."""
        return np.repeat(np.arange(counts.size), counts)

    def bits_to_ids(self, bits, n, count=None):
        """Sorted vertex ids (int32) whose bit is set (``count``: how many are below n, where
        the caller knows it; the GPU then reads no total)."""
        words = np.flatnonzero(bits)
        if 4 * words.size > bits.size:          # most words hold a vertex: unpack them all
            ids = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
        else:                                   # a sparse set: unpack its words only
            at = np.flatnonzero(np.unpackbits(np.take(bits, words).view(np.uint8), bitorder="little"))
            ids = np.take(words, at >> 5) * 32 + (at & 31)
        return ids[ids < n].astype(np.int32)

    def pcsr_lookup(self, groups, v):
        return pcsr.lookup(groups, v, np)

    def list_hits(self, ci, st, en, far, hit):
        """hit[i] |= bit k for each bitset ``far[k]`` (at most 32) holding an entry of vertex
        i's list ``ci[st[i]:en[i]]`` (in place; part of :meth:`refine_drop`)."""
        cnt = en - st
        nb = ci[pcsr.ragged_indices(st, cnt)]
        if nb.size == 0:
            return
        word, bit = nb >> 5, (nb & 31).astype(np.uint32)
        m = np.zeros(nb.size, np.uint32)
        for k in range(far.shape[0]):
            m |= ((far[k, word] >> bit) & np.uint32(1)) << np.uint32(k)
        rows = np.flatnonzero(cnt)
        firsts = np.concatenate([[0], np.cumsum(cnt[rows])[:-1]])
        hit[rows] |= np.bitwise_or.reduceat(m, firsts)

    def member(self, store, link, vcol, erow, evals, cap, ecount=None, cbits=None, via=None):
        """For each entry i: is ``evals[i]`` in N(vcol[erow[i]], l)? (:func:`.membership.member`: the lists of the distinct linking vertices streamed into bitsets of at most
        ``cap`` bytes). ``via``: the backend whose ``segments()`` streams them (a wrapper's)."""
        return member(via or self, store, link, vcol, erow, evals, cap, ecount=ecount, cbits=cbits)

    def own_hits(self, row_tuple, etuple, evals, sstart, scount, cols):
        """For each column of ``cols`` (a vertex per row that its row's set may hold): the rows
        ``sel`` where it may be, whether it is (``hit``), and its vertex there. The sets are
        packed: tuple t's set is ``evals[sstart[t] : sstart[t] + scount[t]]``, sorted, and
        ``etuple`` the tuple of each entry; ``row_tuple`` the tuple of each row.

        By :meth:`_own_table` where it fits (``sel`` the rows whose vertex is in their set), else
        by :meth:`_own_search`. The GPU's reference (there a thread a row searches its tuple's set)."""
        if not cols or evals.size == 0:
            return
        hits = self._own_table(row_tuple, etuple, evals, scount, len(cols))
        if hits is None:
            yield from self._own_search(row_tuple, etuple, evals, sstart, scount, cols)
            return
        for col in cols:
            cancel_point()
            h = hits(col)
            sel = np.flatnonzero(h)
            yield sel, h[sel], col[sel]

    def _own_table(self, row_tuple, etuple, evals, scount, n_cols):
        """``hits(col)``: whether each row's vertex ``col[i]`` is in its tuple's set (bool, all the
        rows), read from a table of (tuple, rank among the sets' distinct values), each vertex's
        rank from an array over [min - 1, max + 1] of the values (a gather that clips); None where
        the table or the ranks pass :data:`OWN_TABLE_BYTES`, or the ranks outnumber 4 lookups each.
        A count's last step tests millions of rows against sets of a few entries: yeast's
        sparse_24_94 made 137M binary searches, half its 10 s."""
        u, rank = self.distinct_index(evals)
        nd = int(u.size) + 1                    # rank nd - 1: in no set
        off = max(int(u[0]) - 1, 0)             # ranks over [off, max + 1]: ids past either end clip to one
        size = int(u[-1]) - off + 2
        lookups = n_cols * row_tuple.size
        if scount.size * nd > OWN_TABLE_BYTES or size > min(OWN_TABLE_BYTES // 4, max(4096, 4 * lookups)):
            return None
        table = np.zeros(scount.size * nd, bool)
        table[etuple.astype(np.int64) * nd + rank] = True
        ranks = np.full(size, nd - 1, np.int32)
        ranks[u - off] = np.arange(nd - 1, dtype=np.int32)
        base = row_tuple.astype(np.int32) * np.int32(nd)       # the table fits int32: 4-byte passes

        def hits(col):
            at = np.take(ranks, col - off if off else col, mode="clip")
            at += base
            return np.take(table, at)
        return hits

    def _own_search(self, row_tuple, etuple, evals, sstart, scount, cols):
        """:meth:`own_hits` by binary search: a row's vertex can be in S(t) only within [min, max]
        of S(t), tested first; the rows left search keys tuple << 32 | vertex, sorted."""
        skeys = (etuple.astype(np.int64) << 32) | evals.astype(np.int64)
        nonempty = scount > 0
        lo = np.full(scount.size, -1, np.int64)
        hi = np.full(scount.size, -2, np.int64)
        lo[nonempty] = evals[sstart[nonempty]]
        hi[nonempty] = evals[sstart[nonempty] + scount[nonempty] - 1]
        lr, hr = lo[row_tuple], hi[row_tuple]
        for col in cols:
            for a in range(0, int(col.size), OWN_SEARCH_ROWS):     # a cancel is seen between blocks
                cancel_point()
                b = a + OWN_SEARCH_ROWS
                sel = np.flatnonzero((col[a:b] >= lr[a:b]) & (col[a:b] <= hr[a:b]))
                if sel.size == 0:
                    continue
                sel += a
                x = col[sel]
                q = (row_tuple[sel].astype(np.int64) << 32) | x.astype(np.int64)
                pos = np.minimum(np.searchsorted(skeys, q), skeys.size - 1)
                yield sel, skeys[pos] == q, x

    def sizes_less_own(self, row_tuple, etuple, evals, sstart, scount, cols):
        """|S(t_i)| of each row i less the row's vertices of ``cols`` found in it (int64; the
        vertices of a row differ). Tuple t's set is ``evals[sstart[t] : sstart[t] + scount[t]]``,
        sorted; ``etuple`` the tuple of each entry where the sets are packed, None where gaps
        lie between them. The GPU kernel ``sizes_less_own``'s reference: the sets packed, then
        :meth:`own_hits`' table or search."""
        counts = scount[row_tuple].astype(np.int64)
        if not cols or evals.size == 0:
            return counts
        if etuple is None:
            etuple, evals = self.repeat_index(scount), evals[pcsr.ragged_indices(sstart, scount)]
            sstart = self.exclusive_sum(scount)
            if evals.size == 0:
                return counts
        hits = self._own_table(row_tuple, etuple, evals, scount, len(cols))
        if hits is not None:
            for col in cols:
                cancel_point()
                counts -= hits(col)
            return counts
        for sel, hit, _x in self._own_search(row_tuple, etuple, evals, sstart, scount, cols):
            counts[sel] -= hit
        return counts

    def refine_round(self, store, bits, keep, jobs):
        """:meth:`refine_drop` of each job (partition, users, ends, needs) of a refinement round
        (the GPU's one call a round)."""
        for p, users, ends, needs in jobs:
            self.refine_drop(store, p, bits, keep, users, ends, needs)

    def refine_drop(self, store, p, bits, keep, users, ends, needs):
        """One partition's part of a refinement round (``plan._refine``), in place: clears from
        ``keep[users[i]]`` each vertex whose lists in partition ``p`` lack, for some bit k of
        ``needs[i]``, an entry in ``bits[ends[k]]`` (at most 32 ends). ``bits`` holds the round's
        candidate bitsets, one row per pattern vertex; ``keep[a]`` lies within ``bits[a]``.
        The GPU kernels ``segments_meeting``, ``refine_hits`` and ``refine_drop``'s reference:
        the users' candidates as ids, their lists looked up segment by segment."""
        ids = self.bits_to_ids(union_bits(bits, users), store.n_vertices)
        if ids.size == 0:
            return
        far = np.ascontiguousarray(bits[ends])
        hit = np.zeros(ids.size, dtype=np.uint32)         # bit k: a neighbour in bits[ends[k]]
        for lo, hi, groups, ci in segments_of(store, self, p, ids):
            st, en = self.pcsr_lookup(groups, ids[lo:hi])
            self.list_hits(ci, st, en, far, hit[lo:hi])
        for a, need in zip(users, needs):
            self.drop_unmet(keep[a], ids, hit, need)

    def candidate_bits(self, n, parts, ands):
        """C(u) of several pattern vertices as bitsets over the ``n`` data vertices.

        ``parts``: per vertex segment (first vertex, vertices, tests), ``tests[i]`` holding
        pattern vertex i's (labels or None, label, [(signature column, query word), ...]):
        a vertex of the segment stays when its label is ``label`` (where labels are given)
        and each column's word covers the query word (``signatures.signature_pass``).
        ``ands[i]``: bool arrays over all vertices (degree tests) it must pass as well.
        ``labels``: the segment's label array, or its :class:`LabelIndex`.

        Label first, as the GPU's kernel: where a label is given, only the label's vertices
        have their signature words and degree tests read (the kernel's threads of other labels
        stop at the label).
        """
        out = []
        for i, masks in enumerate(ands):
            if parts and parts[0][2][i][0] is None:         # no label: every vertex's words
                out.append(self._unlabeled_bits(n, parts, i, masks))
                continue
            found = []
            for start, count, tests in parts:
                labels, label, pairs = tests[i]
                ids = (labels.members(label) if isinstance(labels, LabelIndex)
                       else np.flatnonzero(labels == label))
                # Test by test, each on the vertices the ones before kept; a query word of 0
                # tests nothing (signature_pass gives None for it).
                for col, q in pairs:
                    if int(q):
                        ids = ids[signatures.signature_pass([np.take(col, ids)], [q], np)]
                ids = ids + start
                for m in masks:
                    ids = ids[np.take(m, ids)]
                found.append(ids)
            out.append(bits_of_ids(np.concatenate(found) if found else np.zeros(0, np.int64), n))
        return out

    def _unlabeled_bits(self, n, parts, i, masks):
        """:meth:`candidate_bits` of pattern vertex i, which has no label: every vertex's words."""
        mask = np.ones(n, dtype=bool)
        for start, count, tests in parts:
            _labels, _label, pairs = tests[i]
            ok = signatures.signature_pass([c for c, _q in pairs], [q for _c, q in pairs], np)
            if ok is not None:
                mask[start:start + count] &= ok
        return self.pack_bits(mask, masks)

    def extend(self, row_tuple, per_row, evals, sstart, scount, conflict_cols, sizes=None):
        """Columnar extension of one slice (Algorithm 6): row i takes the entries of its
        tuple's set S(t_i) (``per_row[i] = scount[t_i]`` of them from ``sstart[t_i]``) other than its own
        vertices. Returns (row of each output, new column), rows in order. ``sizes``: (inclusive
        prefix sum of per_row, its total, its largest entry) when the caller has them (the GPU's
        sizing; unused here).

        On the CPU a gather does it: each row's entries are one slice of ``evals``.
        """
        vals = np.take(evals, pcsr.ragged_indices(np.take(sstart, row_tuple), per_row))
        erow = self.repeat_index(per_row)
        if conflict_cols:
            ok = np.ones(vals.size, dtype=bool)
            for col in conflict_cols:
                cancel_point()
                ok &= vals != np.take(col, erow)
            keep = np.flatnonzero(ok)
            erow, vals = np.take(erow, keep), np.take(vals, keep)
        return erow, vals

    def expand_rows(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba):
        """buf_i += (flist of row i's vertex) minus the row's conflict vertices, in GBA.

        The NumPy reference of the GPU's expansion kernels (tests/test_gpu.py); the CPU
        engine extends through :meth:`extend`."""
        rc = fcnt[run]
        vals = flist[pcsr.ragged_indices(fstart[run], rc)]
        rid = rows[self.repeat_index(rc)]
        ok = np.ones(vals.size, dtype=bool)
        for col in conflict_cols:
            cancel_point()
            ok &= vals != col[rid]
        self._append(gba, F, fill, rid[ok], vals[ok])

    def gather_segment(self, groups, ci, verts, cbits, start, fill, gba):
        """buf_v += N_x(v, l) ∩ C(u) for the sorted distinct ``verts`` found in one segment
        (``groups``, ``ci``): vertex i's buffer starts at ``gba[start[i]]``, ``fill[i]``
        entries are written already (in place, each list in order). The first-edge gather
        of Prealloc-Combine; the NumPy reference of the GPU's ``gather_lists`` kernels."""
        st, en = self.pcsr_lookup(groups, verts)
        cnt = en - st
        nb = ci[pcsr.ragged_indices(st, cnt)]
        keep = self.test_bits(cbits, nb)
        self._append(gba, start, fill, self.repeat_index(cnt)[keep], nb[keep])

    def drop_unmet(self, bits, ids, hit, need):
        """Clear, in place, the bit of ``ids[i]`` in bitset ``bits`` wherever ``hit[i]`` (uint32)
        lacks one of the bits of ``need``."""
        bad = ids[(hit & np.uint32(need)) != np.uint32(need)]
        mask = np.zeros(bits.size * 32, dtype=bool)
        mask[bad] = True
        bits &= ~self.pack_bits(mask)

    def add_bits_weight(self, out, bits, v, d):
        """out[0] += Σ d[i] over the i whose vertex v[i] is in bitset ``bits`` (int64)."""
        out[0] += int(np.where(self.test_bits(bits, v), d, 0).sum(dtype=np.int64))

    def add_union_degrees(self, out, bits, jobs):
        """out[0] += Σ over ``jobs`` (users, deg) of Σ deg[v] over the vertices v of the union of
        the bitsets ``bits[u]`` of the users (``deg``: one entry per vertex)."""
        for users, deg in jobs:
            out[0] += int(deg[self.bits_to_ids(union_bits(bits, users), int(deg.size))].sum(dtype=np.int64))

    def piece_summary(self, deg, col):
        """(Σ deg, max deg, min col, max col, places where col descends) as Python ints, for
        non-empty arrays."""
        return (int(deg.sum()), int(deg.max()), int(col.min()), int(col.max()),
                int(np.count_nonzero(col[1:] < col[:-1])))

    def distinct_sum(self, col, deg, span):
        """Σ deg over the distinct values of ``col`` (rows with equal values have equal deg);
        ``span``: (min, max) of ``col``."""
        if col.size == 0:
            return 0
        lo, hi = span
        if hi - lo + 1 <= 16 * int(col.size):      # dense ids: each vertex's deg put at its place, summed
            by_vertex = np.zeros(hi - lo + 1, dtype=np.int64)
            by_vertex[col - lo] = deg
            return int(by_vertex.sum())
        uniq, k = self.distinct_index(col, span)
        by_vertex = np.zeros(uniq.size, dtype=np.int64)
        by_vertex[k] = deg
        return int(by_vertex.sum())

    def piece_degrees(self, dense, col):
        """(|N(v, l)| of each row's vertex ``col`` from ``dense``, every vertex's degree, as
        int64; :meth:`piece_summary` of them; their exclusive prefix sum where the backend found
        it on the way, else None; int64 zeros a row where the backend wrote them with it (a light
        step's fill counts), else None), for a non-empty ``col``."""
        deg = dense[col].astype(np.int64)
        return deg, self.piece_summary(deg, col), None, None

    def row_lists(self, groups, ci, v, cbits, conflict_cols, F, fill, gba):
        """buf_i += N_x(v_i, l) ∩ C(u) minus row i's own vertices (``conflict_cols``), for each
        row i (repeated vertices too) whose vertex is in one segment (``groups``, ``ci``): row
        i's buffer starts at ``gba[F[i]]``, ``fill[i]`` entries are written already (in place,
        each list in order); ``gba`` None: only ``fill`` is counted up (``F`` may be None). The first link of a
        light piece (``Engine._row_sets``); the NumPy reference of the GPU's ``row_lists`` kernel."""
        st, en = self.pcsr_lookup(groups, v)
        cnt = en - st
        nb = ci[pcsr.ragged_indices(st, cnt)]
        rid = self.repeat_index(cnt)
        keep = self.test_bits(cbits, nb)
        for col in conflict_cols:
            cancel_point()
            keep &= nb != np.take(col, rid)
        if gba is None:
            fill += np.bincount(rid[keep], minlength=int(fill.size))
            return
        self._append(gba, F, fill, rid[keep], nb[keep])

    def block_counts(self, lists, cbits, conflict_cols, spans=False):
        """A block's sizes per row with no set written: row i's |C(u) ∩ N(v_i1, l_1) ∩ ... ∩
        N(v_ik, l_k)| less its own vertices (``conflict_cols``), each link given as (groups, ci,
        the rows' vertices) of its partition's one segment. Each row's shortest list (the first
        among equals) is read and its entries kept are searched in the others. With ``spans``,
        (sizes, each link's list of each row: (start, end) in its ci, a (k, n, 2) int64 array).
        The NumPy reference of the GPU's ``block_counts`` kernel."""
        n = int(lists[0][2].size)
        found = [self.pcsr_lookup(groups, v) for groups, _ci, v in lists]
        lens = np.stack([en - st for st, en in found])
        best = np.argmin(lens, axis=0)
        rows = np.arange(n)
        cnt = lens[best, rows]
        rid = self.repeat_index(cnt)
        pos = pcsr.ragged_indices(np.stack([st for st, _en in found])[best, rows], cnt)
        which = best[rid]
        x = np.empty(pos.size, np.int32)
        for j, (_groups, ci, _v) in enumerate(lists):
            cancel_point()
            sel = np.flatnonzero(which == j)
            x[sel] = ci[pos[sel]]
        keep = self.test_bits(cbits, x)
        for col in conflict_cols:
            cancel_point()
            keep &= x != np.take(col, rid)
        for j, ((_groups, ci, _v), (st, en)) in enumerate(zip(lists, found)):
            cancel_point()
            at = np.flatnonzero(keep & (which != j))
            keep[at] = in_lists(ci, st[rid[at]], en[rid[at]], x[at])
        counts = np.bincount(rid[keep], minlength=n).astype(np.int64)
        if not spans:
            return counts
        return counts, np.stack([np.stack([st, en], axis=1) for st, en in found]).astype(np.int64)

    def rows_less_own(self, cis, cbits, conflict_cols, tcount, spans, row_tuple):
        """Per row, ``tcount[row_tuple]`` (its tuple's set size) less each of its own vertices
        (``conflict_cols``; one of equal ones) in C(u) and in all of its tuple's lists: link j's
        is ``cis[j][spans[j, t, 0] : spans[j, t, 1]]`` for tuple t (as :meth:`block_counts`
        writes them). The NumPy reference of the GPU's ``rows_less_own`` kernel."""
        out = np.take(tcount, row_tuple).astype(np.int64)
        for a, x in enumerate(conflict_cols):
            cancel_point()
            hit = self.test_bits(cbits, x)
            for other in conflict_cols[:a]:
                hit &= other != x
            for ci, where in zip(cis, spans):
                at = np.flatnonzero(hit)
                se = where[np.take(row_tuple, at)]
                hit[at] = in_lists(ci, se[:, 0], se[:, 1], np.take(x, at))
            out -= hit
        return out

    def pack_rows(self, gba, F, fill, take=None):
        """(row of each entry, entries) of the rows' buffers ``gba[F[i] : F[i] + fill[i]]``
        packed end to end, rows in order; with ``take`` (columns of the rows), those columns
        taken at each entry's row in place of the rows."""
        erow, vals = self.repeat_index(fill), np.take(gba, pcsr.ragged_indices(F, fill))
        return (erow, vals) if take is None else ([np.take(c, erow) for c in take], vals)

    def _append(self, gba, start, fill, owner, vals):
        """Prealloc-Combine: ``vals`` appended, in order, to their owners' buffers (owner i's
        from ``gba[start[i] + fill[i]]``; owners come in runs), ``fill`` counting them."""
        if owner.size == 0:
            return
        _v, first, end = self.runs(owner)
        rank = np.arange(owner.size) - first[self.repeat_index(end - first)]      # within its run
        gba[start[owner] + fill[owner] + rank] = vals
        fill += np.bincount(owner, minlength=fill.size)

    def intersect_lists(self, lists, bitcap):
        """S(t) of each tuple from a step's gathered lists: the entries of its first link's
        list found in every other gathered list. Returns (entry tuples, entry values, entries
        probed, links left untested), or None when no later link's lists can be used.

        On the CPU by bitsets over ranks (:func:`.membership.intersect_ranked`),
        the reference of the GPU's ``intersect_lists`` kernel."""
        return intersect_ranked(self, lists, bitcap)

    def overlaps(self, bits):
        """:class:`Overlaps` of the candidate bitsets ``bits`` (a list that may grow)."""
        return Overlaps(np, bits)

    def popcount(self, bits):
        if _bitwise_count is not None:
            return int(_bitwise_count(bits).sum(dtype=np.int64))
        return int(_BYTE_POPCOUNT[bits.view(np.uint8)].sum(dtype=np.int64))

    def popcounts(self, bitsets):
        """The set bits of each bitset, as Python integers."""
        return [self.popcount(b) for b in bitsets]

    def candidate_sets(self, n, parts, ands, cost_jobs=None):
        """:meth:`candidate_bits`, with :meth:`counts_and_overlaps` of the sets: (bits, counts,
        overlaps, cost or None). ``cost_jobs``: None, or a function giving the cost's jobs (or
        None: no cost), called once the filter is issued (the GPU's host work on them then
        overlaps the filter's device work). The GPU's filter finds the counts and overlaps as
        it writes the sets, and gives the cost as a function reading it (the plan's
        ``refine_cost``)."""
        return sets_then_summary(self, n, parts, ands, cost_jobs)

    def counts_and_overlaps(self, bits, cost_jobs=None):
        """(:meth:`popcounts` of the candidate bitsets ``bits``, their :meth:`overlaps`): what the
        planner asks of them, in one call (the GPU's reads both at once); with ``cost_jobs``
        also Σ of :meth:`add_union_degrees` over them (plan.refine_cost)."""
        if cost_jobs is None:
            return self.popcounts(bits), self.overlaps(bits)
        total = np.zeros(1, dtype=np.int64)
        self.add_union_degrees(total, bits, cost_jobs)
        return self.popcounts(bits), self.overlaps(bits), int(total[0])

    def test_bits(self, bits, v):
        """Membership of vertex ids ``v`` in a bitset."""
        v = v.astype(np.int64, copy=False)
        return ((bits[v >> 5] >> (v & 31).astype(np.uint32)) & np.uint32(1)).astype(bool)


#: NumPy 2's popcount of each element (None before 2.0: a table of the bytes' counts then).
_bitwise_count = getattr(np, "bitwise_count", None)
_BYTE_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)


class LabelIndex:
    """The vertices of one vertex segment grouped by label, for a label-first filter on the CPU
    (:meth:`CpuBackend.candidate_bits`): ``order`` holds the segment's vertex offsets sorted by
    label (each label's in increasing order), label k's (-1: none) from ``starts[k + 1]`` to
    ``starts[k + 2]``. Read only: it is kept between queries."""

    def __init__(self, labels):
        shifted = np.asarray(labels).astype(np.int64) + 1          # no label (-1) first
        top = int(shifted.max()) + 1 if shifted.size else 0
        # A stable sort of small keys is a radix sort in NumPy (0.07 s for 8.4M uint8 labels,
        # 0.5 s as int32).
        key = shifted.astype(np.min_scalar_type(max(top - 1, 0)))
        self.order = np.argsort(key, kind="stable").astype(np.int32)
        self.starts = np.zeros(top + 1, dtype=np.int64)
        np.cumsum(np.bincount(shifted, minlength=top), out=self.starts[1:])
        self.order.flags.writeable = self.starts.flags.writeable = False
        self.nbytes = self.order.nbytes + self.starts.nbytes

    @staticmethod
    def bytes_for(vertices):
        """About the bytes of the index of a segment of ``vertices`` vertices."""
        return 4 * int(vertices)

    def members(self, label):
        """The offsets, in order, of the segment's vertices of ``label`` (int32)."""
        k = int(label) + 1
        if not 0 <= k < self.starts.size - 1:
            return self.order[:0]
        return self.order[self.starts[k]:self.starts[k + 1]]


def bits_of_ids(ids, n):
    """The bitset (uint32 words) over ``n`` vertices of the sorted distinct vertex ids ``ids``:
    a bool array packed where they are many, their words OR-ed together where they are few."""
    if ids.size * 16 >= n:
        mask = np.zeros(n + (-n) % 32, dtype=bool)
        mask[ids] = True
        return np.packbits(mask, bitorder="little").view(np.uint32)
    words = np.zeros((n + 31) // 32, dtype=np.uint32)
    if ids.size:
        w = ids >> 5
        bit = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
        first = np.flatnonzero(run_starts(w))
        words[np.take(w, first)] = np.bitwise_or.reduceat(bit, first)
    return words


def run_starts(sorted_values):
    """Whether each value of a 1-D array starts a run of equal values (the first one does)."""
    new = np.empty(sorted_values.size, dtype=bool)
    if new.size:
        new[0] = True
        np.not_equal(sorted_values[1:], sorted_values[:-1], out=new[1:])
    return new
