"""The Python API: :func:`build`, :func:`open` and :class:`Graph`."""

from __future__ import annotations

import os
import threading
import traceback

import pyarrow as pa

from . import budget as budget_mod
from .errors import BudgetError, Cancelled, MemoryShortage, PatternError, SgsiError
from .join.backend import get_backend
from .join.engine import Engine
from .join.plan import REFINE_ROUNDS, make_plan
from .pattern import load_pattern
from .storage.build import build_store
from .storage.store import Store

#: The most vertices a pattern may have. The engine runs one join step per
#: pattern vertex, nested (depth first), and plans in time quadratic in the
#: pattern's size; far larger patterns are refused with a PatternError
#: rather than exhausting the stack or the clock.
MAX_PATTERN_VERTICES = 256


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


def open(path, verify=False):  # noqa: A001 - the public name of the API
    """Open a graph store read-only; see :class:`Graph`.

    ``verify=True`` also checks every file against its checksum first (reads
    the whole store once; ``sgsi info --verify`` does the same).
    """
    return Graph(path, verify=verify)


class Graph:
    """A graph store opened for queries.

    ``count`` and ``match`` take a pattern in the pattern language, a
    :class:`~sgsi.pattern.Pattern`, or the path of a query file.
    ``device`` is ``"cpu"``, ``"gpu"`` or ``"auto"`` (the GPU where one is
    present); ``memory_budget`` bounds one join step (bytes or ``"64KB"``);
    ``injective=False`` asks for homomorphisms instead of isomorphisms;
    ``cancel`` (a :class:`threading.Event`, or a callable returning True)
    stops the query with :class:`~sgsi.errors.Cancelled` once set: it is
    checked before each segment the engine reads and between result batches.

    A Graph may be shared by threads: each running query takes a backend of
    its own (an idle one is reused, so the GPU backend's segment cache
    survives between queries), and the store is only read. The store's files
    are all opened when the Graph is, so a store rebuilt in place with
    ``force`` is not seen by Graphs opened before.
    """

    def __init__(self, path, verify=False):
        self.path = os.fspath(path)
        self.store = Store(self.path)
        if verify:
            self.store.verify()
        self._lock = threading.Lock()
        self._idle = {}         # device -> a backend no query uses now
        self._here = threading.local()      # the stats of this thread's last query
        self.last_stats = {}

    def __repr__(self):
        return f"Graph({self.path!r}: {self.store.n_vertices:,} vertices, {self.store.n_edges:,} edges)"

    def close(self):
        with self._lock:
            self._idle.clear()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- backends -------------------------------------------------------------------

    def _take_backend(self, device):
        """A backend for one query: the idle one kept for ``device``, or a new one."""
        with self._lock:
            backend = self._idle.pop(device, None)
        if backend is None:
            backend = get_backend(device)
        backend.stats = dict.fromkeys(backend.stats, 0)
        return backend

    def _end(self, device, backend, failed):
        """The query on ``backend`` ended: what it took goes back (``backend.end``), and the
        backend waits for the next query of this Graph (one idle backend a device)."""
        backend.end(failed)
        with self._lock:
            self._idle.setdefault(device, backend)

    def _publish(self, backend, engine, settled=True):
        """Publish the query's stats; ``settled``: it ended well, so the backend can wait for its
        work (the GPU's copy timings are complete then)."""
        if settled:
            backend.synchronize()
        stats = {"device": backend.name, **(engine.stats if engine is not None else {}), **backend.stats}
        self.last_stats = self._here.stats = stats

    def thread_last_stats(self) -> dict:
        """:attr:`last_stats` of the last query this thread ran (other threads' queries may have ended
        since, on a shared Graph)."""
        return dict(getattr(self._here, "stats", {}))

    def _guard(self, fn, *args, **kwargs):
        """Run ``fn``; an unexpected error is checked against the store's checksums, so a
        damaged file is reported as a StoreError naming it rather than as a crash."""
        try:
            return fn(*args, **kwargs)
        except (SgsiError, RecursionError):
            raise
        except MemoryError as e:            # the host's memory: as the GPU pool's limit
            raise MemoryShortage(f"the query needed more host memory than there is: {e}") from None
        except Exception as e:
            damage = self.store.find_damage()
            if damage is not None:
                raise damage from e
            raise

    def _pattern(self, pattern):
        pat = load_pattern(pattern)
        if len(pat.vertices) > MAX_PATTERN_VERTICES:
            raise PatternError(f"the pattern has {len(pat.vertices):,} vertices; sgsi matches patterns of at most "
                               f"{MAX_PATTERN_VERTICES} vertices")
        return pat

    def _engine(self, pat, backend, budget, injective, check, count=False):
        if check is not None:
            check()
            backend = _Watched(backend, check)
        # Plan on the filtered candidate sets; refine them only if the join outgrows them.
        # A count takes the pattern's leaves and last vertices as a product (make_plan's factor_leaves).
        plan = self._guard(backend.run, lambda: make_plan(self.store, pat, backend, injective=injective,
                                                          refine_rounds=0, factor_leaves=count))
        refined = lambda: make_plan(self.store, pat, backend, injective=injective, refine_rounds=REFINE_ROUNDS,  # noqa: E731
                                    factor_leaves=count, filtered=plan.candidates)      # not filtered again
        return Engine(self.store, plan, backend, budget, replan=refined)

    def _begin(self, backend, memory_budget):
        """The query's budget on ``backend``, at or above the store's floor."""
        budget = backend.begin(self.store, memory_budget)
        floor = memory_floor(self.store)
        if budget < floor:
            raise BudgetError(f"memory budget of {budget_mod.format_size(budget)} is below this store's floor of "
                              f"{budget_mod.format_size(floor)} (two segments and a partial match); use a larger "
                              f"budget or rebuild the store with a smaller --memory-budget")
        return budget

    def _halved(self, backend, budget, shortage):
        """The budget to run a query again on after ``shortage``: half of ``budget``, where that
        is still at or above the store's floor (else the shortage is raised as a BudgetError)."""
        _drop_frames(shortage)              # its traceback holds the failed run's arrays
        floor = memory_floor(self.store)
        if budget // 2 < floor:
            raise BudgetError(f"{shortage}, even at {budget_mod.format_size(budget)}, the least this store's "
                              f"floor of {budget_mod.format_size(floor)} allows halving to; use a larger memory "
                              f"budget") from None
        backend.recover()
        return budget // 2

    # -- queries --------------------------------------------------------------------

    def count(self, pattern, device="auto", memory_budget=None, injective=True, cancel=None) -> int:
        """Number of embeddings of ``pattern`` (every automorphic copy counted)."""
        pat = self._pattern(pattern)
        check = _cancel_check(cancel)
        backend = self._take_backend(device)
        failed = True
        try:
            n = self._count(pat, backend, memory_budget, injective, check)
            failed = False
            return n
        except BaseException as e:
            _drop_frames(e)
            raise
        finally:
            self._end(device, backend, failed)

    def _count(self, pat, backend, memory_budget, injective, check):
        """:meth:`count` on ``backend``: run again on half the budget where its work outgrew the
        memory (``stats["budget_halved"]``), down to the store's floor."""
        budget = self._begin(backend, memory_budget)
        halved = 0
        while True:
            try:
                engine = None
                engine = self._engine(pat, backend, budget, injective, check, count=True)
                with backend.measuring_memory():
                    n = self._guard(backend.run, engine.count)
                break
            except MemoryShortage as e:
                engine = None
                budget = self._halved(backend, budget, e)
                halved += 1
        self._publish(backend, engine)
        self.last_stats["budget_halved"] = self._here.stats["budget_halved"] = halved
        return n

    def match(self, pattern, device="auto", memory_budget=None, injective=True, limit=None,
              cancel=None) -> pa.RecordBatchReader:
        """Embeddings as a stream of record batches: one column per named vertex, original ids.

        The engine runs as the batches are read. Closing the reader early
        (``reader.close()``, leaving a ``with`` block, or dropping it) stops
        the engine and frees its memory; so does ``limit`` once reached.

        A bad pattern, store or budget raises here, before any batch. An
        error while the batches are read (``cancel`` set, a store damaged
        under the query) reaches the reader as :class:`pyarrow.ArrowInvalid`
        whose message holds sgsi's: pyarrow's stream interface, which makes
        ``close()`` stop the engine, carries no exception type.
        """
        return self._match(pattern, device, memory_budget, injective, limit, cancel)[0]

    def _match(self, pattern, device="auto", memory_budget=None, injective=True, limit=None, cancel=None):
        """:meth:`match`, and a list that receives the exception that ended the stream, if any
        (the command line and SQL re-raise it with its type)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise SgsiError(f"limit must be a non-negative integer, got {limit!r}")
        pat = self._pattern(pattern)
        check = _cancel_check(cancel)
        backend = self._take_backend(device)
        try:
            budget = self._begin(backend, memory_budget)
            while True:
                try:
                    engine = self._engine(pat, backend, budget, injective, check)
                    break
                except MemoryShortage as e:
                    budget = self._halved(backend, budget, e)
        except BaseException as e:
            _drop_frames(e)
            self._end(device, backend, failed=True)
            raise
        schema = pa.schema([(name, self.store.vertex_id_type) for name in pat.output_names])
        failure = []
        batches = self._batches(pat, backend, engine, budget, injective, check, limit, schema, device, failure)
        reader = pa.RecordBatchReader.from_batches(schema, batches)
        # A reader made by from_batches keeps its generator alive after close();
        # seen through the C stream interface, close() releases it at once, and
        # with it the engine and every array it holds.
        from_stream = getattr(pa.RecordBatchReader, "from_stream", None)
        if from_stream is not None:
            reader = from_stream(reader)
        return reader, failure

    def _batches(self, pat, backend, engine, budget, injective, check, limit, schema, device, failure):
        """The record batches of a :meth:`match`; the query runs again on half the budget where
        its work outgrew the memory before any batch left."""
        cols = pat.output_vertices
        left = limit
        failed = True
        sent = False
        chunks = chunk = None
        try:
            if left == 0 or not cols:
                failed = False
                return
            chunks = engine.chunks()
            while True:
                try:
                    chunk = self._guard(backend.run, next, chunks, None)
                except MemoryShortage as e:
                    if sent:
                        raise BudgetError(f"{e}; rows have been returned already, so the query cannot be run "
                                          f"again on a smaller budget: use a larger memory budget") from None
                    chunks = engine = None
                    budget = self._halved(backend, budget, e)
                    engine = self._engine(pat, backend, budget, injective, check)
                    chunks = engine.chunks()
                    continue
                if chunk is None:
                    break
                if check is not None:
                    check()
                n = int(next(iter(chunk.values())).size)
                if left is not None and n > left:
                    chunk = {u: c[:left] for u, c in chunk.items()}
                    n = left
                sent = True
                yield pa.record_batch([self.store.vertex_ids(chunk[u]) for u in cols], schema=schema)
                if left is not None:
                    left -= n
                    if left == 0:
                        break
            failed = False
        except BaseException as e:
            _drop_frames(e)
            failure.append(e)
            raise
        finally:   # also when stopped early: by the limit, or the reader closed
            try:
                self._publish(backend, engine, settled=not failed)
            finally:        # this frame outlives the stream in the error's traceback: let its arrays go
                chunks = chunk = engine = None
                self._end(device, backend, failed)


#: Bytes the floor holds for one partial match and its step (beside two segments).
PARTIAL_MATCH_BYTES = 4096


def memory_floor(store) -> int:
    """The least memory budget a query of ``store`` runs at: two of its segments and one partial
    match's step (:data:`PARTIAL_MATCH_BYTES`), and never under :data:`~sgsi.budget.MIN_BUDGET`."""
    return max(budget_mod.MIN_BUDGET, 2 * store.max_segment_bytes + PARTIAL_MATCH_BYTES)


