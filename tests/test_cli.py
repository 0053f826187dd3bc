"""The ``sgsi`` command line: build, info, count, match, demo, and its errors."""

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi

from oracle import oracle_matches, random_graph
from sgsi.cli import main
from sgsi.pattern import parse_pattern

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    rng = random.Random(11)
    edges, vlabels = random_graph(rng, 30, 90, 2, 2, string_ids=True)
    ep, vp = str(d / "e.parquet"), str(d / "v.parquet")
    pq.write_table(pa.table({"src": [s for s, _, _ in edges], "dst": [t for _, t, _ in edges],
                             "label": [l for _, _, l in edges]}), ep)
    ids = sorted(vlabels)
    pq.write_table(pa.table({"id": ids, "label": [vlabels[i] for i in ids]}), vp)
    return {"dir": d, "edges": edges, "vlabels": vlabels, "efile": ep, "vfile": vp}


@pytest.fixture(scope="module")
def store(graph):
    out = str(graph["dir"] / "g.sgsi")
    assert main(["build", "--edges", graph["efile"], "--vertices", graph["vfile"], "--out", out, "-q"]) == 0
    return out


def expected(graph, pattern):
    p = parse_pattern(pattern)
    return sorted(tuple(m[i] for i in p.output_vertices)
                  for m in oracle_matches(graph["edges"], graph["vlabels"], p))


