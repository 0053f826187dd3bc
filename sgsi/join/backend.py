"""The backend seam: every array step of the engine runs on one of these.

:class:`CpuBackend` runs on NumPy. :class:`GpuBackend` (in
:mod:`sgsi.join.gpu`) runs on CuPy and replaces some steps with CUDA
kernels; CuPy is imported only when a GPU backend is asked for, so CPU
users never need it.
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np

from ..budget import resolve_budget
from ..errors import SgsiError
from ..partition import pcsr, signatures
from .memory import LruCache, trim_heap, tune_allocator
from .stream import dense_degrees_of, segments_of


#: The share of the memory budget (one part in this many) the CPU backend keeps derived arrays in.
DERIVED_CACHE_SHARE = 8


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

    def end(self, failed=False):
        """The query ended (``failed``: by an error or a cancel, its arrays collected first); the
        heap's free memory goes back to the system (:func:`trim_heap`)."""
        if failed:
            gc.collect()
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
        nb = ci[pcsr.ragged_indices(st, cnt, np)]
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
        """For each entry i: is ``evals[i]`` in N(vcol[erow[i]], l)? (:func:`sgsi.join.membership.
        member`: the lists of the distinct linking vertices streamed into bitsets of at most
        ``cap`` bytes). ``via``: the backend whose ``segments()`` streams them (a wrapper's)."""
        from .membership import member
        return member(np, via or self, store, link, vcol, erow, evals, cap, ecount=ecount, cbits=cbits)

    def own_hits(self, row_tuple, etuple, evals, sstart, scount, cols):
        """:func:`own_hits` (the GPU's: a thread a row searching its tuple's set)."""
        return own_hits(np, row_tuple, etuple, evals, sstart, scount, cols)

    def sizes_less_own(self, row_tuple, etuple, evals, sstart, scount, cols):
        """|S(t_i)| of each row i less the row's vertices of ``cols`` found in it (int64; the
        vertices of a row differ). Tuple t's set is ``evals[sstart[t] : sstart[t] + scount[t]]``,
        sorted; ``etuple`` the tuple of each entry where the sets are packed, None where gaps
        lie between them. The GPU kernel ``sizes_less_own``'s reference: the sets packed, then
        :func:`own_hits`."""
        counts = scount[row_tuple].astype(np.int64)
        if not cols or evals.size == 0:
            return counts
        if etuple is None:
            etuple, evals = self.repeat_index(scount), evals[pcsr.ragged_indices(sstart, scount, np)]
            sstart = exclusive_sum(np, scount)
        for sel, hit, _x in own_hits(np, row_tuple, etuple, evals, sstart, scount, cols):
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
        vals = np.take(evals, pcsr.ragged_indices(np.take(sstart, row_tuple), per_row, np))
        erow = self.repeat_index(per_row)
        if conflict_cols:
            ok = np.ones(vals.size, dtype=bool)
            for col in conflict_cols:
                ok &= vals != np.take(col, erow)
            keep = np.flatnonzero(ok)
            erow, vals = np.take(erow, keep), np.take(vals, keep)
        return erow, vals

    def expand_rows(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba):
        """buf_i += (flist of row i's vertex) minus the row's conflict vertices, in GBA.

        The NumPy reference of the GPU's expansion kernels (tests/test_gpu.py); the CPU
        engine extends through :meth:`extend`."""
        rc = fcnt[run]
        vals = flist[pcsr.ragged_indices(fstart[run], rc, np)]
        rid = rows[self.repeat_index(rc)]
        ok = np.ones(vals.size, dtype=bool)
        for col in conflict_cols:
            ok &= vals != col[rid]
        self._append(gba, F, fill, rid[ok], vals[ok])

    def gather_segment(self, groups, ci, verts, cbits, start, fill, gba):
        """buf_v += N_x(v, l) ∩ C(u) for the sorted distinct ``verts`` found in one segment
        (``groups``, ``ci``): vertex i's buffer starts at ``gba[start[i]]``, ``fill[i]``
        entries are written already (in place, each list in order). The first-edge gather
        of Prealloc-Combine; the NumPy reference of the GPU's ``gather_lists`` kernels."""
        st, en = self.pcsr_lookup(groups, verts)
        cnt = en - st
        nb = ci[pcsr.ragged_indices(st, cnt, np)]
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
        uniq, k = distinct_index(np, col, span)
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
        nb = ci[pcsr.ragged_indices(st, cnt, np)]
        rid = self.repeat_index(cnt)
        keep = self.test_bits(cbits, nb)
        for col in conflict_cols:
            keep &= nb != np.take(col, rid)
        if gba is None:
            fill += np.bincount(rid[keep], minlength=int(fill.size))
            return
        self._append(gba, F, fill, rid[keep], nb[keep])

    def pack_rows(self, gba, F, fill, take=None):
        """(row of each entry, entries) of the rows' buffers ``gba[F[i] : F[i] + fill[i]]``
        packed end to end, rows in order; with ``take`` (columns of the rows), those columns
        taken at each entry's row in place of the rows."""
        erow, vals = self.repeat_index(fill), np.take(gba, pcsr.ragged_indices(F, fill, np))
        return (erow, vals) if take is None else ([np.take(c, erow) for c in take], vals)

    def _append(self, gba, start, fill, owner, vals):
        """Prealloc-Combine: ``vals`` appended, in order, to their owners' buffers (owner i's
        from ``gba[start[i] + fill[i]]``; owners come in runs), ``fill`` counting them."""
        if owner.size == 0:
            return
        gba[start[owner] + fill[owner] + rank_in_runs(np, self, owner)] = vals
        fill += np.bincount(owner, minlength=fill.size)

    def intersect_lists(self, lists, bitcap):
        """S(t) of each tuple from a step's gathered lists: the entries of its first link's
        list found in every other gathered list. Returns (entry tuples, entry values, entries
        probed, links left untested), or None when no later link's lists can be used.

        On the CPU by bitsets over ranks (:func:`sgsi.join.membership.intersect_ranked`),
        the reference of the GPU's ``intersect_lists`` kernel."""
        from .membership import intersect_ranked
        return intersect_ranked(np, self, lists, bitcap)

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
        first = np.flatnonzero(run_starts(np, w))
        words[np.take(w, first)] = np.bitwise_or.reduceat(bit, first)
    return words


