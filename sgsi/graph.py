"""The Python API: :func:`build`, :func:`open` and :class:`Graph`."""

from __future__ import annotations

import os
import threading

import pyarrow as pa

from .join import delta
from .join.query import Backends, Query, with_columns
from .query_options import query_options, scale_options, since_option
from .storage.build import build_store
from .storage.store import Store


def build(out, edges=None, vertices=None, *, graph=None, src="src", dst="dst", label=None, id="id",
          vertex_label=None, undirected=False, lean=False, memory_budget=None, force=False, progress=None,
          **params):
    """Build a graph store from Parquet edge files and open it.

    Parameters
    ----------
    out : str
        Directory of the new store (e.g. ``"social.sgsi"``); must not exist
        unless ``force``.
    edges : str or list of str
        Parquet edge files (glob patterns allowed) with columns ``src``,
        ``dst`` and optionally ``label``.
    vertices : str or list of str, optional
        Parquet vertex files with columns ``id`` and optionally ``label``.
    graph : str, optional
        Instead of Parquet: a data graph in the benchmark text format
        (``t``/``v``/``e`` lines, undirected, vertex labels only).
    src, dst, label, id, vertex_label : str
        Column names. ``label``/``vertex_label`` default to ``"label"`` when
        that column exists; naming them makes the column required.
    undirected : bool
        Store both directions of every edge.
    lean : bool
        Store only the partitions of labelled, directed pattern edges
        (``-[:L]->``, ``<-[:L]-``): with several edge labels, about a third
        of the size and half the build time of a full store. Patterns with
        unlabeled (``-->``) or undirected (``-[:L]-``) edges are refused on a
        lean store with a :class:`~sgsi.errors.PatternError`.
    memory_budget : int or str, optional
        Device memory for one join step (e.g. ``"2GB"``); sets the segment
        sizes. Default: a quarter of RAM.
    force : bool
        Replace an existing store.
    progress : callable, optional
        Called with one line of text per build stage.
    **params
        Store parameters: ``theta`` (pairs per PCSR group, 2-16, default 4),
        ``signature_bits`` (default 128), ``label_bits`` (default 16).

    Returns
    -------
    Graph

    Examples
    --------
    >>> import sgsi, pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"src": [1, 2, 3], "dst": [2, 3, 1], "label": ["K", "K", "K"]}),
    ...                os.path.join(d, "e.parquet"))
    >>> g = sgsi.build(os.path.join(d, "g.sgsi"), edges=os.path.join(d, "e.parquet"))
    >>> g.count("(a)-[:K]->(b)-[:K]->(c)-[:K]->(a)")
    3
    """
    path = build_store(out, edges=edges, vertices=vertices, graph=graph, src=src, dst=dst, label=label, id=id,
                       vertex_label=vertex_label, undirected=undirected, lean=lean, memory_budget=memory_budget,
                       force=force, progress=progress, **params)
    return Graph(path)


def open(path, verify=False, version=None):  # noqa: A001 - the public name of the API
    """Open a graph store read-only; see :class:`Graph`.

    ``verify=True`` also checks every file against its checksum first (reads
    the whole store once; ``sgsi info --verify`` does the same). ``version``:
    the store version to read (default: the newest); it stays that version.
    """
    return Graph(path, verify=verify, version=version)


