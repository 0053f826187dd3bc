"""match(), match_count() and sgsi_build() in real DuckDB SQL.

Results are compared with the brute-force oracle on random graphs with
string vertex ids; the rest checks what a SQL user sees: column names and
types, LIMIT, joins, errors that leave the connection usable, one engine
run per statement, and scratch files that go away.
"""

import os
import random
import tempfile

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import oracle_matches, random_graph, random_pattern
from sgsi.pattern import parse_pattern


def q(s):
    """A SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


def write_graph(directory, edges, vertex_labels, id_type=None):
    e = pa.table({"src": pa.array([s for s, _, _ in edges], id_type),
                  "dst": pa.array([d for _, d, _ in edges], id_type),
                  "label": [str(l) for _, _, l in edges]})
    ids = sorted(vertex_labels)
    v = pa.table({"id": pa.array(ids, id_type), "label": [vertex_labels[i] for i in ids]})
    ep, vp = os.path.join(directory, "e.parquet"), os.path.join(directory, "v.parquet")
    pq.write_table(e, ep)
    pq.write_table(v, vp)
    return ep, vp


@pytest.fixture(scope="module")
def social(tmp_path_factory):
    """A random graph with string ids, its store, and the oracle's inputs."""
    d = tmp_path_factory.mktemp("social")
    rng = random.Random(7)
    edges, vlabels = random_graph(rng, 40, 120, 3, 2, string_ids=True)
    ep, vp = write_graph(d, edges, vlabels)
    store = str(d / "g.sgsi")
    sgsi.build(store, edges=ep, vertices=vp)
    return {"store": store, "edges": edges, "vlabels": vlabels, "vfile": vp, "dir": d}


@pytest.fixture
def con():
    c = duckdb.connect()
    yield c
    c.close()


@pytest.fixture
def reg(con):
    return sgsi.register(con, device="cpu")


def expected_rows(social, pattern, injective=True):
    p = parse_pattern(pattern)
    cols = p.output_vertices
    return sorted(tuple(m[i] for i in cols)
                  for m in oracle_matches(social["edges"], social["vlabels"], p, injective=injective))


# ---------------------------------------------------------------------------
# Results equal the oracle
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_match_rows_equal_oracle_on_random_graphs(tmp_path, seed):
    rng = random.Random(seed)
    edges, vlabels = random_graph(rng, 25, 70, 2, 2, string_ids=True)
    ep, vp = write_graph(tmp_path, edges, vlabels)
    store = str(tmp_path / "g.sgsi")
    sgsi.build(store, edges=ep, vertices=vp, memory_budget="64KB")
    c = duckdb.connect()
    sgsi.register(c, device="cpu")
    graph = {"edges": edges, "vlabels": vlabels}
    checked = 0
    for _ in range(12):
        pattern = random_pattern(rng, rng.randint(2, 4), vertex_labels=range(2), edge_labels=["E0", "E1"])
        p = parse_pattern(pattern)
        n_expected = len(oracle_matches(edges, vlabels, p))
        (count,) = c.execute(f"SELECT match_count({q(store)}, {q(pattern)})").fetchall()[0]
        assert count == n_expected, pattern
        if not p.output_names:
            continue
        rows = sorted(c.execute(f"SELECT * FROM match({q(store)}, {q(pattern)})").fetchall())
        assert rows == expected_rows(graph, pattern), pattern
        checked += 1
    assert checked >= 6
    c.close()


def test_homomorphism_option(con, reg, social):
    pattern = "(a)-[:E0]->(b)-[:E0]->(c)"
    inj = con.execute(f"SELECT count(*) FROM match({q(social['store'])}, {q(pattern)})").fetchall()[0][0]
    hom = con.execute(f"SELECT count(*) FROM match({q(social['store'])}, {q(pattern)}, homomorphism := true)"
                      ).fetchall()[0][0]
    assert inj == len(expected_rows(social, pattern))
    assert hom == len(expected_rows(social, pattern, injective=False))
    assert con.execute(f"SELECT match_count({q(social['store'])}, {q(pattern)}, homomorphism := true)"
                       ).fetchall()[0][0] == hom
    # a connection-wide default
    c2 = duckdb.connect()
    sgsi.register(c2, device="cpu", homomorphism=True)
    assert c2.execute(f"SELECT match_count({q(social['store'])}, {q(pattern)})").fetchall()[0][0] == hom
    c2.close()


