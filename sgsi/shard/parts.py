"""The scratch directory of a sharded query: its marker, and a match's Parquet parts.

The directory holds the marker file ``running`` while the query runs: the
driver removes it to stop the tasks, which look for it (in their own thread,
so a worker's busy event loop cannot delay them), and removing the directory
removes it too.

Task k writes ``part-k.parquet`` under a temporary name, syncs it and renames
it into place (:func:`sgsi.results.write_parquet`), so a task run twice (a
worker died, Dask ran it again) replaces its part rather than adding rows. The
directory is ``sgsi-scratch-PID-shard-*`` under ``SGSI_SHARD_DIR`` (a directory
every worker sees, for a cluster of several hosts), else the system's temp
directory; one a crashed process left is removed as the SQL front end's are
(:func:`sgsi.db.scratch.sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

import pyarrow.parquet as pq

from ..db.scratch import PREFIX
from ..results import write_parquet

#: Rows a batch read back from a part holds at most.
READ_BATCH_ROWS = 1 << 16
#: The name of the marker file.
MARKER = "running"


def new_dir() -> str:
    """A new directory for one query, holding its marker."""
    d = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-shard-", dir=os.environ.get("SGSI_SHARD_DIR") or None)
    open(marker(d), "w").close()
    return d


def marker(directory) -> str:
    return os.path.join(directory, MARKER)


def stop(directory):
    """Tell the query's tasks to stop: remove its marker."""
    with contextlib.suppress(OSError):
        os.remove(marker(directory))


def path(directory, index) -> str:
    """Where task ``index`` writes its part."""
    return os.path.join(directory, f"part-{index:05d}.parquet")


def write(reader, target) -> int:
    """Write ``reader``'s batches as the part ``target``, atomically; the rows written."""
    return write_parquet(reader, target, fsync=True)


def read(target):
    """The batches of the part ``target``, read as they are asked for."""
    f = pq.ParquetFile(target)
    try:
        yield from f.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False)
    finally:
        f.close()


def remove(directory, tries=20):
    """Remove ``directory``; a task still stopping may write into it for a moment, so try again."""
    for _ in range(tries):
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.exists(directory):
            return
        time.sleep(0.05)
