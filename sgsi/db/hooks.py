"""What sgsi changes in DuckDB's Python client, once, on the first registration.

``DuckDBPyConnection.interrupt``: a Python function that DuckDB is running
does not see ``con.interrupt()`` (DuckDB checks its interrupt flag only
between its own operators), so the wrapper first cancels the sgsi engine
runs of that connection (they stop within one segment's work and raise
:class:`~sgsi.errors.Cancelled`, removing their scratch files), then calls
DuckDB's own.

``execute``, ``executemany``, ``sql``, ``query`` and ``from_query``: an
unknown option of ``match()``, ``match_count()`` or ``sgsi_build()`` gets
DuckDB's generic "does not support the supplied arguments"; the wrapper
re-raises it, with the same exception type, naming the option and listing
the valid ones (:func:`sgsi.db.arguments.explain`). Every other error, and
every statement that succeeds, passes through untouched.
"""

from __future__ import annotations

import functools
import threading

import duckdb

from . import arguments
from .database import STATES

#: The methods whose macro errors are explained; each takes the statement first.
STATEMENT_METHODS = ("execute", "executemany", "sql", "query", "from_query")

_ORIGINAL_INTERRUPT = None
_LOCK = threading.Lock()


def install():
    """Wrap the client's methods (see the module notes); later calls do nothing."""
    global _ORIGINAL_INTERRUPT
    with _LOCK:
        cls = duckdb.DuckDBPyConnection
        original = getattr(cls, "interrupt", None)
        if original is not None and not getattr(original, "_sgsi_hook", False):
            def interrupt(self):
                cancel_connection(self)
                return original(self)
            interrupt._sgsi_hook = True
            interrupt.__doc__ = getattr(original, "__doc__", None)
            if _replace(cls, "interrupt", interrupt):    # an immutable type: Registration.interrupt() still works
                _ORIGINAL_INTERRUPT = original
        for name in STATEMENT_METHODS:
            method = getattr(cls, name, None)
            if method is not None and not getattr(method, "_sgsi_hook", False):
                _replace(cls, name, _explaining(method))


def duckdb_interrupt(con):
    """DuckDB's own ``con.interrupt()``, without sgsi's cancelling."""
    return _ORIGINAL_INTERRUPT(con) if _ORIGINAL_INTERRUPT is not None else con.interrupt()


def cancel_connection(con):
    """Cancel the sgsi engine runs of ``con``."""
    for state in list(STATES.values()):
        for c in list(state.connections.values()):
            if c.ref is not None and c.ref() is con:
                c.cancel_running()


def _replace(cls, name, fn) -> bool:
    try:
        setattr(cls, name, fn)
    except (TypeError, AttributeError):
        return False
    return True


def _explaining(method):
    """``method`` of a connection, re-raising the errors :func:`arguments.explain` can say better."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (duckdb.BinderException, duckdb.ParserException) as e:
            statement = args[0] if args else kwargs.get("query")
            better = arguments.explain(str(e), statement)
            if better is None:
                raise
            raise type(e)(better) from None
    wrapper._sgsi_hook = True
    return wrapper