# ---------------------------------------------------------------------------
# What a SQL user sees
# ---------------------------------------------------------------------------

def test_columns_are_named_vertices_in_order_with_original_types(con, reg, social, tmp_path):
    rel = con.sql(f"SELECT * FROM match({q(social['store'])}, '(b)-[:E1]->(), (b)<--(a:1)')")
    assert rel.columns == ["b", "a"]
    assert [str(t) for t in rel.types] == ["VARCHAR", "VARCHAR"]
    # integer ids come back as integers of their input width
    for id_type, sql_type in [(pa.int64(), "BIGINT"), (pa.int32(), "INTEGER")]:
        d = tmp_path / sql_type
        d.mkdir()
        ep, _ = write_graph(d, [(1, 2, "K"), (2, 3, "K"), (3, 1, "K")], {1: "A", 2: "A", 3: "B"}, id_type)
        sgsi.build(d / "g.sgsi", edges=ep)
        rel = con.sql(f"SELECT * FROM match({q(d / 'g.sgsi')}, '(x)-[:K]->(y)')")
        assert [str(t) for t in rel.types] == [sql_type, sql_type]
        assert sorted(rel.fetchall()) == [(1, 2), (2, 3), (3, 1)]


def test_limit_count_and_max_rows(con, reg, social):
    pattern = "(a)-->(b)-->(c)"
    expected = expected_rows(social, pattern)
    assert len(expected) > 10
    g = q(social["store"])
    rows = con.execute(f"SELECT * FROM match({g}, {q(pattern)}) LIMIT 5").fetchall()
    assert len(rows) == 5 and set(rows) <= set(expected)
    assert con.execute(f"SELECT count(*) FROM match({g}, {q(pattern)})").fetchall()[0][0] == len(expected)
    assert con.execute(f"SELECT match_count({g}, {q(pattern)})").fetchall()[0][0] == len(expected)
    rows = con.execute(f"SELECT * FROM match({g}, {q(pattern)}, max_rows := 7)").fetchall()
    assert len(rows) == 7 and set(rows) <= set(expected)
    assert con.execute(f"SELECT count(*) FROM match({g}, {q(pattern)}, max_rows := 0)").fetchall()[0][0] == 0
    # an empty result still has its columns (a benchmark query whose label 99 the data lacks)
    query = social["dir"] / "absent_label.graph"
    query.write_text("t 2 1\nv 0 0 1\nv 1 99 1\ne 0 1\n")
    rel = con.sql(f"SELECT * FROM match({g}, {q(query)})")
    assert rel.columns == ["u0", "u1"] and rel.fetchall() == []


def test_join_back_to_vertex_table(con, reg, social):
    con.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet({q(social['vfile'])})")
    pattern = "(a)-[:E0]->(b)"
    rows = con.execute(f"""
        SELECT m.a, pa.label AS a_label, m.b, pb.label AS b_label
        FROM match({q(social['store'])}, {q(pattern)}) m
        JOIN people pa ON pa.id = m.a
        JOIN people pb ON pb.id = m.b
        WHERE pa.label <= pb.label
        ORDER BY m.a, m.b""").fetchall()
    vl = social["vlabels"]
    expected = sorted((a, vl[a], b, vl[b]) for a, b in expected_rows(social, pattern) if vl[a] <= vl[b])
    assert rows == expected and rows


