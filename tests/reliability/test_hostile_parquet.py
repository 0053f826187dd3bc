"""Adversarial Parquet input: each case gives a correct result or a clear error naming the problem."""

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.errors import InputError, PatternError


def _q(s):
    return "'" + str(s).replace("'", "''") + "'"


def test_megabyte_string_ids(tmp_path):
    big = ["x" * (1 << 20) + str(i) for i in range(3)]
    e = rh.write_edges(tmp_path / "e.parquet", [big[0], big[1], big[2]], [big[1], big[2], big[0]], ["K"] * 3)
    store = str(tmp_path / "g.sgsi")
    with sgsi.build(store, edges=e) as g:
        rows = rh.rows_of(g.match("(a)-[:K]->(b)-[:K]->(c)-[:K]->(a)", device="cpu"))
        assert sorted(rows) == sorted([(big[i], big[(i + 1) % 3], big[(i + 2) % 3]) for i in range(3)])
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    got = con.execute(f"SELECT length(a), b = {_q(big[1])} FROM match({_q(store)}, '(a)-[:K]->(b)') "
                      f"WHERE a = {_q(big[0])}").fetchall()
    assert got == [(len(big[0]), True)]
    con.close()


def test_megabyte_labels(tmp_path):
    lab = "L" * (1 << 20)
    e = rh.write_edges(tmp_path / "e.parquet", [1, 2], [2, 3], [lab, "short"])
    with sgsi.build(str(tmp_path / "g.sgsi"), edges=e) as g:
        assert g.count(f"(a)-[:`{lab}`]->(b)-[:short]->(c)", device="cpu") == 1
        shown = r"L{60}\.\.\."                   # cut to one short line
        with pytest.raises(PatternError, match=f"^unknown edge label {shown}; the store's edge labels are {shown}, short$"):
            g.count(f"(a)-[:`{lab}x`]->(b)", device="cpu")


def test_ids_of_different_kinds_across_files(tmp_path):
    a = rh.write_edges(tmp_path / "ints.parquet", [1, 2], [2, 3])
    b = rh.write_edges(tmp_path / "strs.parquet", ["1", "x"], ["x", "y"])
    with pytest.raises(InputError) as err:
        sgsi.build(str(tmp_path / "g.sgsi"), edges=[a, b])
    assert "ints.parquet" in str(err.value) and "strs.parquet" in str(err.value)
    assert not os.path.exists(tmp_path / "g.sgsi") and rh.leftovers(tmp_path, "g.sgsi") == []


def test_integer_widths_across_files(tmp_path):
    """int32 ids in one file, int64 ids above 2^31 in the next and uint8 in a third: each read with its own type."""
    a = rh.write_edges(tmp_path / "i32.parquet", pa.array([1, 2], pa.int32()), pa.array([2, 3], pa.int32()))
    b = rh.write_edges(tmp_path / "i64.parquet", pa.array([3, 2**40], pa.int64()), pa.array([2**40, 1], pa.int64()))
    c = rh.write_edges(tmp_path / "u8.parquet", pa.array([7], pa.uint8()), pa.array([1], pa.uint8()))
    with sgsi.build(str(tmp_path / "g.sgsi"), edges=[a, b, c]) as g:
        assert rh.rows_of(g.match("(a)-->(b)-->(c)-->(d)-->(a)", device="cpu")) == sorted(
            [(1, 2, 3, 2**40), (2, 3, 2**40, 1), (3, 2**40, 1, 2), (2**40, 1, 2, 3)])
        assert g.count("(a)-->(b)", device="cpu") == 5
    v32 = str(tmp_path / "v32.parquet")
    v64 = str(tmp_path / "v64.parquet")
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "label": pa.array([5, 6], pa.int32())}), v32)
    pq.write_table(pa.table({"id": pa.array([2**40], pa.int64()), "label": pa.array([2**40], pa.int64())}), v64)
    with sgsi.build(str(tmp_path / "v.sgsi"), edges=[a, b, c], vertices=[v32, v64]) as g:
        assert rh.rows_of(g.match(f"(a:5)-->(b:6)-->(c)-->(d:{2**40})", device="cpu")) == [(1, 2, 3, 2**40)]
    s = rh.write_edges(tmp_path / "strs.parquet", ["x"], ["y"])
    with pytest.raises(InputError, match=r"column 'src' holds integers in .*i32\.parquet but strings in .*strs\.parquet"):
        sgsi.build(str(tmp_path / "s.sgsi"), edges=[a, b, s])
    assert rh.leftovers(tmp_path, "s.sgsi") == []


