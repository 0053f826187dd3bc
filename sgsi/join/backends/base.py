"""The backend seam: the :class:`Backend` protocol every array step of the engine runs through,
and what its two implementations share.

:class:`~sgsi.join.backends.cpu.CpuBackend` implements it on NumPy;
:class:`~sgsi.join.backends.gpu.backend.GpuBackend` on CuPy and CUDA kernels. The engine
(:mod:`sgsi.join.engine` and the modules it runs) calls these methods, and raw ``xp.``
functions only where NumPy and CuPy behave alike. Arrays are the backend's own (``xp``
arrays); ``store`` is an open :class:`~sgsi.storage.store.Store`.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable


class _Watch(threading.local):
    check = None        # the cancel test of the query whose backend call this thread runs


#: Set around each backend call of a query that can be cancelled (``query._Watched``).
WATCH = _Watch()


def cancel_point():
    """Raise Cancelled where the query this thread runs a backend call for was cancelled: a
    backend method of several passes calls it between them (on the CPU one call over a large
    piece ran past a second, each of its passes a tenth of that)."""
    if WATCH.check is not None:
        WATCH.check()


@runtime_checkable
class Backend(Protocol):
    """The operations the engine needs of a backend (see the module's docstring)."""

    name: str  # "cpu" or "gpu"
    xp: object  # the array module: numpy or cupy
    stats: dict  # counters of the query's work (segments read, bytes copied, ...)
    light_entries: int  # first-link entries under which a piece is joined row by row
    early_refine_cost: bool  # whether the planner finds refine_cost with the candidate counts
    slice_entries: int  # most buffer entries of one piece of a join step
    slice_rows: int  # most rows of one piece of a join step
    reorder_work: int  # join work (entries and rows) after which a refined plan's order is sampled
    search_work: int  # join work an order search costs about (none runs where under twice it is left)
    weighted_min_entries: int  # fewest root entries a piece's one-leaf subtree is counted from weights at
    block_count_probes: int  # most rows x list entries of a count's block counted by block_counts (0: never)
    merge_gain: float  # least cut of a level's rows by merging for a count to go on merging them
    merge_probe_growth: bool  # a merge probe's distinct rows grown to its slice's at their rate (merge.Merges)

    # -- a query's lifetime
    def begin(self, store, memory_budget=None) -> int:
        """Start a query of ``store``; returns its memory budget in bytes."""

    def end(self, failed=False, keep=False):
        """The query ended (``failed``: by an error or a cancel); what it took is released, but
        for ``keep`` after one that ended well: its free memory stays for the next (:meth:`release`)."""

    def release(self):
        """The free memory kept by :meth:`end` (``keep``) goes back, where no query runs."""

    def recover(self):
        """After a MemoryShortage: the failed run's memory given back before the query runs again."""

    def measuring_memory(self):
        """Context of one query whose peak device memory the backend measures."""

    def run(self, fn, *args):
        """``fn(*args)`` where the backend computes (the GPU's memory pool)."""

    def synchronize(self):
        """Wait for the backend's work; its timings join the stats."""

    # -- data in and out
    def to_device(self, a):
        """A host array where the backend computes."""

    def to_host(self, a):
        """A backend array as a NumPy array."""

    def store_arrays(self, keys, read):
        """Store arrays where the backend computes, kept between queries under ``keys``."""

    def derived(self, key, make):
        """An array derived from the store alone, kept between queries under ``key``."""

    def vertex_labels(self, store, seg):
        """The labels of vertex segment ``seg`` as :meth:`candidate_bits` takes them."""

    def dense_degrees(self, store, p):
        """|N(v, l)| of every vertex in partition ``p`` (int32), or None where it would not fit."""

    def segments(self, store, seg_ids):
        """Yield (position, groups, ci) for each segment of ``seg_ids``, in order."""

    # -- array operations
    def ragged_indices(self, starts, counts):
        """Concatenation of ``arange(s, s + c)`` for each (s, c)."""

    def repeat_index(self, counts):
        """For each output slot of ``repeat(x, counts)``, the index into x."""

    def run_starts(self, sorted_values):
        """Whether each value of a 1-D array starts a run of equal values."""

    def runs(self, sorted_values):
        """(distinct values, run starts, run ends) of a sorted array."""

    def prefix_sum(self, a):
        """``cumsum`` of a 1-D array."""

    def exclusive_sum(self, a):
        """``cumsum(a) - a``."""

    def exclusive_total(self, a):
        """(``exclusive_sum`` as int64, the sum as a Python int) of a 1-D int array."""

    def nonzero_index(self, a):
        """``flatnonzero``."""

    def scatter_equal(self, out, idx, values):
        """``out[idx] = values`` where equal indices carry equal values."""

    def take_values(self, a, idx, dtype=None):
        """``take(a, idx)`` of a 1-D array, cast to ``dtype`` where given."""

    def stack(self, arrays):
        """``stack`` of 1-D arrays of one dtype and size."""

    def take_columns(self, arrays, idx):
        """``[take(a, idx) for a in arrays]``."""

    def host_ints(self, *scalars):
        """Python ints of backend scalars, read in one transfer."""

    def host_reductions(self, *pairs):
        """Python ints of ("sum" | "max" | "min", int array) pairs, read in one transfer."""

    def row_numbers(self, n):
        """0, 1, ..., n - 1 as int64."""

    def pair_key(self, c0, c1):
        """(int64 keys ``c0 << 32 | c1``, whether they ascend)."""

    def distinct_index(self, values, span=None):
        """(sorted distinct values, index of each element among them) of a non-empty int array;
        ``span``: (lo, hi) bounding the values where the caller knows them."""

    def argsort(self, a):
        """A stable ``argsort``."""

    def lexsort(self, keys):
        """``lexsort`` of a list of keys."""

    def bincount(self, x, n):
        """``bincount(x, minlength=n)`` of ids below n (int64)."""

    def add_at(self, out, idx, values):
        """``out[idx] += values``, repeated indices adding up (in place)."""

    # -- bitsets and candidate sets
    def test_bits(self, bits, v):
        """Membership of vertex ids ``v`` in a bitset (bool)."""

    def bits_to_ids(self, bits, n, count=None):
        """Sorted vertex ids (int32) whose bit is set, below n."""

    def candidate_bits(self, n, parts, ands):
        """C(u) of several pattern vertices as bitsets over the ``n`` data vertices."""

    def candidate_sets(self, n, parts, ands, cost_jobs=None):
        """:meth:`candidate_bits` with their sizes, overlaps and refinement cost."""

    def counts_and_overlaps(self, bits, cost_jobs=None):
        """(set sizes, :class:`Overlaps`[, union degrees of ``cost_jobs``]) of bitsets."""

    def refine_round(self, store, bits, keep, jobs):
        """One refinement round's jobs (partition, users, ends, needs), clearing ``keep`` in place."""

    def refine_drop(self, store, p, bits, keep, users, ends, needs):
        """One partition's part of a refinement round, in place."""

    def add_bits_weight(self, out, bits, v, d):
        """``out[0] += Σ d[i]`` over the i whose vertex ``v[i]`` is in ``bits``."""

    def add_union_degrees(self, out, bits, jobs):
        """``out[0] +=`` Σ over ``jobs`` (users, deg) of deg summed over the users' union."""

    # -- join steps
    def pcsr_lookup(self, groups, v):
        """(start, end) of each vertex's list in a segment's ci."""

    def piece_summary(self, deg, col):
        """(Σ deg, max deg, min col, max col, descents of col) as Python ints."""

    def piece_degrees(self, dense, col):
        """(degrees ``dense[col]``, their summary, exclusive prefix sum or None, zeros or None)."""

    def distinct_sum(self, col, deg, span):
        """Σ deg over the distinct values of ``col``."""

    def gather_segment(self, groups, ci, verts, cbits, start, fill, gba):
        """The first link's gather of one segment into Prealloc-Combine buffers (in place)."""

    def row_lists(self, groups, ci, v, cbits, conflict_cols, F, fill, gba):
        """A light piece's first link in one segment, row by row (in place)."""

    def pack_rows(self, gba, F, fill, take=None):
        """(row of each entry or taken columns, entries) of the rows' buffers packed end to end."""

    def block_counts(self, lists, cbits, conflict_cols, spans=False):
        """A block's |S_B \\ m_row| per row from its links' one-segment lists (None: not counted so);
        with ``spans``, and where each row's lists lie ((k, n, 2) int64)."""

    def rows_less_own(self, cis, cbits, conflict_cols, tcount, spans, row_tuple):
        """Per row, its tuple's set size ``tcount[row_tuple]`` less its own vertices in the set."""

    def intersect_lists(self, lists, bitcap):
        """(entry tuples, entry values, entries probed, links untested) of gathered lists, or None."""

    def member(self, store, link, vcol, erow, evals, cap, ecount=None, cbits=None, via=None):
        """Whether each entry ``evals[i]`` is in N(vcol[erow[i]], l)."""

    def own_hits(self, row_tuple, etuple, evals, sstart, scount, cols):
        """Per column of ``cols``: (rows, whether their vertex is in their set, the vertices)."""

    def sizes_less_own(self, row_tuple, etuple, evals, sstart, scount, cols):
        """|S(t_i)| of each row less its own vertices found in it (int64)."""

    def extend(self, row_tuple, per_row, evals, sstart, scount, conflict_cols, sizes=None):
        """Columnar extension of one slice: (row of each output, new column)."""


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
    the bitsets it has not seen yet in one launch and one read (:class:`sgsi.join.backends.gpu.filter.GpuOverlaps`).

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


def union_bits(bits, users):
    """The union of the candidate bitsets ``bits[u]`` of the pattern vertices ``users`` (read
    only: one user's is its own bitset)."""
    union = bits[users[0]]
    for u in users[1:]:
        union = union | bits[u]
    return union

