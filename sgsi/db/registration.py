"""The public API of sgsi in DuckDB: :func:`register`, :func:`build_from_sql` and :class:`Registration`."""

from __future__ import annotations

import importlib.resources
import os
import string
from pathlib import Path

from .. import budget as budget_mod
from ..errors import SgsiError
from . import hooks, scratch
from .database import database_state

__all__ = ["register", "build_from_sql", "Registration"]

#: The options whose connection-wide defaults ``register`` takes, with their SQL defaults.
OPTIONS = {"device": "'auto'", "memory_budget": "NULL", "homomorphism": "false"}


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
    hooks.install()
    state = database_state(con)
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
    from ..graph import build

    tmp = scratch.new_build_dir()
    try:
        edges = scratch.copy_query(con, edges_sql, os.path.join(tmp, "edges.parquet"), "edges")
        vertices = None
        if vertices_sql is not None:
            vertices = scratch.copy_query(con, vertices_sql, os.path.join(tmp, "vertices.parquet"), "vertices")
        return build(out, edges=edges, vertices=vertices, **options)
    finally:
        scratch.remove(tmp)


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
                hooks.duckdb_interrupt(con)

    def __repr__(self):
        return f"Registration(token={self.token!r}, stats={self.stats!r})"


def _check_defaults(defaults) -> dict:
    unknown = sorted(set(defaults) - set(OPTIONS))
    if unknown:
        raise SgsiError(f"unknown option {unknown[0]!r} for sgsi.register: use "
                        f"{', '.join(OPTIONS)}")
    literals = dict(OPTIONS)
    if defaults.get("device") is not None:
        device = defaults["device"]
        if device not in ("cpu", "gpu", "auto"):
            raise SgsiError(f"unknown device {device!r}: use cpu, gpu or auto")
        literals["device"] = scratch.sql_str(device)
    if defaults.get("memory_budget") is not None:
        budget_mod.parse_size(defaults["memory_budget"])
        literals["memory_budget"] = scratch.sql_str(defaults["memory_budget"])
    if defaults.get("homomorphism") is not None:
        if not isinstance(defaults["homomorphism"], bool):
            raise SgsiError(f"homomorphism must be True or False, got {defaults['homomorphism']!r}")
        literals["homomorphism"] = "true" if defaults["homomorphism"] else "false"
    return literals


def _macro_sql(token, literals) -> str:
    """The text of ``sql/match.sql`` with the connection's token and defaults filled in."""
    try:
        text = importlib.resources.files("sgsi.sql").joinpath("match.sql").read_text()
    except (ModuleNotFoundError, FileNotFoundError):   # a source checkout that is not installed
        text = (Path(__file__).resolve().parents[2] / "sql" / "match.sql").read_text()
    return string.Template(text).substitute(token=scratch.sql_str(token), **literals)
