"""The GPU backend: :class:`GpuBackend`, the backend seam (:class:`~sgsi.join.backends.base.Backend`)
on CuPy, put together from the steps of this package's modules: array primitives
(:mod:`.primitives`), transfers and the segments' stream (:mod:`.transfers`), filtering
(:mod:`.filter`), join steps (:mod:`.join`) and the columnar extension (:mod:`.expand`), each
launching the CUDA kernels of its own ``cuda/*.cu``. This module holds what a query sets up and
releases: the device's memory pool and cache (:mod:`.memory`), its budget, and the cost model
(:mod:`.calibration`).
"""

from __future__ import annotations

import gc

import cupy as cp
import numpy as np

from ....budget import format_size, parse_size
from ....errors import MemoryShortage
from ...stream import dense_degrees_of
from . import REORDER_WORK, SEARCH_WORK
from .calibration import device_costs
from .expand import ExpandSteps
from .filter import FilterSteps
from .join import JoinSteps
from .memory import POOL_ALLOWANCE, device_memory
from .primitives import ArrayOps
from .transfers import SegmentCopies, read_small


class _PeakMemory:
    """Context of one query on a backend: the most bytes its memory pool held while the query ran
    (``stats["device_peak_bytes"]``). The pool's use is read after each allocation made through
    :meth:`GpuBackend.run` (its allocator while the context is open): the peak is reached at one.
    A CuPy ``MemoryHook`` saw each allocation and free too, at four Python calls a pair."""

    def __init__(self, backend):
        self.backend = backend

    def __enter__(self):
        self.backend._peak = self.backend.memory.used_bytes()
        return self

    def __exit__(self, *exc):
        self.backend.stats["device_peak_bytes"] = self.backend._peak
        self.backend._peak = None
        return False


