"""Hostile patterns: fuzzed, mutated, enormous, unicode, and SQL-looking.

The parser must never raise anything but PatternError (an SgsiError) for
any text; patterns and graph paths full of quotes must pass through SQL
untouched; a pattern too large to match is refused with a clear error.
"""

import os
import random
import sys
import time

import duckdb
import pyarrow as pa
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.errors import PatternError, SgsiError
from sgsi.pattern import Pattern, load_pattern, parse_pattern, parse_query_text

SEED = int(os.environ.get("SGSI_TEST_SEED", "20240607"))
#: Seconds each fuzz loop runs (fixed seed: the same inputs every run, as many as fit).
FUZZ_SECONDS = float(os.environ.get("SGSI_FUZZ_SECONDS", "3"))

VALID = [
    "(a:Person)-[:KNOWS]->(b)<-[:WORKS_AT]-(c:Company), (a)-[:LIKES]-(c)",
    "(x)-->(y)--(z)",
    "()-[:`odd label`]->(:`a``b`)",
    "(a:3)-[:7]-(b:03), (b)<--(c)",
    "(`naïve`:`日本`)-[:`ラベル`]->(`🙂`)",
    "(a)-[:`'; DROP TABLE x; --`]->(b:`\"quoted\"`)",
]
ALPHABET = list("()[]:,-<>` \t\n_aZ09") + ["'", '"', ";", "\\", "\x00", "é", "日", "🙂", "\u202e", "\ud800", "--", "->",
                                            "<-", "-[", "]-", "(a)", "(b:L)", "-[:E]->", "``"]


def _random_text(rng):
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 40)))


def _mutate(rng, text):
    chars = list(text)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(chars) + 1)
        if op == 0 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op == 1:
            chars.insert(i, rng.choice(ALPHABET))
        elif op == 2 and chars:
            chars[min(i, len(chars) - 1)] = rng.choice(ALPHABET)
        elif op == 3:
            j = rng.randrange(len(chars) + 1)
            chars[i:i] = chars[min(i, j):max(i, j)]          # duplicate a slice
        else:
            chars = chars[:i] + chars[i:][::-1]
    return "".join(chars)


def _check(fn, text, length=None):
    """fn(text) gives a Pattern or a PatternError with one short line and a position inside the text."""
    length = len(text) if length is None else length
    try:
        result = fn(text)
    except PatternError as e:
        msg = str(e)
        assert msg and msg.isprintable() and len(msg) < 400, repr(msg)      # one short line
        if e.position is not None:
            assert 0 <= e.position <= length, (text, e.position)
        return "error"
    except SgsiError:
        return "error"
    assert isinstance(result, Pattern), result
    assert result.vertices
    return "ok"


def _fuzz(make, fn):
    rng = random.Random(SEED)
    seen = {"ok": 0, "error": 0}
    deadline = time.monotonic() + FUZZ_SECONDS
    n = 0
    while time.monotonic() < deadline or n < 200:
        text = make(rng)
        try:
            seen[_check(fn, text)] += 1
        except BaseException as e:
            raise AssertionError(f"{type(e).__name__} for pattern {text!r}: {e}") from e
        n += 1
    return seen


def test_fuzz_random_text():
    seen = _fuzz(_random_text, parse_pattern)
    assert seen["error"] > 0


def test_fuzz_mutated_valid_patterns():
    seen = _fuzz(lambda rng: _mutate(rng, rng.choice(VALID)), parse_pattern)
    assert seen["ok"] > 0 and seen["error"] > 0


def test_fuzz_load_pattern_text_and_files(tmp_path):
    """load_pattern on strings that are, or look like, paths; and on files of random bytes."""
    specials = ["", ".", "..", "/", str(tmp_path), "\x00", "a" * 5000, "t 3 2", "t\n", "(a)" * 3]
    for s in specials:
        assert _check(load_pattern, s) in ("ok", "error")
    rng = random.Random(SEED)
    for k in range(60):
        f = tmp_path / f"q{k}.graph"
        kind = k % 3
        if kind == 0:
            f.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200))))
        elif kind == 1:
            f.write_bytes(_mutate(rng, "t 3 2\nv 0 1 1\nv 1 2 2\nv 2 1 1\ne 0 1\ne 1 2\n").encode("utf-8", "surrogatepass"))
        else:
            f.write_bytes(_mutate(rng, rng.choice(VALID)).encode("utf-8", "surrogatepass"))
        size = len(f.read_bytes())       # positions count characters, at most one per byte
        assert _check(load_pattern, str(f), size) in ("ok", "error")
        assert _check(load_pattern, f, size) in ("ok", "error")


