"""Join steps on the device (launchers of ``cuda/join.cu``): PCSR lookups, the first link's
gathers (Prealloc-Combine), light pieces row by row, later links by intersection or membership,
a piece's summary, and the rows' own vertices in their sets.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from ...stream import spanning
from .launch import BLOCK, Kernels, grid
from .primitives import column_table, flatnonzero, pointer, pointers, read_reductions, scan, scan_state, \
    scan_total, stack_rows, take_columns
from .transfers import read_results, result_slots, to_device_small

kernel = Kernels("join")


#: Longest list of a vertex in one segment that gather_lists gives one warp; longer ones get a block.
_GATHER_WARP_MAX = 1024
#: Blocks of gather_lists_block, which stride over the vertices for the lists longer than that.
_GATHER_BLOCKS = 2048


#: Pieces of up to this many rows are summarised by one block (``piece_summary_small``), which
#: writes their degrees' prefix sum too. A thread takes a run of rows, so past a few rows a thread
#: the block is slower than the grid's kernel: 37 us a launch measured on light steps of up to
#: 65,536 rows (one H100), where the grid's took 11 us.
_SUMMARY_ONE_BLOCK = 1 << 12
#: Rows a thread of a summary's tile (a block of 256 threads) takes: 16 where it writes the
#: offsets too (``piece_pass_offsets``, PASS_OFFSETS_ROUNDS in the kernel; a piece of at most
#: ``_OFFSETS_MAX`` rows); where it only sums (``piece_pass``), at least 4 and as many as keep the
#: tiles within ``_SUMMARY_TILES``.
_SUMMARY_ROUNDS = 16
_SUMMARY_ROUNDS_SUM = 4
#: Tiles a summary that only sums is cut into, at most: about one wave of 8 blocks an SM, as
#: many as the grid-stride kernel it replaced had blocks (more tiles, each waiting on the ones
#: before it, were 11% slower on 20M rows).
_SUMMARY_TILES = 1024
#: Pieces of up to this many rows get their degrees' exclusive prefix sum from the summary's kernel
#: (the buffer offsets of a light step, which then needs no scan; ``Engine._row_sets``). The summary
#: comes before the piece is known to be light, so every piece this small pays for the offsets (an
#: allocation, 8 bytes a row written); larger ones, seldom light, are scanned by the light step.
_OFFSETS_MAX = 1 << 16


#: Rows from which ``GpuBackend.row_lists`` takes a thread a row first (``row_lists_short``):
#: on walk 0 of the 100M graph a warp a row took 283 us of device time for 350K rows whose lists
#: hold about 3 entries.
_ROW_THREAD_ROWS = 2048
#: Blocks an SM of the ``row_lists`` launch over the rows ``row_lists_short`` left, which stride
#: over them (their number is on the device), and of the ``row_lists_spread`` launch counting them.
_ROW_REST_BLOCKS_PER_SM = 16
#: Rows a ``row_lists`` block takes a round (1 to 8, its warps; a row's list of more than 32
#: entries is shared by them all): under ``_ROW_THREAD_ROWS`` rows, and over the rows that
#: ``row_lists_short`` left. Fewer rows a round spread the long lists over more blocks.
_ROW_LISTS_ROWS = 1
_ROW_REST_ROWS = 4


#: Blocks an SM of a ``block_counts`` launch, whose warps stride over the rows (a warp a row).
_BLOCK_COUNT_BLOCKS_PER_SM = 16


#: Most columns of 4-byte and of 8-byte elements that one ``pack_rows`` launch takes at the
#: entries' rows (the kernel's PACK_COLS_4 and PACK_COLS_8).
_PACK_COLS = (6, 2)


def _pack_columns(take):
    """(positions of the 4-byte columns, of the 8-byte ones) in ``take`` where ``pack_rows`` takes
    them all in its launch (1-D, within ``_PACK_COLS``); (None, None) where it does not."""
    if take is None:
        return None, None
    cols4 = [i for i, c in enumerate(take) if c.ndim == 1 and c.dtype.itemsize == 4]
    cols8 = [i for i, c in enumerate(take) if c.ndim == 1 and c.dtype.itemsize == 8]
    if len(cols4) + len(cols8) != len(take) or len(cols4) > _PACK_COLS[0] or len(cols8) > _PACK_COLS[1]:
        return None, None
    return cols4, cols8




def _link_table(lists, held):
    """The links (groups, ci, vertices) of ``block_counts`` as its kernel reads them: five int64 a
    link (groups, their number, theta, ci, vertices), on the device."""
    table = []
    for groups, ci, v in lists:
        table += [pointer(groups, cp.int32, held), groups.shape[0], groups.shape[1],
                  pointer(ci, cp.int32, held), pointer(v, cp.int32, held)]
    return to_device_small(np.array(table, np.int64))


class JoinSteps:
    """A join step's kernels (reference: CpuBackend's methods of the same names), mixed into
    :class:`~sgsi.join.backends.gpu.backend.GpuBackend`."""

    def pcsr_lookup(self, groups, v):
        """(start, end) of each vertex's list in a segment's ci (reference: pcsr.lookup): the
        ``pcsr_lookup`` kernel writes both for every vertex, in one allocation (zeros, with no
        launch, where the segment has no group)."""
        n = int(v.size)
        if not (n and groups.shape[0]):
            se = cp.zeros(2 * n, cp.int64)
            return se[:n], se[n:]
        se = cp.empty(2 * n, cp.int64)
        start, end = se[:n], se[n:]
        kernel("pcsr_lookup")(grid(n * 32), (BLOCK,),
                                      (groups, groups.shape[0], groups.shape[1],
                                       cp.ascontiguousarray(v.astype(cp.int32, copy=False)), n, start, end))
        return start, end

    def block_counts(self, lists, cbits, conflict_cols, spans=False):
        """A block's sizes per row with no set written, or None where it has more links than a
        warp has lanes (reference: CpuBackend.block_counts): one ``block_counts`` launch, a warp
        a row. With ``spans``, (sizes, each link's list of each row as (k, n, 2) int64)."""
        n = int(lists[0][2].size)
        if len(lists) > 32:
            return None
        out = cp.empty(n, cp.int64)
        where = cp.empty((len(lists), n, 2), cp.int64) if spans else None
        if n:
            held = []
            blocks = min(-(-n // (BLOCK // 32)), _BLOCK_COUNT_BLOCKS_PER_SM * self.sms())
            kernel("block_counts")((blocks,), (BLOCK,),
                                   (_link_table(lists, held), len(lists), n, cbits,
                                    column_table(conflict_cols, held), len(conflict_cols), out,
                                    0 if where is None else where))
        return (out, where) if spans else out

    def rows_less_own(self, cis, cbits, conflict_cols, tcount, spans, row_tuple):
        """Per row, ``tcount[row_tuple]`` less its own vertices in its tuple's lists (reference:
        CpuBackend.rows_less_own): one ``rows_less_own`` launch, a thread a row."""
        n = int(row_tuple.size)
        if n == 0 or not conflict_cols:
            return self.take_values(tcount, row_tuple, cp.int64)
        out = cp.empty(n, cp.int64)
        held = []
        kernel("rows_less_own")(grid(n), (BLOCK,),
                                (column_table(cis, held), len(cis), n, cbits, column_table(conflict_cols, held),
                                 len(conflict_cols), cp.ascontiguousarray(tcount.astype(cp.int64, copy=False)),
                                 spans, int(spans.shape[1]),
                                 cp.ascontiguousarray(row_tuple.astype(cp.int64, copy=False)), out))
        return out

    def gather_segment(self, groups, ci, verts, cbits, start, fill, gba):
        """First-edge gather of one segment (reference: CpuBackend.gather_segment): the PCSR
        lookup, then one warp per vertex, one block per vertex whose list in the segment is
        longer than ``_GATHER_WARP_MAX``; ``start`` and ``fill`` are int64, ``fill`` is written
        in place."""
        n = int(verts.size)
        st, en = self.pcsr_lookup(groups, verts)
        if n == 0 or ci.size == 0:
            return
        kernel("gather_lists")(grid(n * 32), (BLOCK,),
                                       (st, en, n, ci, cbits, _GATHER_WARP_MAX, start, fill, gba))
        kernel("gather_lists_block")((min(n, _GATHER_BLOCKS),), (BLOCK,),
                                             (n, st, en, _GATHER_WARP_MAX, ci, cbits, start,
                                              fill, gba))

    def own_hits(self, row_tuple, etuple, evals, sstart, scount, cols):
        """For each column of ``cols``: (the rows whose vertex is in their tuple's set, all True,
        those vertices) (reference: CpuBackend.own_hits, whose rows ``sel`` may also hold ones
        not in it, ``hit`` False): per column one ``own_hit_rows`` launch, a thread a row
        binary-searching its tuple's set, then the rows found (one read). The reference keyed
        every entry and searched them all: on the 100M graph's 3.5e9 walk, some 1.5 ms of an
        H200's host and device time over its 12M rows and their sets."""
        n = int(row_tuple.size)
        if not cols or evals.size == 0 or n == 0:
            return
        row_tuple = cp.ascontiguousarray(row_tuple.astype(cp.int64, copy=False))
        sstart = cp.ascontiguousarray(sstart.astype(cp.int64, copy=False))
        scount = cp.ascontiguousarray(scount.astype(cp.int64, copy=False))
        evals = cp.ascontiguousarray(evals.astype(cp.int32, copy=False))
        hit = cp.empty(n, cp.bool_)
        for col in cols:
            kernel("own_hit_rows")(grid(n), (BLOCK,),
                                           (row_tuple, sstart, scount, evals,
                                            cp.ascontiguousarray(col.astype(cp.int32, copy=False)), n, hit))
            sel = flatnonzero(hit)
            if sel.size:
                yield sel, cp.ones(int(sel.size), cp.bool_), cp.take(col, sel)

    def sizes_less_own(self, row_tuple, etuple, evals, sstart, scount, cols):
        """|S(t_i)| of each row less its vertices in it (reference: CpuBackend.sizes_less_own):
        one ``sizes_less_own`` launch, a thread per row searching its set where it lies (packed
        or not; ``etuple`` unused), where the reference packs the sets and searches keys."""
        n = int(row_tuple.size)
        out = cp.empty(n, cp.int64)
        if n:
            held = []
            kernel("sizes_less_own")(grid(n), (BLOCK,),
                                             (cp.ascontiguousarray(row_tuple.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(sstart.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(scount.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(evals.astype(cp.int32, copy=False)),
                                              column_table(cols, held), len(cols), n, out))
        return out


    def member(self, store, link, vcol, erow, evals, cap, ecount=None, cbits=None, via=None):
        """For each entry i: is ``evals[i]`` in N(vcol[erow[i]], l)? (reference:
        CpuBackend.member): one ``member_entries`` launch per segment of the link's partition
        meeting the tuples' vertices, a thread per entry finding its vertex's list in the
        segment's PCSR and binary-searching the entry in it. No bitset: ``cap``, ``ecount``
        and ``cbits`` are not needed. ``via``: the backend whose ``segments()`` streams them."""
        n = int(evals.size)
        found = cp.zeros(n, dtype=cp.bool_)
        p = store.partition(link.label_id, link.direction)
        if n == 0 or p.seg_ids.size == 0:
            return found
        vcol = cp.ascontiguousarray(vcol.astype(cp.int32, copy=False))
        erow = cp.ascontiguousarray(erow.astype(cp.int64, copy=False))
        evals = cp.ascontiguousarray(evals.astype(cp.int32, copy=False))
        sel = np.arange(p.seg_ids.size)
        if sel.size > 1:                # the segments meeting the vertices' range (one read)
            sel = spanning(p, *read_reductions([("min", vcol), ("max", vcol)]))
        for i, groups, ci in (via or self).segments(store, p.seg_ids[sel]):
            kernel("member_entries")(grid(n), (BLOCK,),
                                             (groups, groups.shape[0], groups.shape[1], ci,
                                              p.first_src[sel[i]], p.last_src[sel[i]], vcol,
                                              erow, evals, n, found))
        return found


    def distinct_sum(self, col, deg, span):
        """Σ deg over the distinct values of ``col`` (reference: CpuBackend.distinct_sum): a
        bit a value of ``span`` (min, max), one ``distinct_sum`` kernel, one read."""
        n = int(col.size)
        if n == 0:
            return 0
        lo, hi = span
        seen = cp.zeros((hi - lo + 32) // 32, cp.uint32)
        out = cp.zeros(1, cp.int64)
        kernel("distinct_sum")((min(grid(n)[0], 4096),), (BLOCK,),
                                       (cp.ascontiguousarray(col.astype(cp.int32, copy=False)),
                                        cp.ascontiguousarray(deg.astype(cp.int64, copy=False)), n,
                                        lo, seen, out))
        return int(out[0])


    def piece_summary(self, deg, col):
        """(Σ deg, max deg, min col, max col, places where col descends) as Python ints
        (reference: CpuBackend.piece_summary): one kernel and one read, where the reductions took
        a dozen launches and two reads."""
        return self._summary(cp.ascontiguousarray(deg.astype(cp.int64, copy=False)), col, None)

    def piece_degrees(self, dense, col):
        """(the rows' degrees ``dense[col]`` as int64, :meth:`piece_summary` of them, their exclusive
        prefix sum or None, zeros a row or None) (reference: CpuBackend.piece_degrees): the degrees
        are gathered by the summary's kernel, which writes their prefix sum too (a light step's
        buffer offsets) and zeros (its fill counts, which then need no memset) for a piece of at
        most ``_OFFSETS_MAX`` rows; the three come in one allocation."""
        n = int(col.size)
        dense = cp.ascontiguousarray(dense.astype(cp.int32, copy=False))
        if n > _OFFSETS_MAX:
            deg = cp.empty(n, cp.int64)
            return deg, self._summary(deg, col, dense), None, None
        buf = cp.empty(3 * n, cp.int64)
        deg, offsets, zeros = buf[:n], buf[n:2 * n], buf[2 * n:]
        return deg, self._summary(deg, col, dense, offsets, zeros), offsets, zeros

    def _summary(self, deg, col, dense, offsets=None, zeros=None):
        """The summary as Python ints, in one launch and one read: one block up to
        ``_SUMMARY_ONE_BLOCK`` rows, else ``piece_pass`` (single-pass, a tile a block), its last
        tile writing the summary into result slots (:func:`result_slots`); ``offsets``: where to
        write the exclusive prefix sum of deg (None: nowhere), and ``zeros`` a zero a row."""
        n = int(col.size)
        col = cp.ascontiguousarray(col.astype(cp.int32, copy=False))
        dense = 0 if dense is None else dense
        host, out = result_slots(5)
        if n <= _SUMMARY_ONE_BLOCK:
            null = 0
            kernel("piece_summary_small")((1,), (1024,), (deg, col, n, out, dense,
                                                                  null if offsets is None else offsets,
                                                                  null if zeros is None else zeros))
        else:
            state = scan_state()
            if offsets is not None:
                tiles = (n + 256 * _SUMMARY_ROUNDS - 1) // (256 * _SUMMARY_ROUNDS)
                kernel("piece_pass_offsets")((tiles,), (256,), (deg, col, n, out, dense, offsets,
                                                                        zeros) + state.args(tiles))
            else:
                rounds = max(_SUMMARY_ROUNDS_SUM, -(-n // (256 * _SUMMARY_TILES)))
                tiles = (n + 256 * rounds - 1) // (256 * rounds)
                kernel("piece_pass")((tiles,), (256,), (deg, col, n, rounds, out, dense)
                                             + state.args(tiles))
        return read_results(host)

    def row_lists(self, groups, ci, v, cbits, conflict_cols, F, fill, gba):
        """First link of a light piece in one segment, row by row (reference:
        CpuBackend.row_lists; ``gba`` None: counts only, a null pointer to the kernels, and
        ``F`` may be None). Under ``_ROW_THREAD_ROWS`` rows the ``row_lists`` kernel, a block
        for ``_ROW_LISTS_ROWS`` rows a round (a list of more than 32 entries is shared by the
        block's warps); from there
        ``row_lists_short``, a thread a row, then ``row_lists`` over the rows whose lists it left
        (longer than its THREAD_LIST), which it counted on the device (no read: the launch's
        blocks stride over them, ``_ROW_REST_ROWS`` a round); counting, ``row_lists_spread``
        over those rows instead, their lists' chunks spread evenly over its warps."""
        n = int(v.size)
        if n == 0 or ci.size == 0 or groups.shape[0] == 0:
            return
        held = []
        conf = column_table(conflict_cols, held)
        args = (groups, groups.shape[0], groups.shape[1], ci,
                cp.ascontiguousarray(v.astype(cp.int32, copy=False)), n, cbits,
                conf, len(conflict_cols), 0 if F is None else F, fill,
                0 if gba is None else gba)
        if n < _ROW_THREAD_ROWS:
            per = _ROW_LISTS_ROWS
            kernel("row_lists")(((n + per - 1) // per,), (BLOCK,),
                                        args + (0, 0, per))
            return
        if gba is None:
            # Counting: the rows left (and their lists' starts and lengths) for row_lists_spread,
            # which spreads their chunks over the grid's warps by the prefix sum of their chunks
            # (zero past the rows left). Layout: rows, starts, lengths, their number, chunks.
            buf = cp.empty(4 * n + 1, cp.int64)
            rest, starts, lens, count, chunks = buf[:n], buf[n:2 * n], buf[2 * n:3 * n], buf[3 * n:3 * n + 1], \
                buf[3 * n + 1:]
            count.data.memset_async(0, 8 * (n + 1))
            kernel("row_lists_short")(grid(n), (BLOCK,), args + (rest, count, starts, lens, chunks))
            kernel("row_lists_spread")((_ROW_REST_BLOCKS_PER_SM * self.sms(),), (BLOCK,),
                                               (ci, cbits, conf, len(conflict_cols), n, fill,
                                                rest, count, starts, lens, scan(chunks)))
            return
        rest = cp.empty(n + 1, cp.int64)            # the rows left, then their number
        count = rest[n:]
        count.data.memset_async(0, 8)
        null = 0
        kernel("row_lists_short")(grid(n), (BLOCK,), args + (rest, count, null, null, null))
        # Their number is not read: the blocks stride over them.
        blocks = min(-(-n // _ROW_REST_ROWS), _ROW_REST_BLOCKS_PER_SM * self.sms())
        kernel("row_lists")((blocks,), (BLOCK,), args + (rest, count, _ROW_REST_ROWS))

    def pack_rows(self, gba, F, fill, take=None):
        """(row of each entry, entries) of the rows' buffers packed end to end; with ``take``
        (columns of the rows), those columns taken at each entry's row in place of the rows
        (reference: CpuBackend.pack_rows): a scan of ``fill``, one host read of the total, the
        ``pack_rows`` kernel, which takes up to ``_PACK_COLS`` of 4-byte and 8-byte columns as
        it writes the entries (more, or other sizes: a ``take_columns`` after it)."""
        n = int(fill.size)
        cols4, cols8 = _pack_columns(take)
        if n == 0:
            vals = cp.zeros(0, cp.int32)
            return (cp.zeros(0, cp.int64) if take is None else [c[:0] for c in take]), vals
        ends, total = scan_total(fill)
        vals = cp.empty(total, cp.int32)
        fused = cols4 is not None                   # take given, and every column fits the launch
        erow = None if fused else cp.empty(total, cp.int64)
        out4 = cp.empty((len(cols4), total), cp.uint32) if fused and cols4 else None
        out8 = cp.empty((len(cols8), total), cp.uint64) if fused and cols8 else None
        if total:
            a = [cp.ascontiguousarray(take[i]) for i in cols4] if out4 is not None else []
            b = [cp.ascontiguousarray(take[i]) for i in cols8] if out8 is not None else []
            a += [a[0] if a else gba] * (_PACK_COLS[0] - len(a))
            b += [b[0] if b else F] * (_PACK_COLS[1] - len(b))
            null = 0
            kernel("pack_rows")(grid(n * 32), (BLOCK,),
                                        (gba, F, fill, ends, n, null if fused else erow, vals, *a,
                                         len(cols4) if fused else 0, null if out4 is None else out4, *b,
                                         len(cols8) if fused else 0, null if out8 is None else out8,
                                         total))
        if take is None:
            return erow, vals
        if not fused:
            return take_columns(take, erow), vals
        taken = [None] * len(take)
        for r, i in enumerate(cols4):
            taken[i] = out4[r].view(take[i].dtype)
        for r, i in enumerate(cols8):
            taken[i] = out8[r].view(take[i].dtype)
        return taken, vals


    def intersect_lists(self, lists, bitcap=None):
        """Later linking edges (reference: CpuBackend.intersect_lists): each tuple's entries are
        those of its shortest gathered list found in all its other gathered lists, by the
        ``intersect_lists`` kernel (binary search in windows that advance with the entries),
        written in Prealloc-Combine: a buffer per tuple sized by its shortest list, then
        compacted. Every gathered list is used, however long (no bitsets: ``bitcap`` unused)."""
        got = [L for L in lists if L is not None]
        if len(got) < 2:
            return None
        untested = [j for j, L in enumerate(lists) if L is None]
        n = int(got[0].of_tuple.size)
        if n == 0:
            return cp.zeros(0, cp.int64), cp.zeros(0, cp.int32), 0, untested
        lcount = stack_rows([L.count[L.of_tuple].astype(cp.int64, copy=False) for L in got])
        lstart = stack_rows([L.start[L.of_tuple].astype(cp.int64, copy=False) for L in got])
        tcnt = lcount.min(axis=0)
        off = scan(tcnt, exclusive=True)
        probes = int(tcnt.sum())
        out = cp.empty(probes, cp.int32)
        kept = cp.zeros(n, cp.int64)
        values = [cp.ascontiguousarray(L.values.astype(cp.int32, copy=False)) for L in got]
        ptrs = pointers(values)
        if probes:
            kernel("intersect_lists")(grid(n * 32), (BLOCK,),
                                              (n, len(got), ptrs, lstart, lcount, off, out, kept))
        etuple = self.repeat_index(kept)
        evals = out[self.ragged_indices(off, kept)]
        return etuple, evals, probes, untested
