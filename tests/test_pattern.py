"""Tests of the pattern language, the benchmark query format and load_pattern."""

from pathlib import Path

import pytest

from sgsi.errors import PatternError
from sgsi.pattern import (
    Pattern,
    PatternEdge,
    PatternVertex,
    load_pattern,
    parse_pattern,
    parse_query_text,
    read_query_file,
)

BENCH = Path(__file__).parent / "data" / "benchmarks"


def V(name, label=None):
    return PatternVertex(name, label)


def E(src, dst, label=None, directed=True):
    return PatternEdge(src, dst, label, directed)


# ---------------------------------------------------------------------------
# Patterns that parse
# ---------------------------------------------------------------------------

PARSED = [
    ("(a)", [V("a")], []),
    ("()", [V(None)], []),
    ("(:Person)", [V(None, "Person")], []),
    ("(a:Person)-[:KNOWS]->(b:Person)",
     [V("a", "Person"), V("b", "Person")], [E(0, 1, "KNOWS")]),
    # a left arrow points from the right-hand vertex to the left-hand one
    ("(a)<-[:L]-(b)", [V("a"), V("b")], [E(1, 0, "L")]),
    # undirected edges are stored with src < dst
    ("(x)-[:L]-(y), (z)--(x)",
     [V("x"), V("y"), V("z")], [E(0, 1, "L", False), E(0, 2, None, False)]),
    ("(x)-->(y)--(z)<--(w)",
     [V("x"), V("y"), V("z"), V("w")],
     [E(0, 1), E(1, 2, None, False), E(3, 2)]),
    ("(a)-[]->(b)<-[]-(c)-[]-(a)",
     [V("a"), V("b"), V("c")], [E(0, 1), E(2, 1), E(0, 2, None, False)]),
    ("(a)-[:K]->(b), (b)-[:L]->(a)", [V("a"), V("b")], [E(0, 1, "K"), E(1, 0, "L")]),
    # every () is a vertex of its own
    ("()-[:R]->()<-[:R]-()", [V(None)] * 3, [E(0, 1, "R"), E(2, 1, "R")]),
    # a label at a later mention applies to the vertex; a repeated label is fine
    ("(a)-->(b), (a:P)--(c:`has space`), (a:P)-->(c)",
     [V("a", "P"), V("b"), V("c", "has space")],
     [E(0, 1), E(0, 2, None, False), E(0, 2)]),
    # duplicate edges are dropped; directed and undirected are different edges
    ("(a)-[:K]->(b), (a)-[:K]->(b), (b)-[:K]-(a), (a)-[:K]-(b), (b)<-[:K]-(a)",
     [V("a"), V("b")], [E(0, 1, "K"), E(0, 1, "K", False)]),
    # integer labels, normalised like integers
    ("(a:3)-[:7]->(b:03)", [V("a", "3"), V("b", "3")], [E(0, 1, "7")]),
    # backtick quoting: doubled backtick, spaces, unicode, punctuation
    ("(a:`x``y`)-[:`knows well`]->(b:`日本`)-[:`a-b->c`]->(c:`3`)",
     [V("a", "x`y"), V("b", "日本"), V("c", "3")],
     [E(0, 1, "knows well"), E(1, 2, "a-b->c")]),
    # whitespace anywhere between tokens, including inside arrows
    (" ( a : Person ) -\t[ : KNOWS ] - > ( b ) ,\n ( b ) < - - ( _c9 ) ",
     [V("a", "Person"), V("b"), V("_c9")], [E(0, 1, "KNOWS"), E(2, 1)]),
    # names are case-sensitive
    ("(a)--(A)", [V("a"), V("A")], [E(0, 1, None, False)]),
]


@pytest.mark.parametrize("text, vertices, edges", PARSED)
def test_parse(text, vertices, edges):
    assert parse_pattern(text) == Pattern(tuple(vertices), tuple(edges))


def test_vertex_order_is_first_appearance():
    p = parse_pattern("(c)-->(b), (a)-->(c), (b)<--(d)")
    assert [v.name for v in p.vertices] == ["c", "b", "a", "d"]
    assert p.edges == (E(0, 1), E(2, 0), E(3, 1))


def test_output_names_skip_anonymous_vertices():
    p = parse_pattern("(a:Person)-[:KNOWS]->(b)<-[:WORKS_AT]-(:Company), (a)-[:LIKES]-()")
    assert p.output_names == ["a", "b"]
    assert p.output_vertices == [0, 1]
    assert len(p.vertices) == 4


# ---------------------------------------------------------------------------
# Patterns that do not parse: message and position
# ---------------------------------------------------------------------------