def test_fuzz_query_text_format():
    base = "t 4 4\nv 0 1 2\nv 1 2 2\nv 2 1 2\nv 3 0 2\ne 0 1\ne 1 2\ne 2 3\ne 3 0\n"
    seen = _fuzz(lambda rng: _mutate(rng, base), parse_query_text)
    assert seen["error"] > 0


def test_huge_patterns_parse_without_recursion():
    """10,000-vertex paths (one path, or 10,000 comma-separated edges) parse under a tight stack."""
    n = 10_000
    path = "".join(f"(v{i})-[:E]->" for i in range(n)) + f"(v{n})"
    pieces = ", ".join(f"(v{i})--(v{i + 1})" for i in range(n))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200 + len(__import__("inspect").stack()))
    try:
        for text in (path, pieces):
            p = parse_pattern(text)
            assert len(p.vertices) == n + 1 and len(p.edges) == n
        with pytest.raises(PatternError):
            parse_pattern("(" * n)
        with pytest.raises(PatternError):
            parse_pattern("(a)" + "-->" * n)
        with pytest.raises(PatternError, match="disconnected"):
            parse_pattern(", ".join(f"(v{i})" for i in range(n)))
    finally:
        sys.setrecursionlimit(old)
    long_label = "x" * 1_000_000
    assert parse_pattern(f"(a:`{long_label}`)-->(b)").vertices[0].label == long_label


def test_huge_pattern_is_refused_by_a_query(tmp_path):
    from sgsi.join.query import MAX_PATTERN_VERTICES
    m = MAX_PATTERN_VERTICES
    ring = m + 44                      # a directed cycle: a path of k vertices matches `ring` times
    e = rh.write_edges(tmp_path / "ring.parquet", list(range(ring)), [(i + 1) % ring for i in range(ring)])
    n = 10_000
    path = "".join(f"(v{i})-->" for i in range(n)) + f"(v{n})"
    with sgsi.build(str(tmp_path / "ring.sgsi"), edges=e) as g:
        with pytest.raises(PatternError, match=f"at most {m}"):
            g.count(path, device="cpu")
        with pytest.raises(PatternError):
            g.match(path, device="cpu")
        # the largest pattern allowed runs to the end (no RecursionError)
        ok = "".join(f"(v{i})-->" for i in range(m - 1)) + f"(v{m - 1})"
        assert g.count(ok, device="cpu") == ring
        assert g.match(ok, device="cpu", max_rows=3).read_all().num_rows == 3


# ---------------------------------------------------------------------------
# Unicode and SQL-looking labels, names and paths
# ---------------------------------------------------------------------------

EVIL = ["'; DROP TABLE x; --", "Robert'); DROP TABLE students;--", '"quoted"', "back`tick", "naïve", "日本語",
        "🙂", "a\\b", "%s", "{token}", "$token", "NULL", "\u202ertl"]


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    """A store with SQL-looking, quoted and unicode labels and ids, in a directory whose name has quotes."""
    d = tmp_path_factory.mktemp("evil") / "it's \"odd\" $dir"
    d.mkdir()
    edges = [(EVIL[i], EVIL[(i + 1) % len(EVIL)], EVIL[i]) for i in range(len(EVIL))]
    e = rh.write_edges(d / "e's.parquet", [s for s, _, _ in edges], [t for _, t, _ in edges],
                       [lab for _, _, lab in edges])
    v = str(d / "v.parquet")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"id": EVIL, "label": list(reversed(EVIL))}), v)
    store = str(d / "g'; DROP TABLE x; --.sgsi")
    sgsi.build(store, edges=e, vertices=v).close()
    return {"dir": d, "store": store, "edges": edges, "vlabels": dict(zip(EVIL, reversed(EVIL))), "efile": e,
            "vfile": v}