def test_uint64_ids_beyond_int64(tmp_path):
    """uint64 ids above 2^63 with int64 ids elsewhere: exact ids back, or a clear error naming the column."""
    a = rh.write_edges(tmp_path / "u64.parquet", pa.array([2**64 - 1], pa.uint64()), pa.array([1], pa.uint64()))
    b = rh.write_edges(tmp_path / "i64.parquet", pa.array([1], pa.int64()), pa.array([2], pa.int64()))
    with sgsi.build(str(tmp_path / "one.sgsi"), edges=[a]) as g:
        assert rh.rows_of(g.match("(a)-->(b)", device="cpu")) == [(2**64 - 1, 1)]
    try:
        g = sgsi.build(str(tmp_path / "two.sgsi"), edges=[a, b])
    except InputError as e:
        assert "src" in str(e) or "u64.parquet" in str(e), e
    else:
        with g:
            assert rh.rows_of(g.match("(a)-->(b)-->(c)", device="cpu")) == [(2**64 - 1, 1, 2)]


def test_empty_files_and_zero_edge_graphs(tmp_path):
    empty = rh.write_edges(tmp_path / "empty.parquet", pa.array([], pa.int64()), pa.array([], pa.int64()),
                           pa.array([], pa.string()))
    full = rh.write_edges(tmp_path / "full.parquet", [1, 2], [2, 3], ["K", "K"])
    with sgsi.build(str(tmp_path / "zero.sgsi"), edges=empty) as g:
        assert (g.store.n_vertices, g.store.n_edges) == (0, 0)
        assert g.count("(a)", device="cpu") == 0
        with pytest.raises(PatternError, match="^unknown edge label K; the store has no edge labels$"):
            g.count("(a)-[:K]->(b)", device="cpu")
        t = g.match("(a)-->(b)", device="cpu").read_all()
        assert t.num_rows == 0 and t.column_names == ["a", "b"]
    with sgsi.build(str(tmp_path / "mixed.sgsi"), edges=[empty, full, empty]) as g:
        assert g.count("(a)-[:K]->(b)", device="cpu") == 2
    vp = str(tmp_path / "v.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3], "label": ["P", "Q", "P"]}), vp)
    with sgsi.build(str(tmp_path / "iso.sgsi"), edges=empty, vertices=vp) as g:
        assert g.count("(a:P)", device="cpu") == 2
        assert rh.rows_of(g.match("(a)", device="cpu")) == [(1,), (2,), (3,)]
        assert g.count("(a)-->(b)", device="cpu") == 0
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    assert con.execute(f"SELECT count(*) FROM match({_q(tmp_path / 'zero.sgsi')}, '(a)-->(b)')").fetchall() == [(0,)]
    assert con.execute(f"SELECT match_count({_q(tmp_path / 'iso.sgsi')}, '(a:P)')").fetchall() == [(2,)]
    con.close()
    rc, out, err = rh.run_sgsi("count", tmp_path / "zero.sgsi", "(a)-->(b)", "--device", "cpu")
    assert rc == 0 and out.strip().splitlines()[-1] == "0", err


@pytest.mark.parametrize("content, words", [
    (b"", ["0 bytes", "empty.parquet"]),
    (b"src,dst\n1,2\n", ["empty.parquet", "Parquet"]),
    (b"PAR1" + np.random.default_rng(7).bytes(64) + b"PAR1", ["empty.parquet"]),
], ids=["empty", "csv", "par1-random"])     # seeded bytes and plain ids: each pytest-xdist worker collects the same
def test_files_that_are_not_parquet(tmp_path, content, words):
    p = tmp_path / "empty.parquet"
    p.write_bytes(content)
    with pytest.raises(InputError) as err:
        sgsi.build(str(tmp_path / "g.sgsi"), edges=str(p))
    for w in words:
        assert w in str(err.value), err.value
    assert "\n" not in str(err.value)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["empty.parquet"]


@pytest.mark.parametrize("column, array", [
    ("src", pa.array([1.5, 2.5])),
    ("src", pa.array([[1], [2]])),
    ("src", pa.array([{"x": 1}, {"x": 2}])),
    ("label", pa.array([1.0, 2.0])),
    ("src", pa.array([b"\x00\x01", b"\x02"])),
])
def test_columns_of_unusable_types(tmp_path, column, array):
    cols = {"src": pa.array([1, 2]), "dst": pa.array([2, 3]), "label": pa.array(["a", "b"])}
    cols[column] = array
    pq.write_table(pa.table(cols), tmp_path / "e.parquet")
    with pytest.raises(InputError) as err:
        sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "e.parquet"))
    assert column in str(err.value) and "e.parquet" in str(err.value), err.value


