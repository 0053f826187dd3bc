"""Ingest: Parquet edge files (or the benchmark text format) into a store.

DuckDB does the heavy lifting out of core (it spills to disk): the vertex
id dictionary, label dictionaries, deduplication and the sorts by
(label, src, dst). Its sorted output is streamed in record batches into the
segment writers, which cut each edge-label partition into segments of equal
edge count and build each segment's PCSR, and into the signature writer.

Everything is written into a temporary directory beside the target, which
is renamed into place only when complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from glob import glob

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import budget as budget_mod
from ..errors import InputError
from ..partition import pcsr, signatures
from ..partition.plan import plan as make_plan
from . import format as fmt

_BATCH_ROWS = 1 << 20
_INTtypes_seen = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def build_store(out, *, edges=None, vertices=None, graph=None, src="src", dst="dst", label=None,
                id="id", vertex_label=None, undirected=False, memory_budget=None, force=False,
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
    budget = budget_mod.resolve_budget(memory_budget, "cpu")
    report = progress or (lambda msg: None)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    tmp = os.path.join(parent, f".{os.path.basename(out)}.tmp-{uuid.uuid4().hex[:8]}")
    os.mkdir(tmp)
    try:
        with tempfile.TemporaryDirectory(prefix="sgsi-spill-", dir=parent) as spill:
            con = duckdb.connect(config={"temp_directory": spill, "preserve_insertion_order": False})
            try:
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
                             has_edge_labels, has_vertex_labels, report)
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


def _describe(edges, vertices, graph):
    parts = []
    for x in (edges, vertices, graph):
        if x is None:
            continue
        parts.extend([os.fspath(x)] if isinstance(x, (str, os.PathLike)) else [os.fspath(p) for p in x])
    return ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")


def _move_into_place(tmp, out, force):
    if os.path.exists(out):
        if not force:
            raise InputError(f"output path exists: {out} (use --force to replace it)")
        trash = f"{tmp}.old"
        os.rename(out, trash)
        os.rename(tmp, out)
        shutil.rmtree(trash, ignore_errors=True) if os.path.isdir(trash) else os.remove(trash)
    else:
        os.rename(tmp, out)


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


def _check_columns(files, needed, optional, what):
    """Check column presence and types; returns {column: kind} and which optionals exist.

    A column whose integer type differs between files (int32 here, int64
    there) gets the kind ``integer-mixed`` and is read as BIGINT.
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
        if out.get(c) == "integer" and len(types) > 1:
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
                f"filename AS f FROM read_parquet({lst}, filename=true)")
    _check_nulls(con, "raw", {"s": src, "d": dst, "l": label_name if has_edge_labels else None})

    has_vertex_labels = False
    if vertices is not None:
        vfiles = _expand(vertices, "vertex")
        vl_name = vertex_label or "label"
        vkinds, vopt = _check_columns(vfiles, [id_col], {vl_name: vertex_label is not None}, "vertex")
        if vkinds[id_col].split("-")[0] != ekinds[src].split("-")[0]:
            raise InputError(f"vertex ids are {vkinds[id_col]}s but edge ids are {ekinds[src]}s")
        has_vertex_labels = vopt[vl_name]
        vlst = "[" + ", ".join(_sql_str(f) for f in vfiles) + "]"
        vlab = _column_sql(vl_name, vkinds.get(vl_name)) if has_vertex_labels else "NULL"
        con.execute(f"CREATE VIEW vraw AS SELECT {_column_sql(id_col, vkinds[id_col])} AS id, {vlab} AS label, "
                    f"filename AS f "
                    f"FROM read_parquet({vlst}, filename=true)")
        _check_nulls(con, "vraw", {"id": id_col, "label": vl_name if has_vertex_labels else None})
        bad = con.execute("SELECT id FROM vraw GROUP BY id HAVING count(DISTINCT label) > 1 LIMIT 1").fetchone()
        if bad:
            raise InputError(f"vertex {bad[0]!r} has more than one label in the vertex files")
    else:
        con.execute("CREATE VIEW vraw AS SELECT s AS id, NULL AS label FROM raw WHERE false")
    return has_edge_labels, has_vertex_labels, efiles + (_expand(vertices, "vertex") if vertices else [])


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
    """Turns the ``raw``/``vraw`` views of a DuckDB connection into a store."""

    def __init__(self, con, directory, budget, theta, sig_bits, label_bits, undirected,
                 has_edge_labels, has_vertex_labels, report):
        self.con, self.dir, self.theta = con, directory, theta
        self.sig_bits, self.label_bits = sig_bits, label_bits
        self.undirected = undirected
        self.has_edge_labels, self.has_vertex_labels = has_edge_labels, has_vertex_labels
        self.report = report
        self.budget = budget
        self.plan = make_plan(budget, theta, sig_bits // 32)
        self.t0 = time.perf_counter()

    def _say(self, msg):
        self.report(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}")

    def run(self) -> dict:
        con = self.con
        self._say("building the vertex dictionary")
        con.execute("CREATE TABLE vdict AS SELECT id, (row_number() OVER (ORDER BY id) - 1)::INTEGER AS vid "
                    "FROM (SELECT s AS id FROM raw UNION SELECT d FROM raw UNION SELECT id FROM vraw)")
        n_vertices = con.execute("SELECT count(*) FROM vdict").fetchone()[0]
        if n_vertices >= 2**31 - 1:
            raise InputError(f"{n_vertices} vertices exceed the int32 id space")
        con.execute("CREATE TABLE vlab AS SELECT label, (row_number() OVER (ORDER BY label) - 1)::INTEGER AS lid "
                    "FROM (SELECT DISTINCT label FROM vraw WHERE label IS NOT NULL)")
        con.execute("CREATE TABLE vinfo AS SELECT vdict.vid, coalesce(vlab.lid, -1)::INTEGER AS lid "
                    "FROM vdict LEFT JOIN (SELECT DISTINCT id, label FROM vraw) v ON vdict.id = v.id "
                    "LEFT JOIN vlab ON v.label = vlab.label")
        self._say(f"{n_vertices:,} vertices; encoding and deduplicating edges")
        con.execute("CREATE TABLE elab AS SELECT l AS label, (row_number() OVER (ORDER BY l) - 1)::INTEGER AS eid "
                    "FROM (SELECT DISTINCT l FROM raw)")
        enc = ("SELECT a.vid AS s, b.vid AS d, el.eid AS l FROM raw JOIN vdict a ON raw.s = a.id "
               "JOIN vdict b ON raw.d = b.id JOIN elab el ON raw.l = el.label")
        if self.undirected:
            enc = f"SELECT s, d, l FROM ({enc}) UNION SELECT d, s, l FROM ({enc})"
        else:
            enc = f"SELECT DISTINCT s, d, l FROM ({enc})"
        con.execute(f"CREATE TABLE enc AS {enc}")
        n_edges = con.execute("SELECT count(*) FROM enc").fetchone()[0]
        n_input = con.execute("SELECT count(*) FROM raw").fetchone()[0]
        self._say(f"{n_edges:,} distinct directed edges from {n_input:,} input rows")

        files = {}
        files.update(self._write_vertices(n_vertices))
        elabels = con.execute("SELECT el.label, el.eid, count(e.l) FROM elab el LEFT JOIN enc e ON e.l = el.eid "
                              "GROUP BY ALL ORDER BY el.eid").fetchall()
        vlabels = con.execute("SELECT v.label, v.lid, count(i.vid) FROM vlab v LEFT JOIN vinfo i ON i.lid = v.lid "
                              "GROUP BY ALL ORDER BY v.lid").fetchall()
        partitions = self._write_partitions(len(elabels))
        files.update(self._write_signatures(n_vertices))

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
                "frequency": [x[2] for x in elabels],
            },
            "vertex_labels": {
                "values": [_json_label(x[0]) for x in vlabels],
                "frequency": [x[2] for x in vlabels],
                "unlabeled": n_vertices - sum(x[2] for x in vlabels),
            },
            "parameters": {
                "memory_budget": self.budget,
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
        for name in ("segments.arrow", "pcsr_groups.arrow", "pcsr_ci.arrow", "vindex.arrow", "vindex_batches.arrow"):
            files[name] = None
        self._say("checksumming files")
        manifest["files"] = {
            name: {"bytes": os.path.getsize(os.path.join(self.dir, name)),
                   "crc32": fmt.file_crc32(os.path.join(self.dir, name))}
            for name in sorted(files)}
        self._say(f"done: {n_vertices:,} vertices, {n_edges:,} edges, "
                  f"{sum(f['bytes'] for f in manifest['files'].values()):,} bytes")
        return manifest

    # -- vertices -----------------------------------------------------------------

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

    def _partition_queries(self, n_labels):
        """(direction, label-aware?, SQL sorted by (l, s, d)) for each stored partition kind."""
        q = []
        q.append(("out", "SELECT l, s, d FROM enc ORDER BY l, s, d"))
        if not self.undirected:
            q.append(("in", "SELECT l, s, d FROM (SELECT l, d AS s, s AS d FROM enc) ORDER BY l, s, d"))
            q.append(("both", "SELECT l, s, d FROM (SELECT l, s, d FROM enc UNION SELECT l, d, s FROM enc) "
                              "ORDER BY l, s, d"))
        if n_labels > 1:
            q.append(("out", "SELECT -1 AS l, s, d FROM (SELECT DISTINCT s, d FROM enc) ORDER BY s, d"))
            if not self.undirected:
                q.append(("in", "SELECT -1 AS l, s, d FROM (SELECT DISTINCT d AS s, s AS d FROM enc) ORDER BY s, d"))
                q.append(("both", "SELECT -1 AS l, s, d FROM (SELECT s, d FROM enc UNION SELECT d, s FROM enc) "
                                  "ORDER BY s, d"))
        return q

    def _write_partitions(self, n_labels):
        w = _SegmentWriter(self.dir, self.plan, self.theta)
        for direction, sql in self._partition_queries(n_labels):
            self._say(f"writing {direction} partitions")
            reader = _stream(self.con, sql)
            for batch in reader:
                l, s, d = (batch.column(i).to_numpy().astype(np.int32) for i in range(3))
                w.feed(direction, l, s, d)
            w.finish_partition()
            self._say(f"{direction}: {w.n_segments:,} segments so far")
        parts = w.close()
        # Aliases: an undirected store keeps one direction; one label is also "any".
        for lid in list(range(n_labels)) + [fmt.ANY_LABEL]:
            base = lid if (lid != fmt.ANY_LABEL or n_labels > 1) else 0
            for direction in fmt.DIRECTIONS:
                key = fmt.partition_key(lid, direction)
                stored_dir = "out" if self.undirected else direction
                target = fmt.partition_key(base, stored_dir)
                if key != target:
                    parts[key] = {"alias": target}
                parts.setdefault(target, {"segments": [w.n_segments, 0], "vindex": [0, 0], "edges": 0,
                                          "vertices": 0, "max_degree": 0})
        return parts

    def _degree_stats(self, partitions):
        stats = {}
        for key, p in partitions.items():
            if "alias" in p:
                continue
            stats[key] = {"max": p["max_degree"], "mean": (p["edges"] / p["vertices"]) if p["vertices"] else 0.0}
        return stats

    # -- signatures ---------------------------------------------------------------

    def _write_signatures(self, n_vertices):
        con = self.con
        self._say("computing vertex signatures")
        groups = signatures.n_groups(self.sig_bits, self.label_bits)
        if self.undirected:
            pairs = "SELECT e.s AS v, e.l, 'u' AS dir, vi.lid AS nl FROM enc e JOIN vinfo vi ON vi.vid = e.d"
        else:
            pairs = ("SELECT e.s AS v, e.l, 'o' AS dir, vi.lid AS nl FROM enc e JOIN vinfo vi ON vi.vid = e.d "
                     "UNION ALL SELECT e.d AS v, e.l, 'i' AS dir, vi.lid AS nl FROM enc e JOIN vinfo vi ON vi.vid = e.s")
        con.execute(f"CREATE VIEW pairs AS {pairs}")
        keys = con.sql("SELECT DISTINCT l, dir, nl FROM pairs").to_arrow_table()
        ls, ds, ns = (keys.column(i).to_pylist() for i in range(3))
        grp = [signatures.pair_group(a, b, c, groups) for a, b, c in zip(ls, ds, ns)]  # one per distinct key
        key_table = keys.append_column("grp", pa.array(grp, pa.int32()))
        con.register("sigkeys_arrow", key_table)
        con.execute("CREATE TABLE sigkeys AS SELECT * FROM sigkeys_arrow")
        con.unregister("sigkeys_arrow")
        counts = _stream(con, 
            "SELECT p.v, k.grp, count(*) AS c FROM pairs p JOIN sigkeys k ON p.l = k.l AND p.dir = k.dir "
            "AND p.nl = k.nl GROUP BY p.v, k.grp ORDER BY p.v")
        labels = _stream(con, "SELECT lid FROM vinfo ORDER BY vid")

        seg_len = self.plan.signature_segment_vertices
        cols = self.plan.signature_bucket_columns
        n_words = self.sig_bits // 32
        sig_file = fmt.BatchFile(os.path.join(self.dir, "signatures.arrow"),
                                 pa.schema([(f"w{c}", pa.uint32()) for c in range(cols)]))
        lab_file = fmt.BatchFile(os.path.join(self.dir, "vertex_labels.arrow"), pa.schema([("label", pa.int32())]))
        count_stream = _Restreamer(counts, 3)
        label_stream = _Restreamer(labels, 1)
        for start in range(0, max(n_vertices, 1), seg_len) if n_vertices else []:
            stop = min(start + seg_len, n_vertices)
            (lab,) = label_stream.take_rows(stop - start)
            v, g, c = count_stream.take_until(0, stop)
            words = signatures.words_from_groups(v, g, c, lab.astype(np.int64), stop - start, self.sig_bits,
                                                 self.label_bits, first_vertex=start)
            lab_file.write([pa.array(lab.astype(np.int32))])
            for b in range(n_words // cols):
                sig_file.write([pa.array(words[:, b * cols + k]) for k in range(cols)])
        sig_file.close()
        lab_file.close()
        return {"signatures.arrow": None, "vertex_labels.arrow": None}


def _stream(con, sql):
    """A RecordBatchReader over a query, on its own cursor so several can be open at once."""
    return con.cursor().sql(sql).to_arrow_reader(_BATCH_ROWS)


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

    def take_until(self, col, bound):
        """Rows whose ``col`` value is below ``bound`` (the stream is sorted by it)."""
        while not self.done and (len(self.buf[col]) == 0 or self.buf[col][-1] < bound):
            self._pull()
        k = int(np.searchsorted(self.buf[col], bound))
        out = [b[:k] for b in self.buf]
        self.buf = [b[k:] for b in self.buf]
        return out


class _SegmentWriter:
    """Cuts sorted (label, src, dst) streams into segments and writes their PCSRs."""

    def __init__(self, directory, plan, theta):
        self.plan, self.theta = plan, theta
        self.groups = fmt.BatchFile(os.path.join(directory, "pcsr_groups.arrow"), pa.schema([("g", pa.int32())]))
        self.ci = fmt.BatchFile(os.path.join(directory, "pcsr_ci.arrow"), pa.schema([("ci", pa.int32())]))
        self.vindex = fmt.BatchFile(os.path.join(directory, "vindex.arrow"),
                                    pa.schema([("vertex", pa.int32()), ("degree", pa.int32())]))
        self.seg_rows = []      # (partition, first_src, last_src, edges, groups)
        self.idx_rows = []      # (partition, first_vertex, last_vertex, rows)
        self.parts = {}
        self.n_segments = 0
        self.key = None
        self._reset_pending()

    def _reset_pending(self):
        self.pend_s, self.pend_d, self.pend_n = [], [], 0
        self.idx_v, self.idx_c = [], []
        self.idx_n = 0
        self.carry = None       # (vertex, count) of the last run, may continue

    def feed(self, direction, l, s, d):
        cuts = np.flatnonzero(l[1:] != l[:-1]) + 1
        bounds = np.r_[0, cuts, len(l)]
        for a, b in zip(bounds[:-1], bounds[1:]):   # one iteration per label run in the batch
            key = fmt.partition_key(int(l[a]), direction)
            if key != self.key:
                self.finish_partition()
                self.key = key
                self.parts[key] = {"segments": [self.n_segments, 0], "vindex": [len(self.idx_rows), 0],
                                   "edges": 0, "vertices": 0, "max_degree": 0}
            self._append(s[a:b], d[a:b])

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
        s = np.concatenate(self.pend_s)
        d = np.concatenate(self.pend_d)
        self.pend_s, self.pend_d, self.pend_n = [], [], 0
        groups, ci = pcsr.build(s, d, self.theta)
        self.groups.write([pa.array(groups.reshape(-1))])
        self.ci.write([pa.array(ci)])
        self.seg_rows.append((self.key, int(s[0]), int(s[-1]), len(s), groups.shape[0]))
        self.n_segments += 1
        p = self.parts[self.key]
        p["segments"][1] += 1
        p["edges"] += len(s)
        # Degree index: runs of equal sources; the last run may continue in the next segment.
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        verts = s[starts]
        counts = np.diff(np.r_[starts, len(s)])
        if self.carry is not None:
            if verts[0] == self.carry[0]:
                counts[0] += self.carry[1]
            else:
                self._add_index(np.array([self.carry[0]]), np.array([self.carry[1]]))
        self._add_index(verts[:-1], counts[:-1])
        self.carry = (int(verts[-1]), int(counts[-1]))

    def _add_index(self, v, c):
        if len(v) == 0:
            return
        self.idx_v.append(v.astype(np.int32))
        self.idx_c.append(c.astype(np.int32))
        self.idx_n += len(v)
        p = self.parts[self.key]
        p["vertices"] += len(v)
        p["max_degree"] = max(p["max_degree"], int(c.max()))
        while self.idx_n >= self.plan.index_batch_rows:
            self._flush_index(self.plan.index_batch_rows)

    def _flush_index(self, k):
        v = np.concatenate(self.idx_v)
        c = np.concatenate(self.idx_c)
        k = min(k, len(v))
        if k == 0:
            return
        self.vindex.write([pa.array(v[:k]), pa.array(c[:k])])
        self.idx_rows.append((self.key, int(v[0]), int(v[k - 1]), k))
        self.parts[self.key]["vindex"][1] += 1
        self.idx_v, self.idx_c, self.idx_n = [v[k:]], [c[k:]], len(v) - k

    def finish_partition(self):
        if self.key is None:
            return
        self._flush_segment()
        if self.carry is not None:
            self._add_index(np.array([self.carry[0]]), np.array([self.carry[1]]))
            self.carry = None
        while self.idx_n:
            self._flush_index(self.plan.index_batch_rows)
        self.key = None
        self._reset_pending()

    def close(self):
        self.finish_partition()
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


def stderr_progress(msg):
    print(msg, file=sys.stderr, flush=True)
