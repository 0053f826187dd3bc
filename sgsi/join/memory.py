"""Memory the process keeps between queries: glibc's heap, tuned for a join's temporaries and
trimmed after each query, and the least-recently-used cache of arrays kept for the next query
(the CPU backend's derived arrays, the GPU's device copies of the store)."""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import sys
import threading


#: glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_tuned = threading.Event()


def tune_allocator():
    """Let glibc's malloc keep freed temporaries for reuse (once per process).

    A join step allocates and frees arrays of a few MB at a high rate. By
    default glibc maps each large one afresh and gives it back on free, so
    every step pays page faults on memory it just released (a fifth of the
    CPU time on the 1M-edge bench). Arrays up to 32 MB now come from the heap,
    and up to 512 MB of free heap is kept. Linux/glibc only; set
    SGSI_MALLOC_TUNING=0 to leave the allocator as it is.
    """
    if _tuned.is_set():
        return
    _tuned.set()
    if os.environ.get("SGSI_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):      # not glibc (musl, ...): nothing to tune
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 512 << 20)


#: Free heap memory left to the process after a query (more goes back to the system).
KEEP_FREE_HEAP = 64 << 20


def trim_heap():
    """Give the free part of glibc's heap back to the system where it passes ``KEEP_FREE_HEAP``:
    :func:`tune_allocator` keeps freed arrays for reuse within a query, which would otherwise
    stay with the process after it. Linux/glibc only (elsewhere nothing is done)."""
    libc = _libc()
    if libc is None:
        return
    info = _Mallinfo2()
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
        if info.fordblks <= KEEP_FREE_HEAP:
            return
    libc.malloc_trim(ctypes.c_size_t(KEEP_FREE_HEAP))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


@functools.lru_cache(maxsize=1)
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim                  # noqa: B018 - glibc only
        return libc
    except (OSError, AttributeError):
        return None


class LruCache:
    """Values kept under keys within ``limit`` bytes, the least recently used first out: the
    CPU backend's derived arrays, the GPU's device copies of the store (one cache a device,
    shared by the process's threads: every method takes the lock). A value larger than the
    limit is not kept."""

    def __init__(self, limit):
        self.limit = int(limit)
        self.bytes = 0
        self._items = collections.OrderedDict()        # key -> (value, bytes)
        self._lock = threading.RLock()

    def __contains__(self, key):
        return key in self._items

    def keys(self):
        """The keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def get(self, key):
        """The value kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key, value, nbytes):
        """Keep ``value`` (``nbytes`` bytes) under ``key``, dropping the least recently used
        values past the limit; False where it is larger than the limit (not kept)."""
        with self._lock:
            if nbytes > self.limit:
                return False
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (value, nbytes)
            self.bytes += nbytes
            self._shrink()
            return True

    def resize(self, limit):
        """A new limit; the least recently used values go until the rest fit it."""
        with self._lock:
            self.limit = int(limit)
            self._shrink()

    def drop(self, which):
        """Drop the values whose key ``which(key)`` holds for."""
        with self._lock:
            for key in [k for k in self._items if which(k)]:
                self.bytes -= self._items.pop(key)[1]

    def _shrink(self):
        while self.bytes > self.limit:
            _key, (_value, b) = self._items.popitem(last=False)
            self.bytes -= b

    def clear(self):
        with self._lock:
            self._items.clear()
            self.bytes = 0
