"""The stores a database keeps open between queries.

A query finds the GPU segments, signature columns and pinned buffers the
query before it left on the device, instead of opening the store afresh.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager

from ..storage.format import MANIFEST

#: Stores a database keeps open between queries.
OPEN_STORES = 4


class OpenStores:
    """The stores a database keeps open between queries, least recently used closed first.

    A store is known by its path and its manifest's identity (inode, size,
    modification time): one updated since is brought to its newest version
    (``opener(path, previous Graph)``, sharing what was read), one rebuilt in
    place opened anew. A store in use by a query is closed only when the last
    such query ends.
    """

    class _Open:
        __slots__ = ("version", "graph", "users", "retired")

        def __init__(self, version, graph):
            self.version, self.graph, self.users, self.retired = version, graph, 0, False

    def __init__(self, limit, opener, on_open=None):
        self.limit = limit
        self.opener = opener            # (path, the Graph of an older version or None) -> an open Graph
        self.on_open = on_open
        self.lock = threading.Lock()
        self.open = OrderedDict()           # absolute path -> _Open
        self.closed = False

    @contextmanager
    def use(self, path):
        """``with stores.use(path) as graph:`` the open Graph of the store at ``path``."""
        path = os.path.abspath(path)
        version = manifest_version(path)
        with self.lock:
            entry, previous = self.open.get(path), None
            if entry is not None and entry.version != version:
                entry, previous = None, self.open.pop(path)
            if entry is None:
                try:                    # a bad store raises here, nothing kept
                    entry = self._Open(version, self.opener(path, previous and previous.graph))
                finally:
                    if previous is not None:        # after: the new one is made from it
                        self._retire(previous)
                if self.on_open is not None:
                    self.on_open()
                if not self.closed:
                    self.open[path] = entry
                else:
                    entry.retired = True
            if path in self.open:
                self.open.move_to_end(path)
            while len(self.open) > self.limit:
                self._retire(self.open.popitem(last=False)[1])
            entry.users += 1
        try:
            yield entry.graph
        finally:
            with self.lock:
                entry.users -= 1
                if entry.retired and entry.users == 0:
                    entry.graph.close()

    def _retire(self, entry):
        entry.retired = True
        if entry.users == 0:
            entry.graph.close()

    def entries(self):
        """The open stores (Graphs) now."""
        with self.lock:
            return [entry.graph for entry in self.open.values()]

    def close_idle(self, forever=False):
        """Close the stores no query uses (those in use close when their queries end)."""
        with self.lock:
            self.closed = self.closed or forever
            for path in list(self.open):
                if forever or self.open[path].users == 0:
                    self._retire(self.open.pop(path))


def manifest_version(path):
    """(inode, size, mtime) of a store's manifest, which a rebuild replaces; None: no manifest."""
    try:
        st = os.stat(os.path.join(path, MANIFEST))
    except OSError:
        return None                      # Graph() reports the missing store
    return (st.st_ino, st.st_size, st.st_mtime_ns)
