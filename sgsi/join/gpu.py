"""GPU backend on CuPy: segments streamed through page-locked host memory (§6).

Segments move host-to-device on their own stream: while the join computes on
segment k, segment k+1 is already being copied. They are copied straight
from the store's segment files, mapped and registered with CUDA as
read-only page-locked memory (:class:`_MappedBlocks`): the copy engine reads
the page cache at the pinned rate, with no staging copy on the host. Where
that is not possible (no support, the limit of registered bytes reached, a
store read through Arrow), a segment is read into one of two pinned staging
buffers first. Segments that fit are kept on the device in an LRU cache
bounded by half the memory budget (in-core is then the special case of one
pass). Hot steps use the kernels of :mod:`sgsi.join.kernels`.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
import weakref
from collections import OrderedDict

import cupy as cp
import numpy as np

from ..partition import pcsr
from . import balance, kernels
from .backend import Overlaps, sets_then_summary
from .backend import run_starts as backend_run_starts  # the kernel's, or CuPy's for other dtypes
from .gpu_memory import POOL_ALLOWANCE, device_memory
from .stream import dense_degrees_of, segment_ranges, spanning

_BLOCK = 256
#: Longest list of a vertex in one segment that gather_lists gives one warp; longer ones get a block.
_GATHER_WARP_MAX = 1024
#: Blocks of gather_lists_block, which stride over the vertices for the lists longer than that.
_GATHER_BLOCKS = 2048


def _grid(n_threads):
    return (max(1, (int(n_threads) + _BLOCK - 1) // _BLOCK),)


#: Set bits of uint32 words, summed (per row with ``axis=1``).
_popcount_rows = cp.ReductionKernel("uint32 x", "int64 y", "__popc(x)", "a + b", "y = a", "0", "sgsi_popcount")


#: Arrays up to this long are scanned (``scan``, ``flatnonzero``) by one block in one launch;
#: longer ones in one single-pass launch (``scan_pass``: tiles of ``_SCAN_ROUNDS`` values a thread,
#: a block a tile, each tile's prefix found by looking back at the tiles before it). CuPy's scan
#: costs some 40-130 us of launches and host work whatever the size (measured on the 100M walks),
#: and a scan in tiles three launches, which added up over the dozens of scans of a query's steps.
#: One block took 87 us of device time on 50,000 values, the single pass 19.5 us on 300,000 (one
#: H200, probe scan_probe, in git history).
_SMALL_SCAN = 1 << 13
#: Threads of a ``scan_pass`` block (at most ``SCAN_BLOCK_MAX``), and the values each takes
#: (``SCAN_ROUNDS`` in the kernel).
_SCAN_BLOCK = 512
_SCAN_ROUNDS = 8
_SCAN_KERNELS = {np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.bool_): "bool"}


class _ScanState:
    """What the single-pass kernels (``scan_pass``, ``piece_pass``) keep across launches: a ticket
    counter handing their tiles out in launch order (set back to 0 by each launch's last tile), and
    per tile a flag, ``_WIDTH`` int64 of aggregate and as many of inclusive prefix. Each launch gets
    a new epoch, which the flags it sets carry: flags of earlier launches read as not set, so none
    is cleared between launches.

    One state per host thread and CUDA stream (:func:`_scan_state`): the launches on one stream run
    in order, so one launch's tiles never meet another's. Its memory is allocated outside the
    memory pools (a few bytes a tile; it outlives the queries)."""

    _WIDTH = 5                         # values a tile publishes, at most (piece_pass's summary)
    _EPOCH_END = 1 << 29               # epochs fit a flag's int32 beside 2 status bits

    def __init__(self):
        self.tiles = 0
        self.epoch = 0
        counters = self._zeros(2, cp.uint64)
        self.ticket, self.done = counters[:1], counters[1:]     # done: reduce_ints' finished blocks

    @staticmethod
    def _zeros(n, dtype):
        nbytes = n * np.dtype(dtype).itemsize
        mem = cp.cuda.MemoryPointer(cp.cuda.Memory(nbytes), 0)     # cudaMalloc, no pool
        mem.memset_async(0, nbytes)
        return cp.ndarray((n,), dtype, memptr=mem)

    def args(self, n_tiles):
        """The state's kernel arguments (ticket, flags, agg, incl, epoch) for a launch of ``n_tiles``."""
        if n_tiles > self.tiles or self.epoch + 1 >= self._EPOCH_END:
            self.tiles = max(1024, 1 << (int(n_tiles) - 1).bit_length(), self.tiles)
            self.flags = self._zeros(self.tiles, cp.int32)
            self.agg = self._zeros(self.tiles * self._WIDTH, cp.int64)
            self.incl = self._zeros(self.tiles * self._WIDTH, cp.int64)
            self.epoch = 0
        self.epoch += 1
        return self.ticket, self.flags, self.agg, self.incl, self.epoch


_scan_states = threading.local()


def _scan_state() -> _ScanState:
    """The :class:`_ScanState` of this thread on the current device and stream."""
    states = getattr(_scan_states, "by_stream", None)
    if states is None:
        states = _scan_states.by_stream = {}
    key = (cp.cuda.runtime.getDevice(), cp.cuda.get_current_stream().ptr)
    state = states.get(key)
    if state is None:
        state = states[key] = _ScanState()
    return state


def scan(a, exclusive=False, sum_out=0):
    """Inclusive prefix sum of a 1-D array as ``numpy.cumsum`` gives it (int64 for bool, int32 and
    int64); ``exclusive``: each value's sum before it (``cumsum(a) - a``) in the same launch.
    ``sum_out``: the address of a result slot for the sum of the values (:func:`scan_total`), or 0."""
    kind = _SCAN_KERNELS.get(a.dtype)
    n = int(a.size)
    if kind is None or n == 0 or a.ndim != 1:
        out = cp.cumsum(a, dtype=cp.int64) if kind is not None else cp.cumsum(a)
        return out - a if exclusive else out
    a = cp.ascontiguousarray(a)
    out = cp.empty(n, cp.int64)
    if n <= _SMALL_SCAN:
        kernels.kernel("scan_small_" + kind)((1,), (1024,), (a, n, out, exclusive, sum_out))
        return out
    tile = _SCAN_BLOCK * _SCAN_ROUNDS
    tiles = (n + tile - 1) // tile
    kernels.kernel("scan_pass_" + kind)((tiles,), (_SCAN_BLOCK,),
                                        (a, n, out, exclusive, sum_out) + _scan_state().args(tiles))
    return out


def scan_total(a, exclusive=False):
    """(:func:`scan` of ``a`` (``exclusive``: as scan takes it), the sum of ``a`` as a Python int):
    the scan's kernel writes the sum into a result slot (:func:`result_slots`) as it scans, where
    the scan's last value was copied back."""
    if _SCAN_KERNELS.get(a.dtype) is None or a.size == 0 or a.ndim != 1:
        out = scan(a)
        total = read_last(out) if out.size else 0
        return (out - a if exclusive else out), total
    host, ptr = result_slots(1)
    out = scan(a, exclusive=exclusive, sum_out=ptr)
    return out, read_results(host)[0]


def flatnonzero(a):
    """``cp.flatnonzero``: the indices (int64) of the true entries, one host read for their number."""
    n = int(a.size)
    if a.dtype != np.bool_ or n == 0 or a.ndim != 1:
        return cp.flatnonzero(a)
    a = cp.ascontiguousarray(a)
    if n > _SMALL_SCAN:
        ends, total = scan_total(a)
        out = cp.empty(total, cp.int64)
        kernels.kernel("nonzero_at")(_grid(n), (_BLOCK,), (a, ends, n, out))
        return out
    out = cp.empty(n, cp.int64)
    host, count = result_slots(1)
    kernels.kernel("nonzero_small")((1,), (1024,), (a, n, out, count))
    return out[:read_results(host)[0]]


#: ``distinct_index`` of int32 values spanning up to this many (past 16 a value) takes
#: :func:`distinct_dense` too (r/8 bytes of bits and r/2 of word counts and ranks: 10 MB here),
#: where a sort and CuPy's run finding cost some 300 us of host time (a 12-vertex walk's profile).
DISTINCT_DENSE_RANGE = 1 << 24


def distinct_dense(values, lo, r):
    """``distinct_index`` of int32 or int64 ``values`` within [lo, lo + r): a bit a value (``mark_bits``:
    an element sets its bit only where it reads unset, where a plain scatter serialises on a
    hub's repeats), the words' set bits counted and scanned, one host read of their number, and
    one kernel writing the distinct values and each element's index among them
    (``distinct_of_bits``). The bits and their words' ranks take r/8 and r/4 bytes, where a
    byte and a rank a value took 9r."""
    values = cp.ascontiguousarray(values)
    wide = values.dtype == cp.int64
    n = int(values.size)
    words = (r + 31) // 32
    bits = cp.zeros(words, dtype=cp.uint32)
    (kernels.kernel("mark_bits_i64") if wide else kernels.kernel("mark_bits"))(_grid(n), (_BLOCK,),
                                                                               (values, n, lo, bits))
    counts = cp.empty(words, cp.int64)
    kernels.kernel("word_counts")(_grid(words), (_BLOCK,), (bits, words, 32 * words, counts))
    wend, distinct = scan_total(counts)
    uniq = cp.empty(distinct, values.dtype)
    idx = cp.empty(n, cp.int64)
    (kernels.kernel("distinct_of_bits_i64") if wide else kernels.kernel("distinct_of_bits"))(
        _grid(max(n, words)), (_BLOCK,), (bits, wend, words, lo, values, n, uniq, idx))
    return uniq, idx


def pair_key(c0, c1):
    """(``c0.astype(int64) << 32 | c1.astype(int64)`` of two int32 columns, whether those keys
    ascend) (reference: backend.pair_key): one ``pair_key`` launch writing the keys and, into a
    result slot, whether any descends, and the slot's read."""
    n = int(c0.size)
    key = cp.empty(n, cp.int64)
    host, ptr = result_slots(1)
    host[0] = 0                     # the kernel only ever writes 1
    if n:
        kernels.kernel("pair_key")(_grid(n), (_BLOCK,), (cp.ascontiguousarray(c0), cp.ascontiguousarray(c1), n,
                                                         key, ptr))
    return key, read_results(host)[0] == 0


def scatter_equal(out, idx, values):
    """``out[idx] = values`` (int64) where equal indices carry equal values, each element
    writing only where ``out`` does not hold its value yet (see :func:`distinct_dense`)."""
    n = int(idx.size)
    if idx.dtype != np.int64 or values.dtype != np.int64 or out.dtype != np.int64 or n == 0:
        out[idx] = values
        return
    kernels.kernel("scatter_equal")(_grid(n), (_BLOCK,), (cp.ascontiguousarray(idx), cp.ascontiguousarray(values),
                                                         n, out))


def row_scan(counts, starts=None, total=None):
    """Per slot of rows of ``counts`` slots laid end to end: its row (``starts`` None:
    ``repeat_index``), or ``starts[row] + its place in the row`` (:func:`sgsi.partition.pcsr.
    ragged_indices`). One host sync for the total (none where the caller gives ``total``, the sum
    of ``counts``), the ``row_marks`` kernel, one scan (int64)."""
    counts = counts.astype(cp.int64, copy=False)
    if counts.size == 0:
        return cp.zeros(0, cp.int64)
    if total is None:
        ends, total = scan_total(counts)
    else:
        ends = scan(counts)
    if total == 0:
        return cp.zeros(0, cp.int64)
    ramp = starts is not None
    if ramp:
        mark = cp.ones(total, cp.int64)
        off = cp.asarray(starts).astype(cp.int64, copy=False) - (ends - counts)   # start - first slot
    else:
        mark = cp.zeros(total, cp.int64)
        off = ends                                                                  # unused
    n = int(counts.size)
    kernels.kernel("row_marks")(_grid(n), (_BLOCK,), (ends, counts, off, ramp, n, total, mark))
    return scan(mark)


pcsr.use_device_scan(cp, row_scan)       # pcsr.ragged_indices of CuPy arrays (partition imports no join)


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


#: Most bytes a read takes through this thread's pinned buffer (:func:`read_small`); more go
#: through CuPy's copy.
_READ_SMALL_MAX = 1 << 16
_read_buffers = threading.local()


def read_small(a):
    """A small device array on the host (a NumPy copy): an asynchronous copy into a pinned buffer
    of this thread's and one synchronize of the stream, where CuPy's copy into pageable memory
    cost some 6 us more a read of the host's time (15.4 against 9.4 us, one H100,
    probe read_probe, in git history); a count reads a dozen times or more. Past ``_READ_SMALL_MAX``
    bytes, CuPy's copy."""
    shape = a.shape
    a = cp.ascontiguousarray(a)
    nbytes = int(a.nbytes)
    if nbytes > _READ_SMALL_MAX:
        return cp.asnumpy(a).reshape(shape)
    buf = getattr(_read_buffers, "buf", None)
    if buf is None:
        buf = _read_buffers.buf = np.frombuffer(cp.cuda.alloc_pinned_memory(_READ_SMALL_MAX), np.uint8)
    if nbytes:
        stream = cp.cuda.get_current_stream()
        a.data.copy_to_host_async(buf.ctypes.data, nbytes, stream)
        stream.synchronize()
    return buf[:nbytes].view(a.dtype).reshape(shape).copy()


def read_last(a) -> int:
    """``int(a[-1])`` of a device array, through :func:`read_small`."""
    return int(read_small(a[-1:])[0])


#: int64 slots of a thread's ring of result slots (:func:`result_slots`).
_RESULT_SLOTS = 1 << 12
#: 0: result slots are device memory, read back by a copy (as before them), to measure what they
#: gain (probe consts_probe, in git history).
_MAPPED_RESULTS = 1


class _ResultRing:
    """A thread's pinned host memory for small results that kernels write themselves."""

    def __init__(self):
        dev = cp.cuda.runtime.getDevice()
        if not cp.cuda.runtime.getDeviceProperties(dev).get("unifiedAddressing", 0):
            raise RuntimeError("sgsi's GPU backend needs unified addressing (a 64-bit CUDA platform): "
                               "its kernels write small results into pinned host memory")
        self.size = _RESULT_SLOTS
        self.mem = cp.cuda.alloc_pinned_memory(8 * self.size)
        self.host = np.frombuffer(self.mem, np.int64, self.size)
        self.ptr = int(self.host.ctypes.data)
        self.at = 0


def result_slots(k):
    """``k`` int64 slots of pinned host memory for a kernel to write a small result into itself:
    (their host view, the address the kernel takes), read with :func:`read_results` (a synchronize,
    no copy). Where a kernel wrote device memory and a read copied it back, the copy cost the host
    some 15 us a read (31.4 against 16.2 us with the kernel's launch, one H100,
    probe mapped_probe, in git history), and a count reads a dozen times or more. Pinned memory is the
    device's to address under unified addressing, at its host address. A thread's slots are taken
    in turn from its ring; at the ring's end the stream is synchronized before the first slots are
    taken again, so no kernel still writes them. The kernel must write the slots plainly (no
    atomics: those on host memory need not be atomic over the bus)."""
    if not _MAPPED_RESULTS:
        dev = cp.empty(k, cp.int64)
        return dev, dev.data.ptr
    ring = getattr(_read_buffers, "ring", None)
    if ring is None:
        ring = _read_buffers.ring = _ResultRing()
    if k > ring.size:
        raise ValueError(f"result_slots: {k} slots asked for, a ring holds {ring.size}")
    at = ring.at
    if at + k > ring.size:
        cp.cuda.get_current_stream().synchronize()
        at = 0
    ring.at = at + k
    return ring.host[at:at + k], ring.ptr + 8 * at


def read_results(host):
    """The values (Python ints) of result slots (:func:`result_slots`) once the work queued on the
    current stream, their kernels' included, is done."""
    if isinstance(host, cp.ndarray):            # device slots (_MAPPED_RESULTS off)
        return read_small(host).tolist()
    cp.cuda.get_current_stream().synchronize()
    return host.tolist()


class _Staging:
    """A pinned buffer of one thread's for small host arrays on their way to the device (argument
    tables): each is copied in on the current stream from its own stretch of the buffer, where
    ``cp.asarray`` took a block of CuPy's pinned pool and an event a copy (some 8 us more of the
    host's time, probe h2d_probe, in git history). The buffer's two halves are used in turn; a half is
    taken again once the copies issued from it before have been done (its event)."""

    HALF = 1 << 15

    def __init__(self):
        self.buf = np.frombuffer(cp.cuda.alloc_pinned_memory(2 * self.HALF), np.uint8)
        self.half, self.at = 0, 0
        self.done = [None, None]        # per half: an event after its last copies

    def to_device(self, a):
        a = np.ascontiguousarray(a)
        nbytes = int(a.nbytes)
        if nbytes > self.HALF:
            return cp.asarray(a)
        stream = cp.cuda.get_current_stream()
        at = (self.at + 15) & ~15
        if at + nbytes > self.HALF:             # the other half, once its copies are done
            self.done[self.half] = stream.record()
            self.half, at = 1 - self.half, 0
            if self.done[self.half] is not None:
                self.done[self.half].synchronize()
        host = self.buf[self.half * self.HALF + at:][:nbytes]
        host[:] = a.view(np.uint8).reshape(-1)
        out = cp.empty(a.shape, a.dtype)
        if nbytes:
            out.data.copy_from_host_async(host.ctypes.data, nbytes, stream)
        self.at = at + nbytes
        return out


def to_device_small(a):
    """``cp.asarray`` of a small host array through this thread's :class:`_Staging`."""
    staging = getattr(_read_buffers, "staging", None)
    if staging is None:
        staging = _read_buffers.staging = _Staging()
    return staging.to_device(a)


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

#: Blocks of a ``candidate_bits`` launch an SM (the kernel's CB_BLOCKS_PER_SM): a launch has at most
#: this many times the SMs, one wave of blocks, each striding over the vertices (fewer blocks, fewer
#: atomics adding the sets' sizes and overlaps).
_CANDIDATE_BLOCKS_PER_SM = 8
#: Most entries of a ``candidate_bits`` argument table (copied to shared memory, 16 KB): pattern
#: vertices past it, or past 32, take more launches.
_CANDIDATE_TABLE = 2048

#: Most arrays :func:`stack_rows` and scalars :func:`read_ints` take in one launch (the kernels'
#: pointer arguments); more take more launches.
_STACK_MAX = 8


def stack_rows(arrays, idx=None):
    """``cp.stack(arrays)`` of 1-D arrays of one dtype and size (``idx``: of ``cp.take(a, idx)``
    of arrays of one dtype): one ``stack_rows_4`` or ``stack_rows_8`` launch (the arrays as
    pointer arguments) for every ``_STACK_MAX`` arrays of 4- or 8-byte elements, where CuPy's
    stack costs some 70 us of host time and its take some 20 us an array (measured on one H100's
    host, probe op_costs, in git history); others through CuPy."""
    k = len(arrays)
    dtype = arrays[0].dtype if k else None
    if k == 0 or dtype.itemsize not in (4, 8) or \
            any(a.ndim != 1 or a.dtype != dtype or (idx is None and a.size != arrays[0].size) for a in arrays):
        return cp.stack(arrays if idx is None else [cp.take(a, idx) for a in arrays])
    n = int(arrays[0].size if idx is None else idx.size)
    out = cp.empty((k, n), dtype)
    if n:
        arrays = [cp.ascontiguousarray(a) for a in arrays]
        at = 0 if idx is None else cp.ascontiguousarray(idx.astype(cp.int64, copy=False))
        fn = kernels.kernel("stack_rows_4") if dtype.itemsize == 4 else kernels.kernel("stack_rows_8")
        for a in range(0, k, _STACK_MAX):       # up to _STACK_MAX rows a launch, from row a of out
            part = arrays[a:a + _STACK_MAX]
            fn(((n + _BLOCK - 1) // _BLOCK, len(part)), (_BLOCK,),
               tuple(part + [part[0]] * (_STACK_MAX - len(part)) + [at, n, out[a:]]))
    return out


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


def take(a, idx, dtype=None):
    """``cp.take(a, idx)`` of a 1-D array (``dtype``: then ``.astype(dtype)``): one ``take_*``
    launch for 4- and 8-byte values and an int32 or int64 index, int32 values taken as int64 too,
    where CuPy's take cost some 20 us of host time (an int32 index and the cast a launch each
    more); other arrays through CuPy."""
    size = a.itemsize
    widen = dtype is not None and np.dtype(dtype) != a.dtype
    if a.ndim != 1 or idx.ndim != 1 or size not in (4, 8) or idx.dtype not in (cp.int32, cp.int64) or \
            (widen and not (a.dtype == cp.int32 and np.dtype(dtype) == cp.int64)):
        got = cp.take(a, idx)
        return got if dtype is None else got.astype(dtype, copy=False)
    n = int(idx.size)
    out = cp.empty(n, cp.int64 if widen else a.dtype)
    if n:
        at = idx.dtype == cp.int64
        if widen:
            fn = kernels.kernel("take_wide_i64") if at else kernels.kernel("take_wide_i32")
        elif size == 8:
            fn = kernels.kernel("take_8_i64") if at else kernels.kernel("take_8_i32")
        else:
            fn = kernels.kernel("take_4_i64") if at else kernels.kernel("take_4_i32")
        fn(_grid(n), (_BLOCK,), (cp.ascontiguousarray(a), int(a.size), cp.ascontiguousarray(idx), n, out))
    return out


def run_starts(v):
    """Whether each value of a 1-D int32 or int64 array starts a run of equal values, in one
    ``run_starts_*`` launch (reference: backend.run_starts, which takes other arrays to CuPy)."""
    n = int(v.size)
    out = cp.empty(n, dtype=bool)
    if n:
        fn = kernels.kernel("run_starts_i64") if v.dtype == cp.int64 else kernels.kernel("run_starts_i32")
        fn(_grid(n), (_BLOCK,), (cp.ascontiguousarray(v), n, out))
    return out


def runs(v):
    """(distinct values, where each run starts, where it ends) of a sorted non-empty 1-D array
    (reference: backend.runs): the run starts (``backend.run_starts``), their positions (one
    read for their number), their values (:func:`take`) and ends (``run_ends``), where CuPy's
    fills, comparisons, slice copies and take cost some 100 us of host time."""
    start = flatnonzero(backend_run_starts(cp, v))
    k = int(start.size)
    end = cp.empty(k, cp.int64)
    kernels.kernel("run_ends")(_grid(k), (_BLOCK,), (start, k, int(v.size), end))
    return take(v, start), start, end


def take_columns(arrays, idx):
    """``[cp.take(a, idx) for a in arrays]`` (1-D arrays): the arrays of one dtype gathered by one
    :func:`stack_rows` launch for up to ``_STACK_MAX`` of them, each taken as a row of its output
    (one array too: CuPy's take cost 26 us of host time a call in a light count's profile)."""
    out = [None] * len(arrays)
    by_dtype = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype, []).append(i)
    for members in by_dtype.values():
        for a in range(0, len(members), _STACK_MAX):
            part = members[a:a + _STACK_MAX]
            if len(part) == 1 and arrays[part[0]].dtype.itemsize not in (4, 8):
                out[part[0]] = cp.take(arrays[part[0]], idx)
                continue
            rows = stack_rows([arrays[i] for i in part], idx)
            for r, i in enumerate(part):
                out[i] = rows[r]
    return out


#: Threads of a ``reduce_ints`` block, the elements a thread takes at least, and the most blocks an
#: array gets (about two waves of an H100's SMs: past that, each thread takes more).
_REDUCE_BLOCK = 256
_REDUCE_PER_THREAD = 16
_REDUCE_BLOCKS = 264


#: The reductions of ``reduce_ints`` (the low two of an array's four bits of its ``ops``).
_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2}


