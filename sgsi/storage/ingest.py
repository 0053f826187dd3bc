"""Ingest: Parquet edge files (or the benchmark text format) into a store.

DuckDB does the heavy lifting out of core (it spills to disk): the vertex
id dictionary (integer ids that already fill a range map by subtraction),
the label dictionaries and the encoding of the edges (table ``enc``, repeats
kept). The edges are sorted by (label, src, dst) and (label, dst, src)
for the labelled partitions and, with several edge labels, by
(src, dst, label) and (dst, src, label) for the ``any`` ones: in memory as
packed uint64 keys on all cores (:mod:`keysort`) where a pass fits in
``_Builder.max_sort_bytes``, by DuckDB out of core otherwise. Each sorted
stream is read in record batches, deduplicated on the fly (equal rows are
adjacent), cut into segments of equal edge count whose PCSRs are built and
written, and copied to a scratch Arrow file: the ``both`` partitions are the
merge of two scratch files, and the vertex signatures are counted from the
two vertex-sorted ones. A lean store (``lean=True``) keeps the labelled
``out`` and ``in`` partitions only: with several edge labels its signatures
are counted from the label-sorted streams into a table of saturating
(vertex, group) counts, so it needs two sorts instead of four and no
scratch files. The next sort runs in the background while a stream
is written; on larger machines PCSRs are built on worker threads; files are
checksummed in the background as they are finished. Only the in-memory
sort holds all edges of a pass, and only where they fit; otherwise batches,
segments and vertex blocks are bounded.

Everything is written into a temporary directory beside the target, which
is renamed into place only when complete.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from glob import glob

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import budget as budget_mod
from ..errors import InputError
from ..partition import pcsr, signatures
from ..partition.segments import plan as make_plan
from . import format as fmt
from . import keysort

_BATCH_ROWS = 1 << 20
_INTtypes_seen = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def build_store(out, *, edges=None, vertices=None, graph=None, src="src", dst="dst", label=None,
                id="id", vertex_label=None, undirected=False, lean=False, memory_budget=None, force=False,
                theta=pcsr.DEFAULT_THETA, signature_bits=signatures.DEFAULT_BITS,
                label_bits=signatures.DEFAULT_LABEL_BITS, progress=None):
    """Build a graph store at ``out``; see :func:`sgsi.build` for the arguments."""
    out = os.fspath(out)
    if os.path.exists(out) and not force:
        raise InputError(f"output path exists: {out} (use --force to replace it)")
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
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    _sweep_stale(parent, os.path.basename(out))
    pid = os.getpid()
    tmp = os.path.join(parent, f".{os.path.basename(out)}.tmp-{pid}-{uuid.uuid4().hex[:8]}")
    os.mkdir(tmp)
    try:
        with tempfile.TemporaryDirectory(prefix=f"sgsi-spill-{pid}-", dir=parent) as spill:
            con = duckdb.connect(config={"temp_directory": spill, "preserve_insertion_order": False,
                                         "threads": os.cpu_count() or 1,
                                         "memory_limit": f"{_duckdb_memory_mb()}MB"})
            try:
                # The build reports its own progress; DuckDB's bar (its cursors inherit this) would
                # write over it on stderr.
                con.execute("SET enable_progress_bar = false")
                if graph is not None:
                    _load_text_graph(con, graph)
                    undirected = True
                    has_edge_labels = False
                    has_vertex_labels = True
                    sources = [os.fspath(graph)]
                else:
                    has_edge_labels, has_vertex_labels, sources = _load_parquet(
                        con, edges, vertices, src, dst, label, id, vertex_label)
                b = _Builder(con, tmp, budget, theta, signature_bits, label_bits, undirected,
                             has_edge_labels, has_vertex_labels, report, scratch=spill, lean=lean)
                manifest = b.run()
                manifest["sources"] = sources
            except duckdb.Error as e:
                raise InputError(f"reading the input failed ({_describe(edges, vertices, graph)}): "
                                 f"{str(e).splitlines()[0]}") from None
            finally:
                con.close()
        fmt.write_manifest(tmp, manifest)
        _move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _pcsr_workers():
    """Threads that build PCSRs: none on small machines (the feeding thread and DuckDB use them)."""
    env = os.environ.get("SGSI_BUILD_WORKERS")
    if env is not None:
        return max(0, int(env))
    return max(0, min(8, (os.cpu_count() or 1) - 2))


def _duckdb_memory_mb():
    """DuckDB's memory limit: 60% of RAM (it spills beyond), leaving room for the segment builds."""
    return max(256, int(budget_mod.host_memory_bytes() * 0.6) >> 20)


def _describe(edges, vertices, graph):
    parts = []
    for x in (edges, vertices, graph):
        if x is None:
            continue
        parts.extend([os.fspath(x)] if isinstance(x, (str, os.PathLike)) else [os.fspath(p) for p in x])
    return ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")