def _bq(label):
    return "`" + label.replace("`", "``") + "`"


def test_evil_labels_in_python(evil):
    with sgsi.open(evil["store"]) as g:
        for i, lab in enumerate(EVIL):
            p = f"(a)-[:{_bq(lab)}]->(b)"
            assert rh.rows_of(g.match(p, device="cpu")) == [(EVIL[i], EVIL[(i + 1) % len(EVIL)])], lab
            vl = evil["vlabels"][EVIL[i]]
            assert g.count(f"(a:{_bq(vl)})-->(b)", device="cpu") == 1, vl


def _q(s):
    return "'" + str(s).replace("'", "''") + "'"


def test_evil_labels_and_paths_through_sql(evil, scratch_root):
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    con.execute("CREATE TABLE x AS SELECT 1 AS keep")
    con.execute("CREATE TABLE students AS SELECT 1 AS keep")
    for i, lab in enumerate(EVIL):
        p = f"(a)-[:{_bq(lab)}]->(b)"
        want = [(EVIL[i], EVIL[(i + 1) % len(EVIL)])]
        assert con.execute(f"SELECT * FROM match({_q(evil['store'])}, {_q(p)})").fetchall() == want
        assert con.execute("SELECT * FROM match(?, ?)", [evil["store"], p]).fetchall() == want
        assert con.execute("SELECT match_count(?, ?)", [evil["store"], p]).fetchall() == [(1,)]
    # names that are SQL keywords or need quoting become column names as written
    rel = con.execute(f"SELECT * FROM match({_q(evil['store'])}, "
                      f"{_q('(`select`)-->(`from x; --`)-->(`a b`)')}) ORDER BY 1")
    assert [c[0] for c in rel.description] == ["select", "from x; --", "a b"]
    assert con.execute("SELECT count(*) FROM x").fetchall() == [(1,)]
    assert con.execute("SELECT count(*) FROM students").fetchall() == [(1,)]
    # a build through SQL with quotes in every path
    out = str(evil["dir"] / "o'ut.sgsi")
    con.execute("SELECT sgsi_build(?, edges := ?, vertices := ?)", [out, evil["efile"], evil["vfile"]]).fetchall()
    assert con.execute("SELECT match_count(?, '(a)-->(b)')", [out]).fetchall() == [(len(EVIL),)]
    con.close()


def test_evil_text_in_sql_options_is_an_error_not_sql(evil):
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    con.execute("CREATE TABLE x AS SELECT 1 AS keep")
    for bad in ["cpu'; DROP TABLE x; --", "gpu\x00"]:
        with pytest.raises(duckdb.Error, match="unknown device"):
            con.execute("SELECT match_count(?, '(a)-->(b)', device := ?)", [evil["store"], bad]).fetchall()
    with pytest.raises(duckdb.Error, match="not a size"):
        con.execute("SELECT match_count(?, '(a)-->(b)', memory_budget := ?)",
                    [evil["store"], "1GB'; DROP TABLE x; --"]).fetchall()
    with pytest.raises(SgsiError):
        sgsi.register(con, device="cpu'); DROP TABLE x; --")
    with pytest.raises(SgsiError):
        sgsi.register(con, memory_budget="1GB'), ('x")
    assert con.execute("SELECT count(*) FROM x").fetchall() == [(1,)]
    con.close()


def test_evil_patterns_on_the_command_line(evil):
    p = f"(a)-[:{_bq(EVIL[0])}]->(b)"
    rc, out, err = rh.run_sgsi("count", evil["store"], p, "--device", "cpu")
    assert rc == 0, err
    assert out.strip().splitlines()[-1] == "1"
    rc, out, err = rh.run_sgsi("count", evil["store"], "(a)-[:'; DROP TABLE x; --]->(b)", "--device", "cpu")
    assert rc == 1
    assert "position" in rh.assert_one_line(err, "sgsi: error: ")
