"""sgsi in DuckDB SQL: ``match()``, ``match_count()`` and ``sgsi_build()``.

After ``sgsi.register(con)``::

    SELECT * FROM match('social.sgsi', '(a:Person)-[:KNOWS]->(b:Person)');
    SELECT match_count('social.sgsi', '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)');
    SELECT sgsi_build('social.sgsi', edges := 'edges.parquet', vertices := 'people.parquet');

How it works
------------
DuckDB's Python client cannot define table functions, and Python code that
runs inside a query cannot use that query's connection. So ``match()`` is a
TEMP table macro (``sql/match.sql``) over ``read_parquet`` whose file list
comes from the scalar Python function ``sgsi_match_files``: DuckDB evaluates
it while binding the statement, and it runs the engine once and streams the
result batches into Parquet files in a scratch directory (one row group in
memory at a time), which DuckDB then scans in parallel.

DuckDB may bind one statement more than once (the Python client binds a
statement to learn its columns and again to run it; a self-join binds the
macro twice), so results are cached per connection by (store, pattern,
options). The macro passes ``txid_current()``: each new transaction id a
connection's calls carry starts a new *generation*; a result is reused
within its generation and the next one, and deleted when a later
generation begins, when the connection closes, when the database closes,
or when the process exits. Scratch files live under
``tempfile.gettempdir()/sgsi-scratch-PID-*``, never in the working
directory; directories left by a crashed process are removed by the next
registration.

A Python function that DuckDB is running does not see ``con.interrupt()``:
DuckDB checks its interrupt flag only between its own operators. So sgsi
wraps ``DuckDBPyConnection.interrupt`` (once, on the first registration):
the wrapper first cancels the sgsi engine runs of that connection (they
stop within one segment's work and raise
:class:`~sgsi.errors.Cancelled`, removing their scratch files), then calls
DuckDB's own. :meth:`Registration.interrupt` does the same explicitly.

Python UDFs belong to the database, not the connection: every connection
and cursor of one database shares them, so the per-database state lives in
:class:`_Database` and each registered connection gets its own macros and a
token that keeps its cache apart.

Stores stay open between queries: the database keeps the last
``_OPEN_STORES`` stores it queried open (:class:`_OpenStores`), so a query
finds the GPU segments, signature columns and pinned buffers the one before
left on the device instead of opening the store afresh. A store rebuilt in
place is opened anew (its manifest changed); the old one closes once no
query uses it. They close with the database, or with
:meth:`Registration.release`.
"""

from __future__ import annotations

import atexit
import importlib.resources
import itertools
import json
import os
import shutil
import string
import tempfile
import threading
import uuid
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

import duckdb

from . import budget as budget_mod
from .errors import InputError, PatternError, SgsiError, os_error_behind
from .graph import Graph, reraise_stream_error
from .results import write_parquet_parts
from .storage.format import MANIFEST
from .storage.build import build_store

__all__ = ["register", "build_from_sql", "Registration"]

_OPTIONS = {"device": "'auto'", "memory_budget": "NULL", "homomorphism": "false"}
_SCRATCH_PREFIX = "sgsi-scratch-"
_STATES: "weakref.WeakValueDictionary[str, _Database]" = weakref.WeakValueDictionary()


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def register(con, **defaults):
    """Define ``match()``, ``match_count()`` and ``sgsi_build()`` on a DuckDB connection.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection. The macros are TEMP: other connections and cursors
        of the same database need their own ``register`` call.
    **defaults
        Defaults of the optional SQL parameters on this connection:
        ``device`` (``"cpu"``, ``"gpu"`` or ``"auto"``), ``memory_budget``
        (bytes or a size such as ``"2GB"``) and ``homomorphism`` (bool).

    Returns
    -------
    Registration
        Its ``stats`` count engine runs; ``release()`` deletes this
        connection's cached results now.

    Raises
    ------
    SgsiError
        For an unknown default or a bad value.

    Examples
    --------
    >>> import duckdb, sgsi
    >>> con = duckdb.connect()
    >>> reg = sgsi.register(con, device="cpu")
    >>> con.sql("SELECT count(*) FROM match('social.sgsi', '(a)-[:KNOWS]->(b)')")   # doctest: +SKIP
    """
    literals = _check_defaults(defaults)
    _install_interrupt_hook()
    state = _database_state(con)
    token = state.connect(con)
    con.execute(_macro_sql(token, literals))
    return Registration(state, token)


