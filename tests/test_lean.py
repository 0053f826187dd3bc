"""Lean stores (``lean=True``, ``--lean``, ``lean := true``): labelled, directed partitions only.

A lean store must answer every pattern of labelled, directed edges exactly
as a full store does (checked against the oracle), with the same vertex
signatures whichever way they were counted (a table of saturating counts
filled from the label-sorted passes, or vertex-sorted passes when that
table would not fit), and refuse the patterns it cannot answer with a
clear PatternError.
"""

import random
import subprocess
import sys

import duckdb
import pytest

import sgsi
from oracle import oracle_count, random_graph, random_pattern, write_graph_files
from sgsi.cli import main as cli_main
from sgsi.errors import PatternError
from sgsi.storage import build, sources

VLABELS = [0, 1, 2]
ELABELS = ["E0", "E1", "E2"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("lean")
    rng = random.Random(77)
    edges, vlabels = random_graph(rng, 60, 400, 3, 3)
    vlabels = {v: l for v, l in vlabels.items() if v != 7}      # one vertex without a label
    e, v = write_graph_files(d, edges, vlabels)
    return d, edges, vlabels, e, v


def _directed_labelled(seed, n):
    rng = random.Random(seed)
    return [random_pattern(rng, rng.randint(2, 5), VLABELS, ELABELS, p_edge_label=1.0, p_directed=1.0)
            for _ in range(n)]


def _signatures(g):
    return g.store._readers["signatures.arrow"].read_all()


@pytest.mark.parametrize("budget", [None, "16KB"], ids=["default", "16KB"])
def test_lean_store_answers_directed_labelled_patterns(graph, budget):
    d, edges, vlabels, e, v = graph
    full = sgsi.build(str(d / f"full-{budget}.sgsi"), edges=e, vertices=v, memory_budget=budget)
    lean = sgsi.build(str(d / f"lean-{budget}.sgsi"), edges=e, vertices=v, memory_budget=budget, lean=True)
    with full, lean:
        assert lean.store.lean and not full.store.lean
        stored = [k for k, p in lean.store.manifest["partitions"].items() if "alias" not in p]
        assert stored and all(k.split(":")[0] != "any" and k.split(":")[1] in ("out", "in") for k in stored)
        pcsr = {g: sum(g.store.manifest["files"][f]["bytes"] for f in ("pcsr_ci.arrow", "pcsr_groups.arrow"))
                for g in (full, lean)}
        assert pcsr[lean] < pcsr[full] / 2
        assert _signatures(lean).equals(_signatures(full))
        nonzero = 0
        for p in _directed_labelled(11, 25):
            for injective in (True, False):
                want = oracle_count(edges, vlabels, p, injective=injective)
                assert lean.count(p, device="cpu", memory_budget=budget, homomorphism=not injective) == want, p
                nonzero += bool(want)
        assert nonzero >= 10


def test_signatures_from_vertex_sorted_passes_when_the_table_is_too_large(graph, monkeypatch):
    d, edges, vlabels, e, v = graph
    full = sgsi.build(str(d / "full-sig.sgsi"), edges=e, vertices=v)
    monkeypatch.setattr(build._Builder, "max_signature_table", 0)
    lean = sgsi.build(str(d / "lean-passes.sgsi"), edges=e, vertices=v, lean=True)
    with full, lean:
        assert _signatures(lean).equals(_signatures(full))
        for p in _directed_labelled(12, 10):
            assert lean.count(p, device="cpu") == oracle_count(edges, vlabels, p), p


def test_lean_store_refuses_unlabeled_and_undirected_edges(graph):
    d, edges, vlabels, e, v = graph
    with sgsi.build(str(d / "lean-refuse.sgsi"), edges=e, vertices=v, lean=True) as g:
        with pytest.raises(PatternError, match="unlabeled edges.*built lean.*without lean=True"):
            g.count("(a)-->(b)")
        with pytest.raises(PatternError, match="undirected edges.*built lean"):
            g.count("(a)-[:E1]-(b)")
        with pytest.raises(PatternError, match="built lean"):
            g.match("(a)-[:E0]->(b)<--(c)").read_all()


def test_lean_single_label_and_undirected_stores(tmp_path):
    """One edge label: 'any' is that label, so only undirected edges are refused. An undirected store
    holds one direction for all, so a lean one refuses only unlabeled edges (with several labels)."""
    rng = random.Random(5)
    edges, vlabels = random_graph(rng, 40, 150, 2, 1)
    e, v = write_graph_files(tmp_path / "single", edges, vlabels, edge_labels=False)
    with sgsi.build(str(tmp_path / "single.sgsi"), edges=e, vertices=v, lean=True) as g:
        for p in ["(a)-->(b)-->(c)", "(a:0)-->(b), (b)-->(a)", "(a)<--(b)-->(c)-->(a)"]:
            assert g.count(p) == oracle_count([(s, t, None) for s, t, _ in edges], vlabels, p), p
        with pytest.raises(PatternError, match="undirected edges"):
            g.count("(a)--(b)")
    edges, vlabels = random_graph(rng, 40, 150, 2, 2)
    e, v = write_graph_files(tmp_path / "und", edges, vlabels)
    both = edges + [(t, s, lab) for s, t, lab in edges]
    with sgsi.build(str(tmp_path / "und.sgsi"), edges=e, vertices=v, undirected=True, lean=True) as g:
        for p in ["(a)-[:E0]-(b)-[:E1]-(c)", "(a)-[:E0]->(b), (b)-[:E1]->(a)", "(a:1)-[:E1]-(b)-[:E1]-(c)"]:
            assert g.count(p) == oracle_count(both, vlabels, p), p
        with pytest.raises(PatternError, match="unlabeled edges"):
            g.count("(a)--(b)")


def test_lean_and_theta_from_the_command_line_and_sql(graph, tmp_path, capsys):
    d, edges, vlabels, e, v = graph
    out = tmp_path / "cli.sgsi"
    r = subprocess.run([sys.executable, "-m", "sgsi", "build", "--edges", e, "--vertices", v, "--out", str(out),
                        "--lean", "--theta", "2", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    capsys.readouterr()
    assert cli_main(["info", str(out)]) == 0          # the command line in this process, from here on
    info = capsys.readouterr().out
    assert "(lean: labelled, directed edges only)" in info
    assert [line.split() for line in info.splitlines() if line.split()[:1] == ["lean"]] == [["lean", "yes"]]
    with sgsi.open(str(out)) as g:
        assert g.store.theta == 2 and g.store.lean
        p = "(a)-[:E0]->(b)-[:E1]->(c)"
        want = oracle_count(edges, vlabels, p)
        assert g.count(p) == want
    assert cli_main(["count", str(out), "(a)-->(b)"]) == 1
    err = capsys.readouterr().err
    assert "built lean" in err and "without --lean" in err

    con = duckdb.connect()
    reg = sgsi.register(con, device="cpu")
    sql_store = str(tmp_path / "sql.sgsi")
    con.execute(f"SELECT sgsi_build('{sql_store}', edges := '{e}', vertices := '{v}', lean := true)").fetchall()
    assert sgsi.open(sql_store).store.lean
    assert con.execute(f"SELECT match_count('{sql_store}', '{p}')").fetchone()[0] == want
    stats = reg.last_stats
    assert stats["device"] == "cpu" and stats["steps"] >= 1 and stats["segments"] >= 1
    with pytest.raises(duckdb.Error, match="built lean.*without lean := true"):
        con.execute(f"SELECT match_count('{sql_store}', '(a)--(b)')").fetchall()
    con.close()


def test_signature_counts_on_several_threads(tmp_path, monkeypatch):
    """With build workers the counts of the batches run on several threads and update the table by
    stripes: the signatures must be those of a full store all the same."""
    edges, vlabels = random_graph(random.Random(9), 3000, 40000, 3, 3)
    e, v = write_graph_files(tmp_path, edges, vlabels)
    monkeypatch.setenv("SGSI_BUILD_WORKERS", "4")
    monkeypatch.setattr(sources, "BATCH_ROWS", 2048)            # about 20 batches per pass
    full = sgsi.build(str(tmp_path / "full.sgsi"), edges=e, vertices=v)
    lean = sgsi.build(str(tmp_path / "lean.sgsi"), edges=e, vertices=v, lean=True)
    with full, lean:
        assert _signatures(lean).equals(_signatures(full))
        p = "(a:0)-[:E0]->(b)-[:E1]->(c:2), (c)<-[:E2]-(a)"
        assert lean.count(p) == full.count(p) == oracle_count(edges, vlabels, p)
