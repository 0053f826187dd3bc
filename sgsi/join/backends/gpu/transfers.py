"""Moving data between host and device: small reads through a pinned buffer, result slots that
kernels write in pinned host memory, a staging buffer for argument tables, and the store's
segments streamed to the device (§6).

Segments move host-to-device on their own stream: while the join computes on segment k,
segment k+1 is already being copied. They are copied straight from the store's segment files,
mapped and registered with CUDA as read-only page-locked memory (:class:`_MappedBlocks`): the copy
engine reads the page cache at the pinned rate, with no staging copy on the host. Where that is
not possible (no support, the limit of registered bytes reached, a store read through Arrow), a
segment is read into one of two pinned staging buffers first. Segments that fit are kept on the
device in an LRU cache bounded by half the memory budget (in-core is then the special case of
one pass).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict

import cupy as cp
import numpy as np


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
RESULT_SLOTS = 1 << 12
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
        self.size = RESULT_SLOTS
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




class SegmentCopies:
    """The store's segments streamed to the device (``segments``), mixed into
    :class:`~sgsi.join.backends.gpu.backend.GpuBackend`: each copied on the copy stream while the
    one before is joined, from registered maps or through two pinned buffers, and timed."""

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
        hit = self._cached((store.segment_key(seg), "segment", seg))
        if hit is not None:
            return hit[0], hit[1], None
        # Streams may nest (a hub's list is read while later steps read theirs): never
        # overwrite a pinned buffer whose copy to the device is still in flight.
        if self._pinned_busy[slot] is not None:
            self._pinned_busy[slot].synchronize()
            self._pinned_busy[slot] = None
        # Segments of a version's changes are held in memory: copied through the pinned buffers.
        direct = store.reads_direct_segment(seg)
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
        self._cache.put((store.segment_key(seg), "segment", seg), (d_groups, d_ci), dev.nbytes)
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
                hit = self._cached((store.segment_key(seg), "segment", seg))
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
        return all((store.segment_key(int(s)), "segment", int(s)) in self._cache for s in seg_ids)

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