def read_reductions(pairs):
    """Python ints of ("sum" | "max" | "min", int array) pairs (reference: backend.host_reductions;
    the max and min of an empty array are 0), up to 4 arrays a ``reduce_ints`` launch and one read
    in all, where each of CuPy's reductions cost some 20-30 us of host time and ``read_ints`` a
    gather launch more."""
    if len(pairs) > _RESULT_SLOTS:
        return [v for a in range(0, len(pairs), _RESULT_SLOTS) for v in read_reductions(pairs[a:a + _RESULT_SLOTS])]
    host, ptr = result_slots(len(pairs))         # the last block of each launch writes its results there
    for a in range(0, len(pairs), 4):
        part = pairs[a:a + 4]
        # int32 arrays are read as they are (bit 2 of their ops); other dtypes as int64.
        arrays = [cp.ascontiguousarray(x if x.dtype == cp.int32 else x.astype(cp.int64, copy=False))
                  for _op, x in part]
        k = len(arrays)
        longest = max(int(x.size) for x in arrays)
        blocks = max(1, min(_REDUCE_BLOCKS, -(-longest // (_REDUCE_BLOCK * _REDUCE_PER_THREAD))))
        partials = cp.empty(k * blocks, cp.int64)
        ops = sum((_REDUCE_OPS[op] | (4 if x.dtype == cp.int32 else 0)) << (4 * j)
                  for j, ((op, _x), x) in enumerate(zip(part, arrays)))
        sizes = [x.size for x in arrays] + [0] * (4 - k)
        kernels.kernel("reduce_ints")((blocks, k), (_REDUCE_BLOCK,),
                                      tuple(arrays + [arrays[0]] * (4 - k) + sizes) +
                                      (ops, partials, _scan_state().done, ptr + 8 * a))
    return read_results(host)


def arange(n):
    """``cp.arange(n, dtype=cp.int64)`` in one ``iota_i64`` launch, where CuPy's took some 23 us of
    host time a call (a light count's profile)."""
    out = cp.empty(int(n), cp.int64)
    if n:
        kernels.kernel("iota_i64")(_grid(n), (_BLOCK,), (n, out))
    return out


def read_ints(scalars):
    """Python ints of device scalars (0-d arrays) in one read (reference: backend.host_ints):
    ``gather_scalars`` launches, each gathering up to ``_STACK_MAX`` of them into one array, where
    stacking them cost CuPy's stack (some 70 us of host time)."""
    scalars = [cp.ascontiguousarray(s.astype(cp.int64, copy=False)) for s in scalars]
    k = len(scalars)
    if k == 0:
        return []
    if k == 1:                                  # one: read where it is
        return read_small(scalars[0].reshape(1)).tolist()
    if k > _RESULT_SLOTS:
        return [v for a in range(0, k, _RESULT_SLOTS) for v in read_ints(scalars[a:a + _RESULT_SLOTS])]
    host, ptr = result_slots(k)
    for a in range(0, k, _STACK_MAX):
        part = scalars[a:a + _STACK_MAX]
        kernels.kernel("gather_scalars")((1,), (32,), tuple(part + [part[0]] * (_STACK_MAX - len(part))
                                                            + [len(part), ptr + 8 * a]))
    return read_results(host)


def _conflict_table(conflict_cols, placeholder):
    """The rows' own vertices as the kernels read them: one int32 row per conflict column
    (``placeholder``, a 1 x 1 zero, where there is none)."""
    if not conflict_cols:
        return placeholder
    return stack_rows([c.astype(cp.int32, copy=False) for c in conflict_cols])


def _pointer(a, dtype, held):
    """Device address of ``a`` as a contiguous ``dtype`` array (0 for None); the array is
    appended to ``held``, to stay alive until the launch that reads it is issued."""
    if a is None:
        return 0
    if not (isinstance(a, cp.ndarray) and a.dtype == dtype and a.flags.c_contiguous):
        a = cp.ascontiguousarray(cp.asarray(a, dtype=dtype))      # some 3 us even where a is already so
    held.append(a)
    return int(a.data.ptr)


def _record_table(head, records):
    """One int64 device array a kernel reads its arguments from: ``head``, then where each of
    ``records`` starts in the array, then the records back to back."""
    starts = len(head) + len(records) + np.cumsum([0] + [len(r) for r in records[:-1]])
    return to_device_small(np.array(list(head) + list(starts) + [x for r in records for x in r], dtype=np.int64))


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


def _pointers(arrays):
    """The device addresses of ``arrays``, as a device array a kernel takes as ``T* const*``
    (one null pointer when there are none)."""
    return to_device_small(np.array([a.data.ptr for a in arrays] or [0], dtype=np.uint64))


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


class GpuOverlaps(Overlaps):
    """:class:`~sgsi.join.backend.Overlaps` with one launch and one host read per question
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
        per_pair = max(1, min(64, (words + 8 * _BLOCK - 1) // (8 * _BLOCK)))
        pointers = _pointers(every)
        kernels.kernel("bitset_overlaps")((len(new) * len(every) * per_pair,), (_BLOCK,),
                                          (pointers[self.seen:], pointers, len(every),
                                           words, per_pair, out))

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


class GpuBackend:
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

    def __init__(self, memory_budget=None):
        # Device memory comes from the pool of the device, shared by the process's backends; the
        # store's arrays are kept in the device's cache (gpu_memory.DeviceMemory). A query sets
        # its budget with begin() and gives its blocks back with end().
        self.memory = device_memory()
        self.pool = self.memory.pool
        self._cache = self.memory.cache
        self.budget = None
        if memory_budget is not None:           # used outside Graph's queries: limits for it now
            from ..budget import parse_size
            self.budget = parse_size(memory_budget)
            self.memory.allow(self.budget)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self._pinned = [None, None]
        self._pinned_busy = [None, None]    # the copy last issued from each pinned buffer
        self.load_balance = None        # None: follow SGSI_LOAD_BALANCE (0 = the warp way for every row)
        self._costs = None
        self._sms = None
        with self.memory.caching():         # kept: never in the query pool, whose blocks it would pin
            self._no_conflicts = cp.zeros((1, 1), cp.int32)     # the kernels' conflict table with no column
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
        from ..budget import parse_size
        self.budget = self.memory.default_budget() if memory_budget is None else parse_size(memory_budget)
        self.memory.begin(self.budget, store)
        return self.budget

    def end(self, failed=False):
        """The query that :meth:`begin` started ended; ``failed``: by an error or a cancel, whose
        copies and work may be in flight (waited for) and whose arrays are collected first."""
        if failed:
            try:
                self.synchronize()
            except cp.cuda.runtime.CUDARuntimeError:
                pass
            self._pinned_busy = [None, None]
        self.memory.end(self.budget, failed)

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
                from ..budget import format_size
                from ..errors import MemoryShortage
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

    def _pinned_buffer(self, slot, nbytes):
        buf = self._pinned[slot]
        if buf is None or buf.size < nbytes:
            mem = cp.cuda.alloc_pinned_memory(max(nbytes, 1 << 20))
            buf = np.frombuffer(mem, np.uint8, max(nbytes, 1 << 20))
            self._pinned[slot] = buf
        return buf

    def _stage(self, store, seg, slot):
        """Start the copy of one segment; returns (groups, ci, event)."""
        self._time_copies()
        hit = self._cached((store.token, "segment", seg))
        if hit is not None:
            return hit[0], hit[1], None
        # Streams may nest (a hub's list is read while later steps read theirs): never
        # overwrite a pinned buffer whose copy to the device is still in flight.
        if self._pinned_busy[slot] is not None:
            self._pinned_busy[slot].synchronize()
            self._pinned_busy[slot] = None
        direct = store.reads_direct
        if direct:
            got = self._stage_mapped(store, seg)
            if got is not None:
                return got
        if direct:
            # pread(2) straight into the pinned buffer: no page faults on the memory map, several
            # threads for a large segment; the groups are checked on the device below.
            g_bytes, c_bytes = store.segment_sizes(seg)
        else:
            groups, ci = store.segment(seg)
            g_bytes, c_bytes = groups.nbytes, ci.nbytes
        pinned = self._pinned_buffer(slot, g_bytes + c_bytes)
        t0 = time.perf_counter()
        if direct:
            _g, _c, shape = store.read_segment(seg, pinned)
        else:
            shape = groups.shape
            pinned[:g_bytes] = groups.reshape(-1).view(np.uint8)
            pinned[g_bytes:g_bytes + c_bytes] = ci.view(np.uint8)
        self.stats["stage_seconds"] += time.perf_counter() - t0
        dev = self._copy_target(g_bytes + c_bytes)
        start = self.copy_stream.record()
        dev.set(pinned[:g_bytes + c_bytes], stream=self.copy_stream)
        self._pinned_busy[slot] = self.copy_stream.record()
        return self._copied(store, seg, dev, start, g_bytes, shape)

    def _copy_target(self, nbytes):
        """Device memory for a segment the copy stream writes. The pool may hand out memory that
        work queued on the compute stream still reads (a segment dropped from the cache just
        before): the copy stream waits for the work queued so far, which is the join's on the
        segments before the one now computing, so the copy still overlaps that one."""
        with self.memory.caching():
            dev = cp.empty(nbytes, dtype=cp.uint8)
        self.copy_stream.wait_event(cp.cuda.get_current_stream().record())
        return dev

    def _stage_mapped(self, store, seg):
        """Start the copy of one segment straight from the store's registered file maps; None
        where its blocks cannot be registered (the pinned buffers are used then)."""
        g_bytes, c_bytes = store.segment_sizes(seg)
        dev = self._copy_target(g_bytes + c_bytes)
        start = self.copy_stream.record()
        if not MAPPED.copy(store, store.segment_spans(seg), dev.data.ptr, self.copy_stream):
            return None
        self.stats["h2d_mapped_bytes"] += g_bytes + c_bytes
        return self._copied(store, seg, dev, start, g_bytes, store.segment_shape(seg))

    def _copied(self, store, seg, dev, start, g_bytes, shape):
        """A segment whose copy into ``dev`` (groups, then ci) the copy stream has queued since
        event ``start``: timed, counted and cached; returns (groups, ci, the copy's end event)."""
        event = self.copy_stream.record()
        self._copies.append(((start,), event))
        self.stats["h2d_bytes"] += dev.nbytes
        self.stats["h2d_segment_bytes"] += dev.nbytes
        d_groups = dev[:g_bytes].view(cp.int32).reshape(shape)
        d_ci = dev[g_bytes:].view(cp.int32)
        self._cache.put((store.token, "segment", seg), (d_groups, d_ci), dev.nbytes)
        return d_groups, d_ci, event

    def segments(self, store, seg_ids):
        """Yield (position, groups, ci) on the device; segment k+1 copies while k computes."""
        seg_ids = seg_ids.tolist() if isinstance(seg_ids, np.ndarray) else [int(s) for s in seg_ids]
        if not seg_ids:
            return
        if self._resident(store, seg_ids):
            # Every segment on the device already: nothing to copy, overlap or time (a stream's
            # events cost more host time than a launch on its segment).
            for i, seg in enumerate(seg_ids):
                hit = self._cached((store.token, "segment", seg))
                if hit is None:             # dropped by a nested stream since: the rest copied
                    for j, groups, ci in self._timed_stream(store, seg_ids[i:]):
                        yield i + j, groups, ci
                    return
                self.stats["segments"] += 1
                self.stats["segment_bytes"] += hit[0].nbytes + hit[1].nbytes
                yield i, hit[0], hit[1]
            return
        yield from self._timed_stream(store, seg_ids)

    def _resident(self, store, seg_ids):
        """Whether every segment of ``seg_ids`` is in the device cache."""
        return all((store.token, "segment", int(s)) in self._cache for s in seg_ids)

    def _timed_stream(self, store, seg_ids):
        """:meth:`segments` with copies: the stream's device time is taken by CUDA events."""
        # The stream's span on the device: from its start on either stream to the end of the
        # join's work on its last segment (CUDA events, timed once they are done).
        starts = (cp.cuda.get_current_stream().record(), self.copy_stream.record())
        try:
            yield from self._stream(store, seg_ids)
        finally:
            # A copy left in flight (the stream given up early) must not land in memory the
            # pool hands out again.
            cp.cuda.get_current_stream().wait_event(self.copy_stream.record())
            self._spans.append((starts, cp.cuda.get_current_stream().record()))
            self._time_copies()

    def _stream(self, store, seg_ids):
        nxt = self._stage(store, seg_ids[0], 0)
        for i in range(len(seg_ids)):
            groups, ci, event = nxt
            if event is not None:
                cp.cuda.get_current_stream().wait_event(event)
                # Read with pread, the segment is checked here, on the device (store.segment checks
                # what it maps on the host); the next segment's copy is already under way.
                store.check_segment(seg_ids[i], groups, cp)
            if i + 1 < len(seg_ids):
                # The slot reused here held segment i-1, whose copy the stream already waited for.
                nxt = self._stage(store, seg_ids[i + 1], (i + 1) % 2)
            self.stats["segments"] += 1
            self.stats["segment_bytes"] += groups.nbytes + ci.nbytes
            yield i, groups, ci

    def _time_copies(self):
        """Add the durations of the finished segment copies to ``h2d_seconds``, and of the
        finished streams to ``stream_seconds``."""
        self._copies = self._time_finished(self._copies, "h2d_seconds")
        self._spans = self._time_finished(self._spans, "stream_seconds")
        self._expands = self._time_finished(self._expands, "expand_seconds")

    def _time_finished(self, pending, stat):
        """Add to ``stats[stat]`` the durations of the finished ``(start events, end event)`` of
        ``pending`` (from the earliest start); returns those not finished yet."""
        left = []
        for starts, end in pending:
            if end.done:
                self.stats[stat] = self.stats.get(stat, 0) + max(cp.cuda.get_elapsed_time(s, end)
                                                                  for s in starts) / 1e3
            else:
                left.append((starts, end))
        return left

    # -- small array helpers (the CPU backend has NumPy twins) -----------------------
    def bincount(self, x, n):
        """``numpy.bincount(x, minlength=n)`` for ids below n: one atomic per distinct id of a
        warp (``count_ids``), where ``add.at`` serialised on the repeats of a hub's id."""
        out = cp.zeros(n, cp.int64)
        if x.size:
            x = cp.ascontiguousarray(x.astype(cp.int64, copy=False))
            kernels.kernel("count_ids")(_grid(x.size), (_BLOCK,), (x, x.size, out))
        return out

    def add_at(self, out, idx, values):
        """``numpy.add.at(out, idx, values)``; int64 in one atomic per distinct index of a warp
        (``add_ids``), where ``add.at`` serialised on the repeats of one row's index."""
        if not idx.size:
            return
        if out.dtype == cp.int64 and getattr(values, "shape", None) == idx.shape and values.dtype == cp.int64:
            kernels.kernel("add_ids")(_grid(idx.size), (_BLOCK,),
                                      (cp.ascontiguousarray(idx.astype(cp.int64, copy=False)),
                                       cp.ascontiguousarray(values), idx.size, out))
            return
        cp.add.at(out, idx, values)

    def bincount_weights(self, x, w, n):
        out = cp.zeros(n, cp.float64)
        if x.size:
            cp.add.at(out, x, w)
        return out

    def argsort(self, a):
        return cp.argsort(a)

    def lexsort(self, keys):
        return cp.lexsort(cp.stack(keys))

    def repeat_index(self, counts):
        """For each output slot of ``repeat(x, counts)``, the index into x (marks at the rows'
        first slots, then a scan: :func:`row_scan`)."""
        return row_scan(counts)

    def test_bits(self, bits, v):
        out = cp.empty(v.size, dtype=cp.bool_)
        if v.size:
            v32 = v.astype(cp.int32, copy=False)
            kernels.kernel("test_bits")(_grid(v.size), (_BLOCK,), (bits, v32, v.size, out))
        return out

    def bits_to_ids(self, bits, n, count=None):
        """Sorted vertex ids (int32) whose bit is set (reference: CpuBackend.bits_to_ids): the set
        bits counted per word, a scan, then each word writes its ids. ``count``: the number of
        set bits below n where the caller knows it (the plan's candidate counts), which spares
        the read of the scan's total (a wait on the device)."""
        words = int(bits.size)
        if words == 0 or count == 0:
            return cp.zeros(0, cp.int32)
        counts = cp.empty(words, cp.int64)
        kernels.kernel("word_counts")(_grid(words), (_BLOCK,), (bits, words, n, counts))
        if count is None:
            ends, count = scan_total(counts)
        else:
            ends = scan(counts)
        ids = cp.empty(count, cp.int32)
        if ids.size:
            kernels.kernel("word_ids")(_grid(words), (_BLOCK,), (bits, words, n, ends, counts,
                                                                 ids.size, ids))
        return ids

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
        _popcount_rows(stack_rows(bits), axis=1, out=buf[:k])
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
        return read_small(_popcount_rows(stack_rows(bitsets), axis=1)).tolist()

    # -- kernels for the hot steps ------------------------------------------------------
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
        kernels.kernel("pcsr_lookup")(_grid(n * 32), (_BLOCK,),
                                      (groups, groups.shape[0], groups.shape[1],
                                       cp.ascontiguousarray(v.astype(cp.int32, copy=False)), n, start, end))
        return start, end

    def gather_segment(self, groups, ci, verts, cbits, start, fill, gba):
        """First-edge gather of one segment (reference: CpuBackend.gather_segment): the PCSR
        lookup, then one warp per vertex, one block per vertex whose list in the segment is
        longer than ``_GATHER_WARP_MAX``; ``start`` and ``fill`` are int64, ``fill`` is written
        in place."""
        n = int(verts.size)
        st, en = self.pcsr_lookup(groups, verts)
        if n == 0 or ci.size == 0:
            return
        kernels.kernel("gather_lists")(_grid(n * 32), (_BLOCK,),
                                       (st, en, n, ci, cbits, _GATHER_WARP_MAX, start, fill, gba))
        kernels.kernel("gather_lists_block")((min(n, _GATHER_BLOCKS),), (_BLOCK,),
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
            kernels.kernel("own_hit_rows")(_grid(n), (_BLOCK,),
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
            conf = _conflict_table(cols, self._no_conflicts)
            kernels.kernel("sizes_less_own")(_grid(n), (_BLOCK,),
                                             (cp.ascontiguousarray(row_tuple.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(sstart.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(scount.astype(cp.int64, copy=False)),
                                              cp.ascontiguousarray(evals.astype(cp.int32, copy=False)), conf,
                                              len(cols), n, out))
        return out

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
                kernels.kernel("segments_meeting")(_grid(words), (_BLOCK,),
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
                    kernels.kernel("refine_fused")(_grid((w1 - w0) * 32), (_BLOCK,),
                                                   (groups, groups.shape[0], groups.shape[1],
                                                    ci, bits, words, args, nu, ne, lo,
                                                    hi, w0, w1 - w0, n,
                                                    keep))
                continue
            for i, groups, ci in self.segments(store, p.seg_ids[here]):
                lo, hi = max(base, int(p.first_src[here[i]])), min(top, int(p.last_src[here[i]]))
                kernels.kernel("refine_hits")(_grid(((hi >> 5) - (lo >> 5) + 1) * 32), (_BLOCK,),
                                              (groups, groups.shape[0], groups.shape[1], ci,
                                               bits, words, args, nu, ne, lo, hi,
                                               base, hit))
            kernels.kernel("refine_drop")(_grid((w1 - w0) * 32), (_BLOCK,),
                                          (keep, words, w0, w1 - w0, args, nu, ne, hit,
                                           base, n))

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
            kernels.kernel("member_entries")(_grid(n), (_BLOCK,),
                                             (groups, groups.shape[0], groups.shape[1], ci,
                                              p.first_src[sel[i]], p.last_src[sel[i]], vcol,
                                              erow, evals, n, found))
        return found

    def add_bits_weight(self, out, bits, v, d):
        """out[0] += Σ d[i] over the i whose vertex v[i] is in ``bits`` (reference:
        CpuBackend.add_bits_weight): one ``bits_weight`` kernel, where a test, a select and a
        sum took five launches."""
        n = int(v.size)
        if n == 0:
            return
        kernels.kernel("bits_weight")((min(_grid(n)[0], 1024),), (_BLOCK,),
                                      (bits, cp.ascontiguousarray(v.astype(cp.int32, copy=False)),
                                       cp.ascontiguousarray(d.astype(cp.int64, copy=False)), n, out))

    def distinct_sum(self, col, deg, span):
        """Σ deg over the distinct values of ``col`` (reference: CpuBackend.distinct_sum): a
        bit a value of ``span`` (min, max), one ``distinct_sum`` kernel, one read."""
        n = int(col.size)
        if n == 0:
            return 0
        lo, hi = span
        seen = cp.zeros((hi - lo + 32) // 32, cp.uint32)
        out = cp.zeros(1, cp.int64)
        kernels.kernel("distinct_sum")((min(_grid(n)[0], 4096),), (_BLOCK,),
                                       (cp.ascontiguousarray(col.astype(cp.int32, copy=False)),
                                        cp.ascontiguousarray(deg.astype(cp.int64, copy=False)), n,
                                        lo, seen, out))
        return int(out[0])

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
        records = [[_pointer(deg, cp.int32, held), len(users)] + [int(u) for u in users] for users, deg in jobs]
        args = _record_table([_pointer(b, cp.uint32, held) for b in bits], records)
        kernels.kernel("union_degrees")((min(_grid(words)[0], 1024), len(jobs)), (_BLOCK,),
                                        (args, k, words, n, out))

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
            kernels.kernel("piece_summary_small")((1,), (1024,), (deg, col, n, out, dense,
                                                                  null if offsets is None else offsets,
                                                                  null if zeros is None else zeros))
        else:
            state = _scan_state()
            if offsets is not None:
                tiles = (n + 256 * _SUMMARY_ROUNDS - 1) // (256 * _SUMMARY_ROUNDS)
                kernels.kernel("piece_pass_offsets")((tiles,), (256,), (deg, col, n, out, dense, offsets,
                                                                        zeros) + state.args(tiles))
            else:
                rounds = max(_SUMMARY_ROUNDS_SUM, -(-n // (256 * _SUMMARY_TILES)))
                tiles = (n + 256 * rounds - 1) // (256 * rounds)
                kernels.kernel("piece_pass")((tiles,), (256,), (deg, col, n, rounds, out, dense)
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
        conf = _conflict_table(conflict_cols, self._no_conflicts)
        args = (groups, groups.shape[0], groups.shape[1], ci,
                cp.ascontiguousarray(v.astype(cp.int32, copy=False)), n, cbits,
                conf, len(conflict_cols), 0 if F is None else F, fill,
                0 if gba is None else gba)
        if n < _ROW_THREAD_ROWS:
            per = _ROW_LISTS_ROWS
            kernels.kernel("row_lists")(((n + per - 1) // per,), (_BLOCK,),
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
            kernels.kernel("row_lists_short")(_grid(n), (_BLOCK,), args + (rest, count, starts, lens, chunks))
            kernels.kernel("row_lists_spread")((_ROW_REST_BLOCKS_PER_SM * self.sms(),), (_BLOCK,),
                                               (ci, cbits, conf, len(conflict_cols), n, fill,
                                                rest, count, starts, lens, scan(chunks)))
            return
        rest = cp.empty(n + 1, cp.int64)            # the rows left, then their number
        count = rest[n:]
        count.data.memset_async(0, 8)
        null = 0
        kernels.kernel("row_lists_short")(_grid(n), (_BLOCK,), args + (rest, count, null, null, null))
        # Their number is not read: the blocks stride over them.
        blocks = min(-(-n // _ROW_REST_ROWS), _ROW_REST_BLOCKS_PER_SM * self.sms())
        kernels.kernel("row_lists")((blocks,), (_BLOCK,), args + (rest, count, _ROW_REST_ROWS))

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
            kernels.kernel("pack_rows")(_grid(n * 32), (_BLOCK,),
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
                record = [label if labels is not None else -1, _pointer(labels, cp.int32, held), len(pairs)]
                for col, q in pairs:
                    record += [_pointer(col, cp.uint32, held), int(q)]
                records.append(record + [len(masks)] + [_pointer(m, cp.bool_, held) for m in masks])
            threads = count + start % 32
            blocks = min((threads + _BLOCK - 1) // _BLOCK, _CANDIDATE_BLOCKS_PER_SM * self.sms())
            launches = _filter_launches([len(r) for r in records])     # _filter_record_length each
            if stats is not None and len(launches) > 1:
                raise ValueError("candidate_bits: the sets' stats need one launch a segment")
            for u0, u1 in launches:
                args = _record_table([], records[u0:u1])
                kernels.kernel("candidate_bits")((blocks,), (_BLOCK,),
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
        ptrs = _pointers(values)
        if probes:
            kernels.kernel("intersect_lists")(_grid(n * 32), (_BLOCK,),
                                              (n, len(got), ptrs, lstart, lcount, off, out, kept))
        etuple = self.repeat_index(kept)
        evals = out[pcsr.ragged_indices(off, kept, cp)]
        return etuple, evals, probes, untested

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
        conf = _conflict_table(conflict_cols, self._no_conflicts)
        args = (flist, fstart, fcnt, conf, len(conflict_cols), conf.shape[1], F, fill, gba)
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
                self._launch_pool(r, d, fcnt, args, most // _POOL_ELEMENTS + 1)
            elif name == "block":
                kernels.kernel("expand_rows_block")((n,), (_BLOCK_ROW,), (r, d, n) + args)
            else:
                self._expand_own(r, d, flist, fstart, fcnt, conflict_cols, F, fill, gba)

    def _launch_pool(self, rows, run, fcnt, args, n_blocks):
        """Rows that share task pools: the rows starting in each run of _POOL_ELEMENTS entries go to
        one block. ``n_blocks`` is at least the blocks needed (known on the host without a sync); the
        extra ones find no rows and return."""
        pstart = cp.concatenate([cp.zeros(1, cp.int64), scan(fcnt[run])])
        block_of = pstart[:-1] // _POOL_ELEMENTS               # the block a row starts in
        bstart = cp.searchsorted(block_of, cp.arange(n_blocks + 1, dtype=cp.int64)).astype(cp.int64)
        kernels.kernel("expand_rows_pool")((n_blocks,), (_BLOCK_ROW,), (rows, run, pstart, bstart) + args)

    def _launch_warp(self, rows, run, args):
        n = int(rows.size)                      # a warp takes 32 rows
        kernels.kernel("expand_rows")(_grid((n + 31) // 32 * 32), (_BLOCK,), (rows, run, n) + args)

    def _expand_own(self, rows, run, flist, fstart, fcnt, conflict_cols, F, fill, gba):
        """The heaviest rows, flattened over the whole device: every entry its own thread."""
        cnt = fcnt[run]
        if int(cnt.sum()) == 0:
            return
        vals = flist[pcsr.ragged_indices(fstart[run], cnt, cp)]
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

    def costs(self):
        """t_sn and t_kl of this device, measured once and cached on disk."""
        if self._costs is None:
            self._costs = _device_costs()
        return self._costs


_BLOCK_ROW = 1024
#: Most entries of one row that ``extend`` packs with a warp a row (``pack_rows``).
_PACK_ROW_MAX = 1 << 16
#: Vertices whose refinement hits (4 bytes each) one pass of ``GpuBackend.refine_round`` holds:
#: 64 MB, whatever the graph (a multiple of 32: a window's bitset words are its own).
REFINE_WINDOW = 1 << 24

#: Elements of the rows one task-pool block takes (four rounds of 1024).
_POOL_ELEMENTS = 4096


#: Registration unit of the segment files' maps: a segment's copy registers the blocks it spans.
MAPPED_BLOCK = 32 << 20
#: cudaDevAttrHostRegisterReadOnlySupported, cudaHostRegisterReadOnly, cudaMemcpyHostToDevice.
_ATTR_REGISTER_READ_ONLY, _REGISTER_READ_ONLY, _HOST_TO_DEVICE = 113, 8, 1


def mapped_limit() -> int:
    """Bytes of store files that may stay registered (page-locked) at once: a quarter of the
    host's memory, or SGSI_GPU_MAPPED_BYTES (0: segments always go through the pinned buffers)."""
    env = os.environ.get("SGSI_GPU_MAPPED_BYTES")
    if env is not None:
        return int(env)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 0


class _MappedBlocks:
    """Blocks of the stores' segment files, registered with CUDA as read-only page-locked memory,
    so that a segment is copied to the device straight from the file's map at the pinned rate.

    Process-wide (CUDA registers an address range once, whichever backend asks), least recently
    used first out past :func:`mapped_limit`. A block keeps its map alive (the store's view of
    the whole file, :meth:`~sgsi.storage.store.Store.map_buffer`) until it is unregistered; a
    store's blocks are unregistered when the store is closed.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.blocks = OrderedDict()     # (map address, block number) -> bytes registered
        self.maps = {}                  # map address -> the view of the whole map (keeps it alive)
        self.bytes = 0
        self.supported = None

    def _available(self):
        if self.supported is None:
            try:
                dev = cp.cuda.Device().id
                self.supported = cp.cuda.runtime.deviceGetAttribute(_ATTR_REGISTER_READ_ONLY, dev) == 1
            except cp.cuda.runtime.CUDARuntimeError:
                self.supported = False
        return self.supported

    def copy(self, store, spans, dst, stream) -> bool:
        """Copy ``spans`` (``Store.segment_spans``) one after another to device address ``dst`` on
        ``stream``, from registered blocks; False (nothing copied) where a block cannot be
        registered."""
        limit = mapped_limit()
        if limit <= 0 or not self._available():
            return False
        with self.lock:         # no block goes out between its registration and the copies issued
            pieces, needed = [], set()
            for name, offset, nbytes in spans:
                view = store.map_buffer(name)
                base = view.ctypes.data
                for b in range(offset // MAPPED_BLOCK, -(-(offset + nbytes) // MAPPED_BLOCK)):
                    needed.add((base, b))
                    if not self._register(store, view, b, limit, needed):
                        return False
                a = offset
                while a < offset + nbytes:
                    n = min(offset + nbytes, (a // MAPPED_BLOCK + 1) * MAPPED_BLOCK) - a
                    pieces.append((base + a, n))       # one piece per block: copies stay inside one
                    a += n
            at = dst
            for ptr, n in pieces:
                cp.cuda.runtime.memcpyAsync(at, ptr, n, _HOST_TO_DEVICE, stream.ptr)
                at += n
        return True

    def _register(self, store, view, b, limit, needed):
        """Register block ``b`` of the map under ``view`` (already there: marked used), making room
        by unregistering the least recently used blocks outside ``needed``."""
        base = view.ctypes.data
        key = (base, b)
        if key in self.blocks:
            self.blocks.move_to_end(key)
            return True
        start = b * MAPPED_BLOCK
        nbytes = min(MAPPED_BLOCK, int(view.size) - start)
        if self.bytes + nbytes > limit:
            old = [k for k in self.blocks if k not in needed]
            while old and self.bytes + nbytes > limit:
                self._unregister(old.pop(0), synchronize=True)
        if self.bytes + nbytes > limit:
            return False
        try:
            cp.cuda.runtime.hostRegister(base + start, nbytes, _REGISTER_READ_ONLY)
        except cp.cuda.runtime.CUDARuntimeError:
            return False
        if base not in self.maps:
            self.maps[base] = view
            store.on_close(lambda _store, base=base: self.release(base))
            # A store dropped without close(): its blocks go when it is collected (not at exit).
            weakref.finalize(store, self.release, base).atexit = False
        self.blocks[key] = nbytes
        self.bytes += nbytes
        return True

    def _unregister(self, key, synchronize):
        if synchronize:         # copies from the block may still be in flight on any stream
            cp.cuda.runtime.deviceSynchronize()
        nbytes = self.blocks.pop(key)
        self.bytes -= nbytes
        cp.cuda.runtime.hostUnregister(key[0] + key[1] * MAPPED_BLOCK)
        if not any(k[0] == key[0] for k in self.blocks):
            self.maps.pop(key[0], None)

    def release(self, base):
        """Unregister the blocks of the map at ``base`` (its store is being closed)."""
        with self.lock:
            keys = [k for k in self.blocks if k[0] == base]
            if keys:
                cp.cuda.runtime.deviceSynchronize()
            for k in keys:
                self._unregister(k, synchronize=False)
            self.maps.pop(base, None)


MAPPED = _MappedBlocks()


def _device_costs():
    import json
    import os
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = int(props["multiProcessorCount"])
    cache = os.path.join(os.path.expanduser("~"), ".cache", "sgsi", "device-costs.json")
    try:
        with open(cache) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if name in known and "t_split" in known[name]:
        k = known[name]
        return balance.DeviceCosts(sms, k["t_sn"], k["t_kl"], k["t_split"])
    a = cp.arange(1 << 20, dtype=cp.int32)
    sink = cp.zeros(1, cp.int32)
    iters = 2048

    def timed(fn, repeat=5):
        fn()
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t) / repeat

    it = kernels.kernel("calib_iterations")
    plain = timed(lambda: it((sms,), (1024,), (a, a.size, iters, 0, sink)))
    synced = timed(lambda: it((sms,), (1024,), (a, a.size, iters, 1, sink)))
    empty = kernels.kernel("calib_empty")
    launch = timed(lambda: [empty((1,), (32,), ()) for _ in range(100)]) / 100
    split = timed(_split_rows_once) - timed(lambda: _split_rows_once(warps_only=True))
    t_iter = max(plain / iters, 1e-9)
    t_sn = max((synced - plain) / iters, 0.0) / t_iter
    t_kl = launch / t_iter
    t_split = max(split, 0.0) / t_iter
    known[name] = {"t_sn": t_sn, "t_kl": t_kl, "t_split": t_split, "t_iter_s": t_iter, "sms": sms}
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache, "w") as f:
            json.dump(known, f, indent=1)
    except OSError:
        pass
    return balance.DeviceCosts(sms, t_sn, t_kl, t_split)


def _split_rows_once(warps_only=False, n_rows=4096):
    """What :meth:`GpuBackend._expand_rows` does on the host to send rows two ways (the warp way
    and task pools) beyond launching the warp way for all: the sort by way, each way's gathers and
    the pool's set-up (its launch excluded: an empty launch stands for each); for t_split."""
    fcnt = cp.arange(n_rows, dtype=cp.int64) % 64
    rows, run = cp.arange(n_rows, dtype=cp.int64), cp.arange(n_rows, dtype=cp.int64)
    empty = kernels.kernel("calib_empty")
    if warps_only:
        empty((1,), (32,), ())
        return
    way_of_bin = np.array([0, 1], np.uint8)
    order = cp.argsort(to_device_small(way_of_bin)[fcnt[run] // balance.BIN])
    half = n_rows // 2
    for sel in (order[:half], order[half:]):
        _r, d = rows[sel], run[sel]
        empty((1,), (32,), ())
    pstart = cp.concatenate([cp.zeros(1, cp.int64), scan(fcnt[d])])
    cp.searchsorted(pstart[:-1] // _POOL_ELEMENTS, cp.arange(2, dtype=cp.int64))