def build_from_sql(con, out, edges_sql, vertices_sql=None, **options):
    """Build a store from SQL queries run on ``con`` (TEMP tables and views included).

    Each query's result is first written to a temporary Parquet file with
    ``COPY`` (DuckDB streams it, out of core), then :func:`sgsi.build` reads
    the files; they are removed afterwards.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    out : str
        The new store's directory.
    edges_sql, vertices_sql : str
        SELECT statements (or table names) with the columns ``build`` expects
        (``src``, ``dst``, optionally ``label``; ``id``, optionally ``label``).
    **options
        Passed on to :func:`sgsi.build` (``undirected``, ``force``, ...).

    Returns
    -------
    Graph
    """
    from .graph import build

    tmp = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-build-")
    try:
        edges = _copy_query(con, edges_sql, os.path.join(tmp, "edges.parquet"), "edges")
        vertices = None
        if vertices_sql is not None:
            vertices = _copy_query(con, vertices_sql, os.path.join(tmp, "vertices.parquet"), "vertices")
        return build(out, edges=edges, vertices=vertices, **options)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Registration:
    """What :func:`register` returns: a handle on sgsi's state for one connection.

    Attributes
    ----------
    stats : dict
        Engine runs on this connection's database: ``match_runs``,
        ``count_runs``, ``builds``, and ``store_opens`` (stores opened; an
        open store is reused by later queries), shared by the connections of
        one database.
    """

    def __init__(self, state, token):
        self._state = state
        self.token = token

    @property
    def stats(self) -> dict:
        return self._state.stats

    @property
    def last_stats(self) -> dict:
        """What the engine reported for the last ``match()`` or ``match_count()`` this connection ran (not
        one answered from the cache): :attr:`sgsi.Graph.last_stats` (device, segments, bytes copied to the GPU, ...)."""
        c = self._state.connections.get(self.token)
        return {} if c is None else dict(c.last_stats)

    @property
    def scratch_dir(self) -> str | None:
        """The directory holding this connection's cached results (None until one is made)."""
        root = self._state.root
        return None if root is None else os.path.join(root, self.token)

    def release(self):
        """Delete this connection's cached results now (a later query recomputes), and close the
        database's open stores that no query is using (their GPU memory and pinned buffers go with them)."""
        self._state.release(self.token)
        self._state.stores.close_idle()

    def interrupt(self):
        """Cancel the sgsi queries running on this connection, then interrupt DuckDB's.

        Safe to call from another thread; ``con.interrupt()`` does the same
        on a registered connection.
        """
        c = self._state.connections.get(self.token)
        if c is not None:
            c.cancel_running()
            con = c.ref() if c.ref is not None else None
            if con is not None:
                _ORIGINAL_INTERRUPT(con) if _ORIGINAL_INTERRUPT is not None else con.interrupt()

    def __repr__(self):
        return f"Registration(token={self.token!r}, stats={self.stats!r})"


# ---------------------------------------------------------------------------
# Registration helpers
# ---------------------------------------------------------------------------


def _sql_str(s) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _check_defaults(defaults) -> dict:
    unknown = sorted(set(defaults) - set(_OPTIONS))
    if unknown:
        raise SgsiError(f"unknown option {unknown[0]!r} for sgsi.register: use "
                        f"{', '.join(_OPTIONS)}")
    literals = dict(_OPTIONS)
    if defaults.get("device") is not None:
        device = defaults["device"]
        if device not in ("cpu", "gpu", "auto"):
            raise SgsiError(f"unknown device {device!r}: use cpu, gpu or auto")
        literals["device"] = _sql_str(device)
    if defaults.get("memory_budget") is not None:
        budget_mod.parse_size(defaults["memory_budget"])
        literals["memory_budget"] = _sql_str(defaults["memory_budget"])
    if defaults.get("homomorphism") is not None:
        if not isinstance(defaults["homomorphism"], bool):
            raise SgsiError(f"homomorphism must be True or False, got {defaults['homomorphism']!r}")
        literals["homomorphism"] = "true" if defaults["homomorphism"] else "false"
    return literals


def _macro_sql(token, literals) -> str:
    try:
        text = importlib.resources.files("sgsi.sql").joinpath("match.sql").read_text()
    except (ModuleNotFoundError, FileNotFoundError):   # a source checkout that is not installed
        text = (Path(__file__).resolve().parent.parent / "sql" / "match.sql").read_text()
    return string.Template(text).substitute(token=_sql_str(token), **literals)


_ORIGINAL_INTERRUPT = None
_HOOK_LOCK = threading.Lock()


