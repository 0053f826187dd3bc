"""What sgsi changes in DuckDB's Python client, once, on the first registration.

``DuckDBPyConnection.interrupt``: a Python function that DuckDB is running
does not see ``con.interrupt()`` (DuckDB checks its interrupt flag only
between its own operators), so the wrapper first cancels the sgsi engine
runs of that connection (they stop within one segment's work and raise
:class:`~sgsi.errors.Cancelled`, removing their scratch files), then calls
DuckDB's own.
"""

from __future__ import annotations

import threading

import duckdb

from .database import STATES

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

