"""sgsi's state for one DuckDB database, and the Python functions behind the SQL macros.

Python UDFs belong to the database, not the connection: every connection
and cursor of one database shares them. So the state of a database lives in
one :class:`Database` (its UDFs, its open stores, its scratch directory, its
statistics), and each registered connection gets a token that keeps its
cached results (:class:`~sgsi.db.connection.Connection`) apart.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import threading
import uuid
import weakref

import duckdb

from ..errors import InputError, PatternError, SgsiError, os_error_behind
from ..graph import Graph
from ..join.query import reraise_stream_error, with_columns
from ..query_options import scale_options
from ..results import write_parquet_parts
from ..storage.build import build_store
from . import scratch
from .connection import Connection, Entry, cache_key
from .stores import OPEN_STORES, OpenStores

#: The state of every live database, by id (``sgsi_state_id()`` in SQL).
STATES: "weakref.WeakValueDictionary[str, Database]" = weakref.WeakValueDictionary()

#: The Python functions a database gets: name -> (parameter types, return type).
UDF_TYPES = {
    "sgsi_match_files": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN", "BIGINT",
                          "BIGINT", "VARCHAR"], "VARCHAR[]"),
    "sgsi_count": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN", "BIGINT", "VARCHAR"],
                   "BIGINT"),
    "sgsi_match_delta_files": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "BIGINT", "VARCHAR", "VARCHAR", "BOOLEAN",
                                "BIGINT"], "VARCHAR[]"),
    "sgsi_count_delta": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "BIGINT", "VARCHAR", "VARCHAR", "BOOLEAN"],
                         "STRUCT(added BIGINT, removed BIGINT)"),
    "sgsi_build_store": (["VARCHAR"] * 12 + ["BOOLEAN", "BOOLEAN", "VARCHAR", "BOOLEAN"], "VARCHAR"),
    "sgsi_update_store": (["VARCHAR"] * 10, "VARCHAR"),
    "sgsi_compact_store": (["VARCHAR"] * 2, "VARCHAR"),
    "sgsi_state_id": ([], "VARCHAR"),
}


def database_state(con) -> "Database":
    """The sgsi state of ``con``'s database, installing the Python functions on first use."""
    try:
        ((sid,),) = con.execute("SELECT sgsi_state_id()").fetchall()
    except duckdb.CatalogException:
        state = Database()
        state.install(con)
        return state
    state = STATES.get(sid)
    if state is None:   # pragma: no cover - the functions keep their state alive
        raise SgsiError("this database has sgsi functions whose state is gone; reconnect")
    return state


def _in_sql(fn):
    """A SQL function: its errors name options as SQL spells them (``force := true``)."""
    @functools.wraps(fn)
    def sql_function(*args):
        try:
            return fn(*args)
        except SgsiError as e:
            e.interface = "sql"
            raise
    return sql_function


