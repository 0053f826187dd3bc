"""The process's device memory: one CuPy pool and one store cache per GPU, shared by every backend.

Every GPU backend of the process allocates from the pool of its device, and
keeps the store's segments, signature columns and derived arrays in the
device's one LRU cache, whose arrays come from a pool of their own (a cached
array taken out of a large free block of the query's pool would keep the
whole block from going back). So the device memory sgsi holds is bounded
once per process, however many Graphs, connections, threads or budgets:

- the cache holds at most half of the smallest running budget (and keeps
  that after the query, for the next one);
- while queries run, the query pool's limit is the largest of their budgets
  less the cache's limit, plus :data:`POOL_ALLOWANCE`: a safety net the
  engine's own accounting stays under (reached, the query runs again on half
  its budget: ``Graph``);
- after each query the pool gives its free blocks back to the driver where
  they pass :data:`KEEP_FREE` (after a failed or cancelled one always, once
  the query's arrays have been collected); a query that ends well may keep
  them for the next one instead (a sharded query's tasks on a worker), until
  :meth:`DeviceMemory.release`.

The default budget is half of what the device has for sgsi: its free memory
plus what sgsi's own pool holds (never the free memory alone, which sgsi's
cache and blocks would shrink query after query). Two processes on one GPU
each take half of what the other leaves when they start their first query;
give each an explicit ``memory_budget`` there.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections import Counter

import cupy as cp

from ....budget import MIN_BUDGET
from ...memory import LruCache

#: Device memory the pool may hold past the running queries' budgets: what a query keeps outside
#: the join steps' estimates (candidate bitsets, a vertex segment's signature columns, kernel
#: arguments, CuPy's scratch space). SGSI_GPU_POOL_ALLOWANCE (bytes) overrides it.
POOL_ALLOWANCE = int(os.environ.get("SGSI_GPU_POOL_ALLOWANCE", 256 << 20))
#: The share of the smallest running budget the store cache may hold.
CACHE_FRACTION = 0.5
#: Free pool blocks kept for the next query after one that ended well (more go back to the driver).
KEEP_FREE = 32 << 20


class DeviceMemory:
    """The pool, the store cache and the running queries' budgets of one device."""

    def __init__(self, device_id):
        self.device_id = device_id
        self.pool = cp.cuda.MemoryPool()
        self.cache = LruCache(0)
        self.cache_pool = cp.cuda.MemoryPool()     # the cache's arrays (and what makes them)
        self._lock = threading.Lock()
        self._running = Counter()           # budget -> queries running with it
        self._stores = {}                   # token of a store whose closing drops its entries -> its base_token
        self._bases = Counter()             # base_token -> stores open on those files

    def available(self) -> int:
        """Device memory sgsi may use: the free memory plus what its pool holds."""
        with cp.cuda.Device(self.device_id):
            free, _total = cp.cuda.runtime.memGetInfo()
        return int(free) + self.pool.total_bytes() + self.cache_pool.total_bytes()

    def used_bytes(self) -> int:
        """Bytes of sgsi's arrays on the device (the query pool's and the cache's)."""
        return self.pool.used_bytes() + self.cache_pool.used_bytes()

    def caching(self):
        """Context in which CuPy allocates from the cache's pool (arrays made to be kept)."""
        return cp.cuda.using_allocator(self.cache_pool.malloc)

    def default_budget(self) -> int:
        return max(MIN_BUDGET, self.available() // 2)

    def limit(self) -> int:
        """The pool's limit now (bytes)."""
        return self.pool.get_limit()

    def begin(self, budget: int, store):
        """A query of ``store`` with ``budget`` starts: the pool's limit and the cache's follow."""
        self.watch(store)
        with self._lock:
            self._running[budget] += 1
            self._follow()

    def allow(self, budget: int):
        """Limits for ``budget`` while no query runs (a backend used outside a query, in tests)."""
        with self._lock:
            if not self._running:
                self.cache.resize(int(budget * CACHE_FRACTION))
                self.pool.set_limit(size=budget - self.cache.limit + POOL_ALLOWANCE)

    def end(self, budget: int, failed: bool, keep=False):
        """A query with ``budget`` ended (``failed``: error or cancel); its free blocks go back,
        unless ``keep`` (and it ended well): then at :meth:`release`."""
        with self._lock:
            self._running[budget] -= 1
            if self._running[budget] <= 0:
                del self._running[budget]
            if self._running:
                self._follow()
            else:                           # no query to hold to its budget (0: no limit)
                self.pool.set_limit(size=0)
        if failed:
            gc.collect()                    # cycles through the query's generators hold arrays
        if failed or not keep:
            self.trim(0 if failed else KEEP_FREE)

    def release(self):
        """The free blocks kept past :data:`KEEP_FREE` go back, where no query runs."""
        with self._lock:
            if self._running:
                return
        with cp.cuda.Device(self.device_id):    # the caller's thread may be on another device
            self.trim(KEEP_FREE)

    def trim(self, keep=0):
        """Give the pools' free blocks back to the driver where they pass ``keep`` bytes."""
        for pool in (self.pool, self.cache_pool):
            if pool.total_bytes() - pool.used_bytes() > keep:
                pool.free_all_blocks()

    def clear(self):
        """Drop the cache and every free block (the next query copies the store again)."""
        self.cache.clear()
        gc.collect()
        self.trim()

    def watch(self, store):
        """Drop ``store``'s cache entries when it is closed or collected, and those of its base
        files (``store.base_token``) when the last opening that shares them is."""
        token = store.token
        with self._lock:
            if token in self._stores:
                return
            self._stores[token] = store.base_token
            self._bases[store.base_token] += 1
        store.on_close(lambda _store: self.drop_store(token))
        weakref.finalize(store, self.drop_store, token).atexit = False

    def drop_store(self, token):
        """Drop the cache's entries of one store (closed), and its base files' after the last."""
        with self._lock:
            gone = {token}
            base = self._stores.pop(token, None)
            if base is not None:
                self._bases[base] -= 1
                if self._bases[base] <= 0:
                    del self._bases[base]
                    gone.add(base)
            self.cache.drop(lambda key: key[0] in gone)

    def _follow(self):
        self.cache.resize(int(min(self._running) * CACHE_FRACTION))
        self.pool.set_limit(size=max(self._running) - self.cache.limit + POOL_ALLOWANCE)


_devices: dict = {}
_devices_lock = threading.Lock()


def device_memory(device_id=None) -> DeviceMemory:
    """The :class:`DeviceMemory` of ``device_id`` (default: the current device)."""
    if device_id is None:
        device_id = cp.cuda.runtime.getDevice()
    with _devices_lock:
        mem = _devices.get(device_id)
        if mem is None:
            mem = _devices[device_id] = DeviceMemory(device_id)
        return mem
