"""Bad input to sgsi.build: a clear SgsiError, and nothing left behind.

Every case checks that the exception is an :class:`sgsi.SgsiError`
subclass whose message names the problem (file, column, count), and that
the output directory holds exactly what it held before: no store, no
``.NAME.tmp-*`` directory, no ``sgsi-spill-*`` directory.
"""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import oracle_matches
from sgsi.cli import main
from sgsi.errors import BudgetError, InputError, PatternError, SgsiError


def listing(d):
    return sorted(os.listdir(d))


def parquet(path, **cols):
    pq.write_table(pa.table(cols), path)
    return str(path)


@pytest.fixture
def good(tmp_path):
    """A valid edge file and vertex file with integer ids."""
    e = parquet(tmp_path / "edges.parquet", src=[1, 2, 3], dst=[2, 3, 1], label=["K", "K", "L"])
    v = parquet(tmp_path / "vertices.parquet", id=[1, 2, 3], label=["A", "B", "A"])
    return e, v


def fails(tmp_path, match, exc=InputError, out="g.sgsi", **kw):
    """Build must raise ``exc`` (an SgsiError) matching ``match`` and leave no trace."""
    before = listing(tmp_path)
    with pytest.raises(SgsiError) as info:
        sgsi.build(str(tmp_path / out), **kw)
    assert isinstance(info.value, exc), f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    for m in ([match] if isinstance(match, str) else match):
        assert m in msg, f"{m!r} not in message {msg!r}"
    assert "\n" not in msg.strip(), f"message is not one line: {msg!r}"
    assert listing(tmp_path) == before, "the failed build left something behind"
    return msg


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


def test_missing_edge_file(tmp_path):
    fails(tmp_path, ["edge file not found", "nope.parquet"], edges=str(tmp_path / "nope.parquet"))


def test_missing_edge_file_among_several(tmp_path, good):
    e, _ = good
    fails(tmp_path, "missing.parquet", edges=[e, str(tmp_path / "missing.parquet")])


def test_glob_matches_nothing(tmp_path):
    fails(tmp_path, "nothing-*.parquet", edges=str(tmp_path / "nothing-*.parquet"))


def test_missing_vertex_file(tmp_path, good):
    e, _ = good
    fails(tmp_path, ["vertex file not found", "nov.parquet"], edges=e, vertices=str(tmp_path / "nov.parquet"))


def test_directory_as_edge_file(tmp_path):
    (tmp_path / "adir").mkdir()
    fails(tmp_path, "adir", edges=str(tmp_path / "adir"))


@pytest.mark.parametrize("content", [b"", b"hello, world\n", b"PAR1" + b"\x00" * 100,
                                     b"src,dst\n1,2\n2,3\n"])
def test_not_parquet(tmp_path, content):
    p = tmp_path / "bad.parquet"
    p.write_bytes(content)
    fails(tmp_path, ["bad.parquet", "not a readable Parquet file"], edges=str(p))


def test_not_parquet_vertex_file(tmp_path, good):
    e, _ = good
    p = tmp_path / "v.parquet"
    p.write_text("id,label\n1,A\n")
    fails(tmp_path, ["v.parquet", "Parquet"], edges=e, vertices=str(p))


def test_bug_corrupt_parquet_data_pages_raw_duckdb_error(tmp_path):
    """BUG: a Parquet file whose footer is fine but whose (snappy) data pages are
    damaged makes DuckDB fail while building (sgsi/storage/build.py, the
    _Builder.run SQL), and the raw duckdb.InvalidInputException escapes instead
    of an InputError naming the file."""
    p = tmp_path / "corrupt.parquet"
    n = 5000
    pq.write_table(pa.table({"src": [(i * 7919) % 10**9 for i in range(n)],
                             "dst": [(i * 104729) % 10**9 for i in range(n)]}), p, compression="snappy")
    data = bytearray(p.read_bytes())
    for i in range(200, 400):
        data[i] ^= 0xFF
    p.write_bytes(bytes(data))
    fails(tmp_path, "corrupt.parquet", edges=str(p))


# ---------------------------------------------------------------------------
# Columns and types
# ---------------------------------------------------------------------------