def sets_then_summary(backend, n, parts, ands, cost_jobs=None):
    """``backend.candidate_sets`` as two calls: ``candidate_bits``, then ``counts_and_overlaps``
    of the sets (with the cost where ``cost_jobs()`` gives jobs)."""
    bits = backend.candidate_bits(n, parts, ands)
    jobs = cost_jobs() if cost_jobs is not None else None
    if jobs is None:
        return (bits, *backend.counts_and_overlaps(bits), None)
    return (bits, *backend.counts_and_overlaps(bits, jobs))


class Overlaps:
    """``overlaps(u, w)``: whether bitsets ``bits[u]`` and ``bits[w]`` share a set bit (a data
    vertex both candidate sets hold). ``bits`` is the caller's list and may grow; answers are
    kept. Here each pair is computed when it is asked about; the GPU's computes every pair of
    the bitsets it has not seen yet in one launch and one read (:class:`sgsi.join.gpu.GpuOverlaps`).

    ``labels`` (empty until the planner sets it to the pattern vertices' label ids): the vertex
    label every member of ``bits[u]`` has, or None, for the first bitsets; two sets whose labels
    differ share no vertex (a data vertex has one label), and their pair is answered without
    reading them."""

    def __init__(self, xp, bits):
        self.xp, self.bits, self.known = xp, bits, {}
        self.labels = []

    def __call__(self, u, w):
        key = (min(u, w), max(u, w))
        if key not in self.known:
            self._learn(key)
        return self.known[key]

    def _learn(self, key):
        a, b = key
        la = self.labels[a] if a < len(self.labels) else None
        lb = self.labels[b] if b < len(self.labels) else None
        if la is not None and lb is not None and la != lb:
            self.known[key] = False
        else:
            self.known[key] = bool(self.xp.any(self.bits[a] & self.bits[b]))


def run_starts(xp, sorted_values):
    """Whether each value of a 1-D array starts a run of equal values (the first one does); on
    the GPU one ``run_starts_*`` launch for int32 and int64 values (:func:`sgsi.join.gpu.run_starts`)."""
    if xp is not np and sorted_values.ndim == 1 and sorted_values.dtype in (np.int32, np.int64):
        from .gpu import run_starts as gpu_run_starts
        return gpu_run_starts(sorted_values)
    new = xp.empty(sorted_values.size, dtype=bool)
    if new.size:
        new[0] = True
        xp.not_equal(sorted_values[1:], sorted_values[:-1], out=new[1:])
    return new