def test_nulls_and_missing_columns(tmp_path):
    pq.write_table(pa.table({"src": [1, None], "dst": [2, 3]}), tmp_path / "n.parquet")
    with pytest.raises(InputError, match=r"n\.parquet.*null.*'src'"):
        sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "n.parquet"))
    pq.write_table(pa.table({"from": [1], "dst": [2]}), tmp_path / "m.parquet")
    with pytest.raises(InputError, match=r"m\.parquet.*missing column 'src'"):
        sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "m.parquet"))
    with pytest.raises(InputError, match="no edge file matches"):
        sgsi.build(str(tmp_path / "g.sgsi"), edges=str(tmp_path / "nothing-*.parquet"))


def test_duplicates_and_self_loops(tmp_path):
    e = rh.write_edges(tmp_path / "e.parquet", [1, 1, 1, 2, 2], [2, 2, 1, 1, 2], ["K", "K", "K", "K", "L"])
    with sgsi.build(str(tmp_path / "g.sgsi"), edges=e) as g:
        assert g.count("(a)-[:K]->(b)", device="cpu") == 2           # 1->2, 2->1 (dupes once, loop never)
        assert g.count("(a)-[:K]->(b)", device="cpu", homomorphism=True) == 3
        assert g.count("(a)-[:L]->(b)", device="cpu") == 0


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    """One vertex with 200,000 out-edges (and a few more edges beside)."""
    d = tmp_path_factory.mktemp("star")
    n = 200_000
    src = np.concatenate([np.zeros(n, np.int64), [1, 2]])
    dst = np.concatenate([np.arange(1, n + 1, dtype=np.int64), [2, 0]])
    e = rh.write_edges(d / "star.parquet", src, dst)
    store = str(d / "star.sgsi")
    sgsi.build(store, edges=e, memory_budget="4MB").close()
    return {"store": store, "n": n}


def test_star_with_200k_edges(star):
    n = star["n"]
    with sgsi.open(star["store"]) as g:
        assert g.count("(a)-->(b)", device="cpu") == n + 2
        assert g.count("(a)-->(b)", device="cpu", memory_budget="4MB") == n + 2
        assert g.count("(b)<--(a)-->(c)", device="cpu") == n * (n - 1)      # only the hub has two out-edges
        assert g.count("(a)-->(b)-->(c)-->(a)", device="cpu") == 3          # 0->1->2->0
        rows = g.match("(h)-->(x)", device="cpu", max_rows=10).read_all()
        assert rows.num_rows == 10


def test_star_in_sql(star, scratch_root):
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    assert con.execute(f"SELECT count(*), count(DISTINCT a) FROM match({_q(star['store'])}, '(a)-->(b)') "
                       f"WHERE a = 0").fetchall() == [(star["n"], 1)]
    assert con.execute(f"SELECT count(*) FROM match({_q(star['store'])}, '(a)-->(b)', max_rows := 7)"
                       ).fetchall() == [(7,)]
    con.close()
