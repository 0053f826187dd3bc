"""Ingest sources: edge and vertex inputs as DuckDB views, and their dictionaries.

The inputs become two views of a DuckDB connection: ``raw(s, d, l, f)``,
one row per input edge (``f``: the file it came from), and ``vraw(id,
label)``, one row per vertex file row. They come from Parquet files, whose
columns are checked first (present, integer or string, ids of one kind,
no nulls), or from a graph in the benchmark text format (``t/v/e`` lines).
From those views DuckDB builds the dictionaries: ``vdict(id, vid)`` (dense
int32 vertex ids), ``vlab`` and ``vinfo`` (vertex label ids), ``elab``
(edge label ids), and the encoded edges ``enc(s, d, l)`` (repeats kept).
"""

from __future__ import annotations

import os
from glob import glob

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError

#: Rows per record batch read from DuckDB.
BATCH_ROWS = 1 << 20
_INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_SQL_INTS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
             "UBIGINT", "UHUGEINT")


def stream(con, sql):
    """A RecordBatchReader over a query, on its own cursor so several can be open at once."""
    return con.cursor().sql(sql).to_arrow_reader(BATCH_ROWS)


def sql_str(s: str) -> str:
    """A SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


def sql_ident(s: str) -> str:
    """A quoted SQL identifier."""
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
    if str(t) in _INT_TYPES:
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


def load_parquet(con, edges, vertices, src, dst, label, id_col, vertex_label):
    """Create ``raw`` and ``vraw`` over Parquet files; returns (has edge labels, has vertex labels, files)."""
    efiles = _expand(edges, "edge")
    label_name = label or "label"
    ekinds, eopt = _check_columns(efiles, [src, dst], {label_name: label is not None}, "edge")
    has_edge_labels = eopt[label_name]
    if ekinds[src].split("-")[0] != ekinds[dst].split("-")[0]:
        raise InputError(f"column {src!r} holds {ekinds[src]}s but {dst!r} holds {ekinds[dst]}s")
    lst = "[" + ", ".join(sql_str(f) for f in efiles) + "]"
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
        vlst = "[" + ", ".join(sql_str(f) for f in vfiles) + "]"
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
    return f"CAST({sql_ident(name)} AS BIGINT)" if kind == "integer-mixed" else sql_ident(name)


def _check_nulls(con, view, columns):
    cols = {k: v for k, v in columns.items() if v is not None}
    agg = ", ".join(f"count(*) FILTER (WHERE {k} IS NULL)" for k in cols)
    for row in con.execute(f"SELECT f, {agg} FROM {view} GROUP BY f ORDER BY f").fetchall():
        for (k, name), n in zip(cols.items(), row[1:]):
            if n:
                raise InputError(f"{row[0]}: {n} null value{'s' if n > 1 else ''} in column {name!r}")


def load_text_graph(con, path):
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


def describe(edges, vertices, graph):
    """The input files, for a message (the first five)."""
    parts = []
    for x in (edges, vertices, graph):
        if x is None:
            continue
        parts.extend([os.fspath(x)] if isinstance(x, (str, os.PathLike)) else [os.fspath(p) for p in x])
    return ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")


# -- dictionaries -------------------------------------------------------------


def vertex_dictionary(con):
    """Create ``vdict(id, vid)``; returns (vertices, offset).

    Dense ids are the ranks of the original ids. Where those are
    integers that fill a range without gaps, ``vid = id - offset`` and
    the edges are encoded by arithmetic instead of two joins; offset is
    None otherwise. Integer ids that a vertex file lists as a full range
    skip the distinct pass over the edges as well.
    """
    ids = "SELECT s AS id FROM raw UNION ALL SELECT d FROM raw UNION ALL SELECT id FROM vraw"
    id_type = str(con.sql(ids).types[0])
    offset = None
    if id_type in _SQL_INTS:
        emin, emax = con.execute("SELECT least(min(s), min(d)), greatest(max(s), max(d)) FROM raw").fetchone()
        vmin, vmax, vn, vdistinct = con.execute(
            "SELECT min(id), max(id), count(*), count(DISTINCT id) FROM vraw").fetchone()
        if vn and vdistinct == vmax - vmin + 1 and (emin is None or (emin >= vmin and emax <= vmax)):
            n_vertices = vmax - vmin + 1
            _check_vertex_count(n_vertices)
            con.execute(f"CREATE TABLE vdict AS SELECT (range::HUGEINT + {vmin})::{id_type} AS id, "
                        f"range::INTEGER AS vid FROM range({n_vertices})")
            return n_vertices, vmin
    con.execute("CREATE TABLE vdict AS SELECT id, (row_number() OVER (ORDER BY id) - 1)::INTEGER AS vid "
                "FROM (SELECT s AS id FROM raw UNION SELECT d FROM raw UNION SELECT id FROM vraw)")
    n_vertices = con.execute("SELECT count(*) FROM vdict").fetchone()[0]
    _check_vertex_count(n_vertices)
    if id_type in _SQL_INTS and n_vertices:
        lo, hi = con.execute("SELECT min(id), max(id) FROM vdict").fetchone()
        if hi - lo + 1 == n_vertices:
            offset = lo
    return n_vertices, offset


def _check_vertex_count(n_vertices):
    if n_vertices >= 2**31 - 1:
        raise InputError(f"{n_vertices} vertices exceed the int32 id space")


def vertex_labels(con):
    """Create ``vlab(label, lid)`` (label ids in label order) and ``vinfo(vid, lid)`` (-1: none)."""
    con.execute("CREATE TABLE vlab AS SELECT label, (row_number() OVER (ORDER BY label) - 1)::INTEGER AS lid "
                "FROM (SELECT DISTINCT label FROM vraw WHERE label IS NOT NULL)")
    con.execute("CREATE TABLE vinfo AS SELECT vdict.vid, coalesce(vlab.lid, -1)::INTEGER AS lid "
                "FROM vdict LEFT JOIN (SELECT DISTINCT id, label FROM vraw) v ON vdict.id = v.id "
                "LEFT JOIN vlab ON v.label = vlab.label")


def encode(con, offset, has_edge_labels, undirected):
    """Create ``elab(label, eid)`` and ``enc(s, d, l)``: every input row with dense vertex and label
    ids (repeats kept); ``uenc``, both directions of ``enc``, when ``undirected``."""
    con.execute("CREATE TABLE elab AS SELECT l AS label, (row_number() OVER (ORDER BY l) - 1)::INTEGER AS eid "
                "FROM (SELECT DISTINCT l FROM raw)")
    joins = []
    if offset is not None:
        t = str(con.sql("SELECT id FROM vdict").types[0])
        s, d = (f"(raw.{c} - {offset}::{t})::INTEGER" for c in "sd")
    else:
        s, d = "a.vid", "b.vid"
        joins += ["JOIN vdict a ON raw.s = a.id", "JOIN vdict b ON raw.d = b.id"]
    if has_edge_labels:
        lab = "el.eid"
        joins.append("JOIN elab el ON raw.l = el.label")
    else:
        lab = "0::INTEGER"
    con.execute(f"CREATE TABLE enc AS SELECT {s} AS s, {d} AS d, {lab} AS l FROM raw {' '.join(joins)}")
    if undirected:
        con.execute("CREATE VIEW uenc AS SELECT s, d, l FROM enc UNION ALL SELECT d, s, l FROM enc")