def runs(xp, sorted_values):
    """Distinct values of a sorted array, and where each one's run starts and ends (exclusive)."""
    n = sorted_values.size
    if n == 0:
        e = xp.zeros(0, xp.int64)
        return sorted_values, e, e
    if xp is not np and sorted_values.ndim == 1:
        from .gpu import runs as gpu_runs
        return gpu_runs(sorted_values)
    new = run_starts(xp, sorted_values)
    start = nonzero_index(xp, new)
    end = xp.empty_like(start)
    end[:-1] = start[1:]
    end[-1] = n
    return sorted_values[start], start, end


def rank_in_runs(xp, backend, ids):
    """Rank of each element within its run of equal (adjacent) ids."""
    _v, start, end = runs(xp, ids)
    return xp.arange(ids.size) - start[backend.repeat_index(end - start)]


def sums_over_runs(xp, values, end, dtype):
    """Sums of ``values`` (along the last axis) over the runs that end (exclusive) at ``end``."""
    cs = xp.cumsum(values, axis=-1, dtype=dtype)
    tot = xp.take(cs, end - 1, axis=-1)
    tot[..., 1:] -= xp.take(cs, end[:-1] - 1, axis=-1)
    return tot


def own_hits(xp, row_tuple, etuple, evals, sstart, scount, cols):
    """For each column of ``cols`` (a vertex per row that its row's set may hold): the rows
    ``sel`` where it may be, whether it is (``hit``), and its vertex there. The sets are
    packed: tuple t's set is ``evals[sstart[t] : sstart[t] + scount[t]]``, sorted, and
    ``etuple`` the tuple of each entry; ``row_tuple`` the tuple of each row.

    A row's vertex can be in S(t) only within [min, max] of S(t): that is tested first, and
    only the rows left are binary-searched (keys tuple << 32 | vertex, sorted)."""
    if not cols or evals.size == 0:
        return
    skeys = (etuple.astype(xp.int64) << 32) | evals.astype(xp.int64)
    nonempty = scount > 0
    lo = xp.full(scount.size, -1, xp.int64)
    hi = xp.full(scount.size, -2, xp.int64)
    lo[nonempty] = evals[sstart[nonempty]]
    hi[nonempty] = evals[sstart[nonempty] + scount[nonempty] - 1]
    lr, hr = lo[row_tuple], hi[row_tuple]
    for col in cols:
        sel = nonzero_index(xp, (col >= lr) & (col <= hr))
        if sel.size == 0:
            continue
        x = col[sel]
        q = (row_tuple[sel].astype(xp.int64) << 32) | x.astype(xp.int64)
        pos = xp.minimum(xp.searchsorted(skeys, q), skeys.size - 1)
        yield sel, skeys[pos] == q, x


def union_bits(bits, users):
    """The union of the candidate bitsets ``bits[u]`` of the pattern vertices ``users`` (read
    only: one user's is its own bitset)."""
    union = bits[users[0]]
    for u in users[1:]:
        union = union | bits[u]
    return union


def prefix_sum(xp, a):
    """``cumsum`` of a 1-D array where the backend computes (on the GPU, one launch for small ones)."""
    if xp is np:
        return np.cumsum(a)
    from .gpu import scan
    return scan(a)


def exclusive_total(xp, a):
    """(``exclusive_sum``, the sum of ``a`` as a Python int) of a 1-D int array (on the GPU one
    scan launch, which writes the sum into a result slot, and its read)."""
    if xp is np:
        cs = np.cumsum(a, dtype=np.int64)
        return cs - a, int(cs[-1]) if cs.size else 0
    from .gpu import scan_total
    return scan_total(a, exclusive=True)


def exclusive_sum(xp, a):
    """``cumsum(a) - a`` (each value's sum before it) where the backend computes (on the GPU in
    the scan's own launches)."""
    if xp is np:
        return np.cumsum(a) - a
    from .gpu import scan
    return scan(a, exclusive=True)


def nonzero_index(xp, a):
    """``flatnonzero`` where the backend computes (on the GPU, one launch for small bool arrays)."""
    if xp is np:
        return np.flatnonzero(a)
    from .gpu import flatnonzero
    return flatnonzero(a)


def scatter_equal(xp, out, idx, values):
    """``out[idx] = values`` where equal indices carry equal values (rows of one vertex and
    their degree): on the GPU an element writes only where ``out`` does not hold its value yet."""
    if xp is np:
        out[idx] = values
        return
    from .gpu import scatter_equal as gpu_scatter_equal
    gpu_scatter_equal(out, idx, values)


