"""The Python API: :func:`build`, :func:`open` and :class:`Graph`."""

from __future__ import annotations

import os

import pyarrow as pa

from . import budget as budget_mod
from .errors import BudgetError, SgsiError
from .join.backend import get_backend
from .join.engine import Engine
from .join.plan import make_plan
from .pattern import load_pattern
from .storage.ingest import build_store
from .storage.store import Store


def build(out, edges=None, vertices=None, *, graph=None, src="src", dst="dst", label=None, id="id",
          vertex_label=None, undirected=False, memory_budget=None, force=False, progress=None, **params):
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
    memory_budget : int or str, optional
        Device memory for one join step (e.g. ``"2GB"``); sets the segment
        sizes. Default: a quarter of RAM.
    force : bool
        Replace an existing store.
    progress : callable, optional
        Called with one line of text per build stage.

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
                       vertex_label=vertex_label, undirected=undirected, memory_budget=memory_budget,
                       force=force, progress=progress, **params)
    return Graph(path)


def open(path):  # noqa: A001 - the public name of the API
    """Open a graph store read-only; see :class:`Graph`."""
    return Graph(path)


class Graph:
    """A graph store opened for queries.

    ``count`` and ``match`` take a pattern in the pattern language, a
    :class:`~sgsi.pattern.Pattern`, or the path of a query file.
    ``device`` is ``"cpu"``, ``"gpu"`` or ``"auto"`` (the GPU where one is
    present); ``memory_budget`` bounds one join step (bytes or ``"64KB"``);
    ``injective=False`` asks for homomorphisms instead of isomorphisms.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.store = Store(self.path)
        self._backends = {}
        self.last_stats = {}

    def __repr__(self):
        return f"Graph({self.path!r}: {self.store.n_vertices:,} vertices, {self.store.n_edges:,} edges)"

    def close(self):
        self._backends.clear()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _engine(self, pattern, device, memory_budget, injective):
        pat = load_pattern(pattern)
        backend = self._backends.get((device, memory_budget))
        if backend is None:     # kept per graph: the GPU backend caches segments between queries
            backend = self._backends[(device, memory_budget)] = get_backend(device, memory_budget)
        backend.stats = dict.fromkeys(backend.stats, 0)
        budget = budget_mod.resolve_budget(memory_budget, backend.name)
        need = 2 * self.store.max_segment_bytes
        if need > budget:
            raise BudgetError(f"memory budget of {budget_mod.format_size(budget)} cannot hold two segments of "
                              f"this store ({budget_mod.format_size(need)}); use a larger budget or rebuild the "
                              f"store with a smaller --memory-budget")
        # Plan on the filtered candidate sets; refine them only if the join outgrows them.
        plan = make_plan(self.store, pat, backend, injective=injective, refine_rounds=0)
        refined = lambda: make_plan(self.store, pat, backend, injective=injective, refine_rounds=2)  # noqa: E731
        return pat, backend, Engine(self.store, plan, backend, budget, replan=refined)

    def count(self, pattern, device="auto", memory_budget=None, injective=True) -> int:
        """Number of embeddings of ``pattern`` (every automorphic copy counted)."""
        _pat, backend, engine = self._engine(pattern, device, memory_budget, injective)
        n = engine.count()
        self.last_stats = {"device": backend.name, **engine.stats, **backend.stats}
        return n

    def match(self, pattern, device="auto", memory_budget=None, injective=True, limit=None) -> pa.RecordBatchReader:
        """Embeddings as a stream of record batches: one column per named vertex, original ids."""
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise SgsiError(f"limit must be a non-negative integer, got {limit!r}")
        pat, backend, engine = self._engine(pattern, device, memory_budget, injective)
        names = pat.output_names
        cols = pat.output_vertices
        id_type = self.store.vertex_id_type
        schema = pa.schema([(name, id_type) for name in names])

        def batches():
            left = limit
            if left == 0 or not names:
                return
            try:
                for chunk in engine.chunks():
                    n = int(next(iter(chunk.values())).size)
                    if left is not None and n > left:
                        chunk = {u: c[:left] for u, c in chunk.items()}
                        n = left
                    yield pa.record_batch([self.store.vertex_ids(chunk[u]) for u in cols], schema=schema)
                    if left is not None:
                        left -= n
                        if left == 0:
                            return
            finally:   # also when stopped early by the limit
                self.last_stats = {"device": backend.name, **engine.stats, **backend.stats}

        return pa.RecordBatchReader.from_batches(schema, batches())