def test_sql_parameters_and_options_by_position(con, reg, social):
    # macro arguments may be expressions; options may be given by name in any order
    n = con.execute(f"SELECT count(*) FROM match({q(social['store'])}, '(a)-' || '->(b)', "
                    f"memory_budget := 65536, device := 'cpu')").fetchall()[0][0]
    assert n == len(expected_rows(social, "(a)-->(b)"))


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sql, message", [
    ("SELECT * FROM match('/no/such/graph.sgsi', '(a)-->(b)')", "no graph store at /no/such/graph.sgsi"),
    ("SELECT * FROM match(STORE, '(a)-[:E0->(b)')", "expected ']' to close the edge"),
    ("SELECT * FROM match(STORE, '(a)-->(a)')", "self-loop"),
    ("SELECT * FROM match(STORE, '(a)-->(b)', device := 'tpu')", "unknown device 'tpu'"),
    ("SELECT * FROM match(STORE, '(a)-->(b)', memory_budget := 'lots')", "not a size: 'lots'"),
    ("SELECT * FROM match(STORE, '()-->()')", "names no vertex"),
    ("SELECT match_count('/no/such/graph.sgsi', '(a)')", "no graph store at"),
    ("SELECT match_count(STORE, '(a')", "pattern"),
    ("SELECT * FROM match(STORE, '(a)-->(b)', devise := 'cpu')", "match() has no option 'devise'"),
])
def test_errors_are_clear_and_leave_the_connection_usable(con, reg, social, sql, message):
    sql = sql.replace("STORE", q(social["store"]))
    with pytest.raises(duckdb.Error) as info:
        con.execute(sql).fetchall()
    text = str(info.value)
    assert message in text
    assert "Traceback" not in text and 'File "' not in text
    assert con.execute("SELECT 42").fetchall()[0] == (42,)
    assert con.execute(f"SELECT match_count({q(social['store'])}, '(a)-->(b)')").fetchall()[0][0] == \
        len(expected_rows(social, "(a)-->(b)"))


@pytest.mark.parametrize("sql, message", [
    ("SELECT match_count(STORE, '(a)-->(b)', homomorphsm := true)",
     "Binder Error: match_count() has no option 'homomorphsm' (did you mean homomorphism?); its options are "
     "device, memory_budget, homomorphism, workers, scheduler (name := value, after graph, pattern)"),
    ("SELECT * FROM match(STORE, '(a)-->(b)', injective := false)", "no option 'injective' (did you mean homomorphism?)"),
    ('SELECT * FROM match(STORE, \'(a)-->(b)\', "limit" := 3)', "no option 'limit' (did you mean max_rows?)"),
    ("SELECT * FROM match(STORE, '(a)-->(b)', limit := 3)", "LIMIT is a reserved word in SQL, so match() calls its "
     "row limit max_rows: write max_rows := N"),
    ("SELECT sgsi_build('x.sgsi', edge => 'e.parquet')", "sgsi_build() has no option 'edge' (did you mean edges?)"),
    ("SELECT x FROM range(2) t(x) WHERE x < (SELECT match_count(STORE, '(a)', 'cpu', NULL, false, NULL, NULL, 1))",
     "match_count() takes at most 7 arguments (graph, pattern, device, memory_budget, homomorphism, workers, "
     "scheduler), got 8"),
    ("SELECT match_count(STORE)", "match_count() needs graph and pattern first, got 1 argument"),
])
@pytest.mark.parametrize("method", ["execute", "sql"])
def test_unknown_options_are_named(con, reg, social, sql, message, method):
    """DuckDB's own error for an unknown option of a macro does not name it; sgsi's does, with the
    same exception type, on con.execute() and con.sql() alike (and on a cursor)."""
    sql = sql.replace("STORE", q(social["store"]))
    for c in (con, con.cursor()):
        sgsi.register(c, device="cpu")
        with pytest.raises((duckdb.BinderException, duckdb.ParserException)) as info:
            getattr(c, method)(sql)
        assert message in str(info.value)
    # other errors are DuckDB's own
    with pytest.raises(duckdb.CatalogException, match="nosuch"):
        getattr(con, method)("SELECT nosuch(1)")
    with pytest.raises(duckdb.ParserException, match='syntax error at or near "SELEC"'):
        getattr(con, method)("SELEC 1")


