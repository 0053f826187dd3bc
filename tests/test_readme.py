"""Every code example of README.md runs on the demo's data and gives rows.

The README's fenced ``sql``, ``python`` and ``sh``/``console`` blocks run in
order in one directory holding what ``sgsi demo --keep`` leaves there
(:func:`sgsi.demo.prepare`: ``edges.parquet``, ``vertices.parquet`` and the
store ``social.sgsi``): Python blocks in one namespace, SQL blocks statement
by statement on that namespace's ``con`` (a DuckDB connection with sgsi
registered), ``sgsi ...`` lines through :func:`sgsi.cli.main`. A block right
after a line ``<!-- no-test -->`` is skipped (the install commands); blocks
of other languages (``text``: synopses, layouts) are not code to run.

Every SELECT must return rows, and a count must be above 0; every pattern the
README quotes must match at least once on the demo graph, so the examples
stay true to its schema (Person, Company, City; KNOWS, WORKS_AT, LIVES_IN, LIKES).
"""

import re
import shlex
from pathlib import Path

import duckdb
import pytest

import sgsi
from sgsi.cli import main
from sgsi.demo import prepare
from sgsi.errors import PatternError

README = Path(__file__).resolve().parent.parent / "README.md"
RUN = {"python": "python", "sql": "sql", "sh": "sh", "console": "sh", "bash": "sh"}
NO_TEST = "<!-- no-test -->"

_FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks(text):
    """(language, code, skipped, line) of each fenced block, in order."""
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").splitlines()
        skipped = bool(before) and before[-1].strip() == NO_TEST
        out.append((m.group(1).lower(), m.group(2), skipped, text.count("\n", 0, m.start()) + 1))
    return out


def sql_statements(code):
    """``code`` cut at the semicolons outside quotes and ``--`` comments; comments dropped."""
    stmts, cur, i, quote = [], [], 0, None
    while i < len(code):
        ch = code[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif code.startswith("--", i):
            i = code.find("\n", i)
            if i < 0:
                break
            continue
        elif ch == ";":
            stmts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    stmts.append("".join(cur).strip())
    return [s for s in stmts if s]


def quoted_patterns(text):
    """Every pattern quoted in the README's code blocks and inline code: a string that starts
    with ``(`` and has an edge in it."""
    found = re.findall(r"""['"`](\([^'"`\n]*\)(?:-|<-)[^'"`\n]*\))['"`]""", text)
    return sorted(set(found))


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    _info, g = prepare(str(d))
    g.close()
    return d


@pytest.fixture
def demo_dir(demo_files, monkeypatch):
    monkeypatch.chdir(demo_files)
    return demo_files


def test_readme_blocks_are_found():
    text = README.read_text()
    langs = [(lang, skipped) for lang, _code, skipped, _line in blocks(text)]
    assert ("python", False) in langs and ("sql", False) in langs and ("sh", False) in langs
    # the two commands CI runs are at the top, word for word
    top = text[:600]
    assert "pip install . && sgsi demo" in top
    assert "pip install '.[test]' && python -m pytest -q" in top
    skipped = [code for lang, code, s, _line in blocks(text) if s]
    assert skipped and all("pip install" in code for code in skipped)


def test_readme_examples_run_on_the_demo_data(demo_dir, capsys):
    ns = {"__name__": "__readme__"}
    cons = []
    try:
        for lang, code, skipped, line in blocks(README.read_text()):
            kind = RUN.get(lang)
            if skipped or kind is None:
                continue
            where = f"README.md block at line {line}"
            if kind == "python":
                exec(compile(code, where, "exec"), ns)
                if isinstance(ns.get("con"), duckdb.DuckDBPyConnection) and ns["con"] not in cons:
                    cons.append(ns["con"])
            elif kind == "sql":
                con = ns.get("con")
                if con is None:                 # no Python block before: a registered connection
                    con = ns["con"] = duckdb.connect()
                    sgsi.register(con)
                    cons.append(con)
                for stmt in sql_statements(code):
                    _run_sql(con, stmt, where)
            else:
                for cmd in code.splitlines():
                    _run_cli(cmd, where, capsys)
    finally:
        for g in [v for v in ns.values() if isinstance(v, sgsi.Graph)]:
            g.close()
        for con in cons:
            con.close()


def _run_sql(con, stmt, where):
    cur = con.execute(stmt)
    if not re.match(r"(?is)\s*(SELECT|WITH)\b", stmt):
        return
    rows = cur.fetchall()
    assert rows, f"{where}: no rows from\n{stmt}"
    if len(rows) == 1 and len(rows[0]) == 1 and isinstance(rows[0][0], int):
        assert rows[0][0] > 0, f"{where}: a count of 0 from\n{stmt}"


def _run_cli(cmd, where, capsys):
    args = shlex.split(cmd, comments=True)
    if not args:
        return
    assert args[0] == "sgsi", f"{where}: not an sgsi command: {cmd}"
    capsys.readouterr()
    rc = main(args[1:])
    out, err = capsys.readouterr()
    assert rc == 0, f"{where}: {cmd}\n{err}"
    if args[1] == "count":
        assert int(out.strip().splitlines()[-1]) > 0, f"{where}: {cmd} counted 0"
    if args[1] == "match":
        assert int(out.split()[0]) > 0, f"{where}: {cmd} wrote no rows:\n{out}"


def test_readme_patterns_match_on_the_demo_graph(demo_dir):
    """The README's patterns, the headline ones included, each match at least once (a pattern
    that is an error on purpose, such as the misspelt label, is left to its block)."""
    patterns = quoted_patterns(README.read_text())
    headline = "(a:Person)-[:KNOWS]->(b:Person)-[:WORKS_AT]->(c:Company), (a)-[:LIKES]->(c)"
    assert headline in patterns
    assert "(a:Person)-[:WORKS_AT]->(c:Company)<-[:WORKS_AT]-(b:Person), (a)-[:KNOWS]-(b)" in patterns
    none = []
    with sgsi.open("social.sgsi") as g:
        for p in patterns:
            try:
                rows = g.match(p, device="cpu", memory_budget="8MB", max_rows=1).read_all().num_rows
            except PatternError:
                continue
            if rows == 0:
                none.append(p)
    assert not none, f"patterns of the README with no match on the demo graph: {none}"


def test_links_of_the_readme_and_docs_exist():
    """Every relative link of README.md and docs/*.md names a file of the repository."""
    root = README.parent
    missing = []
    for doc in [README, *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path = target.split("#")[0]
            if path and not (doc.parent / path).exists():
                missing.append(f"{doc.relative_to(root)}: {target}")
    assert not missing, missing