class Database:
    """sgsi's state for one DuckDB database: its Python functions, caches and scratch space."""

    def __init__(self):
        self.id = uuid.uuid4().hex[:12]
        self.lock = threading.RLock()
        self.connections = {}           # token -> Connection
        self.root = None                # scratch directory, made on first use
        self.stats = {"match_runs": 0, "count_runs": 0, "builds": 0, "store_opens": 0}
        self.stores = OpenStores(OPEN_STORES, lambda path, older: older.newest() if older else Graph(path),
                                 lambda: self._bump("store_opens"))
        self._seq = itertools.count(1)
        self.closed = False
        STATES[self.id] = self
        scratch.sweep_stale()

    def install(self, con):
        fns = {"sgsi_match_files": self.match_files, "sgsi_count": self.count,
               "sgsi_match_delta_files": self.match_delta_files, "sgsi_count_delta": self.count_delta,
               "sgsi_build_store": self.build_store, "sgsi_update_store": self.update_store,
               "sgsi_compact_store": self.compact_store, "sgsi_state_id": self.state_id}
        for name, (params, ret) in UDF_TYPES.items():
            fn = fns[name]      # one bound-method object: DuckDB holds it as long as the database lives
            con.create_function(name, fn, params, ret, null_handling="special",
                                side_effects=name in ("sgsi_build_store", "sgsi_update_store", "sgsi_compact_store"))
            if name == "sgsi_state_id":
                # DuckDB drops its Python functions when the database closes: clean up then.
                weakref.finalize(fn, self.close)

    def state_id(self):
        return self.id

    # -- connections ----------------------------------------------------------------

    def connect(self, con) -> str:
        with self.lock:
            for token, c in self.connections.items():
                if c.ref is not None and c.ref() is con:
                    return token
            token = uuid.uuid4().hex[:12]
            self.connections[token] = Connection(weakref.ref(con))
        weakref.finalize(con, self.release, token, True)
        return token

    def connection(self, token) -> Connection:
        with self.lock:
            c = self.connections.get(token)
            if c is None:
                c = self.connections[token] = Connection(None)
            return c

    def release(self, token, forget=False):
        with self.lock:
            c = self.connections.pop(token, None) if forget else self.connections.get(token)
        if c is not None:
            with c.lock:
                c.clear()
            if forget and self.root is not None:
                scratch.remove(os.path.join(self.root, token))

    def close(self):
        with self.lock:
            self.closed = True
            conns = list(self.connections.values())
            self.connections.clear()
        for c in conns:
            c.clear()
        self.stores.close_idle(forever=True)
        if self.root is not None:
            scratch.remove(self.root)
            self.root = None

    def _result_dir(self, token) -> str:
        with self.lock:
            if self.root is None or not os.path.isdir(self.root):
                self.root = scratch.new_root(self.id)
            d = os.path.join(self.root, token, f"r{next(self._seq)}")
        os.makedirs(d)
        return d

    def _bump(self, key):
        with self.lock:
            self.stats[key] += 1

    # -- the SQL functions -------------------------------------------------------------

    @_in_sql
    def match_files(self, token, txid, graph, pattern, device, memory_budget, homomorphism, max_rows, workers,
                    scheduler):
        """``sgsi_match_files``: Parquet files holding the result of one query."""
        c = self.connection(token)
        with c.lock:
            c.advance(txid)
            scale_options(workers, scheduler)
            key = cache_key(graph, pattern, device, memory_budget, homomorphism, max_rows) + (workers, scheduler)
            entry = c.files.get(key)
            if entry is None or not all(os.path.exists(f) for f in entry.value):
                with c.run() as cancel:
                    entry = Entry(*self._run_match(token, graph, pattern, device, memory_budget, homomorphism,
                                                   max_rows, cancel, workers, scheduler), c.generation)
                c.files[key] = entry
            entry.generation = c.generation
            return entry.value

    def _run_match(self, token, graph, pattern, device, memory_budget, homomorphism, max_rows, cancel=None,
                   workers=None, scheduler=None, since=None):
        """Run a match (or with ``since``, an incremental match) into Parquet files: (their paths, their directory)."""
        _require(graph, "graph")
        _require(pattern, "pattern")
        if max_rows is not None and max_rows < 0:
            raise SgsiError(f"max_rows must not be negative, got {max_rows}")
        with self.stores.use(graph) as g:
            if since is None:
                pattern = with_columns(pattern, "match() would return no columns: name one, e.g. (a), or use "
                                                "match_count()")
                reader, failure = g._match(pattern, device=device or "auto", memory_budget=memory_budget,
                                           injective=not homomorphism, limit=max_rows, cancel=cancel,
                                           workers=workers, scheduler=scheduler)
            else:
                reader, failure = g._match_delta(pattern, since, device=device or "auto",
                                                 memory_budget=memory_budget, injective=not homomorphism,
                                                 limit=max_rows, cancel=cancel)
            try:
                _check_column_names(reader.schema.names)
                self._bump("match_runs")
                d = self._result_dir(token)
                try:
                    _rows, n_files = write_parquet_parts(reader, d)
                    self.connection(token).last_stats = g.thread_last_stats()
                except BaseException as e:
                    scratch.remove(d)
                    reraise_stream_error(failure, e)      # the engine's own error, with its type
                    disk = os_error_behind(e) if isinstance(e, Exception) else None
                    if disk is not None:
                        raise SgsiError(scratch.failure_message(disk, d)) from None
                    raise
            finally:
                reader.close()      # stops the engine now, whatever happened
        return [os.path.join(d, f"part-{i:05d}.parquet") for i in range(n_files)], d

    @_in_sql
    def count(self, token, txid, graph, pattern, device, memory_budget, homomorphism, workers, scheduler):
        """``sgsi_count``: the number of matches."""
        c = self.connection(token)
        with c.lock:
            c.advance(txid)
            scale_options(workers, scheduler)
            key = cache_key(graph, pattern, device, memory_budget, homomorphism, None) + (workers, scheduler)
            entry = c.counts.get(key)
            if entry is None:
                _require(graph, "graph")
                _require(pattern, "pattern")
                with self.stores.use(graph) as g, c.run() as cancel:
                    self._bump("count_runs")
                    n = g.count(pattern, device=device or "auto", memory_budget=memory_budget,
                                homomorphism=bool(homomorphism), cancel=cancel, workers=workers, scheduler=scheduler)
                    c.last_stats = g.thread_last_stats()
                if n >= 2**63:
                    raise SgsiError(f"{n} matches do not fit in a BIGINT")
                entry = c.counts[key] = Entry(n, None, c.generation)
            entry.generation = c.generation
            return entry.value

    @_in_sql
    def match_delta_files(self, token, txid, graph, pattern, since, device, memory_budget, homomorphism, max_rows):
        """``sgsi_match_delta_files``: Parquet files holding the rows of one incremental match."""
        _require(since, "since")
        c = self.connection(token)
        with c.lock:
            c.advance(txid)
            key = cache_key(graph, pattern, device, memory_budget, homomorphism, max_rows) + ("delta", since)
            entry = c.files.get(key)
            if entry is None or not all(os.path.exists(f) for f in entry.value):
                with c.run() as cancel:
                    entry = Entry(*self._run_match(token, graph, pattern, device, memory_budget, homomorphism,
                                                   max_rows, cancel, since=since), c.generation)
                c.files[key] = entry
            entry.generation = c.generation
            return entry.value

    @_in_sql
    def count_delta(self, token, txid, graph, pattern, since, device, memory_budget, homomorphism):
        """``sgsi_count_delta``: {added, removed}, the matches gained and lost since version ``since``."""
        c = self.connection(token)
        with c.lock:
            c.advance(txid)
            key = cache_key(graph, pattern, device, memory_budget, homomorphism, None) + ("delta", since)
            entry = c.counts.get(key)
            if entry is None:
                _require(graph, "graph")
                _require(pattern, "pattern")
                _require(since, "since")
                with self.stores.use(graph) as g, c.run() as cancel:
                    self._bump("count_runs")
                    n = g.count_delta(pattern, since=since, device=device or "auto", memory_budget=memory_budget,
                                      homomorphism=bool(homomorphism), cancel=cancel)
                    c.last_stats = g.thread_last_stats()
                if max(n.values()) >= 2**63:
                    raise SgsiError(f"{max(n.values())} matches do not fit in a BIGINT")
                entry = c.counts[key] = Entry(n, None, c.generation)
            entry.generation = c.generation
            return entry.value

    @_in_sql
    def build_store(self, token, out, edges, vertices, graph, edges_query, vertices_query, src, dst, label,
                    id_col, vertex_label, undirected, lean, memory_budget, force):
        """``sgsi_build_store``: build a store; returns a one-line summary."""
        _require(out, "out")
        edges = _paths(edges, "edges")
        vertices = _paths(vertices, "vertices")
        if edges_query is not None and edges is not None:
            raise InputError("give edges or edges_query, not both")
        if vertices_query is not None and vertices is not None:
            raise InputError("give vertices or vertices_query, not both")
        tmp = None
        try:
            if edges_query is not None or vertices_query is not None:
                con = self.connection(token).ref
                con = con() if con is not None else None
                if con is None:
                    raise SgsiError("edges_query/vertices_query need the registered connection, which is gone")
                tmp = scratch.new_build_dir()
                cur = con.cursor()     # a query cannot use its own connection; a cursor is another one
                try:
                    if edges_query is not None:
                        edges = scratch.copy_query(cur, edges_query, os.path.join(tmp, "edges.parquet"),
                                                   "edges_query", separate=True)
                    if vertices_query is not None:
                        vertices = scratch.copy_query(cur, vertices_query, os.path.join(tmp, "vertices.parquet"),
                                                      "vertices_query", separate=True)
                finally:
                    cur.close()
            path = build_store(out, edges=edges, vertices=vertices, graph=graph, src=src or "src",
                               dst=dst or "dst", label=label, id=id_col or "id", vertex_label=vertex_label,
                               undirected=bool(undirected), lean=bool(lean), memory_budget=memory_budget,
                               force=bool(force))
        finally:
            scratch.remove(tmp)
        self._bump("builds")
        with Graph(path) as g:
            return f"{path}: {g.store.n_vertices:,} vertices, {g.store.n_edges:,} edges"


    @_in_sql
    def update_store(self, token, store, insert, delete, vertices, src, dst, label, id_col, vertex_label):
        """``sgsi_update_store``: one batch of updates; returns the summary as JSON text."""
        from ..storage.update import update_store
        _require(store, "store")
        with self.stores.use(store) as g:       # the open store, brought to the newest version
            summary = update_store(store, _paths(insert, "insert"), _paths(delete, "delete"),
                                   _paths(vertices, "vertices"), src=src or "src", dst=dst or "dst", label=label,
                                   id=id_col or "id", vertex_label=vertex_label, store=g.store)
        return json.dumps(summary)

    @_in_sql
    def compact_store(self, token, store):
        """``sgsi_compact_store``: merge a store's deltas into new base files; returns the summary as JSON."""
        from ..storage.compact import compact_store
        _require(store, "store")
        return json.dumps(compact_store(store))


def _require(value, name):
    if value is None:
        raise SgsiError(f"{name} must not be NULL")


def _check_column_names(names):
    seen = {}
    for n in names:
        other = seen.setdefault(n.lower(), n)
        if other != n:
            raise PatternError(f"pattern vertices {other!r} and {n!r} differ only in case, which SQL column "
                               f"names do not tell apart; rename one")


def _paths(text, name):
    """A JSON-encoded path or list of paths (the macro passes to_json(x)) -> str, list or None."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        return value
    raise InputError(f"{name} must be a path, a glob or a list of them, got {text}")


@atexit.register
def _cleanup_at_exit():
    for state in list(STATES.values()):
        state.close()
