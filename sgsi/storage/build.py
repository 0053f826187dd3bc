"""Building a graph store: the stages of ingest, in order, and their progress.

DuckDB does the heavy lifting out of core (it spills to disk): the inputs
become views and dictionaries (:mod:`.sources`), and the encoded edges
(table ``enc``, repeats kept) are sorted by (label, src, dst) and (label,
dst, src) for the labelled partitions and, with several edge labels, by
(src, dst, label) and (dst, src, label) for the ``any`` ones
(:mod:`.sort`). Each sorted stream is read in record batches,
deduplicated on the fly (equal rows are adjacent), cut into segments of
equal edge count whose PCSRs are built and written
(:mod:`.segment_writer`), and copied to a scratch Arrow file: the ``both``
partitions are the merge of two scratch files (:mod:`.merge`), and the
vertex signatures are counted from the two vertex-sorted ones
(:mod:`.signature_writer`). A lean store (``lean=True``) keeps the
labelled ``out`` and ``in`` partitions only: with several edge labels its
signatures are counted from the label-sorted streams into a table of
saturating (vertex, group) counts, so it needs two sorts instead of four
and no scratch files. The next sort runs in the background while a stream
is written; on larger machines PCSRs are built on worker threads; files
are checksummed in the background as they are finished (:mod:`.writers`).
Only the in-memory sort holds all edges of a pass, and only where they
fit; otherwise batches, segments and vertex blocks are bounded.

Everything is written into a temporary directory beside the target, which
is renamed into place only when complete (:mod:`.atomic`).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from .. import budget as budget_mod
from ..errors import InputError
from ..partition import pcsr, signatures
from ..partition.segments import plan as make_plan
from . import atomic, sort, sources, writers
from . import format as fmt
from .merge import merge_sorted
from .segment_writer import SegmentWriter, pcsr_workers
from .signature_writer import SignatureTable, SignatureWriter

_SCRATCH_SCHEMA = pa.schema([("l", pa.int32()), ("v", pa.int32()), ("w", pa.int32()), ("nl", pa.int32())])


def build_store(out, *, edges=None, vertices=None, graph=None, src="src", dst="dst", label=None,
                id="id", vertex_label=None, undirected=False, lean=False, memory_budget=None, force=False,
                theta=pcsr.DEFAULT_THETA, signature_bits=signatures.DEFAULT_BITS,
                label_bits=signatures.DEFAULT_LABEL_BITS, progress=None):
    """Build a graph store at ``out``; see :func:`sgsi.build` for the arguments."""
    out = os.fspath(out)
    atomic.refuse_existing(out, force)
    if (edges is None) == (graph is None):
        raise InputError("give edge Parquet files or a --graph file in the benchmark format, not both")
    try:
        signatures.validate_params(signature_bits, label_bits)
    except ValueError as e:
        raise InputError(str(e)) from None
    if not 2 <= theta <= 16:
        raise InputError(f"theta must be in 2..16, got {theta}")
    budget = budget_mod.resolve_budget(memory_budget)
    report = progress or (lambda msg: None)
    with atomic.replacing_dir(out, force) as tmp:
        with atomic.scratch_dir(os.path.dirname(tmp)) as spill:
            con = duckdb.connect(config={"temp_directory": spill, "preserve_insertion_order": False,
                                         "threads": os.cpu_count() or 1,
                                         "memory_limit": f"{_duckdb_memory_mb()}MB"})
            try:
                # The build reports its own progress; DuckDB's bar (its cursors inherit this) would
                # write over it on stderr.
                con.execute("SET enable_progress_bar = false")
                if graph is not None:
                    sources.load_text_graph(con, graph)
                    undirected = True
                    has_edge_labels = False
                    has_vertex_labels = True
                    inputs = [os.fspath(graph)]
                else:
                    has_edge_labels, has_vertex_labels, inputs = sources.load_parquet(
                        con, edges, vertices, src, dst, label, id, vertex_label)
                b = _Builder(con, tmp, budget, theta, signature_bits, label_bits, undirected,
                             has_edge_labels, has_vertex_labels, report, scratch=spill, lean=lean)
                manifest = b.run()
                manifest["sources"] = inputs
            except duckdb.Error as e:
                raise InputError(f"reading the input failed ({sources.describe(edges, vertices, graph)}): "
                                 f"{str(e).splitlines()[0]}") from None
            finally:
                con.close()
        fmt.write_manifest(tmp, manifest)
    return out


def stderr_progress(msg):
    """A ``progress`` callback that prints each line to stderr (the command line's)."""
    print(msg, file=sys.stderr, flush=True)


def _duckdb_memory_mb():
    """DuckDB's memory limit: 60% of RAM (it spills beyond), leaving room for the segment builds."""
    return max(256, int(budget_mod.host_memory_bytes() * 0.6) >> 20)


class _Builder:
    """Turns the ``raw``/``vraw`` views of a DuckDB connection into a store (see the module notes)."""

    #: Largest table of saturating signature counts (bytes) a lean build keeps in memory;
    #: past it the counts come from vertex-sorted passes instead.
    max_signature_table = budget_mod.host_memory_bytes() // 8
    #: Largest memory (bytes) the in-memory sort of a pass may take (about 32 bytes per row, with the
    #: pass before it still being read); past it DuckDB sorts out of core.
    max_sort_bytes = budget_mod.host_memory_bytes() * 3 // 8

    def __init__(self, con, directory, budget, theta, sig_bits, label_bits, undirected,
                 has_edge_labels, has_vertex_labels, report, scratch=None, lean=False):
        self.con, self.dir, self.theta = con, directory, theta
        self.lean = lean
        self.sig_table = None
        self._label_ids = None
        self.sig_bits, self.label_bits = sig_bits, label_bits
        self.undirected = undirected
        self.has_edge_labels, self.has_vertex_labels = has_edge_labels, has_vertex_labels
        self.report = report
        self.budget = budget
        self.plan = make_plan(budget, theta, sig_bits // 32)
        self.scratch = scratch or directory
        self.sig_sources = []
        self.t0 = time.perf_counter()

    def _say(self, msg):
        self.report(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}")

    def run(self) -> dict:
        crc = writers.Checksums(self.dir)
        self.queries = self.writer = None
        self.sig_future = None
        sig_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgsi-signatures")
        self._start_signatures = lambda n: setattr(self, "sig_future", sig_pool.submit(self._write_signatures, n))
        try:
            return self._run(crc)
        finally:
            if self.queries is not None:
                self.queries.close()
            if self.sig_table is not None:
                self.sig_table.abort()
            if self.writer is not None:
                self.writer.abort()
            sig_pool.shutdown(wait=True, cancel_futures=True)
            crc.close()

    def _run(self, crc) -> dict:
        con = self.con
        self._say("building the vertex dictionary")
        n_vertices, offset = sources.vertex_dictionary(con)
        sources.vertex_labels(con)
        self._say(f"{n_vertices:,} vertices; encoding edges")
        sources.encode(con, offset, self.has_edge_labels, self.undirected)
        n_input = con.execute("SELECT count(*) FROM enc").fetchone()[0]
        elabels = con.execute("SELECT label, eid FROM elab ORDER BY eid").fetchall()
        # A lean store with several edge labels counts the signatures from the label-sorted passes, in a
        # table of (vertex, group) counts, where that table fits; otherwise from vertex-sorted passes.
        groups = signatures.n_groups(self.sig_bits, self.label_bits)
        self.count_signatures = (self.lean and len(elabels) > 1
                                 and n_vertices * groups <= self.max_signature_table)
        # The sorts run one ahead in the background while the rows of the one before are written.
        self.queries = self._sort_queue(len(elabels), n_input, n_vertices)

        files = {}
        files.update(writers.write_vertices(con, self.dir))
        crc.add(*files)
        vlabels = con.execute("SELECT v.label, v.lid, count(i.vid) FROM vlab v LEFT JOIN vinfo i ON i.lid = v.lid "
                              "GROUP BY ALL ORDER BY v.lid").fetchall()
        self.sig_writer = SignatureWriter(self.dir, self.plan, self.sig_bits, self.label_bits, len(vlabels),
                                          self.undirected)
        partitions = self._write_partitions(len(elabels), n_input, n_vertices)
        pfiles = ("segments.arrow", "pcsr_groups.arrow", "pcsr_ci.arrow", "vindex.arrow", "vindex_batches.arrow")
        crc.add(*pfiles)
        sfiles = self.sig_future.result()
        crc.add(*sfiles)
        files.update(sfiles)

        manifest = writers.manifest(
            n_vertices=n_vertices, n_input=n_input, undirected=self.undirected,
            has_edge_labels=self.has_edge_labels, edge_labels=elabels, vertex_labels=vlabels,
            parameters={
                "memory_budget": self.budget,
                "lean": self.lean,
                "theta": self.theta,
                "signature_bits": self.sig_bits,
                "label_bits": self.label_bits,
                "segment_edges": self.plan.segment_edges,
                "signature_bucket_columns": self.plan.signature_bucket_columns,
                "signature_segment_vertices": self.plan.signature_segment_vertices,
                "index_batch_rows": self.plan.index_batch_rows,
            },
            partitions=partitions)
        for name in pfiles:
            files[name] = None
        self._say("checksumming files")
        manifest["files"] = crc.entries(files)
        self._say(f"done: {n_vertices:,} vertices, {manifest['edges']:,} edges, "
                  f"{sum(f['bytes'] for f in manifest['files'].values()):,} bytes")
        return manifest

    def _vertex_label_ids(self):
        """Label id of every vertex (-1: none) as one int32 array, fetched once for the build."""
        if self._label_ids is None:
            col = sources.stream(self.con, "SELECT lid FROM vinfo ORDER BY vid").read_all().column(0)
            self._label_ids = sort.int32(col.combine_chunks())
        return self._label_ids

    def _scratch(self, name):
        return os.path.join(self.scratch, f"{name}.arrow")

    def _sort_queue(self, n_labels, n_input, n_vertices):
        """The passes' sorted rows, each sorted one ahead in the background (:mod:`.sort`)."""
        passes = sort.passes(n_labels, self.undirected, self.count_signatures)
        rows = n_input * (2 if self.undirected else 1)
        memory = sort.in_memory(rows, n_labels, n_vertices, self.max_sort_bytes)
        self._say(f"sorting {len(passes)} passes of {rows:,} rows "
                  + (f"in memory ({os.cpu_count() or 1} threads)" if memory else "with DuckDB"))
        return sort.sort_queue(self.con, passes, memory, n_labels, n_vertices, self.has_vertex_labels,
                               self._vertex_label_ids)

    def _write_partitions(self, n_labels, n_input, n_vertices):
        """Write the partitions from the sorted passes and their merges; returns them, aliases too."""
        w = SegmentWriter(self.dir, self.plan, self.theta, pcsr_workers())
        self.writer = w
        multi = n_labels > 1
        und = self.undirected
        lean = self.lean
        sig_dirs = [signatures.UNDIRECTED] if und else [signatures.OUT, signatures.IN]
        if self.count_signatures:
            groups = signatures.n_groups(self.sig_bits, self.label_bits)
            self.sig_table = SignatureTable(n_vertices, groups, self._vertex_label_ids(),
                                            {d: self.sig_writer.group_map(self.con, d, n_labels) for d in sig_dirs},
                                            workers=max(1, min(4, pcsr_workers())))
        # Labelled partitions: out, in, and both = their merge. The scratch copies serve the merge
        # and, with a single edge label, the signatures.
        merge = not und and not lean
        keep = not multi or merge
        files = [self._scratch("by_label_out") if keep else None]
        self._sorted_pass(self.queries.take(), "out", True, files[0], sig_dirs[0])
        n_edges = sum(p["edges"] for p in w.parts.values())
        self._say(f"{n_edges:,} distinct directed edges from {n_input:,} input rows")
        if not und:
            files.append(self._scratch("by_label_in") if keep else None)
            self._sorted_pass(self.queries.take(), "in", True, files[1], sig_dirs[1])
        if not multi:
            # The signatures are counted from the scratch files, beside the last merge.
            self.sig_sources = list(zip(files, sig_dirs))
            self._start_signatures(n_vertices)
        if merge:
            self._merge_pass(files[0], files[1], "both", True)
        if multi:
            for f in files:
                if f:
                    os.remove(f)
            if self.count_signatures:
                self.sig_table.finish()
                self._start_signatures(n_vertices)
            else:
                # Any label: the same by vertex, deduplicated on (src, dst); a lean store writes no
                # partitions from these passes and keeps them for the signatures only.
                files = [self._scratch("by_vertex_out")]
                self._sorted_pass(self.queries.take(), "out", False, files[0], feed=not lean)
                if not und:
                    files.append(self._scratch("by_vertex_in"))
                    self._sorted_pass(self.queries.take(), "in", False, files[1], feed=not lean)
                self.sig_sources = list(zip(files, sig_dirs))
                self._start_signatures(n_vertices)
                if merge:
                    self._merge_pass(files[0], files[1], "both", False)
        parts = w.close()
        # Aliases: an undirected store keeps one direction; one label is also "any". A lean store has
        # no "any" partitions (with several labels) and no "both" ones (when directed).
        for lid in list(range(n_labels)) + [fmt.ANY_LABEL]:
            base = lid if (lid != fmt.ANY_LABEL or n_labels > 1) else 0
            for direction in fmt.DIRECTIONS:
                if lean and ((lid == fmt.ANY_LABEL and multi) or (direction == "both" and not und)):
                    continue
                key = fmt.partition_key(lid, direction)
                stored_dir = "out" if self.undirected else direction
                target = fmt.partition_key(base, stored_dir)
                if key != target:
                    parts[key] = {"alias": target}
                parts.setdefault(target, {"segments": [w.n_segments, 0], "vindex": [0, 0], "edges": 0,
                                          "vertices": 0, "max_degree": 0})
        return parts

    def _sorted_pass(self, batches, direction, label_major, scratch, sig_dir=None, feed=True):
        """Stream one sorted query into the segment writer, dropping repeated rows.

        Label-major streams feed the labelled partitions; vertex-major ones
        feed the ``any`` partition of ``direction``, deduplicated on (v, w)
        (unless ``feed`` is false). The rows (distinct on (l, v, w)) also go
        to ``scratch`` when given, and to the signature counts as pairs of
        direction ``sig_dir`` when a table of them is kept.
        """
        what = ("by label" if label_major else "any label") if feed else "by vertex, for the signatures"
        self._say(f"writing {direction} partitions ({what}; {self.queries.waited:.1f}s waiting for the sort)")
        counts = self.sig_table if label_major else None
        waited = counts.waited if counts is not None else 0.0
        w = self.writer
        waited_pcsr, fetching = w.waited, 0.0
        batches = iter(batches)
        out = None
        last = last_vw = None
        while True:
            t = time.perf_counter()
            batch = next(batches, None)
            fetching += time.perf_counter() - t
            if batch is None:
                break
            if batch.num_rows == 0:
                continue
            cols = [sort.int32(c) for c in batch.columns]     # l, v, w[, nl]
            keep = sort.new_rows(cols[:3], last)
            if keep is not None:
                cols = [c[keep] for c in cols]
                if len(cols[0]) == 0:
                    continue
            l, v, dst = cols[:3]
            last = (l[-1], v[-1], dst[-1])
            if scratch is not None:
                if out is None:
                    out = fmt.BatchFile(scratch, pa.schema([(f.name, pa.int32()) for f in batch.schema]))
                out.write([pa.array(c) for c in cols])
            if counts is not None:
                counts.add(sig_dir, l, v, dst)
            if label_major:
                w.feed(direction, l, v, dst)
            elif feed:
                keep = sort.new_rows((v, dst), last_vw)
                last_vw = (v[-1], dst[-1])
                if keep is not None:
                    v, dst = v[keep], dst[keep]
                if len(v):
                    w.feed(direction, fmt.ANY_LABEL, v, dst)
        if scratch is not None:
            if out is None:
                out = fmt.BatchFile(scratch, _SCRATCH_SCHEMA)
            out.close()
        t = time.perf_counter()
        w.finish_partition()
        w.sync()
        counting = f", {counts.waited - waited:.1f}s for signature counts" if counts is not None else ""
        self._say(f"{direction}: {w.n_segments:,} segments so far ({fetching:.1f}s fetching sorted rows, "
                  f"{w.waited - waited_pcsr:.1f}s waiting for PCSR builders{counting}; "
                  f"{time.perf_counter() - t:.1f}s for the last ones)")

    def _merge_pass(self, x_file, y_file, direction, label_major):
        """The union of two scratch files (sorted the same way) into the partitions of ``direction``."""
        self._say(f"writing {direction} partitions ({'by label' if label_major else 'any label'})")
        w = self.writer
        for lab, v, dst in merge_sorted(x_file, y_file, label_major):
            w.feed(direction, lab if label_major else fmt.ANY_LABEL, v, dst)
        w.finish_partition()
        w.sync()
        self._say(f"{direction}: {w.n_segments:,} segments so far")

    def _write_signatures(self, n_vertices):
        """The signature files, from the sources the passes left (:mod:`.signature_writer`)."""
        con = self.con.cursor()       # runs on its own thread, beside the last merge
        self._say("computing vertex signatures")
        return self.sig_writer.write(con, n_vertices, self.sig_sources, self.sig_table)
