"""Writing the partitions: sorted edge streams cut into PCSR segments and indexed.

Each partition (edge label x direction) is fed as edges sorted by (src,
dst) and cut into segments of ``plan.segment_edges`` edges. A segment's
PCSR (:mod:`sgsi.partition.pcsr`) goes to ``pcsr_groups.arrow`` and
``pcsr_ci.arrow``, one batch each, and a row to ``segments.arrow``; the
degree of every source vertex goes to ``vindex.arrow`` in batches of
``plan.index_batch_rows``, indexed by ``vindex_batches.arrow``.
"""

from __future__ import annotations

import collections
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from .. import budget as budget_mod
from ..partition import pcsr
from . import format as fmt

#: Rough peak memory of one PCSR build per edge (edges, ci, gather steps, per-vertex arrays).
_BUILD_BYTES_PER_EDGE = 64


def pcsr_workers():
    """Threads that build PCSRs: none on small machines (the feeding thread and DuckDB use them)."""
    env = os.environ.get("SGSI_BUILD_WORKERS")
    if env is not None:
        return max(0, int(env))
    return max(0, min(8, (os.cpu_count() or 1) - 2))


class SegmentWriter:
    """Cuts sorted (label, src, dst) streams into segments and writes their PCSRs.

    The feeding side cuts segments; each segment's PCSR is built by
    :func:`_build_segment`, on ``workers`` threads when there are any (NumPy
    releases the GIL in the heavy steps), and everything is written and
    indexed by the consuming side in the order it was fed, so the store is
    the same whatever the number of workers.
    """

    def __init__(self, directory, plan, theta, workers=0):
        self.plan, self.theta = plan, theta
        self.groups = fmt.BatchFile(os.path.join(directory, "pcsr_groups.arrow"), pa.schema([("g", pa.int32())]))
        self.ci = fmt.BatchFile(os.path.join(directory, "pcsr_ci.arrow"), pa.schema([("ci", pa.int32())]))
        self.vindex = fmt.BatchFile(os.path.join(directory, "vindex.arrow"),
                                    pa.schema([("vertex", pa.int32()), ("degree", pa.int32())]))
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sgsi-pcsr") if workers else None
        self.max_queued = 2 * workers
        # Segments in flight hold about _BUILD_BYTES_PER_EDGE each (their edges and the PCSR temporaries):
        # at most a quarter of RAM, so large segments are built fewer at a time.
        self.max_inflight = budget_mod.host_memory_bytes() // 4
        self.inflight = 0
        self.queue = collections.deque()    # ("start" | "segment" | "end", key, job)
        self.waited = 0.0                   # seconds the feeding side waited for PCSR builders
        self.seg_rows = []      # (partition, first_src, last_src, edges, groups)
        self.idx_rows = []      # (partition, first_vertex, last_vertex, rows)
        self.parts = {}
        self.n_segments = 0
        self.key = None         # partition being fed
        self.pend_s, self.pend_d, self.pend_n = [], [], 0
        self._reset_index()

    def _reset_index(self):
        self.idx_v, self.idx_c = [], []
        self.idx_n = 0
        self.carry = None       # (vertex, count) of the last run, may continue

    # -- feeding side ----------------------------------------------------------------

    def feed(self, direction, label, s, d):
        """Append edges sorted by (label, src, dst); ``label`` is one id or an array."""
        if np.ndim(label) == 0:
            self._start(int(label), direction)
            self._append(s, d)
            return
        l = label
        cuts = np.flatnonzero(l[1:] != l[:-1]) + 1
        bounds = np.r_[0, cuts, len(l)]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):   # one iteration per label run
            self._start(int(l[a]), direction)
            self._append(s[a:b], d[a:b])

    def _start(self, label, direction):
        key = fmt.partition_key(label, direction)
        if key != self.key:
            self.finish_partition()
            self.key = key
            self.queue.append(("start", key, None))

    def _append(self, s, d):
        per = self.plan.segment_edges
        while len(s):
            take = min(per - self.pend_n, len(s))
            self.pend_s.append(s[:take])
            self.pend_d.append(d[:take])
            self.pend_n += take
            s, d = s[take:], d[take:]
            if self.pend_n == per:
                self._flush_segment()

    def _flush_segment(self):
        if not self.pend_n:
            return
        s = self.pend_s[0] if len(self.pend_s) == 1 else np.concatenate(self.pend_s)
        d = self.pend_d[0] if len(self.pend_d) == 1 else np.concatenate(self.pend_d)
        self.pend_s, self.pend_d, self.pend_n = [], [], 0
        if self.pool is None:
            job = _build_segment(s, d, self.theta)
        else:
            job = self.pool.submit(_build_segment, s, d, self.theta)
            self.inflight += len(s) * _BUILD_BYTES_PER_EDGE
        self.queue.append(("segment", self.key, job))
        self._drain()

    def finish_partition(self):
        if self.key is None:
            return
        self._flush_segment()
        self.queue.append(("end", self.key, None))
        self.key = None
        self._drain()

    def sync(self):
        """Write everything fed so far (``parts`` and ``n_segments`` are then up to date)."""
        self._drain(everything=True)

    # -- consuming side (in feeding order) -------------------------------------------

    def _drain(self, everything=False):
        q = self.queue
        while q:
            kind, key, job = q[0]
            if kind == "segment" and self.pool is not None and not job.done() and not everything \
                    and len(q) <= self.max_queued and self.inflight <= self.max_inflight:
                return
            q.popleft()
            if kind == "start":
                self.parts[key] = {"segments": [self.n_segments, 0], "vindex": [len(self.idx_rows), 0],
                                   "edges": 0, "vertices": 0, "max_degree": 0}
            elif kind == "segment":
                if self.pool is None:
                    built = job
                else:
                    t = time.perf_counter()
                    built = job.result()
                    self.waited += time.perf_counter() - t
                if self.pool is not None:
                    self.inflight -= built[6] * _BUILD_BYTES_PER_EDGE
                self._write_segment(key, built)
            else:
                self._end_partition(key)

    def _write_segment(self, key, built):
        groups, ci, verts, counts, first, last, n = built
        self.groups.write([pa.array(groups.reshape(-1))])
        self.ci.write([pa.array(ci)])
        self.seg_rows.append((key, first, last, n, groups.shape[0]))
        self.n_segments += 1
        p = self.parts[key]
        p["segments"][1] += 1
        p["edges"] += n
        # Degree index: runs of equal sources; the last run may continue in the next segment.
        if self.carry is not None:
            if verts[0] == self.carry[0]:
                counts[0] += self.carry[1]
            else:
                self._add_index(key, np.array([self.carry[0]]), np.array([self.carry[1]]))
        self._add_index(key, verts[:-1], counts[:-1])
        self.carry = (int(verts[-1]), int(counts[-1]))

    def _end_partition(self, key):
        if self.carry is not None:
            self._add_index(key, np.array([self.carry[0]]), np.array([self.carry[1]]))
            self.carry = None
        while self.idx_n:
            self._flush_index(key, self.plan.index_batch_rows)
        self._reset_index()

    def _add_index(self, key, v, c):
        if len(v) == 0:
            return
        self.idx_v.append(v.astype(np.int32))
        self.idx_c.append(c.astype(np.int32))
        self.idx_n += len(v)
        p = self.parts[key]
        p["vertices"] += len(v)
        p["max_degree"] = max(p["max_degree"], int(c.max()))
        while self.idx_n >= self.plan.index_batch_rows:
            self._flush_index(key, self.plan.index_batch_rows)

    def _flush_index(self, key, k):
        v = np.concatenate(self.idx_v)
        c = np.concatenate(self.idx_c)
        k = min(k, len(v))
        if k == 0:
            return
        self.vindex.write([pa.array(v[:k]), pa.array(c[:k])])
        self.idx_rows.append((key, int(v[0]), int(v[k - 1]), k))
        self.parts[key]["vindex"][1] += 1
        self.idx_v, self.idx_c, self.idx_n = [v[k:]], [c[k:]], len(v) - k

    def close(self):
        try:
            self.finish_partition()
            self.sync()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
        for f in (self.groups, self.ci, self.vindex):
            f.close()
        d = os.path.dirname(self.groups.path)
        seg = pa.table({
            "partition": pa.array([r[0] for r in self.seg_rows], pa.string()),
            "first_src": pa.array([r[1] for r in self.seg_rows], pa.int32()),
            "last_src": pa.array([r[2] for r in self.seg_rows], pa.int32()),
            "edges": pa.array([r[3] for r in self.seg_rows], pa.int64()),
            "groups": pa.array([r[4] for r in self.seg_rows], pa.int64()),
        })
        with pa.ipc.new_file(os.path.join(d, "segments.arrow"), seg.schema) as wr:
            wr.write_table(seg)
        idx = pa.table({
            "partition": pa.array([r[0] for r in self.idx_rows], pa.string()),
            "first_vertex": pa.array([r[1] for r in self.idx_rows], pa.int32()),
            "last_vertex": pa.array([r[2] for r in self.idx_rows], pa.int32()),
            "rows": pa.array([r[3] for r in self.idx_rows], pa.int64()),
        })
        with pa.ipc.new_file(os.path.join(d, "vindex_batches.arrow"), idx.schema) as wr:
            wr.write_table(idx)
        return self.parts

    def abort(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _build_segment(s, d, theta):
    """PCSR of one segment and its source runs: (groups, ci, verts, counts, first, last, edges)."""
    starts, verts, counts = pcsr.source_runs(s)
    groups, ci = pcsr.build_from_runs(starts, verts, counts, d, theta)
    return groups, ci, verts, counts, int(s[0]), int(s[-1]), len(s)