def _install_interrupt_hook():
    """Make ``con.interrupt()`` also cancel the sgsi engine runs of ``con`` (see the module notes)."""
    global _ORIGINAL_INTERRUPT
    with _HOOK_LOCK:
        cls = duckdb.DuckDBPyConnection
        current = getattr(cls, "interrupt", None)
        if current is None or getattr(current, "_sgsi_hook", False):
            return
        original = current

        def interrupt(self):
            _cancel_connection(self)
            return original(self)

        interrupt._sgsi_hook = True
        interrupt.__doc__ = getattr(original, "__doc__", None)
        try:
            cls.interrupt = interrupt
        except (TypeError, AttributeError):     # an immutable type: Registration.interrupt() still works
            return
        _ORIGINAL_INTERRUPT = original


def _cancel_connection(con):
    for state in list(_STATES.values()):
        for c in list(state.connections.values()):
            if c.ref is not None and c.ref() is con:
                c.cancel_running()


def _database_state(con) -> "_Database":
    """The sgsi state of ``con``'s database, installing the Python functions on first use."""
    try:
        ((sid,),) = con.execute("SELECT sgsi_state_id()").fetchall()
    except duckdb.CatalogException:
        state = _Database()
        state.install(con)
        return state
    state = _STATES.get(sid)
    if state is None:   # pragma: no cover - the functions keep their state alive
        raise SgsiError("this database has sgsi functions whose state is gone; reconnect")
    return state


def _udf_types():
    return {
        "sgsi_match_files": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN",
                              "BIGINT"], "VARCHAR[]"),
        "sgsi_count": (["VARCHAR", "UBIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN"], "BIGINT"),
        "sgsi_build_store": (["VARCHAR"] * 12 + ["BOOLEAN", "BOOLEAN", "VARCHAR", "BOOLEAN"], "VARCHAR"),
        "sgsi_state_id": ([], "VARCHAR"),
    }


# ---------------------------------------------------------------------------
# Per-database and per-connection state
# ---------------------------------------------------------------------------


class _Entry:
    __slots__ = ("value", "directory", "generation")

    def __init__(self, value, directory, generation):
        self.value, self.directory, self.generation = value, directory, generation


class _Connection:
    """One registered connection: its cache of results, by generation."""

    def __init__(self, ref):
        self.ref = ref                  # weakref to the DuckDB connection, or None
        self.lock = threading.RLock()
        self.txid = None
        self.generation = 0
        self.files = {}                 # key -> _Entry(list of parquet files, directory)
        self.counts = {}                # key -> _Entry(int, None)
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
                _remove(cache.pop(key).directory)

    def clear(self):
        for cache in (self.files, self.counts):
            for e in cache.values():
                _remove(e.directory)
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


#: Stores a database keeps open between queries.
_OPEN_STORES = 4


class _OpenStores:
    """The stores a database keeps open between queries, least recently used closed first.

    A store is known by its path and its manifest's identity (inode, size,
    modification time), so one rebuilt in place is opened anew. A store in
    use by a query is closed only when the last such query ends.
    """

    class _Open:
        __slots__ = ("version", "graph", "users", "retired")

        def __init__(self, version, graph):
            self.version, self.graph, self.users, self.retired = version, graph, 0, False

    def __init__(self, limit, on_open=None):
        self.limit = limit
        self.on_open = on_open
        self.lock = threading.Lock()
        self.open = OrderedDict()           # absolute path -> _Open
        self.closed = False

    @contextmanager
    def use(self, path):
        """``with stores.use(path) as graph:`` the open Graph of the store at ``path``."""
        path = os.path.abspath(path)
        version = _manifest_version(path)
        with self.lock:
            entry = self.open.get(path)
            if entry is not None and entry.version != version:
                self._retire(self.open.pop(path))
                entry = None
            if entry is None:
                entry = self._Open(version, Graph(path))      # a bad store raises here, nothing kept
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

    def close_idle(self, forever=False):
        """Close the stores no query uses (those in use close when their queries end)."""
        with self.lock:
            self.closed = self.closed or forever
            for path in list(self.open):
                if forever or self.open[path].users == 0:
                    self._retire(self.open.pop(path))


def _manifest_version(path):
    """(inode, size, mtime) of a store's manifest, which a rebuild replaces; None: no manifest."""
    try:
        st = os.stat(os.path.join(path, MANIFEST))
    except OSError:
        return None                      # Graph() reports the missing store
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _remove(directory):
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