def _move_into_place(tmp, out, force):
    """Rename the finished store into place; with ``force``, swap it in atomically."""
    if os.path.exists(out):
        if not force:
            raise InputError(f"output path exists: {out} (use --force to replace it)")
        if not _exchange(tmp, out):
            trash = f"{tmp}.old"          # no atomic exchange here: two renames
            os.rename(out, trash)
            os.rename(tmp, out)
            tmp = trash
        shutil.rmtree(tmp, ignore_errors=True) if os.path.isdir(tmp) else os.remove(tmp)
    else:
        os.rename(tmp, out)


def _exchange(a, b) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _sweep_stale(parent, name):
    """Remove the temporary and spill directories of builds (of any target here) that died."""
    pattern = re.compile(rf"^(?:\.{re.escape(name)}\.tmp-|sgsi-spill-)(\d+)-")
    for entry in os.listdir(parent):
        m = pattern.match(entry)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                      # its builder is still running
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):
            continue
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _sql_str(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _sql_ident(s: str) -> str:
    return '"' + str(s).replace('"', '""') + '"'


def _expand(paths, what):
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for p in paths:
        p = os.fspath(p)
        matched = sorted(glob(p)) if any(c in p for c in "*?[") else [p]
        if not matched:
            raise InputError(f"no {what} file matches {p}")
        for m in matched:
            if not os.path.isfile(m):
                raise InputError(f"{what} file not found: {m}")
            files.append(m)
    return files


def _schema(path):
    try:
        return pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{path} is not a readable Parquet file: {str(e).splitlines()[0]}") from None


def _kind(t: pa.DataType) -> str:
    if str(t) in _INTtypes_seen:
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    return str(t)


def _check_columns(files, needed, optional, what, nullable=()):
    """Check column presence and types; returns {column: kind} and which optionals exist.

    A column whose integer type differs between files (int32 here, int64
    there) gets the kind ``integer-mixed`` and is read as BIGINT. A
    ``nullable`` column may have the null type (only nulls) in some files:
    its kind is then ``null`` in all files, or ``KIND-mixed``.
    """
    kinds = {}
    types_seen = {}
    present_opt = {}
    for f in files:
        schema = _schema(f)
        names = schema.names
        for col in needed:
            if col not in names:
                raise InputError(f"{f}: missing column {col!r} (columns: {', '.join(names)})")
        for col, explicit in optional.items():
            has = col in names
            if explicit and not has:
                raise InputError(f"{f}: missing column {col!r} (columns: {', '.join(names)})")
            present_opt.setdefault(col, set()).add(has)
        for col in list(needed) + [c for c in optional if c in names]:
            k = _kind(schema.field(col).type)
            if k == "null" and col in nullable:
                types_seen.setdefault(col, set()).add(k)
                continue
            if k not in ("integer", "string"):
                raise InputError(f"{f}: column {col!r} has type {k}; ids and labels must be integers or strings")
            kinds.setdefault(col, {}).setdefault(k, f)
            types_seen.setdefault(col, set()).add(str(schema.field(col).type))
    for col, opts in present_opt.items():
        if len(opts) > 1:
            raise InputError(f"column {col!r} is present in some {what} files and missing in others")
    for col, ks in kinds.items():
        if len(ks) > 1:
            (k1, f1), (k2, f2) = list(ks.items())[:2]
            raise InputError(f"column {col!r} holds {k1}s in {f1} but {k2}s in {f2}")
    out = {c: next(iter(k)) for c, k in kinds.items()}
    for c, types in types_seen.items():
        if "null" in types:
            out[c] = f"{out[c]}-mixed" if c in out else "null"
        elif out.get(c) == "integer" and len(types) > 1:
            out[c] = "integer-mixed"
    return out, {c: True in v for c, v in present_opt.items()}


def _load_parquet(con, edges, vertices, src, dst, label, id_col, vertex_label):
    efiles = _expand(edges, "edge")
    label_name = label or "label"
    ekinds, eopt = _check_columns(efiles, [src, dst], {label_name: label is not None}, "edge")
    has_edge_labels = eopt[label_name]
    if ekinds[src].split("-")[0] != ekinds[dst].split("-")[0]:
        raise InputError(f"column {src!r} holds {ekinds[src]}s but {dst!r} holds {ekinds[dst]}s")
    lst = "[" + ", ".join(_sql_str(f) for f in efiles) + "]"
    lab = _column_sql(label_name, ekinds.get(label_name)) if has_edge_labels else "0"
    con.execute(f"CREATE VIEW raw AS SELECT {_column_sql(src, ekinds[src])} AS s, "
                f"{_column_sql(dst, ekinds[dst])} AS d, {lab} AS l, "
                f"filename AS f FROM read_parquet({lst}{_read_options(ekinds)})")
    _check_nulls(con, "raw", {"s": src, "d": dst, "l": label_name if has_edge_labels else None})

    has_vertex_labels = False
    if vertices is not None:
        vfiles = _expand(vertices, "vertex")
        vl_name = vertex_label or "label"
        vkinds, vopt = _check_columns(vfiles, [id_col], {vl_name: vertex_label is not None}, "vertex",
                                      nullable=[vl_name])
        if vkinds[id_col].split("-")[0] != ekinds[src].split("-")[0]:
            raise InputError(f"vertex ids are {vkinds[id_col]}s but edge ids are {ekinds[src]}s")
        has_vertex_labels = vopt[vl_name]
        vlst = "[" + ", ".join(_sql_str(f) for f in vfiles) + "]"
        vlab = _column_sql(vl_name, vkinds.get(vl_name)) if has_vertex_labels else "NULL"
        con.execute(f"CREATE VIEW vraw AS SELECT {_column_sql(id_col, vkinds[id_col])} AS id, {vlab} AS label, "
                    f"filename AS f "
                    f"FROM read_parquet({vlst}{_read_options(vkinds)})")
        _check_nulls(con, "vraw", {"id": id_col})        # a null label is no label
        bad = con.execute("SELECT id, count(DISTINCT label) FROM vraw GROUP BY id "
                          "HAVING count(DISTINCT label) + bool_or(label IS NULL)::INTEGER > 1 LIMIT 1").fetchone()
        if bad and bad[1] > 1:
            raise InputError(f"vertex {bad[0]!r} has more than one label in the vertex files")
        if bad:
            raise InputError(f"vertex {bad[0]!r} has a label in one row of the vertex files and none (null) in another")
    else:
        con.execute("CREATE VIEW vraw AS SELECT s AS id, NULL AS label FROM raw WHERE false")
    return has_edge_labels, has_vertex_labels, efiles + (_expand(vertices, "vertex") if vertices else [])


def _read_options(kinds):
    """read_parquet options: each file read with its own types where a column's type differs between files."""
    mixed = any(k.endswith("-mixed") for k in kinds.values())
    return ", filename=true" + (", union_by_name=true" if mixed else "")


def _column_sql(name, kind):
    """A column as read: BIGINT where the files mix integer types (int32 here, int64 there)."""
    return f"CAST({_sql_ident(name)} AS BIGINT)" if kind == "integer-mixed" else _sql_ident(name)


def _check_nulls(con, view, columns):
    cols = {k: v for k, v in columns.items() if v is not None}
    agg = ", ".join(f"count(*) FILTER (WHERE {k} IS NULL)" for k in cols)
    for row in con.execute(f"SELECT f, {agg} FROM {view} GROUP BY f ORDER BY f").fetchall():
        for (k, name), n in zip(cols.items(), row[1:]):
            if n:
                raise InputError(f"{row[0]}: {n} null value{'s' if n > 1 else ''} in column {name!r}")


def _load_text_graph(con, path):
    """The benchmark format: ``t N M``, ``v ID LABEL DEGREE``, ``e U V``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"graph file not found: {path}")
    try:
        con.execute(
            "CREATE TABLE txt AS SELECT * FROM read_csv(?, delim=' ', header=false, null_padding=true, "
            "columns={'k': 'VARCHAR', 'a': 'BIGINT', 'b': 'BIGINT', 'c': 'BIGINT', 'x': 'BIGINT'}, auto_detect=false)",
            [path])
    except duckdb.Error as e:
        raise InputError(f"{path} is not a graph file in the t/v/e text format: {str(e).splitlines()[0]}") from None
    kinds = {k for (k,) in con.execute("SELECT DISTINCT k FROM txt").fetchall()}
    if not kinds <= {"t", "v", "e"} or "t" not in kinds:
        raise InputError(f"{path} is not a graph file in the t/v/e text format (line kinds: {sorted(map(str, kinds))})")
    headers = con.execute("SELECT a, b FROM txt WHERE k = 't'").fetchall()
    if len(headers) != 1:
        raise InputError(f"{path}: expected one 't N M' header line, found {len(headers)}")
    n, m = headers[0]
    dup = con.execute("SELECT a FROM txt WHERE k = 'v' GROUP BY a HAVING count(*) > 1 LIMIT 1").fetchone()
    if dup:
        raise InputError(f"{path}: vertex {dup[0]} has more than one v line")
    nv, bad_v = con.execute("SELECT count(*), count(*) FILTER (WHERE a < 0 OR a >= ? OR b IS NULL) "
                            "FROM txt WHERE k = 'v'", [n]).fetchone()
    ne, bad_e = con.execute("SELECT count(*), count(*) FILTER (WHERE a < 0 OR a >= ? OR b < 0 OR b >= ? "
                            "OR b IS NULL) FROM txt WHERE k = 'e'", [n, n]).fetchone()
    if nv != n or bad_v:
        raise InputError(f"{path}: header says {n} vertices but the v lines list {nv} ({bad_v} malformed)")
    if bad_e:
        raise InputError(f"{path}: {bad_e} edge lines name vertices outside 0..{n - 1}")
    if ne != m:
        raise InputError(f"{path}: header says {m} edges but there are {ne} e lines")
    con.execute("CREATE VIEW raw AS SELECT a AS s, b AS d, 0 AS l, 'graph' AS f FROM txt WHERE k = 'e'")
    con.execute("CREATE VIEW vraw AS SELECT a AS id, b AS label FROM txt WHERE k = 'v'")


class _Builder:
    """Turns the ``raw``/``vraw`` views of a DuckDB connection into a store.

    DuckDB encodes the edges once (table ``enc``; duplicates are kept) and
    sorts them: by (label, src, dst) for the ``out`` partitions, by
    (label, dst, src) for ``in``, and, with several edge labels, by
    (src, dst, label) and (dst, src, label) for the ``any`` partitions. Each
    sorted stream is deduplicated on the fly (equal rows are adjacent), cut
    into PCSR segments and copied to a scratch Arrow file; the ``both``
    partitions are the merge of the two scratch files of one kind, and the
    vertex signatures are counted from the two vertex-sorted ones. A lean
    build skips the ``any`` and ``both`` partitions (see the module notes).
    """

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
        crc = _Checksums(self.dir)
        self.queries = self.writer = None
        self.signatures = None
        sig_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgsi-signatures")
        self._start_signatures = lambda n: setattr(self, "signatures", sig_pool.submit(self._write_signatures, n))
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
        n_vertices, offset = self._vertex_dictionary()
        con.execute("CREATE TABLE vlab AS SELECT label, (row_number() OVER (ORDER BY label) - 1)::INTEGER AS lid "
                    "FROM (SELECT DISTINCT label FROM vraw WHERE label IS NOT NULL)")
        con.execute("CREATE TABLE vinfo AS SELECT vdict.vid, coalesce(vlab.lid, -1)::INTEGER AS lid "
                    "FROM vdict LEFT JOIN (SELECT DISTINCT id, label FROM vraw) v ON vdict.id = v.id "
                    "LEFT JOIN vlab ON v.label = vlab.label")
        self._say(f"{n_vertices:,} vertices; encoding edges")
        con.execute("CREATE TABLE elab AS SELECT l AS label, (row_number() OVER (ORDER BY l) - 1)::INTEGER AS eid "
                    "FROM (SELECT DISTINCT l FROM raw)")
        self._encode(offset)
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
        files.update(self._write_vertices(n_vertices))
        crc.add(*files)
        vlabels = con.execute("SELECT v.label, v.lid, count(i.vid) FROM vlab v LEFT JOIN vinfo i ON i.lid = v.lid "
                              "GROUP BY ALL ORDER BY v.lid").fetchall()
        self.n_vertex_labels = len(vlabels)
        partitions = self._write_partitions(len(elabels), n_input, n_vertices)
        pfiles = ("segments.arrow", "pcsr_groups.arrow", "pcsr_ci.arrow", "vindex.arrow", "vindex_batches.arrow")
        crc.add(*pfiles)
        freq = [partitions[fmt.partition_key(eid, "out")]["edges"] for _, eid in elabels]
        n_edges = sum(freq)
        sfiles = self.signatures.result()
        crc.add(*sfiles)
        files.update(sfiles)

        manifest = {
            "format": "sgsi-store",
            "version": fmt.FORMAT_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "vertices": n_vertices,
            "edges": n_edges,
            "input_rows": n_input,
            "undirected": self.undirected,
            "edge_labels": {
                "present": self.has_edge_labels,
                "values": [_json_label(x[0]) for x in elabels] if self.has_edge_labels else [None],
                "frequency": freq,
            },
            "vertex_labels": {
                "values": [_json_label(x[0]) for x in vlabels],
                "frequency": [x[2] for x in vlabels],
                "unlabeled": n_vertices - sum(x[2] for x in vlabels),
            },
            "parameters": {
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
            "partitions": partitions,
            "degree": self._degree_stats(partitions),
        }
        for name in pfiles:
            files[name] = None
        self._say("checksumming files")
        sums = crc.result(sorted(files))
        manifest["files"] = {
            name: {"bytes": os.path.getsize(os.path.join(self.dir, name)), "crc32": sums[name]}
            for name in sorted(files)}
        self._say(f"done: {n_vertices:,} vertices, {n_edges:,} edges, "
                  f"{sum(f['bytes'] for f in manifest['files'].values()):,} bytes")
        return manifest

    # -- vertices -----------------------------------------------------------------

    def _vertex_dictionary(self):
        """Create ``vdict(id, vid)``; returns (vertices, offset).

        Dense ids are the ranks of the original ids. Where those are
        integers that fill a range without gaps, ``vid = id - offset`` and
        the edges are encoded by arithmetic instead of two joins; offset is
        None otherwise. Integer ids that a vertex file lists as a full range
        skip the distinct pass over the edges as well.
        """
        con = self.con
        ids = "SELECT s AS id FROM raw UNION ALL SELECT d FROM raw UNION ALL SELECT id FROM vraw"
        id_type = str(con.sql(ids).types[0])
        offset = None
        if id_type in _SQL_INTS:
            emin, emax = con.execute("SELECT least(min(s), min(d)), greatest(max(s), max(d)) FROM raw").fetchone()
            vmin, vmax, vn, vdistinct = con.execute(
                "SELECT min(id), max(id), count(*), count(DISTINCT id) FROM vraw").fetchone()
            if vn and vdistinct == vmax - vmin + 1 and (emin is None or (emin >= vmin and emax <= vmax)):
                n_vertices = vmax - vmin + 1
                self._check_vertex_count(n_vertices)
                con.execute(f"CREATE TABLE vdict AS SELECT (range::HUGEINT + {vmin})::{id_type} AS id, "
                            f"range::INTEGER AS vid FROM range({n_vertices})")
                return n_vertices, vmin
        con.execute("CREATE TABLE vdict AS SELECT id, (row_number() OVER (ORDER BY id) - 1)::INTEGER AS vid "
                    "FROM (SELECT s AS id FROM raw UNION SELECT d FROM raw UNION SELECT id FROM vraw)")
        n_vertices = con.execute("SELECT count(*) FROM vdict").fetchone()[0]
        self._check_vertex_count(n_vertices)
        if id_type in _SQL_INTS and n_vertices:
            lo, hi = con.execute("SELECT min(id), max(id) FROM vdict").fetchone()
            if hi - lo + 1 == n_vertices:
                offset = lo
        return n_vertices, offset

    @staticmethod
    def _check_vertex_count(n_vertices):
        if n_vertices >= 2**31 - 1:
            raise InputError(f"{n_vertices} vertices exceed the int32 id space")

    def _encode(self, offset):
        """``enc(s, d, l)``: every input row with dense vertex and label ids (repeats kept)."""
        joins = []
        if offset is not None:
            t = str(self.con.sql("SELECT id FROM vdict").types[0])
            s, d = (f"(raw.{c} - {offset}::{t})::INTEGER" for c in "sd")
        else:
            s, d = "a.vid", "b.vid"
            joins += ["JOIN vdict a ON raw.s = a.id", "JOIN vdict b ON raw.d = b.id"]
        if self.has_edge_labels:
            lab = "el.eid"
            joins.append("JOIN elab el ON raw.l = el.label")
        else:
            lab = "0::INTEGER"
        self.con.execute(f"CREATE TABLE enc AS SELECT {s} AS s, {d} AS d, {lab} AS l FROM raw {' '.join(joins)}")
        if self.undirected:
            self.con.execute("CREATE VIEW uenc AS SELECT s, d, l FROM enc UNION ALL SELECT d, s, l FROM enc")

    def _write_vertices(self, n_vertices):
        con = self.con
        con.execute(f"COPY (SELECT d.id, v.label FROM vdict d LEFT JOIN (SELECT DISTINCT id, label FROM vraw) v "
                    f"ON d.id = v.id ORDER BY d.vid) TO {_sql_str(os.path.join(self.dir, 'vertices.parquet'))} "
                    f"(FORMAT parquet)")
        reader = _stream(con, "SELECT id FROM vdict ORDER BY vid")
        out = None
        for batch in reader:
            if out is None:
                out = fmt.BatchFile(os.path.join(self.dir, "vertex_ids.arrow"), pa.schema([("id", batch.schema.field(0).type)]))
            out.write([batch.column(0)])
        if out is None:
            out = fmt.BatchFile(os.path.join(self.dir, "vertex_ids.arrow"), pa.schema([("id", pa.int64())]))
        out.close()
        return {"vertices.parquet": None, "vertex_ids.arrow": None}

    # -- partitions ---------------------------------------------------------------

    def _sorted_sql(self, p):
        """Rows (l, v, w[, nl]) of pass ``p`` sorted by (l, v, w) or (v, w, l); nl = label of w (-1: none)."""
        cols, join = f"e.l AS l, e.{p.v} AS v, e.{p.w} AS w", ""
        if p.with_neighbour_label:
            if self.has_vertex_labels:
                cols += ", vi.lid AS nl"
                join = f" JOIN vinfo vi ON vi.vid = e.{p.w}"
            else:
                cols += ", CAST(-1 AS INTEGER) AS nl"
        order = "l, v, w" if p.label_major else "v, w, l"
        return f"SELECT {cols} FROM {p.table} e{join} ORDER BY {order}"

    def _vertex_label_ids(self):
        """Label id of every vertex (-1: none) as one int32 array, fetched once for the build."""
        if self._label_ids is None:
            col = _stream(self.con, "SELECT lid FROM vinfo ORDER BY vid").read_all().column(0)
            self._label_ids = _int32(col.combine_chunks())
        return self._label_ids

    def _scratch(self, name):
        return os.path.join(self.scratch, f"{name}.arrow")

    def _partition_passes(self, n_labels):
        """The sorted passes, in the order they are written.

        Label-major passes (l, v, w) give the labelled partitions; with
        several edge labels, vertex-major passes (v, w, l) give the ``any``
        ones. The scratch files of the vertex-sorted passes (the label-major
        ones when there is a single label) also carry the neighbour label for
        the signatures.
        """
        multi = n_labels > 1
        table = "uenc" if self.undirected else "enc"
        passes = [_Pass(table, "s", "d", True, not multi)]
        if not self.undirected:
            passes.append(_Pass("enc", "d", "s", True, not multi))
        if multi and not self.count_signatures:
            passes.append(_Pass(table, "s", "d", False, True))
            if not self.undirected:
                passes.append(_Pass("enc", "d", "s", False, True))
        return passes

    def _sort_queue(self, n_labels, n_input, n_vertices):
        """The passes' sorted rows, each sorted one ahead in the background.

        Where a pass's keys fit in memory (``max_sort_bytes``) they are
        sorted by :mod:`keysort`; otherwise DuckDB sorts them (out of core).
        The environment variable ``SGSI_BUILD_SORT`` (``memory`` or
        ``duckdb``; default ``auto``) picks one, for benchmarks.
        """
        passes = self._partition_passes(n_labels)
        rows = n_input * (2 if self.undirected else 1)
        widths = (keysort.bit_width(n_labels), keysort.bit_width(n_vertices), keysort.bit_width(n_vertices))
        choice = os.environ.get("SGSI_BUILD_SORT", "auto")
        if choice not in ("auto", "memory", "duckdb"):
            raise InputError(f"SGSI_BUILD_SORT must be auto, memory or duckdb, not {choice!r}")
        fits = rows * _SORT_BYTES_PER_ROW <= self.max_sort_bytes or choice == "memory"
        self.sorts_in_memory = choice != "duckdb" and fits and keysort.KeyLayout.fits(widths)
        self._say(f"sorting {len(passes)} passes of {rows:,} rows "
                  + (f"in memory ({os.cpu_count() or 1} threads)" if self.sorts_in_memory else "with DuckDB"))
        if not self.sorts_in_memory:
            return _SortQueue([partial(_sql_sort, self.con.cursor(), self._sorted_sql(p)) for p in passes])
        labels = None
        if any(p.with_neighbour_label for p in passes) and self.has_vertex_labels:
            labels = self._vertex_label_ids()
        jobs = []
        for p in passes:
            layout = keysort.KeyLayout(widths if p.label_major else widths[1:] + widths[:1])
            cols = ["e.l", f"e.{p.v}", f"e.{p.w}"] if p.label_major else [f"e.{p.v}", f"e.{p.w}", "e.l"]
            sql = f"SELECT {layout.sql(cols)} AS k FROM {p.table} e"
            nl = (labels if labels is not None else np.full(max(n_vertices, 1), -1, np.int32)) \
                if p.with_neighbour_label else None
            jobs.append(partial(_memory_sort, self.con.cursor(), sql, layout, p.label_major, nl))
        return _SortQueue(jobs)

    def _write_partitions(self, n_labels, n_input, n_vertices):
        w = _SegmentWriter(self.dir, self.plan, self.theta, _pcsr_workers())
        self.writer = w
        multi = n_labels > 1
        und = self.undirected
        lean = self.lean
        sig_dirs = [signatures.UNDIRECTED] if und else [signatures.OUT, signatures.IN]
        if self.count_signatures:
            groups = signatures.n_groups(self.sig_bits, self.label_bits)
            self.sig_table = _SignatureTable(n_vertices, groups, self._vertex_label_ids(),
                                             {d: self._group_map(self.con, d, n_labels) for d in sig_dirs},
                                             workers=max(1, min(4, _pcsr_workers())))
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
            cols = [_int32(c) for c in batch.columns]     # l, v, w[, nl]
            keep = _new_rows(cols[:3], last)
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
                keep = _new_rows((v, dst), last_vw)
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
        for lab, v, dst in _merge_sorted(x_file, y_file, label_major):
            w.feed(direction, lab if label_major else fmt.ANY_LABEL, v, dst)
        w.finish_partition()
        w.sync()
        self._say(f"{direction}: {w.n_segments:,} segments so far")

    def _degree_stats(self, partitions):
        stats = {}
        for key, p in partitions.items():
            if "alias" in p:
                continue
            stats[key] = {"max": p["max_degree"], "mean": (p["edges"] / p["vertices"]) if p["vertices"] else 0.0}
        return stats

    # -- signatures ---------------------------------------------------------------

    def _group_map(self, con, dir_char, n_labels):
        """(edge label, neighbour label) -> signature group, for one direction."""
        groups = signatures.n_groups(self.sig_bits, self.label_bits)
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

    def _write_signatures(self, n_vertices):
        con = self.con.cursor()       # runs on its own thread, beside the last merge
        self._say("computing vertex signatures")
        groups = signatures.n_groups(self.sig_bits, self.label_bits)
        n_labels = con.execute("SELECT count(*) FROM elab").fetchone()[0]
        sources = [(_VertexCursor(path), self._group_map(con, dc, n_labels)) for path, dc in self.sig_sources]
        labels = _stream(con, "SELECT lid FROM vinfo ORDER BY vid")

        seg_len = self.plan.signature_segment_vertices
        block = max(1, min(seg_len, _SIGNATURE_BINS // groups))     # vertices counted per bincount
        if self.sig_table is not None:
            block = max(1, min(seg_len, _SIGNATURE_TABLE_BLOCK))    # vertices whose words are made at once
        cols = self.plan.signature_bucket_columns
        n_words = self.sig_bits // 32
        sig_file = fmt.BatchFile(os.path.join(self.dir, "signatures.arrow"),
                                 pa.schema([(f"w{c}", pa.uint32()) for c in range(cols)]))
        lab_file = fmt.BatchFile(os.path.join(self.dir, "vertex_labels.arrow"), pa.schema([("label", pa.int32())]))
        label_stream = _Restreamer(labels, 1)
        label_table = signatures.label_bit_table(self.n_vertex_labels, self.label_bits)
        table = self.sig_table.table if self.sig_table is not None else None
        for start in range(0, max(n_vertices, 1), seg_len) if n_vertices else []:
            stop = min(start + seg_len, n_vertices)
            (lab,) = label_stream.take_rows(stop - start)
            lab = lab.astype(np.int32)
            words = np.empty((stop - start, n_words), np.uint32)
            for a in range(start, stop, block):          # blocks of vertices, not single ones
                b = min(a + block, stop)
                if table is not None:
                    words[a - start:b - start] = signatures.words_from_saturated(
                        table[a:b], lab[a - start:b - start], self.sig_bits, self.label_bits, label_table)
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
                    counts.reshape(b - a, groups), lab[a - start:b - start], self.sig_bits, self.label_bits,
                    label_table)
            lab_file.write([pa.array(lab)])
            for k in range(n_words // cols):
                sig_file.write([pa.array(words[:, k * cols + c]) for c in range(cols)])
        sig_file.close()
        lab_file.close()
        return {"signatures.arrow": None, "vertex_labels.arrow": None}


_SQL_INTS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
             "UBIGINT", "UHUGEINT")
_SCRATCH_SCHEMA = pa.schema([("l", pa.int32()), ("v", pa.int32()), ("w", pa.int32()), ("nl", pa.int32())])
#: Label pairs up to this many get a dense (edge label, neighbour label) -> group table.
_DENSE_GROUP_TABLE = 1 << 20
#: Rough peak memory of one PCSR build per edge (edges, ci, gather steps, per-vertex arrays).
_BUILD_BYTES_PER_EDGE = 64
#: Peak bytes per row of an in-memory sort: its keys, the bucketed copy and indices, the pass before.
_SORT_BYTES_PER_ROW = 32
#: Counters per signature bincount (vertices x groups).
_SIGNATURE_BINS = 1 << 18
#: Vertices whose words are made at once from a lean build's table of saturated counts.
_SIGNATURE_TABLE_BLOCK = 1 << 16
_LOW32 = np.uint64(0xFFFFFFFF)


def _stream(con, sql):
    """A RecordBatchReader over a query, on its own cursor so several can be open at once."""
    return con.cursor().sql(sql).to_arrow_reader(_BATCH_ROWS)


class _Pass(collections.namedtuple("_Pass", "table v w label_major with_neighbour_label")):
    """One sorted pass over the edges of ``table``: rows (l, v, w) with v, w its columns ``v``, ``w``."""


class _SortQueue:
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
    reader = cursor.sql(sql).to_arrow_reader(_BATCH_ROWS)
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
    for a in range(0, len(keys), _BATCH_ROWS):
        cols = layout.unpack(keys[a:a + _BATCH_ROWS])
        if not label_major:
            cols = cols[2:] + cols[:2]          # (v, w, l) -> (l, v, w)
        if neighbour_labels is not None:
            cols.append(neighbour_labels[cols[2]])
        yield pa.RecordBatch.from_arrays([pa.array(c) for c in cols], names=names)


def _batches(reader, first):
    if first is not None:
        yield first
        yield from reader


def _int32(col):
    a = col.to_numpy()
    return a if a.dtype == np.int32 else a.astype(np.int32)


def _new_rows(cols, last):
    """Mask of the rows of sorted columns that differ from the row before (None: all do).

    ``last`` is the last row of the previous batch, or None.
    """
    n = len(cols[0])
    new = np.zeros(n, bool)
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    new[0] = last is None or any(c[0] != x for c, x in zip(cols, last))
    return None if new.all() else new


def _pack(v, w):
    """(v, w) of non-negative int32 ids as one sortable uint64."""
    k = v.astype(np.uint64)
    k <<= np.uint64(32)
    k |= w.astype(np.uint64)
    return k


def _unpack(k):
    return (k >> np.uint64(32)).astype(np.int32), (k & _LOW32).astype(np.int32)


class _KeyCursor:
    """The rows of a scratch file as (label, packed (v, w)) arrays, consumed by key bound."""

    def __init__(self, path, label_major):
        self.file = fmt.open_batches(path)
        self.next_batch = 0
        self.label_major = label_major
        self.l = self.k = None

    def fill(self):
        while (self.k is None or len(self.k) == 0) and self.next_batch < self.file.num_record_batches:
            b = self.file.get_batch(self.next_batch)
            self.next_batch += 1
            self.l = b.column("l").to_numpy() if self.label_major else None
            self.k = _pack(b.column("v").to_numpy(), b.column("w").to_numpy())
        return self.k is not None and len(self.k) > 0

    def last(self):
        return (int(self.l[-1]) if self.label_major else 0, int(self.k[-1]))

    def take(self, bound):
        """Rows with (label, key) <= bound (all rows if bound is None)."""
        if self.k is None or len(self.k) == 0:
            return None, np.zeros(0, np.uint64)
        if bound is None:
            cut = len(self.k)
        elif self.label_major:
            i0 = int(np.searchsorted(self.l, bound[0], "left"))
            i1 = int(np.searchsorted(self.l, bound[0], "right"))
            cut = i0 + int(np.searchsorted(self.k[i0:i1], np.uint64(bound[1]), "right"))
        else:
            cut = int(np.searchsorted(self.k, np.uint64(bound[1]), "right"))
        l = self.l[:cut] if self.label_major else None
        k = self.k[:cut]
        if self.label_major:
            self.l = self.l[cut:]
        self.k = self.k[cut:]
        return l, k


def _merge_sorted(x_file, y_file, label_major):
    """Yield (label, v, w) runs of the distinct union of two sorted scratch files.

    Label-major files are sorted by (label, v, w) and yield one run per label
    and chunk; vertex-major ones are merged on (v, w) alone (label None).
    """
    x, y = _KeyCursor(x_file, label_major), _KeyCursor(y_file, label_major)
    prev = None     # vertex-major files repeat (v, w) under several labels, maybe across batches
    while True:
        hx, hy = x.fill(), y.fill()
        if not hx and not hy:
            return
        bound = min(x.last(), y.last()) if (hx and hy) else None
        xl, xk = x.take(bound)
        yl, yk = y.take(bound)
        if not label_major:
            k = _merge_keys(xk, yk)
            if len(k) and prev is not None and k[0] == prev:
                k = k[1:]
            if len(k):
                prev = k[-1]
                yield (None, *_unpack(k))
            continue
        labels = np.union1d(_run_values(xl), _run_values(yl))
        for lab in labels.tolist():                       # one step per label in the chunk
            xs = xk[np.searchsorted(xl, lab, "left"):np.searchsorted(xl, lab, "right")] if xl is not None else xk[:0]
            ys = yk[np.searchsorted(yl, lab, "left"):np.searchsorted(yl, lab, "right")] if yl is not None else yk[:0]
            yield (lab, *_unpack(_merge_keys(xs, ys)))


def _run_values(sorted_values):
    if sorted_values is None or len(sorted_values) == 0:
        return np.zeros(0, np.int32)
    return sorted_values[np.r_[True, sorted_values[1:] != sorted_values[:-1]]]


def _merge_keys(a, b):
    """Sorted distinct union of two sorted uint64 arrays."""
    k = np.concatenate([a, b])
    k.sort(kind="stable")          # two sorted runs: timsort merges them in linear time
    if len(k) > 1:
        keep = np.empty(len(k), bool)
        keep[0] = True
        np.not_equal(k[1:], k[:-1], out=keep[1:])
        if not keep.all():
            k = k[keep]
    return k


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


class _SignatureTable:
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


class _Checksums:
    """crc32 of finished files, computed in a background thread while the build goes on."""

    def __init__(self, directory):
        self.dir = directory
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgsi-crc")
        self.futures = {}

    def add(self, *names):
        for name in names:
            self.futures[name] = self.pool.submit(fmt.file_crc32, os.path.join(self.dir, name))

    def result(self, names):
        for name in names:
            if name not in self.futures:
                self.add(name)
        return {name: self.futures[name].result() for name in names}

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


def _json_label(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


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


class _SegmentWriter:
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


def stderr_progress(msg):
    print(msg, file=sys.stderr, flush=True)