def test_missing_src_column(tmp_path):
    e = parquet(tmp_path / "e.parquet", a=[1, 2], dst=[2, 3])
    fails(tmp_path, ["e.parquet", "missing column 'src'"], edges=e)


def test_missing_dst_column_custom_names(tmp_path):
    e = parquet(tmp_path / "e.parquet", frm=[1, 2], dst=[2, 3])
    fails(tmp_path, "missing column 'to'", edges=e, src="frm", dst="to")


def test_missing_named_label_column(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, 2], dst=[2, 3])
    fails(tmp_path, "missing column 'kind'", edges=e, label="kind")


def test_missing_vertex_id_column(tmp_path, good):
    e, _ = good
    v = parquet(tmp_path / "v.parquet", vid=[1, 2], label=["A", "B"])
    fails(tmp_path, ["v.parquet", "missing column 'id'"], edges=e, vertices=v)


def test_missing_named_vertex_label_column(tmp_path, good):
    e, _ = good
    v = parquet(tmp_path / "v.parquet", id=[1, 2], label=["A", "B"])
    fails(tmp_path, "missing column 'kind'", edges=e, vertices=v, vertex_label="kind")


def test_label_column_in_some_files_only(tmp_path):
    a = parquet(tmp_path / "a.parquet", src=[1], dst=[2], label=["K"])
    b = parquet(tmp_path / "b.parquet", src=[2], dst=[3])
    fails(tmp_path, "'label'", edges=[a, b])


@pytest.mark.parametrize("values, kind", [([1.5, 2.5], "double"), ([True, False], "bool")])
def test_bad_id_type(tmp_path, values, kind):
    e = parquet(tmp_path / "e.parquet", src=values, dst=values)
    fails(tmp_path, ["e.parquet", "'src'", kind], edges=e)


def test_bad_label_type(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, 2], dst=[2, 3], label=[0.5, 1.5])
    fails(tmp_path, ["'label'", "double"], edges=e)


# ---------------------------------------------------------------------------
# Nulls
# ---------------------------------------------------------------------------


def test_null_src(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, None, 3, None], dst=[2, 3, 1, 1])
    fails(tmp_path, ["e.parquet", "2 null values", "'src'"], edges=e)


def test_null_dst_names_the_second_file(tmp_path):
    a = parquet(tmp_path / "a.parquet", src=[1, 2], dst=[2, 3])
    b = parquet(tmp_path / "b.parquet", src=[3, 4, 5], dst=[None, 4, 1])
    msg = fails(tmp_path, ["b.parquet", "1 null value", "'dst'"], edges=[a, b])
    assert "a.parquet" not in msg


def test_null_edge_labels(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, 2, 3], dst=[2, 3, 1], label=["K", None, None])
    fails(tmp_path, ["e.parquet", "2 null values", "'label'"], edges=e)


def test_null_vertex_ids(tmp_path, good):
    e, _ = good
    v = parquet(tmp_path / "v.parquet", id=pa.array([1, None, None, None], pa.int64()), label=["A", "B", "C", "D"])
    fails(tmp_path, ["v.parquet", "3 null values", "'id'"], edges=e, vertices=v)


def test_null_vertex_labels_are_no_label(tmp_path, capsys):
    """A null vertex label means no label, as for a vertex the vertex files do not list."""
    edges = [(1, 2, "K"), (2, 3, "K"), (3, 1, "L"), (3, 4, "K"), (4, 5, "K"), (5, 1, "L"), (2, 5, "K"), (4, 1, "K")]
    vlabels = {1: "A", 2: None, 3: "A", 4: None, 6: None, 7: "B"}     # 5: not listed; 6, 7: on no edge
    e = parquet(tmp_path / "e.parquet", src=[s for s, _, _ in edges], dst=[d for _, d, _ in edges],
                label=[l for _, _, l in edges])
    v = parquet(tmp_path / "v.parquet", id=list(vlabels), label=list(vlabels.values()))
    with sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v) as g:
        for p in ["(a:A)-->(b)", "(a)-->(b)", "(a)-[:K]->(b:A)", "(a:A)-->(b)-->(c:A)", "(a)-->(b)-->(c)",
                  "(a:A)", "(a)", "(a:B)"]:
            want = oracle_matches(edges, vlabels, p)
            assert g.count(p, device="cpu") == len(want), p
        t = g.match("(a:A)-->(b)", device="cpu").read_all()
        assert sorted(zip(t["a"].to_pylist(), t["b"].to_pylist())) == [(1, 2), (3, 1), (3, 4)]
        assert g.store.manifest["vertex_labels"] == {"values": ["A", "B"], "frequency": [2, 1], "unlabeled": 4}
    assert main(["info", str(tmp_path / "g.sgsi")]) == 0
    assert "vertex labels  2 (+ 4 unlabeled vertices)" in capsys.readouterr().out