def run_cli(*args, cwd=None, **env_extra):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    return subprocess.run([sys.executable, "-m", "sgsi", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL, timeout=120)


def one_error_line(stderr):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("sgsi: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


# ---------------------------------------------------------------------------
# build, info
# ---------------------------------------------------------------------------

def test_build_prints_progress_and_a_summary(graph, tmp_path, capsys):
    out = tmp_path / "p.sgsi"
    assert main(["build", "--edges", graph["efile"], "--vertices", graph["vfile"], "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "building the vertex dictionary" in captured.err       # progress on stderr
    assert captured.out.startswith(f"built {out}: 30 vertices")
    assert (out / "manifest.json").is_file()


def test_build_from_text_format(tmp_path, capsys):
    text = tmp_path / "data.graph"
    text.write_text("t 3 3\nv 0 1 2\nv 1 1 2\nv 2 2 2\ne 0 1\ne 1 2\ne 2 0\n")
    assert main(["build", "--graph", str(text), "--out", str(tmp_path / "t.sgsi"), "-q"]) == 0
    assert main(["count", str(tmp_path / "t.sgsi"), "(a:1)--(b:1)"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "2"


def test_info(store, capsys):
    assert main(["info", store, "--verify"]) == 0
    out = capsys.readouterr().out
    assert "vertices       30" in out
    assert "E0" in out and "E1" in out           # edge labels with their frequencies
    assert "segments" in out and "manifest" not in out
    assert "total" in out and "bytes" in out
    assert "theta" in out                        # parameters
    assert "checksums      all" in out
    from sgsi.join.query import memory_floor
    with sgsi.open(store) as g:
        assert "memory floor   " in out and f"({memory_floor(g.store):,} bytes)" in out


def test_info_verify_finds_damage(graph, tmp_path, capsys):
    out = tmp_path / "d.sgsi"
    assert main(["build", "--edges", graph["efile"], "--out", str(out), "-q"]) == 0
    f = out / "pcsr_ci.arrow"
    data = bytearray(f.read_bytes())
    data[-20] ^= 0xFF
    f.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["info", str(out), "--verify"]) == 1
    assert "pcsr_ci.arrow fails its checksum" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------
# count, match
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["(a)-[:E0]->(b)-[:E1]->(c)", "(a:0)--(b:1)", "(a)-->(b)-->(c)-->(a)"])
def test_count_prints_the_count_last(graph, store, pattern, capsys):
    assert main(["count", store, pattern, "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == str(len(expected(graph, pattern)))
    assert "device cpu" in captured.err


def test_count_query_file_budget_and_homomorphism(graph, store, tmp_path, capsys):
    qf = tmp_path / "q.txt"
    qf.write_text("(a)-[:E0]->(b)-[:E0]->(c)\n")
    assert main(["count", store, str(qf), "--memory-budget", "32KB"]) == 0
    assert capsys.readouterr().out.split()[-1] == str(len(expected(graph, "(a)-[:E0]->(b)-[:E0]->(c)")))
    assert main(["count", store, "(a)-[:E0]->(b)-[:E0]->(c)", "--homomorphism"]) == 0
    hom = len(oracle_matches(graph["edges"], graph["vlabels"], "(a)-[:E0]->(b)-[:E0]->(c)", injective=False))
    assert capsys.readouterr().out.split()[-1] == str(hom)


def test_match_writes_parquet(graph, store, tmp_path, capsys):
    pattern = "(x)-[:E1]->(y), (y)-->(z)"
    out = tmp_path / "m.parquet"
    assert main(["match", store, pattern, "--output", str(out)]) == 0
    rows = expected(graph, pattern)
    assert capsys.readouterr().out.strip() == f"{len(rows)} rows written to {out}"
    t = pq.read_table(out)
    assert t.column_names == ["x", "y", "z"]
    assert t.schema.field("x").type in (pa.string(), pa.large_string())
    assert sorted(zip(*(t.column(c).to_pylist() for c in t.column_names))) == rows
    # an existing output is refused without --force, and kept as it was
    before = out.read_bytes()
    assert main(["match", store, "(a)-->(b)", "--output", str(out)]) == 1
    assert "output file exists" in one_error_line(capsys.readouterr().err)
    assert out.read_bytes() == before
    assert main(["match", store, "(a)-->(b)", "--output", str(out), "--max-rows", "4", "--force"]) == 0
    assert pq.read_table(out).num_rows == 4
    # --limit, the deprecated name of --max-rows, still works, with a note
    capsys.readouterr()
    assert main(["match", store, "(a)-->(b)", "--output", str(out), "--limit", "3", "--force"]) == 0
    assert pq.read_table(out).num_rows == 3
    assert "--limit is deprecated; use --max-rows" in capsys.readouterr().err
    assert main(["match", store, "(a)-->(b)", "--output", str(out), "--limit", "3", "--max-rows", "3",
                 "--force"]) == 1
    assert "give --max-rows only" in one_error_line(capsys.readouterr().err)
    assert [p for p in os.listdir(tmp_path) if p != "m.parquet"] == []      # no temporary file left


# ---------------------------------------------------------------------------
# Errors: one line, exit 1, nothing left behind
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["build", "--edges", "missing.parquet", "--out", "x.sgsi"], "edge file not found: missing.parquet"),
    (["build", "--edges", "V", "--out", "x.sgsi"], "missing column 'src'"),
    (["build", "--edges", "NOT_PARQUET", "--out", "x.sgsi"], "not a readable Parquet file"),
    (["build", "--out", "x.sgsi"], "nothing to build from"),
    (["build", "--edges", "E", "--out", "x.sgsi", "--memory-budget", "huge"], "not a size: 'huge'"),
    (["count", "nowhere.sgsi", "(a)"], "no graph store at nowhere.sgsi"),
    (["count", "STORE", "(a)-[:E0->(b)"], "expected ']'"),
    (["count", "STORE", "(a)-->(b), (c)-->(d)"], "disconnected"),
    (["count", "STORE", "(a)", "--memory-budget", "1KB"], "below the minimum"),
    (["match", "STORE", "()-->()", "--output", "m.parquet"], "names no vertex"),
    (["match", "STORE", "(a)", "--output", "no/such/dir/m.parquet"], "output directory does not exist"),
])
def test_bad_input_gives_one_line_and_exit_1(graph, store, tmp_path, args, message, capsys, monkeypatch):
    (tmp_path / "bad.parquet").write_text("this is not parquet")
    subst = {"E": graph["efile"], "V": graph["vfile"], "STORE": store, "NOT_PARQUET": "bad.parquet"}
    monkeypatch.chdir(tmp_path)
    assert main([subst.get(a, a) for a in args]) == 1
    captured = capsys.readouterr()
    assert message in one_error_line(captured.err)
    assert captured.out == ""
    assert sorted(os.listdir(tmp_path)) == ["bad.parquet"]       # no store, temp dir or output left


def test_existing_store_is_refused_and_kept(graph, tmp_path, capsys):
    out = tmp_path / "g.sgsi"
    assert main(["build", "--edges", graph["efile"], "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["build", "--edges", graph["efile"], "--out", str(out), "-q"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "output path exists" in line and "(use --force to replace it)" in line     # as the CLI spells it
    # a failed --force build keeps the old store
    assert main(["build", "--edges", graph["vfile"], "--out", str(out), "--force", "-q"]) == 1
    capsys.readouterr()
    assert main(["count", str(out), "(a)-[:E0]->(b)"]) == 0
    assert capsys.readouterr().out.split()[-1] == str(len(expected(graph, "(a)-[:E0]->(b)")))
    assert sorted(os.listdir(tmp_path)) == ["g.sgsi"]
    assert main(["build", "--edges", graph["efile"], "--vertices", graph["vfile"], "--out", str(out),
                 "--force", "-q"]) == 0


def test_interrupt_exits_130(monkeypatch, capsys):
    import sgsi.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_cmd_info", interrupted)
    assert main(["info", "whatever.sgsi"]) == 130
    assert capsys.readouterr().err.strip() == "sgsi: interrupted"


def test_help_explains_with_examples(capsys):
    for argv in (["--help"], ["build", "--help"], ["count", "--help"], ["match", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


# ---------------------------------------------------------------------------
# As a process
# ---------------------------------------------------------------------------

def test_process_count_and_error(graph, store, tmp_path):
    r = run_cli("count", store, "(a)-[:E0]->(b)", "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == str(len(expected(graph, "(a)-[:E0]->(b)")))
    r = run_cli("count", store, "(a)-[:E0", cwd=tmp_path)
    assert r.returncode == 1
    one_error_line(r.stderr)
    assert r.stdout == ""


def test_demo_runs_end_to_end(tmp_path):
    """`sgsi demo` in a process, with a temporary directory of its own (TMPDIR: the system's may
    hold other processes' sgsi-demo-* directories at any moment)."""
    scratch, cwd = tmp_path / "tmp", tmp_path / "cwd"
    scratch.mkdir()
    cwd.mkdir()
    r = run_cli("demo", cwd=cwd, TMPDIR=str(scratch))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "20,000 vertices" in out
    assert "device: CPU" in out or "device: GPU" in out
    for title in ("triangles", "joined back to the vertex table", "4-cycles", "same city"):
        assert title in out
    assert "four_cycles" in out and out.rstrip().endswith("temporary files removed")
    # each query is printed with its number of rows
    assert len(re.findall(r"^    \(\d+ rows? in [\d.]+ s on (?:cpu|gpu)\)$", out, re.M)) == 4, out
    assert "(5 rows in " in out
    assert os.listdir(scratch) == []              # its sgsi-demo-* directory is removed
    assert os.listdir(cwd) == []
