"""Writing a stream of result batches to Parquet with bounded memory.

Both the command line (``sgsi match --output``) and the SQL ``match()``
function turn the :class:`pyarrow.RecordBatchReader` of
:meth:`sgsi.Graph.match` into Parquet. Batches are gathered into row
groups of a fixed size, so memory holds at most one row group whatever
the size of the result, and nothing is ever truncated.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from .storage.atomic import fsync_path as _fsync
from .storage.atomic import replacing_file

#: Rows per Parquet row group (the unit DuckDB reads in parallel).
ROW_GROUP_ROWS = 1 << 17


class _RowGroupWriter:
    """Gathers batches into row groups of ``ROW_GROUP_ROWS`` rows for one file.

    After a failed write (disk full: pyarrow then closes the file), close()
    writes nothing more, so the write's own error is the one raised.
    """

    def __init__(self, path, schema, compression):
        self.writer = pq.ParquetWriter(path, schema, compression=compression)
        self.schema = schema
        self.pending = []
        self.pending_rows = 0
        self.rows = 0
        self.failed = False

    def write(self, batch):
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.rows += batch.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            # Whole row groups only; the remainder waits for the next batches.
            table = pa.Table.from_batches(self.pending, schema=self.schema)
            full = table.num_rows - table.num_rows % ROW_GROUP_ROWS
            self._write(table.slice(0, full))
            rest = table.slice(full)
            self.pending, self.pending_rows = rest.to_batches(), rest.num_rows

    def _write(self, table):
        try:
            self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        except BaseException:
            self.failed = True
            raise

    def _flush(self):
        if self.pending_rows:
            self._write(pa.Table.from_batches(self.pending, schema=self.schema))
        self.pending, self.pending_rows = [], 0

    def close(self):
        if self.failed:
            try:
                self.writer.close()
            except Exception:
                pass        # the file is already closed, or as broken as the write that failed
            return
        self._flush()
        self.writer.close()


def write_parquet(reader: pa.RecordBatchReader, path, *, compression="snappy", fsync=False) -> int:
    """Write every batch of ``reader`` into one Parquet file at ``path``.

    The file is written under a temporary name in the same directory and
    renamed into place when complete, so ``path`` never holds a partial
    file; ``fsync``: it is on disk before the rename, and the rename after.
    Returns the number of rows written.
    """
    path = os.fspath(path)
    with replacing_file(path) as tmp:
        out = _RowGroupWriter(tmp, reader.schema, compression)
        try:
            for batch in reader:
                out.write(batch)
        finally:
            out.close()
        if fsync:
            _fsync(tmp)
    if fsync:
        _fsync(os.path.dirname(os.path.abspath(path)))
    return out.rows



def write_parquet_parts(reader: pa.RecordBatchReader, directory, *, rows_per_file=1 << 22,
                        compression="snappy") -> tuple[int, int]:
    """Write ``reader`` as ``part-00000.parquet``, ``part-00001.parquet``, ... in ``directory``.

    A new file is started every ``rows_per_file`` rows. At least one file
    is written (empty when the stream is), so that a glob over the
    directory always finds the schema. Returns (rows, files).
    """
    directory = os.fspath(directory)
    schema = reader.schema
    rows = files = 0
    out = None
    try:
        for batch in reader:
            start = 0
            while start < batch.num_rows:
                if out is None:
                    out = _RowGroupWriter(os.path.join(directory, f"part-{files:05d}.parquet"), schema, compression)
                    files += 1
                take = min(batch.num_rows - start, rows_per_file - out.rows)
                out.write(batch.slice(start, take))
                start += take
                if out.rows >= rows_per_file:
                    rows += out.rows
                    out.close()
                    out = None
        if out is None and files == 0:
            out = _RowGroupWriter(os.path.join(directory, "part-00000.parquet"), schema, compression)
            files = 1
    finally:
        if out is not None:
            rows += out.rows
            out.close()
    return rows, files
