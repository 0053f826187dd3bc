"""Sorting a build's edges: the passes, each by DuckDB out of core or in memory.

The labelled partitions come from passes sorted by (label, src, dst) and
(label, dst, src); with several edge labels, the ``any`` ones from passes
sorted by (src, dst, label) and (dst, src, label). Where a pass's keys fit
in memory (about ``_SORT_BYTES_PER_ROW`` a row) they are packed into
uint64 keys by DuckDB and sorted by :mod:`keysort` on all cores; otherwise
DuckDB's ORDER BY sorts them out of core. Either way a pass is a stream of
record batches (l, v, w[, nl]), ``nl`` the label of ``w`` (-1: none), and
:class:`SortQueue` runs the next sort in the background while one is read.
"""

from __future__ import annotations

import collections
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pyarrow as pa

from ..errors import InputError
from . import keysort, sources

#: Peak bytes per row of an in-memory sort: its keys, the bucketed copy and indices, the pass before.
_SORT_BYTES_PER_ROW = 32


class Pass(collections.namedtuple("Pass", "table v w label_major with_neighbour_label")):
    """One sorted pass over the edges of ``table``: rows (l, v, w) with v, w its columns ``v``, ``w``."""


def passes(n_labels, undirected, count_signatures):
    """The sorted passes, in the order they are written.

    Label-major passes (l, v, w) give the labelled partitions; with
    several edge labels, vertex-major passes (v, w, l) give the ``any``
    ones, unless the signatures are counted from the label-major ones
    (``count_signatures``: a lean store). The scratch files of the
    vertex-sorted passes (the label-major ones when there is a single
    label) also carry the neighbour label for the signatures.
    """
    multi = n_labels > 1
    table = "uenc" if undirected else "enc"
    out = [Pass(table, "s", "d", True, not multi)]
    if not undirected:
        out.append(Pass("enc", "d", "s", True, not multi))
    if multi and not count_signatures:
        out.append(Pass(table, "s", "d", False, True))
        if not undirected:
            out.append(Pass("enc", "d", "s", False, True))
    return out


def sorted_sql(p, has_vertex_labels):
    """Rows (l, v, w[, nl]) of pass ``p`` sorted by (l, v, w) or (v, w, l); nl = label of w (-1: none)."""
    cols, join = f"e.l AS l, e.{p.v} AS v, e.{p.w} AS w", ""
    if p.with_neighbour_label:
        if has_vertex_labels:
            cols += ", vi.lid AS nl"
            join = f" JOIN vinfo vi ON vi.vid = e.{p.w}"
        else:
            cols += ", CAST(-1 AS INTEGER) AS nl"
    order = "l, v, w" if p.label_major else "v, w, l"
    return f"SELECT {cols} FROM {p.table} e{join} ORDER BY {order}"


def in_memory(rows, n_labels, n_vertices, max_bytes) -> bool:
    """Whether passes of ``rows`` rows are sorted in memory: where they take at most ``max_bytes``.

    The environment variable ``SGSI_BUILD_SORT`` (``memory`` or
    ``duckdb``; default ``auto``) picks one, for benchmarks.
    """
    choice = os.environ.get("SGSI_BUILD_SORT", "auto")
    if choice not in ("auto", "memory", "duckdb"):
        raise InputError(f"SGSI_BUILD_SORT must be auto, memory or duckdb, not {choice!r}")
    fits = rows * _SORT_BYTES_PER_ROW <= max_bytes or choice == "memory"
    return choice != "duckdb" and fits and keysort.KeyLayout.fits(_widths(n_labels, n_vertices))


def _widths(n_labels, n_vertices):
    return keysort.bit_width(n_labels), keysort.bit_width(n_vertices), keysort.bit_width(n_vertices)


