"""One registered connection: its cache of results, kept by generation.

DuckDB may bind one statement more than once, so a result is cached by
(store, pattern, options). Each new transaction id the connection's calls
carry starts a new generation; a result is reused within its generation and
the next one, and deleted when a later one begins.
"""

from __future__ import annotations

import os
import threading

from . import scratch
from .stores import manifest_version


class Entry:
    """A cached result: its value, its scratch directory (or None) and its generation."""

    __slots__ = ("value", "directory", "generation")

    def __init__(self, value, directory, generation):
        self.value, self.directory, self.generation = value, directory, generation


class Connection:
    """One registered connection: its cache of results, by generation."""

    def __init__(self, ref):
        self.ref = ref                  # weakref to the DuckDB connection, or None
        self.lock = threading.RLock()
        self.txid = None
        self.generation = 0
        self.files = {}                 # key -> Entry(list of parquet files, directory)
        self.counts = {}                # key -> Entry(int, None)
        self.running = set()            # threading.Event of each engine run in progress
        self.last_stats = {}            # Graph.last_stats of the last engine run

    def cancel_running(self):
        for event in list(self.running):
            event.set()

    def run(self):
        """``with c.run() as cancel:`` an Event that ``con.interrupt()`` sets while the block runs."""
        return _Run(self)

    def advance(self, txid):
        """Start a new generation on a new transaction id; drop results two generations old."""
        if txid == self.txid:
            return
        self.txid = txid
        self.generation += 1
        for cache in (self.files, self.counts):
            for key in [k for k, e in cache.items() if e.generation < self.generation - 1]:
                scratch.remove(cache.pop(key).directory)

    def clear(self):
        for cache in (self.files, self.counts):
            for e in cache.values():
                scratch.remove(e.directory)
            cache.clear()


class _Run:
    __slots__ = ("conn", "event")

    def __init__(self, conn):
        self.conn, self.event = conn, threading.Event()

    def __enter__(self):
        self.conn.running.add(self.event)
        return self.event

    def __exit__(self, *exc):
        self.conn.running.discard(self.event)
        return False


def cache_key(graph, pattern, device, memory_budget, homomorphism, max_rows):
    """Cache key: the arguments, plus the identity of the store's manifest and a query file's modification time."""
    def mtime(p):
        try:
            return os.stat(p).st_mtime_ns
        except (OSError, TypeError, ValueError):
            return None
    g = os.path.abspath(graph) if graph is not None else None
    return (g, manifest_version(g) if g else None, pattern,
            mtime(pattern) if pattern and "(" not in pattern else None,
            device or "auto", memory_budget, bool(homomorphism), max_rows)
