"""Scratch files: where ``match()`` writes its results and ``sgsi_build`` its query results.

Everything lives under ``tempfile.gettempdir()`` in directories named
``sgsi-scratch-PID-...``, never in the working directory. A directory whose
process no longer runs (it crashed) is removed by :func:`sweep_stale`, which
each new database state runs once.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import duckdb

from ..errors import InputError

PREFIX = "sgsi-scratch-"


def sql_str(s) -> str:
    """``s`` as a SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


def new_root(database_id) -> str:
    """A new scratch directory for the results of one database."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{database_id}-")


def new_build_dir() -> str:
    """A new scratch directory for a build's inputs (the caller removes it)."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-build-")


def remove(directory):
    """Remove ``directory`` and what it holds; None and a missing directory are fine."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def copy_query(con, query, path, what, separate=False):
    """COPY the result of ``query`` (a SELECT or a table name) to a Parquet file."""
    q = query.strip().rstrip(";")
    if not q.lower().startswith(("select", "with", "from", "values", "(", "table")):
        q = f"SELECT * FROM {q}"
    try:
        con.execute(f"COPY ({q}) TO {sql_str(path)} (FORMAT parquet)")
    except duckdb.Error as e:
        msg = str(e).splitlines()[0]
        hint = ""
        if separate and isinstance(e, duckdb.CatalogException):
            hint = (" (sgsi_build runs the query on a separate connection: TEMP tables and views, and "
                    "changes not yet committed, are not visible to it; COPY the data to Parquet first, or "
                    "use sgsi.db.build_from_sql from Python)")
        raise InputError(f"{what} failed: {msg}{hint}") from None
    return path


def failure_message(err, directory) -> str:
    """The message for a result that could not be written to the scratch directory."""
    text = str(err).strip()
    what = err.strerror or (text.splitlines()[0] if text else type(err).__name__)
    return (f"writing the result of match() to the scratch directory {os.path.dirname(os.path.dirname(directory))} "
            f"failed: {what}; match() writes its whole result there before returning the first row (it has "
            f"been removed): free space there or set TMPDIR to a larger disk, bound the result with "
            f"max_rows := N, or use match_count()")


def sweep_stale():
    """Remove scratch directories whose process no longer runs (POSIX only)."""
    if os.name != "posix":      # os.kill(pid, 0) is no liveness test elsewhere
        return
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        except (PermissionError, OSError):
            pass