class Graph:
    """A graph store opened for queries.

    ``count`` and ``match`` take a pattern in the pattern language, a
    :class:`~sgsi.pattern.Pattern`, or the path of a query file.
    ``device`` is ``"cpu"``, ``"gpu"`` or ``"auto"`` (the GPU where one is
    present); ``memory_budget`` bounds one join step (bytes or ``"64KB"``);
    ``homomorphism=True`` asks for homomorphisms instead of isomorphisms;
    ``cancel`` (a :class:`threading.Event`, or a callable returning True)
    stops the query with :class:`~sgsi.errors.Cancelled` once set: it is
    checked before each segment the engine reads and between result batches.
    ``progress``: a query that runs past 2 s writes a line to stderr every 2 s
    (its time, the share of the work done, rows or matches so far); False
    turns that off, a callable gets the lines instead.

    A Graph may be shared by threads: each running query takes a backend of
    its own (an idle one is reused, so the GPU backend's segment cache
    survives between queries), and the store is only read. The store's files
    are all opened when the Graph is, so a store rebuilt in place with
    ``force`` is not seen by Graphs opened before.
    """

    def __init__(self, path, verify=False, version=None, _store=None, _backends=None):
        self.path = os.fspath(path)
        self.store = _store if _store is not None else Store(self.path, version=version)
        if verify:
            self.store.verify()
        self._backends = _backends if _backends is not None else Backends()
        self._here = threading.local()      # the stats of this thread's last query
        self.last_stats = {}

    def __repr__(self):
        return f"Graph({self.path!r}: {self.store.n_vertices:,} vertices, {self.store.n_edges:,} edges)"

    @property
    def version(self) -> int:
        """The store version this Graph reads."""
        return self.store.version

    def update(self, insert=None, delete=None, vertices=None, *, src="src", dst="dst", label=None, id="id",
               vertex_label=None) -> dict:
        """Apply one batch of edge insertions and deletions as a new store version, and read it.

        ``insert`` and ``delete`` are Parquet edge files (globs or lists) with
        the build's columns (``src``, ``dst``, ``label``: the same options);
        ``vertices`` optional vertex files giving labels of new vertices.
        The batch applies to the store's newest version (whatever version
        this Graph reads). Deletions apply before insertions. Inserting an edge that is there,
        or deleting one that is not, is counted, not an error. New vertices
        get the dense ids after the last; new edge labels are allowed. The
        delta is written atomically (:mod:`sgsi.storage.delta`).

        Returns a dict: ``version``, ``inserted`` and ``deleted`` (net edges),
        ``already_present``, ``absent``, ``new_vertices``, ``new_edge_labels``,
        ``vertices``, ``edges``, ``seconds`` (``write_seconds`` of them writing the delta).
        This Graph then reads the new version; other Graphs keep theirs.
        """
        from .storage.update import update_store
        # The new version's opening shares this one's files, deltas and caches (a delta since this
        # version then reads from it), with only the new delta read.
        summary, newer = update_store(self.path, insert, delete, vertices, src=src, dst=dst, label=label, id=id,
                                      vertex_label=vertex_label, store=self.store, keep=True)
        self._reopen(newer)
        return summary

    def newest(self) -> "Graph":
        """A Graph of the store's newest version, sharing the files and deltas this one has read
        (:meth:`Store.newest`); this one keeps its version."""
        store = self.store.newest()
        return Graph(self.path, _store=store, _backends=self._backends if store.shares_files(self.store) else None)

    def compact(self, progress=None) -> dict:
        """Merge the store's deltas into new base files (atomically; open readers go on), and read
        them. Returns a dict: ``version``, ``compacted``, ``vertices``, ``edges``, ``seconds``."""
        from .storage.compact import compact_store
        summary = compact_store(self.path, progress=progress)
        self._reopen()
        return summary

    def _check_newest(self):
        """Sharded queries open the store by path on the workers, at its newest version."""
        newest = int(self.store.versions[-1]["version"])
        from .storage.manifest import read_manifest
        versions = read_manifest(self.path, check_files=False).get("versions")
        if versions:
            newest = int(versions[-1]["version"])
        if self.store.version != newest:
            from .errors import StoreError
            raise StoreError(f"sharded queries (workers, scheduler, client) read the newest version of "
                             f"{self.path}, {newest}; this Graph reads version {self.store.version}")

    def _reopen(self, store=None):
        """Read ``store``, else the newest version opened anew (the old store is left to queries
        still running on it). The backends stay where ``store`` shares the files (a new version):
        their buffers, and the GPU's copies of the base segments, serve it too."""
        if store is None or not store.shares_files(self.store):
            self._backends.clear()
        self.store = store if store is not None else Store(self.path)

    def close(self):
        self._backends.clear()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- queries --------------------------------------------------------------------

    def count(self, pattern, device="auto", memory_budget=None, *, homomorphism=False, cancel=None, progress=True,
              workers=None, scheduler=None, client=None, **deprecated) -> int:
        """Number of embeddings of ``pattern`` (every automorphic copy counted).

        ``homomorphism=True`` counts homomorphisms (two pattern vertices may
        match one data vertex) instead of isomorphisms. ``injective=False``
        is its deprecated spelling (a :class:`DeprecationWarning`).

        ``workers=N`` shards the query over a local Dask cluster started for
        it (N single-threaded processes on the CPU, one worker per GPU with
        dask-cuda on the GPU); ``scheduler="tcp://host:8786"`` or
        ``client=`` (a ``dask.distributed.Client``) over a running one whose
        workers see this store's path. Needs ``pip install 'sgsi[dask]'``.
        """
        injective = not query_options("count", homomorphism, None, deprecated)[0]
        workers, scheduler = scale_options(workers, scheduler, client)
        if workers is not None or scheduler is not None or client is not None:
            from .shard import driver
            self._check_newest()
            return driver.count(self, pattern, device=device, memory_budget=memory_budget, injective=injective,
                                cancel=cancel, progress=progress, workers=workers, scheduler=scheduler, client=client)
        return self._query(pattern, device, memory_budget, injective, cancel, progress).count()

    def match(self, pattern, device="auto", memory_budget=None, *, homomorphism=False, max_rows=None,
              cancel=None, progress=True, workers=None, scheduler=None, client=None,
              **deprecated) -> pa.RecordBatchReader:
        """Embeddings as a stream of record batches: one column per named vertex, original ids.

        The engine runs as the batches are read. Closing the reader early
        (``reader.close()``, leaving a ``with`` block, or dropping it) stops
        the engine and frees its memory; so does ``max_rows`` once reached.
        ``homomorphism=True`` lists homomorphisms instead of isomorphisms.
        ``injective=`` and ``limit=`` are the deprecated spellings of
        ``homomorphism`` (negated) and ``max_rows`` (a :class:`DeprecationWarning`).

        A bad pattern, store or budget raises here, before any batch. An
        error while the batches are read (``cancel`` set, a store damaged
        under the query) reaches the reader as :class:`pyarrow.ArrowInvalid`
        whose message holds sgsi's: pyarrow's stream interface, which makes
        ``close()`` stop the engine, carries no exception type.

        ``workers``, ``scheduler`` and ``client`` shard the query as in
        :meth:`count`: each task writes its rows as a Parquet part of one
        scratch directory, read back here as the tasks finish (rows in no
        fixed order); closing the reader stops the tasks and removes the parts.
        """
        homomorphism, max_rows = query_options("match", homomorphism, max_rows, deprecated)
        pattern = with_columns(pattern, "match() would return no columns: name one, e.g. (a), or use count()")
        return self._match(pattern, device, memory_budget, not homomorphism, max_rows, cancel, progress, workers,
                           scheduler, client)[0]

    def _match(self, pattern, device="auto", memory_budget=None, injective=True, limit=None, cancel=None,
               progress=True, workers=None, scheduler=None, client=None):
        """:meth:`match`, and a list that receives the exception that ended the stream, if any
        (the command line and SQL re-raise it with its type: :func:`reraise_stream_error`)."""
        workers, scheduler = scale_options(workers, scheduler, client)
        if workers is not None or scheduler is not None or client is not None:
            from .shard import driver
            self._check_newest()
            return driver.match(self, pattern, device=device, memory_budget=memory_budget, injective=injective,
                                limit=limit, cancel=cancel, progress=progress, workers=workers, scheduler=scheduler,
                                client=client)
        return self._query(pattern, device, memory_budget, injective, cancel, progress).stream(limit)

    # -- incremental matches ---------------------------------------------------------

    def count_delta(self, pattern, *, since, device="auto", memory_budget=None, homomorphism=False, cancel=None,
                    progress=True) -> dict:
        """The embeddings of ``pattern`` gained and lost from version ``since`` of this store to the
        version open: ``{"added": n, "removed": m}``, so that ``n - m`` is the change of
        :meth:`count`. An embedding is gained when every pattern edge holds now and one did not
        then (for an unlabeled or undirected pattern edge: no edge of any label, or either way,
        joined its ends). The options are :meth:`count`'s; not sharded."""
        homomorphism, _ = query_options("count", homomorphism, None, {})
        old, changed, close = delta.versions(self.store, since_option(since))
        try:
            return self._delta(old, pattern, changed, device, memory_budget, not homomorphism, cancel,
                               progress).count()
        finally:
            close()

    def match_delta(self, pattern, *, since, device="auto", memory_budget=None, homomorphism=False, max_rows=None,
                    cancel=None, progress=True) -> pa.RecordBatchReader:
        """The embeddings gained (``sign`` +1) and lost (``sign`` -1) from version ``since`` to the
        version open (see :meth:`count_delta`), as :meth:`match` streams rows: one column per named
        vertex, original ids, and an int8 ``sign`` column. The options are :meth:`match`'s; not sharded."""
        homomorphism, max_rows = query_options("match", homomorphism, max_rows, {})
        return self._match_delta(pattern, since, device, memory_budget, not homomorphism, max_rows, cancel,
                                 progress)[0]

    def _match_delta(self, pattern, since, device="auto", memory_budget=None, injective=True, limit=None,
                     cancel=None, progress=True):
        """:meth:`match_delta`, and the list receiving the error that ended the stream (as :meth:`_match`)."""
        old, changed, close = delta.versions(self.store, since_option(since))
        try:
            return self._delta(old, pattern, changed, device, memory_budget, injective, cancel,
                               progress).stream(limit, on_end=close)
        except BaseException:
            close()
            raise

    def _delta(self, old, pattern, changed, device, memory_budget, injective, cancel, progress):
        return delta.Delta(old, self.store, self._backends, pattern, changed, device, memory_budget, injective,
                           cancel, self._publish, progress)

    def _query(self, pattern, device, memory_budget, injective, cancel, progress):
        return Query(self.store, self._backends, pattern, device, memory_budget, injective, cancel, self._publish,
                     progress)

    def _publish(self, stats):
        self.last_stats = self._here.stats = stats

    def thread_last_stats(self) -> dict:
        """:attr:`last_stats` of the last query this thread ran (other threads' queries may have ended
        since, on a shared Graph)."""
        return dict(getattr(self._here, "stats", {}))