class _Database:
    """sgsi's state for one DuckDB database: its Python functions, caches and scratch space."""

    def __init__(self):
        self.id = uuid.uuid4().hex[:12]
        self.lock = threading.RLock()
        self.connections = {}           # token -> _Connection
        self.root = None                # scratch directory, made on first use
        self.stats = {"match_runs": 0, "count_runs": 0, "builds": 0, "store_opens": 0}
        self.stores = _OpenStores(_OPEN_STORES, lambda: self._bump("store_opens"))
        self._seq = itertools.count(1)
        self.closed = False
        _STATES[self.id] = self
        _sweep_stale_scratch()

    def install(self, con):
        fns = {"sgsi_match_files": self.match_files, "sgsi_count": self.count,
               "sgsi_build_store": self.build_store, "sgsi_state_id": self.state_id}
        for name, (params, ret) in _udf_types().items():
            fn = fns[name]      # one bound-method object: DuckDB holds it as long as the database lives
            con.create_function(name, fn, params, ret, null_handling="special",
                                side_effects=(name == "sgsi_build_store"))
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
            self.connections[token] = _Connection(weakref.ref(con))
        weakref.finalize(con, self.release, token, True)
        return token

    def _connection(self, token) -> _Connection:
        with self.lock:
            c = self.connections.get(token)
            if c is None:
                c = self.connections[token] = _Connection(None)
            return c

    def release(self, token, forget=False):
        with self.lock:
            c = self.connections.pop(token, None) if forget else self.connections.get(token)
        if c is not None:
            with c.lock:
                c.clear()
            if forget and self.root is not None:
                _remove(os.path.join(self.root, token))

    def close(self):
        with self.lock:
            self.closed = True
            conns = list(self.connections.values())
            self.connections.clear()
        for c in conns:
            c.clear()
        self.stores.close_idle(forever=True)
        if self.root is not None:
            _remove(self.root)
            self.root = None

    def _result_dir(self, token) -> str:
        with self.lock:
            if self.root is None or not os.path.isdir(self.root):
                self.root = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-{self.id}-")
            d = os.path.join(self.root, token, f"r{next(self._seq)}")
        os.makedirs(d)
        return d

    # -- the SQL functions -------------------------------------------------------------

    def match_files(self, token, txid, graph, pattern, device, memory_budget, homomorphism, max_rows):
        """``sgsi_match_files``: Parquet files holding the result of one query."""
        c = self._connection(token)
        with c.lock:
            c.advance(txid)
            key = _key(graph, pattern, device, memory_budget, homomorphism, max_rows)
            entry = c.files.get(key)
            if entry is None or not all(os.path.exists(f) for f in entry.value):
                with c.run() as cancel:
                    entry = _Entry(*self._run_match(token, graph, pattern, device, memory_budget, homomorphism,
                                                    max_rows, cancel), c.generation)
                c.files[key] = entry
            entry.generation = c.generation
            return entry.value

    def _run_match(self, token, graph, pattern, device, memory_budget, homomorphism, max_rows, cancel=None):
        _require(graph, "graph")
        _require(pattern, "pattern")
        if max_rows is not None and max_rows < 0:
            raise SgsiError(f"max_rows must not be negative, got {max_rows}")
        with self.stores.use(graph) as g:
            reader, failure = g._match(pattern, device=device or "auto", memory_budget=memory_budget,
                                       injective=not homomorphism, limit=max_rows, cancel=cancel)
            try:
                if len(reader.schema) == 0:
                    raise PatternError("the pattern names no vertex, so match() would return no columns: "
                                       "name one, e.g. (a), or use match_count()")
                _check_column_names(reader.schema.names)
                self._bump("match_runs")
                d = self._result_dir(token)
                try:
                    _rows, n_files = write_parquet_parts(reader, d)
                    self._connection(token).last_stats = g.thread_last_stats()
                except BaseException as e:
                    _remove(d)
                    reraise_stream_error(failure, e)      # the engine's own error, with its type
                    disk = os_error_behind(e) if isinstance(e, Exception) else None
                    if disk is not None:
                        raise SgsiError(_scratch_failure(disk, d)) from None
                    raise
            finally:
                reader.close()      # stops the engine now, whatever happened
        return [os.path.join(d, f"part-{i:05d}.parquet") for i in range(n_files)], d

    def _bump(self, key):
        with self.lock:
            self.stats[key] += 1

    def count(self, token, txid, graph, pattern, device, memory_budget, homomorphism):
        """``sgsi_count``: the number of matches."""
        c = self._connection(token)
        with c.lock:
            c.advance(txid)
            key = _key(graph, pattern, device, memory_budget, homomorphism, None)
            entry = c.counts.get(key)
            if entry is None:
                _require(graph, "graph")
                _require(pattern, "pattern")
                with self.stores.use(graph) as g, c.run() as cancel:
                    self._bump("count_runs")
                    n = g.count(pattern, device=device or "auto", memory_budget=memory_budget,
                                injective=not homomorphism, cancel=cancel)
                    c.last_stats = g.thread_last_stats()
                if n >= 2**63:
                    raise SgsiError(f"{n} matches do not fit in a BIGINT")
                entry = c.counts[key] = _Entry(n, None, c.generation)
            entry.generation = c.generation
            return entry.value

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
                con = self._connection(token).ref
                con = con() if con is not None else None
                if con is None:
                    raise SgsiError("edges_query/vertices_query need the registered connection, which is gone")
                tmp = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-build-")
                cur = con.cursor()     # a query cannot use its own connection; a cursor is another one
                try:
                    if edges_query is not None:
                        edges = _copy_query(cur, edges_query, os.path.join(tmp, "edges.parquet"), "edges_query",
                                            separate=True)
                    if vertices_query is not None:
                        vertices = _copy_query(cur, vertices_query, os.path.join(tmp, "vertices.parquet"),
                                               "vertices_query", separate=True)
                finally:
                    cur.close()
            path = build_store(out, edges=edges, vertices=vertices, graph=graph, src=src or "src",
                               dst=dst or "dst", label=label, id=id_col or "id", vertex_label=vertex_label,
                               undirected=bool(undirected), lean=bool(lean), memory_budget=memory_budget,
                               force=bool(force))
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        self._bump("builds")
        with Graph(path) as g:
            return f"{path}: {g.store.n_vertices:,} vertices, {g.store.n_edges:,} edges"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _require(value, name):
    if value is None:
        raise SgsiError(f"{name} must not be NULL")


