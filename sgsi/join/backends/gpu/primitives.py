"""Array primitives on the device, each a launch or two of ``cuda/primitives.cu`` where CuPy's
own took tens of microseconds of host time: prefix sums (single-pass), reductions read in one
transfer, gathers and stacks, run starts, distinct values, bitset ids.

:class:`ArrayOps` gives them to :class:`~sgsi.join.backends.gpu.backend.GpuBackend` as the
array operations of the backend seam (:class:`~sgsi.join.backends.base.Backend`).
"""

from __future__ import annotations

import threading

import cupy as cp
import numpy as np

from .launch import BLOCK, Kernels, grid
from .transfers import RESULT_SLOTS, read_last, read_results, read_small, result_slots, to_device_small

kernel = Kernels("primitives")


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

    One state per host thread and CUDA stream (:func:`scan_state`): the launches on one stream run
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


def scan_state() -> _ScanState:
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
        kernel("scan_small_" + kind)((1,), (1024,), (a, n, out, exclusive, sum_out))
        return out
    tile = _SCAN_BLOCK * _SCAN_ROUNDS
    tiles = (n + tile - 1) // tile
    kernel("scan_pass_" + kind)((tiles,), (_SCAN_BLOCK,),
                                        (a, n, out, exclusive, sum_out) + scan_state().args(tiles))
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
        kernel("nonzero_at")(grid(n), (BLOCK,), (a, ends, n, out))
        return out
    out = cp.empty(n, cp.int64)
    host, count = result_slots(1)
    kernel("nonzero_small")((1,), (1024,), (a, n, out, count))
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
    (kernel("mark_bits_i64") if wide else kernel("mark_bits"))(grid(n), (BLOCK,),
                                                                               (values, n, lo, bits))
    counts = cp.empty(words, cp.int64)
    kernel("word_counts")(grid(words), (BLOCK,), (bits, words, 32 * words, counts))
    wend, distinct = scan_total(counts)
    uniq = cp.empty(distinct, values.dtype)
    idx = cp.empty(n, cp.int64)
    (kernel("distinct_of_bits_i64") if wide else kernel("distinct_of_bits"))(
        grid(max(n, words)), (BLOCK,), (bits, wend, words, lo, values, n, uniq, idx))
    return uniq, idx


def pair_key(c0, c1):
    """(``c0.astype(int64) << 32 | c1.astype(int64)`` of two int32 columns, whether those keys
    ascend) (reference: CpuBackend.pair_key): one ``pair_key`` launch writing the keys and, into a
    result slot, whether any descends, and the slot's read."""
    n = int(c0.size)
    key = cp.empty(n, cp.int64)
    host, ptr = result_slots(1)
    host[0] = 0                     # the kernel only ever writes 1
    if n:
        kernel("pair_key")(grid(n), (BLOCK,), (cp.ascontiguousarray(c0), cp.ascontiguousarray(c1), n,
                                                         key, ptr))
    return key, read_results(host)[0] == 0