ERRORS = [
    ("(a)-->[b]", 6, "expected '(' to start a vertex, found '['"),
    ("", 0, "empty pattern"),
    ("   ", 0, "empty pattern"),
    ("(a)-->(a)", 3, "self-loop on vertex a"),
    ("(a)-->(b), (b)-[:K]-(a), (b)--(b)", 28, "self-loop on vertex b"),
    ("(a)-->(b), (c)", 11, "pattern is disconnected: {a, b} and {c} share no edge"),
    ("(a)--(b), ()--()", 10,
     "pattern is disconnected: {a, b} and {() at position 10, () at position 14}"),
    ("(a)--(b), (c), (d)", 10, "and 1 more pieces"),
    ("(a:X)--(a:Y)", 9, "conflicting labels for vertex a: :X and :Y"),
    ("(a:X)--(b), (b)--(a:`Y z`)", 19, "conflicting labels for vertex a: :X and :`Y z`"),
    ("(a)-[e:L]->(b)", 5, "edge variables are not supported"),
    ("(a)-[e]->(b)", 5, "edge variables are not supported"),
    ("(a)--(b) x", 9, "expected ',' or end of pattern, found 'x'"),
    ("(a)--(b))", 8, "expected ',' or end of pattern, found ')'"),
    ("(a:`abc", 3, "unterminated backtick"),
    ("(a)-[:`L]->(b)", 6, "unterminated backtick"),
    ("(a)=>(b)", 3, "unexpected character '='"),
    ("(é)", 1, "unexpected character 'é'"),
    ("(a)<-->(b)", 3, "an edge cannot point both ways"),
    ("(a:)", 3, "expected a label"),
    ("(a", 2, "expected ':' or ')', found end of pattern"),
    ("(a b)", 3, "expected ':' or ')', found 'b'"),
    ("(:P q)", 4, "expected ')', found 'q'"),
    ("(a)-(b)", 4, "expected '-' to continue the edge, found '('"),
    ("(a)->(b)", 4, "expected '-' to continue the edge, found '>'"),
    ("(a)<(b)", 4, "expected '-' after '<', found '('"),
    ("(a)--", 5, "expected '(' to start a vertex, found end of pattern"),
    ("(a)--(b),", 9, "expected '(' to start a vertex, found end of pattern"),
    ("(a)-[:K->(b)", 7, "expected ']' to close the edge, found '-'"),
    ("(a)-[:]->(b)", 6, "expected a label"),
    ("(a)-[3]->(b)", 5, "expected ':' or ']', found '3'"),
    ("(:``)", 2, "empty label"),
    ("a-->b", 0, "expected '(' to start a vertex, found 'a'"),
]


@pytest.mark.parametrize("text, position, message", ERRORS)
def test_parse_error(text, position, message):
    with pytest.raises(PatternError) as info:
        parse_pattern(text)
    assert info.value.position == position
    assert message in str(info.value)
    assert f"(at position {position})" in str(info.value)


def test_parse_rejects_non_text():
    with pytest.raises(TypeError):
        parse_pattern(b"(a)")


def test_pattern_error_is_an_sgsi_error():
    from sgsi.errors import SgsiError

    with pytest.raises(SgsiError):
        parse_pattern("(")


# ---------------------------------------------------------------------------
# The benchmark query format
# ---------------------------------------------------------------------------


def test_read_small_yeast_query():
    # t 4 3 / v 0 13 2 / v 1 36 1 / v 2 12 2 / v 3 2 1 / e 0 1 0 / e 0 2 0 / e 2 3 0
    p = read_query_file(BENCH / "yeast" / "queries" / "query_dense_4_1.graph")
    assert p.vertices == (V("u0", "13"), V("u1", "36"), V("u2", "12"), V("u3", "2"))
    assert p.edges == (E(0, 1, None, False), E(0, 2, None, False), E(2, 3, None, False))


def test_read_hprd_query():
    path = BENCH / "hprd" / "queries" / "query_dense_16_116.graph"
    p = read_query_file(str(path))
    assert len(p.vertices) == 16 and len(p.edges) == 26
    assert p.output_names == [f"u{i}" for i in range(16)]
    assert p.vertices[0] == V("u0", "40") and p.vertices[1] == V("u1", "8")
    assert all(e.label is None and not e.directed and e.src < e.dst for e in p.edges)


def test_every_vendored_query_reads():
    paths = sorted(BENCH.glob("*/queries/*.graph"))
    assert len(paths) == 2060          # hprd 200, yeast 1,800, hprd-hard 60
    for path in paths:
        header = path.read_text().split(maxsplit=3)
        p = read_query_file(path)
        assert len(p.vertices) == int(header[1])
        assert len(p.edges) == int(header[2])


def test_query_text_blank_lines_and_no_degree():
    p = parse_query_text("\n\nt 3 2\n\nv 2 7\nv 0 5 1\nv 1 5 2\ne 1 0\ne 2 1 0\n")
    assert p.vertices == (V("u0", "5"), V("u1", "5"), V("u2", "7"))
    assert p.edges == (E(0, 1, None, False), E(1, 2, None, False))