def _drop_frames(exc):
    """Clear the locals of the finished frames in the tracebacks of ``exc`` and the exceptions
    behind it: an exception kept by the caller must not keep the query's arrays (device memory).
    sgsi's own errors (a cancel, a budget, a bad pattern) lose the engine's part of their
    traceback, which says nothing to a user; other errors keep their frames, cleared."""
    seen = set()
    first = exc
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__
    if isinstance(first, SgsiError):
        first.__traceback__ = None


def reraise_stream_error(failure, exc):
    """Raise the exception that ended a :meth:`Graph._match` stream in place of pyarrow's copy."""
    if failure and isinstance(exc, pa.ArrowException):
        raise failure[0] from None


def _cancel_check(cancel):
    """A function raising Cancelled once ``cancel`` (an Event, or a callable) says stop; None for None."""
    if cancel is None:
        return None
    if hasattr(cancel, "is_set"):
        test = cancel.is_set
    elif callable(cancel):
        test = cancel
    else:
        raise SgsiError(f"cancel must be a threading.Event or a callable returning True to stop, "
                        f"not {type(cancel).__name__}")

    def check():
        if test():
            raise Cancelled("query cancelled")
    return check


class _Watched:
    """A backend that checks for cancellation between its units of work.

    Every join step reads its neighbour lists through ``backend.segments()``
    (its later links' too: ``member()`` is given this wrapper to stream them), a
    refinement round is one ``refine_round()`` call, the filter runs in one
    ``candidate_bits()`` or ``candidate_sets()`` call, and the columnar extension one output
    slice per ``extend()`` call (a light piece's, one ``pack_rows()`` call): a
    check at each stops a query within the work of one segment, round or slice.
    Everything else is the backend's own.
    """

    def __init__(self, backend, check):
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_check", check)

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)

    def refine_round(self, *args, **kwargs):
        self._check()
        return self._backend.refine_round(*args, **kwargs)

    def member(self, *args, **kwargs):
        return self._backend.member(*args, via=self, **kwargs)         # its lists through segments()

    def segments(self, store, seg_ids):
        self._check()
        for item in self._backend.segments(store, seg_ids):
            yield item
            self._check()

    def candidate_bits(self, *args, **kwargs):
        self._check()
        return self._backend.candidate_bits(*args, **kwargs)

    def candidate_sets(self, *args, **kwargs):
        self._check()
        return self._backend.candidate_sets(*args, **kwargs)

    def extend(self, *args, **kwargs):
        self._check()
        return self._backend.extend(*args, **kwargs)

    def pack_rows(self, *args, **kwargs):
        self._check()
        return self._backend.pack_rows(*args, **kwargs)