def test_unknown_option_found_past_strings_comments_and_other_calls():
    from sgsi.db.arguments import explain
    error = ("Binder Error: Macro match_count() does not support the supplied arguments. You might need to add "
             "explicit type casts.\nCandidate macros:\n\tmatch_count(graph, pattern, device := 'a,b', "
             "memory_budget := NULL, homomorphism := false)\n\nLINE 1: ...")
    statement = ("SELECT 'match_count(''g'', ''p'', zz := 1)' AS s, /* match_count(x, y, yy := 1) */ "
                 "match_count('g', lower('(A)'), homomorphism := true), -- match_count('g', 'p', ww := 1)\n"
                 'MATCH_COUNT(\'g\', \'p\', "Memory_Budget" := 1, DEVISE => \'cpu\')')
    assert "has no option 'devise' (did you mean device?)" in explain(error, statement)
    assert "its options are device, memory_budget, homomorphism " in explain(error, statement)
    assert explain(error, "SELECT match_count('g', 'p', homomorphism := 1)") is None    # nothing to say
    assert explain("Binder Error: Macro f() does not support the supplied arguments.", "SELECT f(1, x := 2)") is None


def test_register_rejects_unknown_defaults():
    c = duckdb.connect()
    with pytest.raises(sgsi.SgsiError, match="unknown option 'devise'"):
        sgsi.register(c, devise="cpu")
    with pytest.raises(sgsi.SgsiError, match="unknown device"):
        sgsi.register(c, device="tpu")
    c.close()


# ---------------------------------------------------------------------------
# One engine run per statement; scratch files go away
# ---------------------------------------------------------------------------

def test_one_engine_run_per_statement(con, reg, social):
    g = q(social["store"])
    runs = lambda: reg.stats["match_runs"]   # noqa: E731
    statements = [
        (lambda s: con.sql(s).fetchall(), f"SELECT * FROM match({g}, '(a)-->(b)')"),
        (lambda s: con.execute(s).fetchall(), f"SELECT * FROM match({g}, '(a)-->(b)-->(c)')"),
        (lambda s: con.sql(s).fetchall(),
         f"SELECT count(*) FROM match({g}, '(x)-[:E0]->(y)') m1 JOIN match({g}, '(x)-[:E0]->(y)') m2 "
         f"ON m1.y = m2.x"),
        (lambda s: con.sql(s).fetchall(),
         f"WITH m AS (SELECT * FROM match({g}, '(x)<-[:E1]-(y)')) SELECT * FROM m UNION ALL SELECT * FROM m"),
        (lambda s: con.sql(s).fetchall()[0], f"SELECT * FROM match({g}, '(a)-[:E1]->(b)') ORDER BY a LIMIT 3"),
    ]
    for run, sql in statements:
        before = runs()
        run(sql)
        assert runs() == before + 1, sql
    before = reg.stats["count_runs"]
    con.sql(f"SELECT match_count({g}, '(a)--(b)') FROM range(5)").fetchall()
    assert reg.stats["count_runs"] == before + 1
    # two different patterns in one statement: two runs
    before = runs()
    con.sql(f"SELECT (SELECT count(*) FROM match({g}, '(p)-->(q)')), "
            f"(SELECT count(*) FROM match({g}, '(p)<--(q)'))").fetchall()
    assert runs() == before + 2


def scratch_files(reg):
    d = reg.scratch_dir
    if d is None or not os.path.isdir(d):
        return []
    return [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]