class GpuBackend(ArrayOps, SegmentCopies, FilterSteps, JoinSteps, ExpandSteps):
    """CuPy backend: segments streamed to the device, hot steps in CUDA kernels; see the module's
    docstring."""

    name = "gpu"
    xp = cp
    #: First-link entries under which a piece is joined row by row (``Engine._row_sets``):
    #: reading a shared vertex's list once per row costs the device less, at this size, than
    #: the launches and host reads of finding the distinct tuples (the lists rows share stay
    #: in L2; 2^26 int32 entries are 256 MB read, a fraction of a millisecond).
    light_entries = 1 << 26
    early_refine_cost = True
    #: Most buffer entries and rows of one piece of a join step, whatever the budget: a step over
    #: this many takes the device some milliseconds, so that a cancel is seen within ~100 ms.
    slice_entries = 1 << 27
    slice_rows = 1 << 25
    reorder_work = REORDER_WORK
    search_work = SEARCH_WORK
    #: Fewest entries of a piece's root sets its one-leaf subtree is counted from weights at
    #: (:data:`~sgsi.join.counting.WEIGHTED_SUBTREES`; the CPU's measure, not the GPU's).
    weighted_min_entries = 1 << 22
    #: A count's block whose rows times its links' smallest largest list is at most this is
    #: counted by ``block_counts`` a warp a row, with nothing written; past it, by its distinct
    #: tuples (``Counting._fused_sizes``), where its pieces' gathered lists and sets took some 20
    #: launches and reads: yeast on one H200 at 64-256 MB budgets 1.5-3.4x faster, at the default
    #: 0.89-1.05x. Row by row past it cost more than the rows' shared tuples save.
    block_count_probes = 1 << 24
    #: A count merges a level's equal rows while that cuts them by this much (``merge.Merges``):
    #: on one H200, 45 slow yeast queries, 32 finish within 10 s at 1.25, 31 at 1.5 (dense_24_25
    #: 0.49 -> 1.40 s); a merge costs the device less against the steps it saves than the CPU.
    merge_gain = 1.25
    #: Judged by the probe's own count (not measured on a GPU with the CPU's growth rule).
    merge_probe_growth = False

    def __init__(self, memory_budget=None):
        # Device memory comes from the pool of the device, shared by the process's backends; the
        # store's arrays are kept in the device's cache (memory.DeviceMemory). A query sets
        # its budget with begin() and gives its blocks back with end().
        self.memory = device_memory()
        self.pool = self.memory.pool
        self._cache = self.memory.cache
        self.budget = None
        if memory_budget is not None:           # used outside Graph's queries: limits for it now
            self.budget = parse_size(memory_budget)
            self.memory.allow(self.budget)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self._pinned = [None, None]
        self._pinned_busy = [None, None]    # the copy last issued from each pinned buffer
        self.load_balance = None        # None: follow SGSI_LOAD_BALANCE (0 = the warp way for every row)
        self._costs = None
        self._sms = None
        self._peak = None               # the pool's most bytes in use during a query (_PeakMemory)
        # h2d_bytes: every copy to the device (segments, signatures, labels, degree index);
        # h2d_segment_bytes: the segment copies, through the pinned buffers; h2d_seconds: the time
        # those took on the copy stream (CUDA events); stage_seconds: host time filling the buffers.
        # h2d_mapped_bytes: the part of h2d_segment_bytes copied straight from registered maps;
        # stream_seconds: device time from a stream's start to the end of the join's work on its
        # last segment (summed over the streams that copy a segment; nested streams overlap).
        self.stats = {"segments": 0, "segment_bytes": 0, "h2d_bytes": 0, "h2d_segment_bytes": 0,
                      "h2d_mapped_bytes": 0, "h2d_seconds": 0.0, "stage_seconds": 0.0, "stream_seconds": 0.0,
                      "cache_hits": 0, "expand_seconds": 0.0}
        self._copies = []               # ((start,), end) events of segment copies not yet timed
        self._spans = []                # ((start, copy stream start), end) events of streams not yet timed
        self._expands = []              # ((start,), end) events of row expansions not yet timed

    def sms(self):
        """The device's number of SMs (read once)."""
        if self._sms is None:
            self._sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        return self._sms

    # -- moving data ---------------------------------------------------------------
    def to_device(self, a):
        return cp.asarray(a)

    def to_host(self, a):
        return read_small(a) if isinstance(a, cp.ndarray) else np.asarray(a)

    def _cached(self, key):
        """The device cache's entry for ``key`` (now the most recently used), or None."""
        hit = self._cache.get(key)
        if hit is not None:
            self.stats["cache_hits"] += 1
        return hit

    def store_arrays(self, keys, read):
        """Device copies of store arrays (``read()`` gives them, one per key), kept in the device
        LRU cache between queries: the store is read only when one of them is missing."""
        if all(key in self._cache for key in keys):
            return [self._cached(key)[0] for key in keys]
        out = []
        for key, array in zip(keys, read()):
            with self.memory.caching():
                dev = cp.asarray(array)
            self.stats["h2d_bytes"] += dev.nbytes
            self._cache.put(key, (dev, None), dev.nbytes)
            out.append(dev)
        return out

    def vertex_labels(self, store, seg):
        """The labels of vertex segment ``seg`` as :meth:`candidate_bits` takes them: the device
        copy of the label array (the kernel's threads test their vertex's label first)."""
        return self.store_arrays([(store.token, "labels", seg)], lambda: [store.vertex_labels(seg)])[0]

    def derived(self, key, make):
        """An array computed on the device from the store alone (a degree mask), kept in the device
        LRU cache between queries under ``key``: ``make()`` runs only when it is missing."""
        hit = self._cached(key)
        if hit is not None:
            return hit[0]
        with self.memory.caching():
            array = make()
        self._cache.put(key, (array, None), array.nbytes)
        return array

    def dense_degrees(self, store, p):
        """|N(v, l)| of every vertex in partition ``p`` (int32, zero off the partition), built from
        its degree index batches and kept in the device cache between queries (4 bytes a vertex);
        None when it would not fit the cache (the memory budget): the batches are searched then."""
        if 4 * store.n_vertices > self._cache.limit:
            return None
        return dense_degrees_of(store, self, p)

    def synchronize(self):
        """Wait for the device's work and copies; the timings of the finished ones join the stats."""
        cp.cuda.get_current_stream().synchronize()
        self.copy_stream.synchronize()
        self._time_copies()

    def measuring_memory(self):
        """Context of one query: sets ``stats["device_peak_bytes"]``, the most device memory this
        backend's pool held while it ran (its segment cache included)."""
        return _PeakMemory(self)

    def begin(self, store, memory_budget=None) -> int:
        """Start a query of ``store`` with ``memory_budget`` (None: the default, half of what the
        device has for sgsi); returns the budget in bytes. The pool's limit and the cache follow."""
        self.budget = self.memory.default_budget() if memory_budget is None else parse_size(memory_budget)
        self.memory.begin(self.budget, store)
        return self.budget

    def end(self, failed=False, keep=False):
        """The query that :meth:`begin` started ended; ``failed``: by an error or a cancel, whose
        copies and work may be in flight (waited for) and whose arrays are collected first.
        ``keep``: the pool's free blocks stay for the next query (:meth:`release`), unless failed."""
        if failed:
            try:
                self.synchronize()
            except cp.cuda.runtime.CUDARuntimeError:
                pass
            self._pinned_busy = [None, None]
        self.memory.end(self.budget, failed, keep)

    def release(self):
        """The free blocks kept by :meth:`end` (``keep``) go back, where no query runs on the device."""
        self.memory.release()

    def recover(self):
        """After a :class:`~sgsi.errors.MemoryShortage`: the failed run's arrays collected and
        the pool's free blocks given back, before the query runs again."""
        gc.collect()
        self.memory.trim(0)

    @property
    def pool_limit(self) -> int:
        return self.memory.limit()

    def run(self, fn, *args):
        """``fn(*args)`` with every CuPy allocation taken from the device's pool. Past the
        pool's limit the query stops with :class:`~sgsi.errors.MemoryShortage` (the caller
        runs it again on a smaller budget)."""
        with cp.cuda.using_allocator(self.pool.malloc if self._peak is None else self._malloc_measured):
            try:
                return fn(*args)
            except cp.cuda.memory.OutOfMemoryError as e:
                raise MemoryShortage(f"the query needed more GPU memory than its budget allows: its pool is "
                                     f"limited to {format_size(self.pool_limit)} (memory budget "
                                     f"{format_size(self.budget)} less the store cache's "
                                     f"{format_size(self._cache.limit)}, + {format_size(POOL_ALLOWANCE)})") from e

    def _malloc_measured(self, size):
        """``pool.malloc``, keeping the most bytes sgsi's pools have held (:class:`_PeakMemory`)."""
        mem = self.pool.malloc(size)
        used = self.memory.used_bytes()
        if used > self._peak:
            self._peak = used
        return mem


    def costs(self):
        """t_sn and t_kl of this device, measured once and cached on disk."""
        if self._costs is None:
            self._costs = device_costs()
        return self._costs