QUERY_ERRORS = [
    ("v 0 1 0\n", "line 1: expected the header 't N M'"),
    ("", "empty query file"),
    ("t 2 1\nv 0 1 1\nv 2 1 1\ne 0 1\n", "line 3: vertex id 2 out of range 0..1"),
    ("t 2 1\nv 0 1 1\nv 1 1 1\ne 0 5\n", "line 4: edge endpoint 5 out of range 0..1"),
    ("t 2 1\nv 0 1 1\nv 0 1 1\ne 0 1\n", "line 3: vertex 0 is given twice"),
    ("t 3 1\nv 0 1 1\nv 1 1 1\ne 0 1\n",
     "line 1: header says 3 vertices but the file has 2 'v' lines (vertex 2 is missing)"),
    ("t 2 2\nv 0 1 1\nv 1 1 1\ne 0 1\n", "line 1: header says 2 edges but the file has 1"),
    ("t 2 1\nv 0 1 1\nv 1 1 1\ne 1 1\n", "line 4: self-loop on vertex 1"),
    ("t 2 1\nv 0 1 1\nv 1 1 2\ne 0 1\n", "line 3: vertex 1 says degree 2 but has 1 edges"),
    ("t 2 1\nv 0 1 1\nv 1 1 1\nx 0 1\n", "line 4: unknown line type 'x'"),
    ("t 2 1\nv 0 1 1\nv 1 1 1\ne 0 one\n", "line 4: expected integers in 'e U V'"),
    ("t 2 1\nv 0 1 1\nv 1 1 1\ne 0\n", "line 4: expected 'e U V'"),
    ("t 2 1\nv 0 1 1\nv 1\ne 0 1\n", "line 3: expected 'v ID LABEL DEGREE'"),
    ("t 1 0\nv 0 1 0\nt 1 0\n", "line 3: a second 't' header"),
    ("t 0 0\n", "line 1: header needs N >= 1"),
    ("t 4 2\nv 0 1 1\nv 1 1 1\nv 2 1 1\nv 3 1 1\ne 0 1\ne 2 3\n",
     "pattern is disconnected: {u0, u1} and {u2, u3} share no edge"),
]


@pytest.mark.parametrize("text, message", QUERY_ERRORS)
def test_query_text_error(text, message):
    with pytest.raises(PatternError) as info:
        parse_query_text(text, source="q.graph")
    assert message in str(info.value)
    assert str(info.value).startswith("q.graph: ")


def test_query_error_position_is_line_start():
    text = "t 2 1\nv 0 1 1\nv 5 1 1\ne 0 1\n"
    with pytest.raises(PatternError) as info:
        parse_query_text(text)
    assert info.value.position == text.index("v 5")


def test_read_query_file_names_the_file(tmp_path):
    path = tmp_path / "bad.graph"
    path.write_text("t 2 1\nv 0 1 1\nv 1 1 1\ne 0 9\n")
    with pytest.raises(PatternError, match="bad.graph: line 4"):
        read_query_file(path)
    with pytest.raises(PatternError, match="query file not found"):
        read_query_file(tmp_path / "missing.graph")


# ---------------------------------------------------------------------------
# load_pattern
# ---------------------------------------------------------------------------


def test_load_pattern_passes_a_pattern_through():
    p = parse_pattern("(a)-->(b)")
    assert load_pattern(p) is p


def test_load_pattern_text():
    assert load_pattern("(a)-->(b)") == parse_pattern("(a)-->(b)")


def test_load_pattern_text_is_parsed_once():
    """A repeated text gets the Pattern parsed the first time (immutable, so shared); a bad
    text raises every time; a text past the cached length is parsed each time, alike."""
    text = "(a:A)-[:R]->(b)<-[:S]-(c), (c)--(a)"
    first = load_pattern(text)
    assert load_pattern(text) is first
    assert first == parse_pattern(text)
    for _ in range(2):
        with pytest.raises(PatternError, match="position"):
            load_pattern("(a)-[:R->(b)")
    long = ", ".join(f"(v{i})-->(v{i + 1})" for i in range(400))
    assert len(long) > 4096
    assert load_pattern(long) == parse_pattern(long)
    assert load_pattern(long) is not load_pattern(long)


def test_load_pattern_benchmark_file():
    path = BENCH / "yeast" / "queries" / "query_dense_4_1.graph"
    assert load_pattern(path) == read_query_file(path)
    assert load_pattern(str(path)) == read_query_file(path)


def test_load_pattern_language_file(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("\n(a:Person)-[:KNOWS]->(b),\n(b)-[:KNOWS]->(a)\n")
    assert load_pattern(path) == parse_pattern("(a:Person)-[:KNOWS]->(b), (b)-[:KNOWS]->(a)")
    path.write_text("(a)-->[b]")
    with pytest.raises(PatternError) as info:
        load_pattern(str(path))
    assert str(info.value).startswith(str(path))
    assert info.value.position == 6


def test_load_pattern_missing(tmp_path):
    with pytest.raises(PatternError, match="query file not found"):
        load_pattern(tmp_path / "missing.graph")
    with pytest.raises(PatternError, match="neither an existing query file nor a pattern"):
        load_pattern(str(tmp_path / "missing.graph"))
    with pytest.raises(TypeError):
        load_pattern(42)
