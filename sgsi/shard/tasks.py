"""What a Dask worker runs: one shard of a count or a match.

A worker opens a store once and keeps it, with its backend and caches, for
the tasks after (the last :data:`KEPT_STORES` stores, known by path and
manifest identity: :class:`sgsi.db.stores.OpenStores`). A task that ends well
keeps its free memory (the GPU pool's blocks) for the next task of its query,
which would allocate it again; the driver gives it back with :func:`release`
when the query ends. A task stops at the engine's next check (its result
None: no error in the worker's log) once its query's marker file is gone
(:mod:`.parts`), or, on a host that does not see the query's directory, once
:func:`cancel` of its query has run on its worker.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict

from ..db.stores import OpenStores
from ..errors import Cancelled
from ..join.query import Backends, Query, reraise_stream_error
from ..storage.store import Store
from . import parts

#: Stores a worker keeps open between tasks.
KEPT_STORES = 4
#: Seconds between two looks at a query's marker file.
MARKER_POLL = 0.01
#: Names of cancelled queries a worker remembers (their tasks still to start stop at once).
KEPT_CANCELLED = 256



class _Opened:
    """A store a worker keeps open, with the backends its tasks reuse (``older``: the one kept of
    an earlier version, whose files and deltas the new one shares)."""

    def __init__(self, path, older=None):
        self.store = older.store.newest() if older is not None else Store(path)
        self.backends = Backends()

    def close(self):
        self.backends.clear()
        self.store.close()


_STORES = OpenStores(KEPT_STORES, _Opened)
_LOCK = threading.Lock()
_RUNNING = {}                   # query name -> the stop Events of its tasks running here
_CANCELLED = OrderedDict()      # the names of the last cancelled queries


def count(path, pattern, options, shard, name, directory, sets=None):
    """The matches of ``shard`` of the query, and the engine's stats; ``sets``: the driver's
    :class:`~sgsi.join.shard.SplitSets`, or None. A task its query stopped returns None matches
    (the driver reads no result of a query it stopped; a worker's log shows no error for it)."""
    stats = {}
    with _stopped(), _watch(name, directory) as stop, _STORES.use(path) as g:
        n = Query(g.store, g.backends, pattern, cancel=stop, publish=stats.update, progress=False,
                  shard=shard, shard_sets=sets, keep_memory=True, **options).count()
        return n, stats
    return None, stats


def match(path, pattern, options, shard, name, directory, limit, sets=None):
    """Write the rows of ``shard`` as its part in ``directory``; the rows written (None where its
    query stopped it, as :func:`count`), and the stats."""
    stats = {}
    with _stopped(), _watch(name, directory) as stop, _STORES.use(path) as g:
        reader, failure = Query(g.store, g.backends, pattern, cancel=stop, publish=stats.update, progress=False,
                                shard=shard, shard_sets=sets, keep_memory=True, **options).stream(limit)
        try:
            rows = parts.write(reader, parts.path(directory, shard.index))
        except BaseException as e:
            reraise_stream_error(failure, e)        # the engine's own error, with its type
            raise
        finally:
            reader.close()
        return rows, stats
    return None, stats


@contextlib.contextmanager
def _stopped():
    """A task stopped by its query (its :class:`_Stop`) ends quietly, its result None."""
    try:
        yield
    except Cancelled:
        pass


@contextlib.contextmanager
def _watch(name, directory):
    """The :class:`_Stop` of a task of query ``name``."""
    stop = _Stop(parts.marker(directory))
    with _LOCK:
        if name in _CANCELLED:
            stop.set()
        _RUNNING.setdefault(name, set()).add(stop)
    try:
        yield stop
    finally:
        with _LOCK:
            mine = _RUNNING.get(name, set())
            mine.discard(stop)
            if not mine:
                _RUNNING.pop(name, None)


class _Stop:
    """Whether a task is to stop: :func:`cancel` came, or its query's marker file, seen when it
    started, is gone (looked at every :data:`MARKER_POLL` s at most, in the task's own thread)."""

    def __init__(self, marker):
        self.event = threading.Event()
        self.marker = marker if os.path.exists(marker) else None    # None: not seen from this host
        if self.marker is None and os.path.isdir(os.path.dirname(marker)):
            self.event.set()                # the directory, without its marker: stopped already
        self.next = 0.0

    def set(self):
        self.event.set()

    def is_set(self):
        if self.marker is not None and not self.event.is_set():
            now = time.monotonic()
            if now >= self.next:
                self.next = now + MARKER_POLL
                if not os.path.exists(self.marker):
                    self.event.set()
        return self.event.is_set()


def stop(client, name, directory, running):
    """Stop the tasks of query ``name`` (its scratch ``directory``) from the driver, at their next
    check: its marker goes (the tasks that see it) and every worker is told (:func:`cancel`, for
    those that do not); the Futures ``running`` are cancelled."""
    parts.stop(directory)
    if running:
        with contextlib.suppress(Exception):        # a scheduler that is gone runs no tasks
            client.run(cancel, name, wait=False)
            client.cancel(running)


async def cancel(name):
    """Stop the tasks of query ``name`` on this worker, those running and those to come (the
    driver runs it on every worker's event loop with ``Client.run``, not as a task in the queue;
    a coroutine, so that the driver need not wait for it)."""
    with _LOCK:
        _CANCELLED[name] = True
        while len(_CANCELLED) > KEPT_CANCELLED:
            _CANCELLED.popitem(last=False)
        for stop in _RUNNING.get(name, ()):
            stop.set()


async def release():
    """Give back the free memory this worker's tasks kept (the driver runs it on every worker
    when a query ends, as :func:`cancel`); nothing while a task runs here."""
    with _LOCK:
        if _RUNNING:
            return
    for opened in _STORES.entries():             # _Opened
        opened.backends.release()