def _key(graph, pattern, device, memory_budget, homomorphism, max_rows):
    """Cache key: the arguments, plus the identity of the store's manifest and a query file's modification time."""
    def mtime(p):
        try:
            return os.stat(p).st_mtime_ns
        except (OSError, TypeError, ValueError):
            return None
    g = os.path.abspath(graph) if graph is not None else None
    return (g, _manifest_version(g) if g else None, pattern,
            mtime(pattern) if pattern and "(" not in pattern else None,
            device or "auto", memory_budget, bool(homomorphism), max_rows)


def _scratch_failure(err, directory) -> str:
    """The message for a result that could not be written to the scratch directory."""
    text = str(err).strip()
    what = err.strerror or (text.splitlines()[0] if text else type(err).__name__)
    return (f"writing the result of match() to the scratch directory {os.path.dirname(os.path.dirname(directory))} "
            f"failed: {what}; match() writes its whole result there before returning the first row (it has "
            f"been removed): free space there or set TMPDIR to a larger disk, bound the result with max_rows, "
            f"or use match_count()")


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


def _copy_query(con, query, path, what, separate=False):
    """COPY the result of ``query`` (a SELECT or a table name) to a Parquet file."""
    q = query.strip().rstrip(";")
    if not q.lower().startswith(("select", "with", "from", "values", "(", "table")):
        q = f"SELECT * FROM {q}"
    try:
        con.execute(f"COPY ({q}) TO {_sql_str(path)} (FORMAT parquet)")
    except duckdb.Error as e:
        msg = str(e).splitlines()[0]
        hint = ""
        if separate and isinstance(e, duckdb.CatalogException):
            hint = (" (sgsi_build runs the query on a separate connection: TEMP tables and views, and "
                    "changes not yet committed, are not visible to it; COPY the data to Parquet first, or "
                    "use sgsi.duckdb_ext.build_from_sql from Python)")
        raise InputError(f"{what} failed: {msg}{hint}") from None
    return path


def _sweep_stale_scratch():
    """Remove scratch directories whose process no longer runs (POSIX only)."""
    if os.name != "posix":      # os.kill(pid, 0) is no liveness test elsewhere
        return
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        if not name.startswith(_SCRATCH_PREFIX):
            continue
        pid = name[len(_SCRATCH_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        except (PermissionError, OSError):
            pass


@atexit.register
def _cleanup_at_exit():
    for state in list(_STATES.values()):
        state.close()