def test_vertex_label_columns_of_only_nulls(tmp_path, good):
    """A label column of the null type (only nulls) in some vertex files, strings in others."""
    e, _ = good
    n = str(tmp_path / "n.parquet")
    pq.write_table(pa.table({"id": [1, 2], "label": pa.array([None, None])}), n)
    s = parquet(tmp_path / "s.parquet", id=[3], label=["A"])
    for files, labeled in [([n], 0), ([n, s], 1), ([s, n], 1)]:
        with sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=files, force=True) as g:
            if labeled:
                assert g.count("(a:A)", device="cpu") == labeled
            else:
                with pytest.raises(PatternError, match="^unknown vertex label A; the store has no vertex labels$"):
                    g.count("(a:A)", device="cpu")
            assert g.count("(a)-[:K]->(b)", device="cpu") == 2
            assert g.store.manifest["vertex_labels"]["unlabeled"] == 3 - labeled


def test_vertex_with_a_label_and_a_null_label(tmp_path, good):
    e, _ = good
    v = parquet(tmp_path / "v.parquet", id=[1, 2, 1], label=["A", "B", None])
    fails(tmp_path, ["vertex 1", "a label in one row", "none (null) in another"], edges=e, vertices=v)


def test_vertex_with_two_labels(tmp_path, good):
    e, _ = good
    v = parquet(tmp_path / "v.parquet", id=[1, 2, 1], label=["A", "B", "C"])
    fails(tmp_path, ["vertex 1", "more than one label"], edges=e, vertices=v)


# ---------------------------------------------------------------------------
# Id types across files
# ---------------------------------------------------------------------------


def test_mixed_id_types_across_edge_files(tmp_path):
    a = parquet(tmp_path / "a.parquet", src=["x", "y"], dst=["y", "z"])
    b = parquet(tmp_path / "b.parquet", src=[1, 2], dst=[2, 3])
    fails(tmp_path, ["'src'", "a.parquet", "b.parquet", "string", "integer"], edges=[a, b])


def test_src_and_dst_of_different_types(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, 2], dst=["b", "c"])
    fails(tmp_path, ["'src'", "'dst'", "integer", "string"], edges=e)


def test_string_edges_int_vertices(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=["a", "b"], dst=["b", "c"])
    v = parquet(tmp_path / "v.parquet", id=[1, 2], label=["A", "B"])
    fails(tmp_path, ["vertex ids are integers", "edge ids are strings"], edges=e, vertices=v)


def test_int_edges_string_vertices(tmp_path):
    e = parquet(tmp_path / "e.parquet", src=[1, 2], dst=[2, 3])
    v = parquet(tmp_path / "v.parquet", id=["1", "2"], label=["A", "B"])
    fails(tmp_path, ["vertex ids are strings", "edge ids are integers"], edges=e, vertices=v)


def test_mixed_label_types_across_files(tmp_path):
    a = parquet(tmp_path / "a.parquet", src=[1], dst=[2], label=[1])
    b = parquet(tmp_path / "b.parquet", src=[2], dst=[3], label=["K"])
    fails(tmp_path, ["'label'", "integer", "string"], edges=[a, b])


def test_int32_and_int64_files_build(tmp_path):
    """Integer widths may differ between files (all are 'integers')."""
    a = tmp_path / "a.parquet"
    b = tmp_path / "b.parquet"
    pq.write_table(pa.table({"src": pa.array([1, 2], pa.int32()), "dst": pa.array([2, 3], pa.int32())}), a)
    pq.write_table(pa.table({"src": pa.array([3, 4], pa.int64()), "dst": pa.array([4, 1], pa.int64())}), b)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=[str(a), str(b)])
    assert g.store.n_edges == 4
    assert g.count("(x)-->(y)", device="cpu") == 4