def sort_queue(con, passes, memory, n_labels, n_vertices, has_vertex_labels, label_ids):
    """The sorted rows of ``passes``, each sorted one ahead in the background.

    ``memory``: sort with :mod:`keysort` (see :func:`in_memory`), else with
    DuckDB. ``label_ids()`` gives the label id of every vertex (int32, -1:
    none); it is called only where a pass needs the neighbour labels.
    """
    if not memory:
        return SortQueue([partial(_sql_sort, con.cursor(), sorted_sql(p, has_vertex_labels)) for p in passes])
    labels = None
    if any(p.with_neighbour_label for p in passes) and has_vertex_labels:
        labels = label_ids()
    widths = _widths(n_labels, n_vertices)
    jobs = []
    for p in passes:
        layout = keysort.KeyLayout(widths if p.label_major else widths[1:] + widths[:1])
        cols = ["e.l", f"e.{p.v}", f"e.{p.w}"] if p.label_major else [f"e.{p.v}", f"e.{p.w}", "e.l"]
        sql = f"SELECT {layout.sql(cols)} AS k FROM {p.table} e"
        nl = (labels if labels is not None else np.full(max(n_vertices, 1), -1, np.int32)) \
            if p.with_neighbour_label else None
        jobs.append(partial(_memory_sort, con.cursor(), sql, layout, p.label_major, nl))
    return SortQueue(jobs)


class SortQueue:
    """Runs a list of sorts in order, each one ahead in a background thread.

    DuckDB and NumPy release the GIL while they sort, so the next sort runs
    while the rows of the current one are turned into segments. Each job
    returns an iterator of record batches (l, v, w[, nl]).
    """

    def __init__(self, jobs):
        self.jobs = list(jobs)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgsi-sort")
        self.future = None
        self.waited = 0.0           # seconds the last take() waited for its sort
        self._submit()

    def _submit(self):
        self.future = self.pool.submit(self.jobs.pop(0)) if self.jobs else None

    def take(self):
        """Record batches of the next sort."""
        t = time.perf_counter()
        batches = self.future.result()
        self.future = None          # its rows belong to the caller now
        self.waited = time.perf_counter() - t
        self._submit()
        return batches

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


def _sql_sort(cursor, sql):
    """DuckDB's ORDER BY (out of core), run up to its first batch."""
    reader = cursor.sql(sql).to_arrow_reader(sources.BATCH_ROWS)
    try:
        first = reader.read_next_batch()          # runs the query (the sort) here
    except StopIteration:
        first = None
    return _batches(reader, first)


def _memory_sort(cursor, sql, layout, label_major, neighbour_labels):
    """The packed keys of ``sql`` sorted in memory; batches (l, v, w[, nl]) unpacked as they are read."""
    table = cursor.sql(sql).to_arrow_table()
    keys = np.empty(table.num_rows, np.uint64)
    at = 0
    for chunk in table.column(0).chunks:
        keys[at:at + len(chunk)] = chunk.to_numpy()
        at += len(chunk)
    del table
    keys = keysort.sort_keys(keys, os.cpu_count() or 1)
    return _unpacked_batches(keys, layout, label_major, neighbour_labels)


def _unpacked_batches(keys, layout, label_major, neighbour_labels):
    names = ["l", "v", "w"] + (["nl"] if neighbour_labels is not None else [])
    for a in range(0, len(keys), sources.BATCH_ROWS):
        cols = layout.unpack(keys[a:a + sources.BATCH_ROWS])
        if not label_major:
            cols = cols[2:] + cols[:2]          # (v, w, l) -> (l, v, w)
        if neighbour_labels is not None:
            cols.append(neighbour_labels[cols[2]])
        yield pa.RecordBatch.from_arrays([pa.array(c) for c in cols], names=names)


def _batches(reader, first):
    if first is not None:
        yield first
        yield from reader


def int32(col):
    """An Arrow column as an int32 NumPy array."""
    a = col.to_numpy()
    return a if a.dtype == np.int32 else a.astype(np.int32)


def new_rows(cols, last):
    """Mask of the rows of sorted columns that differ from the row before (None: all do).

    ``last`` is the last row of the previous batch, or None.
    """
    n = len(cols[0])
    new = np.zeros(n, bool)
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    new[0] = last is None or any(c[0] != x for c, x in zip(cols, last))
    return None if new.all() else new