def take_values(xp, a, idx, dtype=None):
    """``xp.take(a, idx)`` of a 1-D array (``dtype``: then ``.astype(dtype)``) where the backend
    computes (on the GPU one launch)."""
    if xp is np:
        got = np.take(a, idx)
        return got if dtype is None else got.astype(dtype, copy=False)
    from .gpu import take as gpu_take
    return gpu_take(a, idx, dtype)


def stack(xp, arrays):
    """``xp.stack`` of 1-D arrays of one dtype and size (on the GPU a launch for every 8)."""
    if xp is np:
        return np.stack(arrays)
    from .gpu import stack_rows
    return stack_rows(arrays)


def take_columns(xp, arrays, idx):
    """``[xp.take(a, idx) for a in arrays]`` (1-D arrays); on the GPU the arrays of one dtype in
    one launch (gpu.take_columns)."""
    if xp is np:
        return [np.take(a, idx) for a in arrays]
    from .gpu import take_columns as gpu_take_columns
    return gpu_take_columns(arrays, idx)


def host_ints(xp, *scalars):
    """Python ints of scalars computed where the backend computes, read in one transfer."""
    if xp is np:
        return [int(s) for s in scalars]
    from .gpu import read_ints
    return read_ints(scalars)


def row_numbers(xp, n):
    """0, 1, ..., n - 1 as int64, where the backend computes (on the GPU one launch)."""
    if xp is np:
        return np.arange(n, dtype=np.int64)
    from .gpu import arange
    return arange(n)


def host_reductions(xp, *pairs):
    """Python ints of ("sum" | "max" | "min", int array) ``pairs``, reduced where the backend
    computes and read in one transfer; the max and min of an empty array are 0."""
    if xp is np:
        return [int(a.sum()) if op == "sum" else (int(getattr(a, op)()) if a.size else 0) for op, a in pairs]
    from .gpu import read_reductions
    return read_reductions(pairs)


def pair_key(xp, c0, c1):
    """(the int64 keys ``c0 << 32 | c1`` of two int columns, each cast to int64 first; whether
    they ascend) (on the GPU one launch and one read, for int32 columns)."""
    if xp is not np and c0.dtype == np.int32 and c1.dtype == np.int32:
        from .gpu import pair_key as gpu_pair_key
        return gpu_pair_key(c0, c1)
    key = (c0.astype(xp.int64) << 32) | c1.astype(xp.int64)
    return key, key.size < 2 or bool((key[1:] >= key[:-1]).all())


def distinct_index(xp, values, span=None):
    """(sorted distinct values of a non-empty int array, index of each element among them).

    Vertex ids are dense: over a range not much wider than the input, a mark
    array and a prefix sum give both in linear passes; otherwise sort and search.
    ``span``: (min, max) of ``values`` where the caller knows them (no host read then).
    """
    lo, hi = span if span is not None else host_reductions(xp, ("min", values), ("max", values))
    r = hi - lo + 1
    if xp is not np and values.dtype in (np.int32, np.int64):
        from .gpu import DISTINCT_DENSE_RANGE, distinct_dense
        if r <= max(16 * int(values.size), DISTINCT_DENSE_RANGE) and r < 1 << 31:
            return distinct_dense(values, lo, r)        # a bit a value: four launches, one host read
    if r <= 16 * int(values.size):
        v = values - lo
        mark = xp.zeros(r, dtype=bool)
        mark[v] = True
        rank = (np.cumsum(mark, dtype=np.int32 if r < 2 ** 31 else np.int64) if xp is np
                else prefix_sum(xp, mark))
        rank -= 1
        return (nonzero_index(xp, mark) + lo).astype(values.dtype), xp.take(rank, v).astype(xp.int64)
    u, _start, _end = runs(xp, xp.sort(values))
    return u, xp.searchsorted(u, values)


def gpu_available() -> bool:
    """True where CuPy imports and sees a CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False


def get_backend(device: str = "auto", memory_budget: int | None = None):
    """The backend for ``device``: ``cpu``, ``gpu`` or ``auto`` (GPU where present)."""
    if device not in ("cpu", "gpu", "auto"):
        raise SgsiError(f"unknown device {device!r}: use cpu, gpu or auto")
    if device == "auto":
        device = "gpu" if gpu_available() else "cpu"
    if device == "cpu":
        return CpuBackend(memory_budget)
    if not gpu_available():
        raise SgsiError("device 'gpu' asked for, but no CUDA GPU with CuPy is available "
                        "(install sgsi[gpu], or use --device cpu)")
    from .gpu import GpuBackend
    return GpuBackend(memory_budget)