def test_bug_int32_then_int64_file_with_large_ids_raw_duckdb_error(tmp_path):
    """BUG: _check_columns (sgsi/storage/sources.py) accepts an int32 file and an
    int64 file as the same kind, but read_parquet takes its schema from the
    first file, so an id above 2**31 in the second file raises a raw
    duckdb.ConversionException (not an SgsiError). Either the build should
    succeed (ids are read as BIGINT / union_by_name) or give an InputError."""
    a = tmp_path / "a.parquet"
    b = tmp_path / "b.parquet"
    pq.write_table(pa.table({"src": pa.array([1, 2], pa.int32()), "dst": pa.array([2, 3], pa.int32())}), a)
    pq.write_table(pa.table({"src": pa.array([3, 2**40], pa.int64()), "dst": pa.array([4, 1], pa.int64())}), b)
    before = listing(tmp_path)
    try:
        g = sgsi.build(str(tmp_path / "g.sgsi"), edges=[str(a), str(b)])
    except SgsiError as e:
        assert "b.parquet" in str(e)
        assert listing(tmp_path) == before
        return
    assert sorted(g.store.vertex_ids(range(g.store.n_vertices)).to_pylist()) == [1, 2, 3, 4, 2**40]
    assert g.count("(x)-->(y)", device="cpu") == 4


# ---------------------------------------------------------------------------
# Output path and parameters
# ---------------------------------------------------------------------------


def test_output_exists_without_force(tmp_path, good):
    e, v = good
    out = tmp_path / "g.sgsi"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    fails(tmp_path, ["exists", "g.sgsi", "force"], edges=e, vertices=v)
    assert (out / "keep.txt").read_text() == "precious"


def test_output_exists_as_file(tmp_path, good):
    e, v = good
    (tmp_path / "g.sgsi").write_text("not a store")
    fails(tmp_path, "exists", edges=e, vertices=v)
    assert (tmp_path / "g.sgsi").read_text() == "not a store"


def test_output_parent_missing(tmp_path, good):
    e, v = good
    fails(tmp_path, "does not exist", out="no/such/dir/g.sgsi", edges=e, vertices=v)


def test_edges_and_graph_both_or_neither(tmp_path, good):
    e, _ = good
    g = tmp_path / "d.graph"
    g.write_text("t 2 1\nv 0 0 1\nv 1 0 1\ne 0 1\n")
    fails(tmp_path, "not both", edges=e, graph=str(g))
    fails(tmp_path, "edge", )


@pytest.mark.parametrize("theta", [0, 1, 17])
def test_bad_theta(tmp_path, good, theta):
    e, _ = good
    fails(tmp_path, "theta", edges=e, theta=theta)


@pytest.mark.parametrize("budget, text", [("1KB", "minimum"), ("lots", "not a size"), ("-5MB", "not a size")])
def test_bad_budget(tmp_path, good, budget, text):
    e, _ = good
    fails(tmp_path, text, exc=BudgetError, edges=e, memory_budget=budget)


@pytest.mark.parametrize("params", [{"signature_bits": 100}, {"signature_bits": 128, "label_bits": 7},
                                    {"signature_bits": 64, "label_bits": 64}])
def test_bug_bad_signature_parameters_raise_valueerror(tmp_path, good, params):
    """BUG (minor): sgsi.build(signature_bits=100) raises a bare ValueError from
    sgsi/partition/signatures.py validate_params (called by build_store), not
    an SgsiError, although errors.py says every user error is an SgsiError."""
    e, _ = good
    fails(tmp_path, "bits", edges=e, **params)


# ---------------------------------------------------------------------------
# Empty input
# ---------------------------------------------------------------------------


def test_empty_edge_file_builds_an_empty_store(tmp_path):
    """0 edges: the build gives a valid, empty store (this is what the code does)."""
    e = tmp_path / "e.parquet"
    pq.write_table(pa.table({"src": pa.array([], pa.int64()), "dst": pa.array([], pa.int64())}), e)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=str(e))
    assert g.store.n_vertices == 0 and g.store.n_edges == 0
    g.store.verify()
    assert g.count("(a)", device="cpu") == 0
    assert g.count("(a)-->(b)", device="cpu") == 0
    assert g.match("(a)-->(b)", device="cpu").read_all().num_rows == 0