def scatter_equal(out, idx, values):
    """``out[idx] = values`` (int64) where equal indices carry equal values, each element
    writing only where ``out`` does not hold its value yet (see :func:`distinct_dense`)."""
    n = int(idx.size)
    if idx.dtype != np.int64 or values.dtype != np.int64 or out.dtype != np.int64 or n == 0:
        out[idx] = values
        return
    kernel("scatter_equal")(grid(n), (BLOCK,), (cp.ascontiguousarray(idx), cp.ascontiguousarray(values),
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
    kernel("row_marks")(grid(n), (BLOCK,), (ends, counts, off, ramp, n, total, mark))
    return scan(mark)


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
        fn = kernel("stack_rows_4") if dtype.itemsize == 4 else kernel("stack_rows_8")
        for a in range(0, k, _STACK_MAX):       # up to _STACK_MAX rows a launch, from row a of out
            part = arrays[a:a + _STACK_MAX]
            fn(((n + BLOCK - 1) // BLOCK, len(part)), (BLOCK,),
               tuple(part + [part[0]] * (_STACK_MAX - len(part)) + [at, n, out[a:]]))
    return out


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
            fn = kernel("take_wide_i64") if at else kernel("take_wide_i32")
        elif size == 8:
            fn = kernel("take_8_i64") if at else kernel("take_8_i32")
        else:
            fn = kernel("take_4_i64") if at else kernel("take_4_i32")
        fn(grid(n), (BLOCK,), (cp.ascontiguousarray(a), int(a.size), cp.ascontiguousarray(idx), n, out))
    return out


def run_starts(v):
    """Whether each value of a 1-D array starts a run of equal values (the first one does): one
    ``run_starts_*`` launch for int32 and int64 values, CuPy's comparison for others (reference:
    CpuBackend.run_starts)."""
    if v.ndim != 1 or v.dtype not in (np.int32, np.int64):
        new = cp.empty(v.size, dtype=bool)
        if new.size:
            new[0] = True
            cp.not_equal(v[1:], v[:-1], out=new[1:])
        return new
    n = int(v.size)
    out = cp.empty(n, dtype=bool)
    if n:
        fn = kernel("run_starts_i64") if v.dtype == cp.int64 else kernel("run_starts_i32")
        fn(grid(n), (BLOCK,), (cp.ascontiguousarray(v), n, out))
    return out


def runs(v):
    """(distinct values, where each run starts, where it ends) of a sorted non-empty 1-D array
    (reference: CpuBackend.runs): the run starts (:func:`run_starts`), their positions (one
    read for their number), their values (:func:`take`) and ends (``run_ends``), where CuPy's
    fills, comparisons, slice copies and take cost some 100 us of host time."""
    start = flatnonzero(run_starts(v))
    k = int(start.size)
    end = cp.empty(k, cp.int64)
    kernel("run_ends")(grid(k), (BLOCK,), (start, k, int(v.size), end))
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
    """Python ints of ("sum" | "max" | "min", int array) pairs (reference: CpuBackend.host_reductions;
    the max and min of an empty array are 0), up to 4 arrays a ``reduce_ints`` launch and one read
    in all, where each of CuPy's reductions cost some 20-30 us of host time and ``read_ints`` a
    gather launch more."""
    if len(pairs) > RESULT_SLOTS:
        return [v for a in range(0, len(pairs), RESULT_SLOTS) for v in read_reductions(pairs[a:a + RESULT_SLOTS])]
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
        kernel("reduce_ints")((blocks, k), (_REDUCE_BLOCK,),
                                      tuple(arrays + [arrays[0]] * (4 - k) + sizes) +
                                      (ops, partials, scan_state().done, ptr + 8 * a))
    return read_results(host)


def arange(n):
    """``cp.arange(n, dtype=cp.int64)`` in one ``iota_i64`` launch, where CuPy's took some 23 us of
    host time a call (a light count's profile)."""
    out = cp.empty(int(n), cp.int64)
    if n:
        kernel("iota_i64")(grid(n), (BLOCK,), (n, out))
    return out


def read_ints(scalars):
    """Python ints of device scalars (0-d arrays) in one read (reference: CpuBackend.host_ints):
    ``gather_scalars`` launches, each gathering up to ``_STACK_MAX`` of them into one array, where
    stacking them cost CuPy's stack (some 70 us of host time)."""
    scalars = [cp.ascontiguousarray(s.astype(cp.int64, copy=False)) for s in scalars]
    k = len(scalars)
    if k == 0:
        return []
    if k == 1:                                  # one: read where it is
        return read_small(scalars[0].reshape(1)).tolist()
    if k > RESULT_SLOTS:
        return [v for a in range(0, k, RESULT_SLOTS) for v in read_ints(scalars[a:a + RESULT_SLOTS])]
    host, ptr = result_slots(k)
    for a in range(0, k, _STACK_MAX):
        part = scalars[a:a + _STACK_MAX]
        kernel("gather_scalars")((1,), (32,), tuple(part + [part[0]] * (_STACK_MAX - len(part))
                                                            + [len(part), ptr + 8 * a]))
    return read_results(host)


def pointer(a, dtype, held):
    """Device address of ``a`` as a contiguous ``dtype`` array (0 for None); the array is
    appended to ``held``, to stay alive until the launch that reads it is issued."""
    if a is None:
        return 0
    if not (isinstance(a, cp.ndarray) and a.dtype == dtype and a.flags.c_contiguous):
        a = cp.ascontiguousarray(cp.asarray(a, dtype=dtype))      # some 3 us even where a is already so
    held.append(a)
    return int(a.data.ptr)


def column_table(cols, held):
    """The int32 columns ``cols`` (a row's own vertices: a column each) as a kernel reads them
    (``const int* const*``, one null pointer where there is none), in place: no copy of the
    columns, no launch."""
    return to_device_small(np.array([pointer(c, cp.int32, held) for c in cols] or [0], np.uint64))


def record_table(head, records):
    """One int64 device array a kernel reads its arguments from: ``head``, then where each of
    ``records`` starts in the array, then the records back to back."""
    starts = len(head) + len(records) + np.cumsum([0] + [len(r) for r in records[:-1]])
    return to_device_small(np.array(list(head) + list(starts) + [x for r in records for x in r], dtype=np.int64))


def pointers(arrays):
    """The device addresses of ``arrays``, as a device array a kernel takes as ``T* const*``
    (one null pointer when there are none)."""
    return to_device_small(np.array([a.data.ptr for a in arrays] or [0], dtype=np.uint64))




class ArrayOps:
    """The array operations of the backend seam on the device (reference: CpuBackend's of the same
    names), mixed into :class:`~sgsi.join.backends.gpu.backend.GpuBackend`."""

    def ragged_indices(self, starts, counts):
        """Concatenation of ``arange(s, s + c)`` for each (s, c), int64 (:func:`row_scan`)."""
        return row_scan(cp.asarray(counts), starts)

    def run_starts(self, sorted_values):
        """Whether each value of a 1-D array starts a run of equal values (:func:`run_starts`)."""
        return run_starts(sorted_values)

    def runs(self, sorted_values):
        """Distinct values of a sorted array, and where each one's run starts and ends (exclusive):
        :func:`runs` for a 1-D one."""
        n = sorted_values.size
        if n == 0:
            e = cp.zeros(0, cp.int64)
            return sorted_values, e, e
        if sorted_values.ndim == 1:
            return runs(sorted_values)
        start = flatnonzero(run_starts(sorted_values))
        end = cp.empty_like(start)
        end[:-1] = start[1:]
        end[-1] = n
        return sorted_values[start], start, end

    def prefix_sum(self, a):
        """``cumsum`` of a 1-D array (:func:`scan`: one launch)."""
        return scan(a)

    def exclusive_sum(self, a):
        """``cumsum(a) - a`` in the scan's own launches."""
        return scan(a, exclusive=True)

    def exclusive_total(self, a):
        """(:meth:`exclusive_sum`, the sum of ``a`` as a Python int): one scan launch, which writes
        the sum into a result slot, and its read."""
        return scan_total(a, exclusive=True)

    def nonzero_index(self, a):
        """``flatnonzero`` (:func:`flatnonzero`: one launch for small bool arrays)."""
        return flatnonzero(a)

    def scatter_equal(self, out, idx, values):
        """``out[idx] = values`` where equal indices carry equal values: an element writes only
        where ``out`` does not hold its value yet (:func:`scatter_equal`)."""
        scatter_equal(out, idx, values)

    def take_values(self, a, idx, dtype=None):
        """``take(a, idx)`` of a 1-D array, cast to ``dtype`` where given (:func:`take`: one launch)."""
        return take(a, idx, dtype)

    def stack(self, arrays):
        """``stack`` of 1-D arrays of one dtype and size (:func:`stack_rows`: a launch for every 8)."""
        return stack_rows(arrays)

    def take_columns(self, arrays, idx):
        """``[take(a, idx) for a in arrays]``: the arrays of one dtype in one launch
        (:func:`take_columns`)."""
        return take_columns(arrays, idx)

    def host_ints(self, *scalars):
        """Python ints of device scalars, read in one transfer (:func:`read_ints`)."""
        return read_ints(scalars)

    def row_numbers(self, n):
        """0, 1, ..., n - 1 as int64 (:func:`arange`: one launch)."""
        return arange(n)

    def host_reductions(self, *pairs):
        """Python ints of ("sum" | "max" | "min", int array) ``pairs`` (0 for the max and min of an
        empty array), reduced on the device and read in one transfer (:func:`read_reductions`)."""
        return read_reductions(pairs)

    def pair_key(self, c0, c1):
        """(the int64 keys ``c0 << 32 | c1``, whether they ascend): for int32 columns one launch and
        one read (:func:`pair_key`)."""
        if c0.dtype == np.int32 and c1.dtype == np.int32:
            return pair_key(c0, c1)
        key = (c0.astype(cp.int64) << 32) | c1.astype(cp.int64)
        return key, key.size < 2 or bool((key[1:] >= key[:-1]).all())

    def distinct_index(self, values, span=None):
        """(sorted distinct values of a non-empty int array, index of each element among them)
        (reference: CpuBackend.distinct_index): int32 and int64 values over a range of at most
        ``DISTINCT_DENSE_RANGE`` (or 16 a value) by :func:`distinct_dense` (four launches, one host
        read); others by a mark array and a scan, or a sort and a search. ``span``: (lo, hi) bounding
        ``values`` where the caller knows them (their min and max, or wider; no host read then)."""
        lo, hi = span if span is not None else read_reductions((("min", values), ("max", values)))
        r = hi - lo + 1
        if values.dtype in (np.int32, np.int64):
            if r <= max(16 * int(values.size), DISTINCT_DENSE_RANGE) and r < 1 << 31:
                return distinct_dense(values, lo, r)
        if r <= 16 * int(values.size):
            v = values - lo
            mark = cp.zeros(r, dtype=bool)
            mark[v] = True
            rank = scan(mark)
            rank -= 1
            return (flatnonzero(mark) + lo).astype(values.dtype), cp.take(rank, v).astype(cp.int64)
        u, _start, _end = self.runs(cp.sort(values))
        return u, cp.searchsorted(u, values)

    def bincount(self, x, n):
        """``numpy.bincount(x, minlength=n)`` for ids below n: one atomic per distinct id of a
        warp (``count_ids``), where ``add.at`` serialised on the repeats of a hub's id."""
        out = cp.zeros(n, cp.int64)
        if x.size:
            x = cp.ascontiguousarray(x.astype(cp.int64, copy=False))
            kernel("count_ids")(grid(x.size), (BLOCK,), (x, x.size, out))
        return out

    def add_at(self, out, idx, values):
        """``numpy.add.at(out, idx, values)``; int64 in one atomic per distinct index of a warp
        (``add_ids``), where ``add.at`` serialised on the repeats of one row's index."""
        if not idx.size:
            return
        if out.dtype == cp.int64 and getattr(values, "shape", None) == idx.shape and values.dtype == cp.int64:
            kernel("add_ids")(grid(idx.size), (BLOCK,),
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
            kernel("test_bits")(grid(v.size), (BLOCK,), (bits, v32, v.size, out))
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
        kernel("word_counts")(grid(words), (BLOCK,), (bits, words, n, counts))
        if count is None:
            ends, count = scan_total(counts)
        else:
            ends = scan(counts)
        ids = cp.empty(count, cp.int32)
        if ids.size:
            kernel("word_ids")(grid(words), (BLOCK,), (bits, words, n, ends, counts,
                                                                 ids.size, ids))
        return ids
