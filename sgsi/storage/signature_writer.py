"""Writing the vertex signatures: ``signatures.arrow`` and ``vertex_labels.arrow``.

A vertex's signature (:mod:`sgsi.partition.signatures`) records, per
group of (edge label, direction, neighbour label) pairs, whether it has
none, one or more such edges. The pairs are counted per block of
vertices either from vertex-sorted scratch files of the build's passes
(:class:`_VertexCursor`), or, in a lean store with several edge labels,
from a table of saturating counts filled from the label-sorted passes as
they are read (:class:`SignatureTable`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from ..partition import signatures
from . import format as fmt
from .sources import stream

#: Label pairs up to this many get a dense (edge label, neighbour label) -> group table.
_DENSE_GROUP_TABLE = 1 << 20
#: Counters per signature bincount (vertices x groups).
_SIGNATURE_BINS = 1 << 18
#: Vertices whose words are made at once from a lean build's table of saturated counts.
_SIGNATURE_TABLE_BLOCK = 1 << 16


class SignatureWriter:
    """The signature files of one store, in the sizes of ``plan``."""

    def __init__(self, directory, plan, bits, label_bits, n_vertex_labels, undirected):
        self.directory, self.plan = directory, plan
        self.bits, self.label_bits = bits, label_bits
        self.n_vertex_labels = n_vertex_labels
        self.undirected = undirected

    def group_map(self, con, dir_char, n_labels):
        """(edge label, neighbour label) -> signature group, for one direction."""
        groups = signatures.n_groups(self.bits, self.label_bits)
        width = self.n_vertex_labels + 1
        if n_labels * width <= _DENSE_GROUP_TABLE:
            table = np.array([signatures.pair_group(a, dir_char, b - 1, groups)      # one per label pair
                              for a in range(n_labels) for b in range(width)], np.int64)
            return lambda l, nl: table[l.astype(np.int64) * width + (nl + 1)]
        # Many labels: only the pairs that occur.
        v, w = ("s", "d") if dir_char != signatures.IN else ("d", "s")
        table = "uenc" if self.undirected else "enc"
        keys = con.execute(f"SELECT DISTINCT e.l, vi.lid FROM {table} e JOIN vinfo vi ON vi.vid = e.{w} "
                           f"ORDER BY 1, 2").fetchall()
        packed = np.array([a * width + b + 1 for a, b in keys], np.int64)
        grp = np.array([signatures.pair_group(a, dir_char, b, groups) for a, b in keys], np.int64)
        return lambda l, nl: grp[np.searchsorted(packed, l.astype(np.int64) * width + (nl + 1))]

    def write(self, con, n_vertices, vertex_sorted, counted=None):
        """Write the signature files; returns {name: None} of each (for the manifest).

        The pairs come from the :class:`SignatureTable` ``counted`` where
        there is one, else from ``vertex_sorted``: (scratch file, direction)
        pairs of vertex-sorted rows (v, l, nl).
        """
        groups = signatures.n_groups(self.bits, self.label_bits)
        n_labels = con.execute("SELECT count(*) FROM elab").fetchone()[0]
        sources = [(_VertexCursor(path), self.group_map(con, dc, n_labels)) for path, dc in vertex_sorted]
        labels = stream(con, "SELECT lid FROM vinfo ORDER BY vid")

        seg_len = self.plan.signature_segment_vertices
        block = max(1, min(seg_len, _SIGNATURE_BINS // groups))     # vertices counted per bincount
        if counted is not None:
            block = max(1, min(seg_len, _SIGNATURE_TABLE_BLOCK))    # vertices whose words are made at once
        cols = self.plan.signature_bucket_columns
        n_words = self.bits // 32
        sig_file = fmt.BatchFile(os.path.join(self.directory, "signatures.arrow"),
                                 pa.schema([(f"w{c}", pa.uint32()) for c in range(cols)]))
        lab_file = fmt.BatchFile(os.path.join(self.directory, "vertex_labels.arrow"),
                                 pa.schema([("label", pa.int32())]))
        label_stream = _Restreamer(labels, 1)
        label_table = signatures.label_bit_table(self.n_vertex_labels, self.label_bits)
        table = counted.table if counted is not None else None
        for start in range(0, max(n_vertices, 1), seg_len) if n_vertices else []:
            stop = min(start + seg_len, n_vertices)
            (lab,) = label_stream.take_rows(stop - start)
            lab = lab.astype(np.int32)
            words = np.empty((stop - start, n_words), np.uint32)
            for a in range(start, stop, block):          # blocks of vertices, not single ones
                b = min(a + block, stop)
                if table is not None:
                    words[a - start:b - start] = signatures.words_from_saturated(
                        table[a:b], lab[a - start:b - start], self.bits, self.label_bits, label_table)
                    continue
                keys = []
                for cursor, group_of in sources:
                    for v, l, nl in cursor.take_below(b):
                        k = v.astype(np.int64)
                        k -= a
                        k *= groups
                        k += group_of(l, nl)
                        keys.append(k)
                keys = keys[0] if len(keys) == 1 else np.concatenate(keys) if keys else np.zeros(0, np.int64)
                counts = np.bincount(keys, minlength=(b - a) * groups)
                words[a - start:b - start] = signatures.words_from_counts(
                    counts.reshape(b - a, groups), lab[a - start:b - start], self.bits, self.label_bits,
                    label_table)
            lab_file.write([pa.array(lab)])
            for k in range(n_words // cols):
                sig_file.write([pa.array(words[:, k * cols + c]) for c in range(cols)])
        sig_file.close()
        lab_file.close()
        return {"signatures.arrow": None, "vertex_labels.arrow": None}


class SignatureTable:
    """Pair counts per (vertex, signature group), from label-sorted edge batches.

    A signature tells only whether a group holds no pair, one, or more
    (00, 01, 11), so the counts stop at 2 and fit a uint8 table of
    n_vertices x G. Batches are counted on worker threads while the feeding
    thread goes on (NumPy's sort releases the GIL); the saturating additions
    commute, so the batches update the table in any order, each stripe of
    vertices by one thread at a time.
    """

    STRIPES = 16

    def __init__(self, n_vertices, groups, vertex_labels, group_maps, workers=1):
        self.groups = groups
        self.table = np.zeros((n_vertices, groups), np.uint8)
        self._flat = self.table.reshape(-1)
        self._labels = vertex_labels          # label id of every vertex (-1: none)
        self._group_maps = group_maps         # direction -> f(edge labels, neighbour labels) -> groups
        self._workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sgsi-signature-counts")
        self._pending = collections.deque()
        self._bounds = np.linspace(0, self._flat.size, self.STRIPES + 1).astype(np.int64)[1:-1]
        self._locks = [threading.Lock() for _ in range(self.STRIPES)]
        self.waited = 0.0          # seconds add() waited for counting threads

    def add(self, direction, l, v, w):
        """Count the pairs (l, direction, label of w) of the vertices v: distinct edges, sorted by (l, v)."""
        self._pending.append(self._pool.submit(self._count, direction, l, v, w))
        if len(self._pending) > 2 * self._workers:
            t = time.perf_counter()
            while len(self._pending) > 2 * self._workers:
                self._pending.popleft().result()
            self.waited += time.perf_counter() - t

    def _count(self, direction, l, v, w):
        k = v.astype(np.int64)
        k *= self.groups
        k += self._group_maps[direction](l, self._labels[w])
        k.sort(kind="stable")       # sorted by (l, v) already: only the runs of one vertex need sorting
        new = np.empty(len(k), bool)
        new[0] = True
        np.not_equal(k[1:], k[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        keys = k[starts]
        n = np.minimum(np.diff(starts, append=len(k)), 2).astype(np.uint8)
        cuts = np.r_[0, np.searchsorted(keys, self._bounds), len(keys)]
        for s, lock in enumerate(self._locks):
            a, b = cuts[s], cuts[s + 1]
            if a < b:
                with lock:
                    cur = self._flat[keys[a:b]]
                    cur += n[a:b]
                    np.minimum(cur, 2, out=cur)
                    self._flat[keys[a:b]] = cur

    def finish(self):
        """Wait for every batch to be counted."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self.abort()

    def abort(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


class _VertexCursor:
    """The rows of a vertex-sorted scratch file, handed out by vertex bound."""

    def __init__(self, path):
        self.file = fmt.open_batches(path)
        self.next_batch = 0
        self.buf = None

    def take_below(self, bound):
        """Yield (v, l, nl) pieces of the rows whose vertex is below ``bound``."""
        while True:
            if self.buf is None or len(self.buf[0]) == 0:
                if self.next_batch >= self.file.num_record_batches:
                    return
                b = self.file.get_batch(self.next_batch)
                self.next_batch += 1
                self.buf = tuple(b.column(c).to_numpy() for c in ("v", "l", "nl"))
            v = self.buf[0]
            cut = int(np.searchsorted(v, bound, "left"))
            if cut:
                yield tuple(c[:cut] for c in self.buf)
            if cut < len(v):
                self.buf = tuple(c[cut:] for c in self.buf)
                return
            self.buf = None


class _Restreamer:
    """Re-chunks a RecordBatchReader: take N rows, or rows until a key is reached."""

    def __init__(self, reader, n_cols):
        self.reader = iter(reader)
        self.n = n_cols
        self.buf = [np.zeros(0, np.int64) for _ in range(n_cols)]
        self.done = False

    def _pull(self):
        try:
            batch = next(self.reader)
        except StopIteration:
            self.done = True
            return False
        self.buf = [np.concatenate([b, batch.column(i).to_numpy().astype(np.int64)]) for i, b in enumerate(self.buf)]
        return True

    def take_rows(self, k):
        while len(self.buf[0]) < k and not self.done:
            self._pull()
        out = [b[:k] for b in self.buf]
        self.buf = [b[k:] for b in self.buf]
        return out