def test_empty_edge_file_with_vertices(tmp_path):
    e = tmp_path / "e.parquet"
    pq.write_table(pa.table({"src": pa.array([], pa.string()), "dst": pa.array([], pa.string()),
                             "label": pa.array([], pa.string())}), e)
    v = parquet(tmp_path / "v.parquet", id=["a", "b", "c"], label=["A", "B", "A"])
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=str(e), vertices=v)
    assert g.store.n_vertices == 3 and g.store.n_edges == 0
    assert g.count("(x:A)", device="cpu") == 2
    assert g.count("(x)-->(y)", device="cpu") == 0
    assert sorted(g.match("(x:A)", device="cpu").read_all().column("x").to_pylist()) == ["a", "c"]


# ---------------------------------------------------------------------------
# The benchmark text format
# ---------------------------------------------------------------------------


def text_graph(tmp_path, text, name="d.graph"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


GOOD_TEXT = "t 3 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n"


def test_text_graph_good(tmp_path):
    g = sgsi.build(str(tmp_path / "g.sgsi"), graph=text_graph(tmp_path, GOOD_TEXT))
    assert g.store.n_vertices == 3 and g.store.n_edges == 4 and g.store.undirected
    assert g.count("(a:0)--(b:0)", device="cpu") == 2


@pytest.mark.parametrize("text, words", [
    ("t 4 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n", ["header says 4 vertices", "3"]),
    ("t 2 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n", ["header says 2 vertices"]),
    ("t 3 3\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n", ["header says 3 edges", "2 e lines"]),
    ("t 3 1\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n", ["header says 1 edges", "2 e lines"]),
    ("t 3 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 7\n", ["outside 0..2"]),
    ("t 3 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne -1 2\n", ["outside 0..2"]),
    ("t 3 2\nv 0 0 1\nv 1 0 2\nv 5 1 1\ne 0 1\ne 1 2\n", ["malformed"]),
    ("t 3 2\nv 0 0 1\nv 1 0 2\nv 2\ne 0 1\ne 1 2\n", ["malformed"]),
    ("t 3\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n", ["edges"]),
    ("v 0 0 1\ne 0 1\n", ["t/v/e"]),
    ("", ["t/v/e"]),
    ("hello world\n", ["t/v/e"]),
    ("t 3 2\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\nx 1 2\n", ["t/v/e"]),
    ("t 3 1\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 one\n", ["t/v/e"]),
])
def test_text_graph_bad(tmp_path, text, words):
    p = text_graph(tmp_path, text)
    fails(tmp_path, ["d.graph"] + words, graph=p)


def test_text_graph_missing(tmp_path):
    fails(tmp_path, ["graph file not found", "nope.graph"], graph=str(tmp_path / "nope.graph"))


def test_bug_text_graph_duplicate_vertex_lines_corrupt_store(tmp_path):
    """BUG: sgsi/storage/sources.py load_text_graph counts v lines but never
    checks that their ids are distinct. With ``v 0 0``, ``v 0 1`` and no line
    for vertex 2 the counts agree (3 == 3), the build succeeds, and the store
    is corrupt: vertices.parquet gets 4 rows for 3 vertices and the per-vertex
    label ids (vertex_labels.arrow) are shifted (vertex 2, which has no v line,
    gets vertex 1's label). It should be an InputError naming the file."""
    p = text_graph(tmp_path, "t 3 2\nv 0 0 1\nv 0 1 2\nv 1 0 1\ne 0 1\ne 1 2\n")
    fails(tmp_path, "d.graph", graph=p)


def test_bug_text_graph_duplicate_header_ignored(tmp_path):
    """A second ``t`` line with other counts is malformed too; the build
    should not silently use one of them (sgsi/storage/sources.py
    load_text_graph reads the first 't' row with fetchone and ignores the rest)."""
    p = text_graph(tmp_path, "t 3 2\nt 5 5\nv 0 0 1\nv 1 0 2\nv 2 1 1\ne 0 1\ne 1 2\n")
    fails(tmp_path, "d.graph", graph=p)
