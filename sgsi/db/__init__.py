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
The statement methods (``execute``, ``sql``, ...) are wrapped too, only to
name an unknown option of the macros, which DuckDB's own error leaves out.

Python UDFs belong to the database, not the connection: every connection
and cursor of one database shares them, so the per-database state lives in
:class:`~sgsi.db.database.Database` and each registered connection gets its
own macros and a token that keeps its cache apart.

Stores stay open between queries: the database keeps the last
:data:`~sgsi.db.stores.OPEN_STORES` stores it queried open
(:class:`~sgsi.db.stores.OpenStores`), so a query finds the GPU segments,
signature columns and pinned buffers the one before left on the device
instead of opening the store afresh. A store rebuilt in place is opened
anew (its manifest changed); the old one closes once no query uses it.
They close with the database, or with :meth:`Registration.release`.

Modules
-------
registration  the public API: register, build_from_sql, Registration
database      per-database state, and the Python functions behind the macros
connection    per-connection state: the cache of results, by generation
stores        the stores a database keeps open between queries
scratch       scratch directories: results, build inputs, stale ones swept
hooks         the wrappers of DuckDBPyConnection (interrupt, unknown options)
arguments     what an unknown option of a macro is called, from DuckDB's error
"""

from .registration import Registration, build_from_sql, register

__all__ = ["register", "build_from_sql", "Registration"]
