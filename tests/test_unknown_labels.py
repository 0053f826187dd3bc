"""A pattern label the store lacks: a PatternError naming the closest labels, in Python, the CLI and SQL.

A benchmark ``t/v/e`` query keeps the benchmarks' meaning instead: such a
label matches nothing (count 0).
"""

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from sgsi.cli import main
from sgsi.errors import PatternError
from sgsi.pattern import load_pattern, parse_pattern, unknown_label

REPO = Path(__file__).resolve().parent.parent

#: (pattern, the error's message): an unknown edge label, an unknown vertex label, a case-only mismatch.
CASES = [
    ("(a:Person)-[:KNWOS]->(b)", "unknown edge label KNWOS; did you mean KNOWS?"),
    ("(a:Persn)-[:KNOWS]->(b)", "unknown vertex label Persn; did you mean Person?"),
    ("(a:person)-->(b)", "unknown vertex label person; did you mean Person?"),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    pq.write_table(pa.table({"src": [1, 2, 3, 1], "dst": [2, 3, 1, 3],
                             "label": ["KNOWS", "KNOWS", "LIKES", "WORKS_AT"]}), d / "e.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3], "label": ["Person", "Person", "Company"]}), d / "v.parquet")
    social = str(d / "social.sgsi")
    sgsi.build(social, edges=str(d / "e.parquet"), vertices=str(d / "v.parquet"))
    # The benchmark text format: numeric vertex labels, no edge labels.
    (d / "data.graph").write_text("t 3 3\nv 0 1 2\nv 1 1 2\nv 2 2 2\ne 0 1\ne 1 2\ne 2 0\n")
    bench = str(d / "bench.sgsi")
    sgsi.build(bench, graph=str(d / "data.graph"))
    return {"dir": d, "social": social, "bench": bench}


# ---------------------------------------------------------------------------
# The message
# ---------------------------------------------------------------------------

def test_message_case_first_then_close_then_a_list():
    known = ["KNOWS", "LIKES", "WORKS_AT"]
    assert str(unknown_label("edge", "Knows", known)) == "unknown edge label Knows; did you mean KNOWS?"
    assert str(unknown_label("edge", "LIKE", known)) == "unknown edge label LIKE; did you mean LIKES?"
    assert str(unknown_label("edge", "knows", ["KNOWS", "knows_well", "KNOWN", "LIKES"])) == \
        "unknown edge label knows; did you mean KNOWS, knows_well or KNOWN?"
    many = [f"L{i}" for i in range(8)]
    assert str(unknown_label("vertex", "Zebra", many)) == \
        "unknown vertex label Zebra; the store's vertex labels are L0, L1, L2, L3, L4 and 3 more"
    assert str(unknown_label("edge", "X", [])) == "unknown edge label X; the store has no edge labels"
    # labels are shown as a pattern writes them, on one line
    assert str(unknown_label("vertex", "has spce", ["has space"])) == \
        "unknown vertex label `has spce`; did you mean `has space`?"
    assert "\n" not in str(unknown_label("edge", "a\nb", ["a b"]))


# ---------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, message", CASES)
def test_python_count_and_match_raise(stores, pattern, message):
    with sgsi.open(stores["social"]) as g:
        with pytest.raises(PatternError) as info:
            g.count(pattern, device="cpu")
        assert str(info.value) == message
        with pytest.raises(PatternError) as info:
            g.match(pattern, device="cpu")            # before any batch
        assert str(info.value) == message
        assert g.count("(a:Person)-[:KNOWS]->(b)", device="cpu") == 2


def test_python_match_of_a_pattern_naming_no_vertex_raises(stores, monkeypatch):
    """As the command line and SQL, before any work: rows need a named vertex; count() counts
    anonymous ones."""
    from sgsi.join import query
    with sgsi.open(stores["social"]) as g:
        with monkeypatch.context() as m:
            m.setattr(query, "make_plan", lambda *a, **k: pytest.fail("planned"))
            with pytest.raises(PatternError, match="names no vertex"):
                g.match("()-[:KNOWS]->()", device="cpu")
        assert g.count("()-[:KNOWS]->()", device="cpu") == g.match("(a)-[:KNOWS]->()", device="cpu").read_all().num_rows


def test_numeric_labels_and_no_edge_labels(stores):
    with sgsi.open(stores["bench"]) as g:
        assert g.count("(a:1)--(b:2)", device="cpu") == 2
        with pytest.raises(PatternError, match=r"^unknown vertex label 7; the store's vertex labels are 1, 2$"):
            g.count("(a:7)--(b)", device="cpu")
        with pytest.raises(PatternError, match=r"^unknown edge label E; the store has no edge labels$"):
            g.count("(a)-[:E]-(b)", device="cpu")


def test_benchmark_query_with_an_absent_label_counts_zero(stores):
    q = stores["dir"] / "q.graph"
    q.write_text("t 2 1\nv 0 1 1\nv 1 7 1\ne 0 1\n")
    assert not load_pattern(q).strict_labels and parse_pattern("(a)").strict_labels
    with sgsi.open(stores["bench"]) as g:
        assert g.count(q, device="cpu") == 0
        assert g.match(q, device="cpu").read_all().num_rows == 0
    assert main(["count", stores["bench"], str(q), "--device", "cpu"]) == 0


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, message", CASES)
def test_cli_count_and_match_report_one_line(stores, tmp_path, pattern, message, capsys):
    assert main(["count", stores["social"], pattern, "--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"sgsi: error: {message}" and captured.out == ""
    out = tmp_path / "m.parquet"
    assert main(["match", stores["social"], pattern, "--output", str(out), "--device", "cpu"]) == 1
    assert capsys.readouterr().err.strip() == f"sgsi: error: {message}"
    assert not out.exists()


def test_cli_process_has_no_traceback(stores, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "sgsi", "count", stores["social"], CASES[0][0]],
                       capture_output=True, text=True, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == f"sgsi: error: {CASES[0][1]}"


# ---------------------------------------------------------------------------
# SQL
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, message", CASES)
def test_sql_match_and_match_count_raise(stores, pattern, message):
    con = duckdb.connect()
    try:
        sgsi.register(con, device="cpu")
        for sql in ("SELECT * FROM match(?, ?)", "SELECT match_count(?, ?)"):
            with pytest.raises(duckdb.Error) as info:
                con.execute(sql, [stores["social"], pattern]).fetchall()
            text = str(info.value)
            assert f"PatternError: {message}" in text and "Traceback" not in text
        assert con.execute("SELECT match_count(?, '(a:Person)-[:KNOWS]->(b)')",
                           [stores["social"]]).fetchall() == [(2,)]
    finally:
        con.close()
