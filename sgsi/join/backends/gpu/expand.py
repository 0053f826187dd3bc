"""Columnar extension on the device (launchers of ``cuda/expand.cu``, Algorithm 6): the rows'
outputs sized by a prefix sum and written by the expansion kernels, rows sent to a warp, a
block's task pool, a block or a launch of their own by the load balance of §7
(:mod:`sgsi.join.balance`).
"""

from __future__ import annotations

import os

import cupy as cp
import numpy as np

from ... import balance
from .launch import BLOCK, Kernels, grid
from .primitives import arange, column_table, read_reductions, row_scan, scan
from .transfers import read_small, to_device_small

kernel = Kernels("expand")


_BLOCK_ROW = 1024
#: Most entries of one row that ``extend`` packs with a warp a row (``pack_rows``).
_PACK_ROW_MAX = 1 << 16


#: Elements of the rows one task-pool block takes (four rounds of 1024).
POOL_ELEMENTS = 4096




class ExpandSteps:
    """The columnar extension (reference: CpuBackend.extend and expand_rows), mixed into
    :class:`~sgsi.join.backends.gpu.backend.GpuBackend`."""

    def extend(self, row_tuple, per_row, evals, sstart, scount, conflict_cols, sizes=None):
        """Columnar extension of one slice (reference: CpuBackend.extend), Prealloc-Combine:
        the rows' outputs are sized by a prefix sum of |S(t_i)|, written by the load-balanced
        expansion kernels, which leave out the rows' own vertices; the rows' buffers are then
        packed (``pack_rows``: one scan, one read, one launch, a warp a row; past
        ``_PACK_ROW_MAX`` entries in a row, a thread an entry). ``sizes``: (the prefix
        sum, its total, the largest |S(t_i)|) when the caller has read them already."""
        m = int(row_tuple.size)
        if sizes is None:
            cum = scan(per_row)
            # The output's size and the heaviest row's, in one read: the load balance needs no
            # histogram when no row is heavy (balance.warps_suffice).
            total, heaviest = read_reductions([("sum", per_row), ("max", per_row)]) if m else (0, 0)
        else:
            cum, total, heaviest = sizes
        F = cum - per_row                       # where each row's output starts
        out_vals = cp.empty(total, dtype=cp.int32)
        rfill = cp.zeros(m, dtype=cp.int64)
        self.expand_rows(arange(m), row_tuple, evals, sstart, scount, conflict_cols, F, rfill, out_vals,
                         heaviest=heaviest)
        if not conflict_cols:           # every entry kept: the rows' buffers are already packed
            return row_scan(per_row, total=total), out_vals
        if heaviest <= _PACK_ROW_MAX:   # a warp a row
            return self.pack_rows(out_vals, F, rfill)
        erow = self.repeat_index(rfill)
        if erow.size == 0:
            return erow, out_vals[:0]
        epos = F[erow] + (cp.arange(erow.size) - (scan(rfill) - rfill)[erow])
        return erow, out_vals[epos]


    def expand_rows(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba, thresholds=None,
                    heaviest=None):
        """Row expansion (reference: CpuBackend.expand_rows), load-balanced (§7).

        Each row's workload is its list length; the histogram and cost model
        of :mod:`sgsi.join.balance` send rows to a warp, a block's shared
        task pool, a block, or a launch of their own. ``thresholds`` (x3, x1)
        overrides the model (tests); ``heaviest``, the most entries of one row when the caller
        knows it, lets rows that are all light go to warps without the histogram's host sync.
        ``self.load_balance = False`` (or SGSI_LOAD_BALANCE=0) runs every row on one warp.
        """
        if int(rows.size) == 0:
            return
        stream = cp.cuda.get_current_stream()
        start = stream.record()
        try:
            self._expand_rows(rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba, thresholds, heaviest)
        finally:
            self._expands.append(((start,), stream.record()))

    def _expand_rows(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba, thresholds, heaviest):
        n_rows = int(rows.size)
        rows = rows.astype(cp.int64, copy=False)
        run = run.astype(cp.int64, copy=False)
        fstart = fstart.astype(cp.int64, copy=False)
        fcnt = fcnt.astype(cp.int64, copy=False)
        flist = flist.astype(cp.int32, copy=False)
        held = []                       # the columns' int32 copies, if any, until the launches are issued
        args = (flist, fstart, fcnt, column_table(conflict_cols, held), len(conflict_cols), F, fill, gba)
        balanced = self.load_balance
        if balanced is None:
            balanced = os.environ.get("SGSI_LOAD_BALANCE", "1") != "0"
        if not balanced:
            self._launch_warp(rows, run, args)
            return
        if thresholds is None and heaviest is not None and balance.warps_suffice(heaviest, self.costs()):
            self.stats["rows_warp"] = self.stats.get("rows_warp", 0) + n_rows
            self._launch_warp(rows, run, args)
            return
        bins = fcnt[run] // balance.BIN
        # The histogram, read in the one host sync of a balanced step (cp.bincount would take a
        # second one for its size; the heaviest row gives it).
        hist = read_small(cp.bincount(bins) if heaviest is None else
                          self.bincount(bins, int(heaviest) // balance.BIN + 1))
        if thresholds is None:
            thresholds = balance.choose_thresholds(hist, self.costs())
        way_of_bin = balance.ways_of_bins(hist.size, *thresholds)
        counts = np.bincount(way_of_bin, weights=hist, minlength=4).astype(np.int64)
        if counts.max() == n_rows:                                     # one way for all: no gather
            order = None
        else:
            order = cp.argsort(to_device_small(way_of_bin)[bins])
        starts = np.concatenate([[0], np.cumsum(counts)])
        for way, name in enumerate(balance.WAYS):
            n = int(counts[way])
            if n == 0:
                continue
            self.stats[f"rows_{name}"] = self.stats.get(f"rows_{name}", 0) + n
            if order is None:
                r, d = rows, run
            else:
                sel = order[starts[way]:starts[way + 1]]
                r, d = rows[sel], run[sel]
            if name == "warp":
                self._launch_warp(r, d, args)
            elif name == "pool":
                w = np.arange(hist.size)[way_of_bin == 1]
                most = int((hist[w] * (balance.BIN * (w + 1))).sum())       # entries, an upper bound
                self._launch_pool(r, d, fcnt, args, most // POOL_ELEMENTS + 1)
            elif name == "block":
                kernel("expand_rows_block")((n,), (_BLOCK_ROW,), (r, d, n) + args)
            else:
                self._expand_own(r, d, flist, fstart, fcnt, conflict_cols, F, fill, gba)

    def _launch_pool(self, rows, run, fcnt, args, n_blocks):
        """Rows that share task pools: the rows starting in each run of POOL_ELEMENTS entries go to
        one block. ``n_blocks`` is at least the blocks needed (known on the host without a sync); the
        extra ones find no rows and return."""
        pstart = cp.concatenate([cp.zeros(1, cp.int64), scan(fcnt[run])])
        block_of = pstart[:-1] // POOL_ELEMENTS               # the block a row starts in
        bstart = cp.searchsorted(block_of, cp.arange(n_blocks + 1, dtype=cp.int64)).astype(cp.int64)
        kernel("expand_rows_pool")((n_blocks,), (_BLOCK_ROW,), (rows, run, pstart, bstart) + args)

    def _launch_warp(self, rows, run, args):
        n = int(rows.size)                      # a warp takes 32 rows
        kernel("expand_rows")(grid((n + 31) // 32 * 32), (BLOCK,), (rows, run, n) + args)

    def _expand_own(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba):
        """The heaviest rows, flattened over the whole device: every entry its own thread."""
        cnt = fcnt[run]
        if int(cnt.sum()) == 0:
            return
        vals = flist[self.ragged_indices(fstart[run], cnt)]
        local = self.repeat_index(cnt)
        rid = rows[local]
        ok = cp.ones(vals.size, dtype=cp.bool_)
        for col in conflict_cols:
            ok &= vals != col[rid]
        cs = scan(ok)
        first = scan(cnt, exclusive=True)                   # each row's first entry
        before = cp.where(first > 0, cs[cp.maximum(first - 1, 0)], 0)
        rank = cs - 1 - before[local]
        gba[(F[rid] + fill[rid] + rank)[ok]] = vals[ok]
        fill[rows] += self.bincount(local[ok], int(rows.size))