def test_scratch_files_are_removed(social, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = duckdb.connect()
    reg = sgsi.register(c, device="cpu")
    g = q(social["store"])
    c.sql(f"SELECT * FROM match({g}, '(a)-->(b)')").fetchall()
    first = scratch_files(reg)
    assert first and all(f.startswith(tempfile.gettempdir()) for f in first)
    # the result is dropped once the connection has moved on by two statements
    c.execute(f"SELECT match_count({g}, '(a)-->(b)')").fetchall()
    c.execute(f"SELECT match_count({g}, '(a)<--(b)')").fetchall()
    assert not any(os.path.exists(f) for f in first)
    assert scratch_files(reg) == []
    # release() drops everything now
    c.execute(f"SELECT * FROM match({g}, '(a)-->(b)-->(c)')").fetchall()
    assert scratch_files(reg)
    reg.release()
    assert scratch_files(reg) == []
    # closing the connection removes the whole scratch directory
    c.execute(f"SELECT * FROM match({g}, '(a)-->(b)-->(c)')").fetchall()
    root = os.path.dirname(reg.scratch_dir)
    assert os.path.isdir(root)
    c.close()
    assert not os.path.exists(root)
    assert os.listdir(tmp_path) == []       # nothing in the working directory


def test_failed_query_leaves_no_scratch(con, reg, social):
    with pytest.raises(duckdb.Error):
        con.execute(f"SELECT * FROM match({q(social['store'])}, '(a)-->(a)')").fetchall()
    assert scratch_files(reg) == []


def test_register_twice_and_on_a_cursor(social):
    c = duckdb.connect()
    r1 = sgsi.register(c)
    r2 = sgsi.register(c, device="cpu")           # again: replaces the defaults
    assert r1.token == r2.token
    cur = c.cursor()
    r3 = sgsi.register(cur, device="cpu")         # a cursor shares the database's functions
    assert r3.token != r1.token
    pattern = "(a)-[:E0]->(b)"
    n = len(expected_rows(social, pattern))
    assert cur.execute(f"SELECT count(*) FROM match({q(social['store'])}, {q(pattern)})").fetchall()[0][0] == n
    assert c.execute(f"SELECT count(*) FROM match({q(social['store'])}, {q(pattern)})").fetchall()[0][0] == n
    cur.close()
    c.close()


# ---------------------------------------------------------------------------
# Building from SQL
# ---------------------------------------------------------------------------

def test_sgsi_build_from_parquet_and_from_a_table(con, reg, social, tmp_path):
    out = tmp_path / "b.sgsi"
    edges_file = os.path.join(social["dir"], "e.parquet")
    (summary,) = con.execute(f"SELECT sgsi_build({q(out)}, edges := {q(edges_file)}, "
                             f"vertices := {q(social['vfile'])})").fetchall()[0]
    assert "vertices" in summary and os.path.isdir(out)
    pattern = "(a:1)-[:E1]->(b)"
    n = len(expected_rows(social, pattern))
    assert con.execute(f"SELECT match_count({q(out)}, {q(pattern)})").fetchall()[0][0] == n
    # an existing store is refused, then replaced with force := true
    with pytest.raises(duckdb.Error, match="output path exists"):
        con.execute(f"SELECT sgsi_build({q(out)}, edges := [{q(edges_file)}])").fetchall()
    # from tables of the database, through queries
    con.execute(f"CREATE TABLE e AS SELECT src AS a, dst AS b, label AS kind FROM read_parquet({q(edges_file)})")
    con.execute(f"CREATE TABLE v AS SELECT * FROM read_parquet({q(social['vfile'])})")
    con.execute(f"SELECT sgsi_build({q(out)}, edges_query := 'SELECT a AS src, b AS dst, kind AS label FROM e', "
                f"vertices_query := 'v', force := true)").fetchall()
    assert con.execute(f"SELECT match_count({q(out)}, {q(pattern)})").fetchall()[0][0] == n
    assert con.execute(f"SELECT count(*) FROM match({q(out)}, {q(pattern)})").fetchall()[0][0] == n


def test_sgsi_build_errors(con, reg, social, tmp_path):
    con.execute("CREATE TEMP TABLE te AS SELECT 'x' AS src, 'y' AS dst")
    with pytest.raises(duckdb.Error, match="TEMP tables"):
        con.execute(f"SELECT sgsi_build({q(tmp_path / 't.sgsi')}, edges_query := 'te')").fetchall()
    with pytest.raises(duckdb.Error, match="missing column 'src'"):
        con.execute(f"SELECT sgsi_build({q(tmp_path / 't.sgsi')}, edges := {q(social['vfile'])})").fetchall()
    assert not os.path.exists(tmp_path / "t.sgsi")
    assert [p for p in os.listdir(tmp_path) if "sgsi" in p] == []
    assert con.execute("SELECT 1").fetchall()[0] == (1,)


def test_build_from_sql_helper_sees_temp_tables(con, reg, social, tmp_path):
    from sgsi.db import build_from_sql
    con.execute(f"CREATE TEMP TABLE te AS SELECT * FROM read_parquet({q(os.path.join(social['dir'], 'e.parquet'))})")
    g = build_from_sql(con, tmp_path / "h.sgsi", "SELECT * FROM te", f"FROM read_parquet({q(social['vfile'])})")
    pattern = "(a:0)-->(b:2)"
    assert g.count(pattern, device="cpu") == len(expected_rows(social, pattern))


def test_stores_stay_open_between_queries(con, reg, social, tmp_path, monkeypatch):
    """Queries of one store reuse its open Graph (and so its backends' caches); a store rebuilt in
    place is opened anew and answers from its new edges; release() closes the idle ones; at most
    OPEN_STORES stay open."""
    from sgsi.db.stores import OPEN_STORES
    g = q(social["store"])
    opens = lambda: reg.stats["store_opens"]   # noqa: E731
    before = opens()
    counts = [con.execute(f"SELECT match_count({g}, {q(p)})").fetchall()[0][0]
              for p in ("(a)-->(b)", "(a)-->(b)-->(c)", "(a)<--(b)")]
    con.sql(f"SELECT count(*) FROM match({g}, '(a)-[:E1]->(b)')").fetchall()
    other = sgsi.register(duckdb.connect(), device="cpu")      # another database opens its own
    assert opens() == before + 1 and counts[0] == len(expected_rows(social, "(a)-->(b)"))
    assert reg.last_stats["segments"] >= 1
    (graph,) = [e.graph for p, e in reg._state.stores.open.items() if p == os.path.abspath(social["store"])]
    # rebuilt in place with fewer edges: the next query sees them
    edges_file = os.path.join(social["dir"], "e.parquet")
    out = tmp_path / "r.sgsi"
    con.execute(f"SELECT sgsi_build({q(out)}, edges := {q(edges_file)}, vertices := {q(social['vfile'])})").fetchall()
    n_all = con.execute(f"SELECT match_count({q(out)}, '(a)-->(b)')").fetchall()[0][0]
    first = reg._state.stores.open[str(out)].graph
    con.execute(f"CREATE TABLE half AS SELECT * FROM read_parquet({q(edges_file)}) WHERE label = 'E0'")
    con.execute(f"SELECT sgsi_build({q(out)}, edges_query := 'half', vertices := {q(social['vfile'])}, "
                f"force := true)").fetchall()
    n_half = con.execute(f"SELECT match_count({q(out)}, '(a)-->(b)')").fetchall()[0][0]
    assert n_all == counts[0] and 0 < n_half == len({(s, d) for s, d, lab in social["edges"] if str(lab) == "E0"})
    assert n_half < n_all and first.store._readers == {}           # the replaced store was closed
    # at most OPEN_STORES stay open; the least recently used one closes
    rebuilt = reg._state.stores.open[str(out)].graph
    assert reg._state.stores.limit == OPEN_STORES >= 2
    monkeypatch.setattr(reg._state.stores, "limit", 1)
    con.execute(f"SELECT match_count({g}, '(a)-->(b)<--(c)')").fetchall()       # not a cached result
    assert list(reg._state.stores.open) == [os.path.abspath(social["store"])]
    assert reg._state.stores.open[os.path.abspath(social["store"])].graph is graph
    assert rebuilt.store._readers == {} and graph.store._readers      # the least recently used closed
    reg.release()
    assert not reg._state.stores.open
    assert con.execute(f"SELECT match_count({g}, '(a)-->(b)')").fetchall()[0][0] == counts[0]
    assert other.stats["store_opens"] == 0
