"""sgsi (CPU backend) and its peers, side by side on the same graphs and queries.

Every engine counts the embeddings of each query with one semantics:
injective (distinct pattern vertices map to distinct data vertices),
non-induced (extra data edges are allowed), vertex and edge labels kept,
directed edges, every automorphic copy counted. Parallel edges with one
label are one edge (as in the sgsi store); every peer gets the same
deduplicated (src, dst, label) edges.

Engines (each query is parsed once by ``sgsi.pattern.parse_pattern`` and
written in each peer's form from the parsed pattern):

- ``sgsi``: ``Graph.count(pattern, device="cpu")`` on a store built once;
  every other engine's count is checked against its count.
- ``duckdb``: the SQL self-joins of ``bench/cpu_vs_duckdb.py`` (forms
  ``join`` and ``semijoin``, each with ``<>`` between every pair of pattern
  vertices); DuckDB's time is its faster form.
- ``networkx``: ``DiGraphMatcher(G, Q, node_match, edge_match)
  .subgraph_monomorphisms_iter()`` (VF2 monomorphisms = non-induced), counted.
- ``rustworkx``: ``vf2_mapping(G, Q, node_matcher, edge_matcher,
  subgraph=True, induced=False, id_order=False)``, counted.
- ``kuzu``: one node table per vertex label, one rel table per edge label
  (``FROM``/``TO`` every vertex-label pair that occurs), and Cypher
  ``MATCH (v0:L1)-[:E0]->(v1:L2), ... WHERE id(v0) <> id(v1) AND ...
  RETURN count(*)``: Kuzu's MATCH allows one node in two pattern positions
  (and even one relationship twice), so injectivity is spelled out. With
  distinct nodes, two pattern edges can never land on one data edge, so
  the relationship semantics does not matter. A graph with more than
  ``KUZU_MAX_PAIRS`` (edge label, source label, target label) triples (the
  ``watdiv`` shape has about half a million, a COPY each) gets the
  "property" schema: one node table ``vertex(id, label)``, a rel table per
  edge label, and ``WHERE v0.label = 'L1'`` (checked by the self-check too).

networkx and rustworkx run in worker processes (spawned, holding the graph)
that are killed when a query passes ``--timeout``; DuckDB is interrupted
(``con.interrupt``) and Kuzu stopped by ``set_query_timeout``. A timed-out
query is reported as ``timeout``, never waited on. A count that differs from
sgsi's is printed at once, listed at the top of the results, and makes the
script exit with status 2 (after the results are written).

Before timing, a self-check on a tiny dense graph compares every engine with
sgsi (and shows Kuzu's count without the ``<>`` constraints, which differs
wherever a pattern could fold onto fewer vertices).

    python bench/peers.py [--edges 1e4,1e5] [--big 1e6] [--per-size 3] [--timeout 60] [--runs 3]
    python bench/peers.py --edges 1e6:watdiv --big 1e6 --timeout 20 --pick-timeout 5 --pick-budget 60

Graphs: ``gen.rmat`` R-MAT graphs, ``ROWS`` or ``ROWS:SHAPE`` (``gen.SHAPES``;
default ``small``: 4 edge and 8 vertex labels). ``--big`` graphs are run by
sgsi, DuckDB and Kuzu only. Queries: random walks
(``gen.random_walk_queries``, fixed seeds) of 4, 6 and 8 vertices; per graph
and size the first ``--per-size`` of ``12 * --per-size`` walks whose sgsi
count is between 1 and ``--max-count``. On large graphs with few labels most
walks of 6+ vertices have billions of embeddings, and counting each
candidate to the end took hours; so while choosing, sgsi's count of a walk
is cancelled after ``--pick-timeout`` s (the walk is skipped) and the choice
for one size ends after ``--pick-budget`` s. Both are reported ("Choosing
the walks"). Peers that do not import are reported as not installed.
Results: ``bench/results/peers.md`` and ``peers.csv``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing as mp
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.ensure_importable()

PEERS = ("duckdb", "networkx", "rustworkx", "kuzu")
VF2 = ("networkx", "rustworkx")


# ---------------------------------------------------------------------------
# Patterns: parsed by sgsi, written in every peer's form
# ---------------------------------------------------------------------------


def parsed(pattern_text):
    """(vertex labels, edges [(src, dst, label)]) of a pattern, from sgsi's own parser."""
    from sgsi.pattern import parse_pattern
    p = parse_pattern(pattern_text)
    for e in p.edges:
        if not e.directed:
            raise ValueError(f"peers.py handles directed pattern edges only: {pattern_text}")
    return [v.label for v in p.vertices], [(e.src, e.dst, e.label) for e in p.edges]


def as_query(pattern_text, name=""):
    """The parsed pattern as a ``gen.Query`` (what cpu_vs_duckdb's SQL writers take)."""
    from gen import Query
    vl, es = parsed(pattern_text)
    return Query(vl, es, name)


def kuzu_ident(s):
    return "`" + str(s).replace("`", "``") + "`"


KUZU_VERTEX = "vertex"     # the one node table of the "property" schema
KUZU_MAX_PAIRS = 1024      # more FROM/TO (edge label, source label, target label) triples: "property" schema


def kuzu_literal(s):
    return "'" + str(s).replace("\\", "\\\\").replace("'", "\\'") + "'"


def to_cypher(pattern_text, injective=True, schema="tables"):
    """Kuzu Cypher: ``MATCH (v0:L1)-[:E0]->(v1), ... WHERE id(v0) <> id(v1) ... RETURN count(*)``.

    ``schema="tables"``: a node table per vertex label (``(v0:L1)``); ``"property"``: one node
    table ``vertex`` whose ``label`` property holds the vertex label (``(v0:vertex)`` and
    ``v0.label = 'L1'``). Edge labels are rel tables in both."""
    vl, es = parsed(pattern_text)
    seen, parts, where = set(), [], []

    def node(i):
        first = i not in seen
        seen.add(i)
        if schema == "property":
            if first and vl[i] is not None:
                where.append(f"v{i}.label = {kuzu_literal(vl[i])}")
            return f"(v{i}:{KUZU_VERTEX})" if first else f"(v{i})"
        if not first or vl[i] is None:
            return f"(v{i})"
        return f"(v{i}:{kuzu_ident(vl[i])})"

    for s, d, lab in es:
        rel = "-[]->" if lab is None else f"-[:{kuzu_ident(lab)}]->"
        parts.append(f"{node(s)}{rel}{node(d)}")
    q = "MATCH " + ", ".join(parts)
    if injective:
        where += [f"id(v{a}) <> id(v{b})" for a, b in itertools.combinations(range(len(vl)), 2)]
    if where:
        q += " WHERE " + " AND ".join(where)
    return q + " RETURN count(*)"


def edge_label_sets(es):
    """Pattern or data edges -> {(src, dst): frozenset(labels)} (parallel labels of one pair together)."""
    out = {}
    for s, d, lab in es:
        out.setdefault((s, d), set()).add(lab)
    return {k: frozenset(v) for k, v in out.items()}


def _node_ok(data_label, query_label):
    return query_label is None or data_label == query_label


def _edge_ok(data_labels, query_labels):
    # an unlabeled pattern edge (None) asks only that the data edge exists
    return all(q is None or q in data_labels for q in query_labels)


# ---------------------------------------------------------------------------
# VF2 workers (spawned processes holding the data graph)
# ---------------------------------------------------------------------------


def _load_peer_graph(path):
    """(vertex ids, vertex labels, [(src, dst, frozenset(labels))]) of the deduplicated graph files."""
    import pyarrow.parquet as pq
    vt = pq.read_table(os.path.join(path, "v.parquet"))
    et = pq.read_table(os.path.join(path, "e.parquet"))
    ids = vt["id"].to_pylist()
    vlabels = vt["label"].to_pylist() if "label" in vt.column_names else [None] * len(ids)
    labels = et["label"].to_pylist() if "label" in et.column_names else [None] * et.num_rows
    sets = edge_label_sets(zip(et["src"].to_pylist(), et["dst"].to_pylist(), labels))
    return ids, vlabels, [(s, d, ls) for (s, d), ls in sets.items()]


def _nx_counter(path):
    import networkx as nx
    from networkx.algorithms.isomorphism import DiGraphMatcher
    ids, vlabels, edges = _load_peer_graph(path)
    G = nx.DiGraph()
    G.add_nodes_from((i, {"label": lab}) for i, lab in zip(ids, vlabels))
    G.add_edges_from((s, d, {"labels": ls}) for s, d, ls in edges)

    def count(vl, es):
        Q = nx.DiGraph()
        Q.add_nodes_from((i, {"label": lab}) for i, lab in enumerate(vl))
        Q.add_edges_from((s, d, {"labels": ls}) for (s, d), ls in edge_label_sets(es).items())
        gm = DiGraphMatcher(G, Q, node_match=lambda a, b: _node_ok(a["label"], b["label"]),
                            edge_match=lambda a, b: _edge_ok(a["labels"], b["labels"]))
        return sum(1 for _ in gm.subgraph_monomorphisms_iter())
    return count


class _Pat(tuple):
    """A pattern node or edge weight for rustworkx, told apart from the data's weights."""


def _rx_match(check):
    # rustworkx 0.18 calls node_matcher(first, second) but edge_matcher(second, first) in
    # subgraph mode (observed; undocumented): put the pattern weight second whatever the order
    def match(a, b):
        return check(b, a[0]) if isinstance(a, _Pat) else check(a, b[0])
    return match


def _rx_counter(path):
    import rustworkx as rx
    ids, vlabels, edges = _load_peer_graph(path)
    G = rx.PyDiGraph(multigraph=False)
    index = dict(zip(ids, G.add_nodes_from(vlabels)))
    G.add_edges_from([(index[s], index[d], ls) for s, d, ls in edges])
    node_ok, edge_ok = _rx_match(_node_ok), _rx_match(_edge_ok)

    def count(vl, es):
        Q = rx.PyDiGraph(multigraph=False)
        Q.add_nodes_from([_Pat((lab,)) for lab in vl])
        Q.add_edges_from([(s, d, _Pat((ls,))) for (s, d), ls in edge_label_sets(es).items()])
        it = rx.vf2_mapping(G, Q, node_matcher=node_ok, edge_matcher=edge_ok,
                            id_order=False, subgraph=True, induced=False)
        return sum(1 for _ in it)
    return count


def _worker(conn, engine, path):
    """Build ``engine``'s graph from ``path``, then answer (vertex labels, edges) with (count, seconds)."""
    try:
        t = time.perf_counter()
        count = {"networkx": _nx_counter, "rustworkx": _rx_counter}[engine](path)
        conn.send(("ready", time.perf_counter() - t))
    except BaseException as e:  # noqa: BLE001
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        msg = conn.recv()
        if msg is None:
            return
        try:
            t = time.perf_counter()
            n = count(*msg)
            conn.send(("ok", n, time.perf_counter() - t))
        except BaseException as e:  # noqa: BLE001
            conn.send(("error", f"{type(e).__name__}: {e}"))


class Worker:
    """A VF2 engine in a spawned process; a query past its timeout kills it (restarted on the next)."""

    def __init__(self, engine, path, build_timeout=600):
        self.engine, self.path, self.build_timeout = engine, path, build_timeout
        self.proc = self.conn = None
        self.build_s = None
        self.failed = None

    def _start(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.engine, self.path), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(self.build_timeout):
            self.stop()
            self.failed = f"graph not built in {self.build_timeout} s"
            return
        msg = self.conn.recv()
        if msg[0] != "ready":
            self.stop()
            self.failed = msg[1]
            return
        if self.build_s is None:
            self.build_s = msg[1]

    def count(self, vl, es, timeout):
        """("ok", count, seconds) | ("timeout", None, timeout) | ("error", message, None)."""
        if self.proc is None:
            self._start()
            if self.proc is None:
                return "error", self.failed, None
        self.conn.send((vl, es))
        if not self.conn.poll(timeout):
            self.stop()
            return "timeout", None, timeout
        try:
            msg = self.conn.recv()
        except EOFError:
            self.stop()
            return "error", "worker died (out of memory?)", None
        if msg[0] == "ok":
            return msg
        return "error", msg[1], None

    def stop(self):
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.conn.close()
        self.proc = self.conn = None


# ---------------------------------------------------------------------------
# One graph, every engine
# ---------------------------------------------------------------------------


def versions():
    """{peer: version or 'not installed: ...'}."""
    out = {}
    for name in ("duckdb", "networkx", "rustworkx", "kuzu"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "?")
        except Exception as e:  # noqa: BLE001
            out[name] = f"not installed ({type(e).__name__}: {e})"
    return out


def installed(v):
    return not v.startswith("not installed")


class KuzuGraph:
    """A Kuzu database of one graph, its connection and its schema ("tables" or "property")."""

    def __init__(self, db, conn, schema, load_s, shape):
        self.db, self.conn, self.schema, self.load_s, self.shape = db, conn, schema, load_s, shape

    def close(self):
        self.conn.close()
        self.db.close()


class Bench:
    """A generated graph loaded into sgsi, DuckDB, Kuzu and the VF2 workers."""

    def __init__(self, gdir, meta, engines, timeout, threads, kuzu_schema="auto"):
        import duckdb

        import sgsi
        self.gdir, self.meta, self.engines, self.timeout = gdir, meta, list(engines), timeout
        self.info = {"edges": meta["edges"], "scale": meta["scale"], "vertices": meta["vertices"]}
        epath, vpath = os.path.join(gdir, "edges.parquet"), os.path.join(gdir, "vertices.parquet")
        t = time.perf_counter()
        self.g = sgsi.build(os.path.join(gdir, "g.sgsi"), edges=epath, vertices=vpath, force=True)
        self.info["sgsi_build_s"] = time.perf_counter() - t
        self.info["distinct_edges"] = self.g.store.n_edges
        C.say(f"  {self.g} built in {self.info['sgsi_build_s']:.2f} s")

        self.con = duckdb.connect()
        self.con.execute(f"SET threads = {threads}")
        t = time.perf_counter()
        self.con.execute(f"CREATE TABLE e AS SELECT DISTINCT src::BIGINT AS src, dst::BIGINT AS dst, label "
                         f"FROM read_parquet('{epath}')")
        self.con.execute(f"CREATE TABLE v AS SELECT id::BIGINT AS id, label FROM read_parquet('{vpath}')")
        self.info["duckdb_load_s"] = time.perf_counter() - t
        n = self.con.execute("SELECT count(*) FROM e").fetchone()[0]
        if n != self.g.store.n_edges:
            raise SystemExit(f"MISMATCH: DuckDB has {n} distinct edges, the sgsi store {self.g.store.n_edges}")
        # the deduplicated graph, as the VF2 workers and Kuzu read it
        self.pdir = os.path.join(gdir, "peers")
        shutil.rmtree(self.pdir, ignore_errors=True)
        os.makedirs(self.pdir)
        self.con.execute(f"COPY (SELECT * FROM e ORDER BY src, dst, label) TO '{self.pdir}/e.parquet' (FORMAT parquet)")
        self.con.execute(f"COPY (SELECT * FROM v ORDER BY id) TO '{self.pdir}/v.parquet' (FORMAT parquet)")

        self.kz, self.kz_extra = None, []
        if "kuzu" in self.engines:
            try:
                self.kz = self.load_kuzu(threads, kuzu_schema)
                self.info["kuzu_schema"] = self.kz.schema
                self.info["kuzu_load_s"] = self.kz.load_s
                self.info["kuzu_shape"] = self.kz.shape
            except Exception as e:  # noqa: BLE001
                self.info["kuzu_error"] = f"{type(e).__name__}: {e}"
                C.say(f"  !! Kuzu failed to load the graph: {self.info['kuzu_error']}")
                self.engines.remove("kuzu")
        self.workers = {e: Worker(e, self.pdir) for e in self.engines if e in VF2}

    def load_kuzu(self, threads, schema="auto", tag="kuzu"):
        """The deduplicated graph in a Kuzu database ``<peers>/<tag>``: a :class:`KuzuGraph`.

        ``schema``: ``"tables"`` (a node table per vertex label, a rel table per edge label with a
        FROM/TO pair per vertex-label pair that occurs), ``"property"`` (one node table ``vertex``
        with a ``label`` property, a rel table per edge label FROM vertex TO vertex) or ``"auto"``
        (``tables`` up to ``KUZU_MAX_PAIRS`` FROM/TO pairs: a graph with 1,000 vertex labels has
        hundreds of thousands, a load of one COPY each)."""
        import kuzu
        kdir = os.path.join(self.pdir, tag)
        fdir = os.path.join(self.pdir, tag + "_files")
        os.makedirs(fdir)
        t = time.perf_counter()
        vlabels = [r[0] for r in self.con.execute("SELECT DISTINCT label FROM v ORDER BY label NULLS LAST").fetchall()]
        if None in vlabels:
            raise ValueError("unlabeled vertices are not handled by the Kuzu loader")
        triples = self.con.execute(
            "SELECT e.label, a.label, b.label FROM e JOIN v a ON a.id = e.src JOIN v b ON b.id = e.dst "
            "GROUP BY ALL ORDER BY ALL").fetchall()
        elabels = sorted({t[0] for t in triples})
        if schema == "auto":
            schema = "tables" if len(triples) <= KUZU_MAX_PAIRS else "property"
        names = set(map(str, vlabels)) if schema == "tables" else {KUZU_VERTEX}
        if names & set(map(str, elabels)):
            raise ValueError("a node table name equals an edge label: one Kuzu table namespace")
        db = kuzu.Database(kdir, buffer_pool_size=2 << 30)
        kz = kuzu.Connection(db, num_threads=threads)
        if schema == "tables":
            for i, lab in enumerate(vlabels):
                f = f"{fdir}/v{i}.parquet"
                self.con.execute(f"COPY (SELECT id FROM v WHERE label = ? ORDER BY id) TO '{f}' (FORMAT parquet)",
                                 [lab])
                kz.execute(f"CREATE NODE TABLE {kuzu_ident(lab)}(id INT64, PRIMARY KEY(id))")
                kz.execute(f"COPY {kuzu_ident(lab)} FROM '{f}'")
            for el in elabels:
                pairs = [(a, b) for e_, a, b in triples if e_ == el]
                kz.execute(f"CREATE REL TABLE {kuzu_ident(el)}(" +
                           ", ".join(f"FROM {kuzu_ident(a)} TO {kuzu_ident(b)}" for a, b in pairs) + ")")
                for j, (a, b) in enumerate(pairs):
                    f = f"{fdir}/e_{elabels.index(el)}_{j}.parquet"
                    self.con.execute(
                        f"COPY (SELECT e.src AS \"from\", e.dst AS \"to\" FROM e JOIN v a ON a.id = e.src "
                        f"JOIN v b ON b.id = e.dst WHERE e.label = ? AND a.label = ? AND b.label = ?) "
                        f"TO '{f}' (FORMAT parquet)", [el, a, b])
                    kz.execute(f"COPY {kuzu_ident(el)} FROM '{f}' (from='{a}', to='{b}')")
            shape = f"{len(vlabels)} node tables, {len(elabels)} rel tables ({len(triples)} FROM/TO pairs)"
        else:
            f = f"{fdir}/v.parquet"
            self.con.execute(f"COPY (SELECT id, label::VARCHAR AS label FROM v ORDER BY id) TO '{f}' (FORMAT parquet)")
            kz.execute(f"CREATE NODE TABLE {KUZU_VERTEX}(id INT64, label STRING, PRIMARY KEY(id))")
            kz.execute(f"COPY {KUZU_VERTEX} FROM '{f}'")
            for i, el in enumerate(elabels):
                f = f"{fdir}/e_{i}.parquet"
                self.con.execute(f"COPY (SELECT src AS \"from\", dst AS \"to\" FROM e WHERE label = ? "
                                 f"ORDER BY src, dst) TO '{f}' (FORMAT parquet)", [el])
                kz.execute(f"CREATE REL TABLE {kuzu_ident(el)}(FROM {KUZU_VERTEX} TO {KUZU_VERTEX})")
                kz.execute(f"COPY {kuzu_ident(el)} FROM '{f}'")
            shape = (f"1 node table `{KUZU_VERTEX}(id, label)` ({len(vlabels)} vertex labels), "
                     f"{len(elabels)} rel tables")
        load_s = time.perf_counter() - t
        n = sum(kz.execute(f"MATCH ()-[r:{kuzu_ident(el)}]->() RETURN count(*)").get_next()[0] for el in elabels)
        if n != self.g.store.n_edges:
            raise ValueError(f"Kuzu holds {n} edges, the sgsi store {self.g.store.n_edges}")
        shutil.rmtree(fdir)
        C.say(f"  Kuzu ({schema} schema): {shape}, loaded in {load_s:.2f} s")
        return KuzuGraph(db, kz, schema, load_s, shape)

    # -- one engine, one query: (status, count, seconds, note) -------------------------

    def run_sgsi(self, pattern):
        t = time.perf_counter()
        n = self.g.count(pattern, device="cpu")
        return "ok", n, time.perf_counter() - t, ""

    def run_duckdb(self, pattern, forms):
        import cpu_vs_duckdb as CD
        q = as_query(pattern)
        best, counts, notes = None, set(), []
        for f in forms:
            s, n = CD.timed_duckdb(self.con, CD.SQL_FORMS[f](q), self.timeout)
            if n is None:
                notes.append(f"{f}: timeout")
                continue
            counts.add(n)
            notes.append(f"{f}: {s:.3f}")
            if best is None or s < best[0]:
                best = (s, n, f)
        if len(counts) > 1:
            return "error", None, None, "DuckDB forms disagree: " + ", ".join(notes)
        if best is None:
            return "timeout", None, self.timeout, "; ".join(notes)
        return "ok", best[1], best[0], f"best form {best[2]} ({'; '.join(notes)})"

    def run_kuzu(self, pattern, injective=True, kz=None):
        kz = kz or self.kz
        kz.conn.set_query_timeout(int(self.timeout * 1000))
        q = to_cypher(pattern, injective, kz.schema)
        t = time.perf_counter()
        try:
            n = kz.conn.execute(q).get_next()[0]
        except RuntimeError as e:
            if "interrupt" in str(e).lower() or "timeout" in str(e).lower():
                return "timeout", None, self.timeout, ""
            return "error", None, None, f"{e}"[:200]
        return "ok", n, time.perf_counter() - t, ""

    def run_vf2(self, engine, pattern):
        vl, es = parsed(pattern)
        status, n, s = self.workers[engine].count(vl, es, self.timeout)
        if status == "error":
            return "error", None, None, str(n)[:200]
        return status, n, s, ""

    def run(self, engine, pattern, forms):
        if engine == "sgsi":
            return self.run_sgsi(pattern)
        if engine == "duckdb":
            return self.run_duckdb(pattern, forms)
        if engine == "kuzu":
            return self.run_kuzu(pattern)
        return self.run_vf2(engine, pattern)

    def close(self):
        for w in self.workers.values():
            w.stop()
        for kz in [self.kz] + self.kz_extra:
            if kz is not None:
                kz.close()
        self.con.close()
        self.g.close()


def timed(bench, engine, pattern, runs, forms, repeat_under):
    """Best of up to ``runs`` runs; no rerun after a run of ``repeat_under`` s or more, a timeout or an error."""
    times, result = [], None
    for _ in range(runs):
        status, n, s, note = bench.run(engine, pattern, forms)
        if status != "ok":
            return {"status": status, "count": n, "seconds": s, "all": times, "note": note}
        if result is not None and n != result:
            return {"status": "error", "count": n, "seconds": None, "all": times,
                    "note": f"count changed between runs: {result} then {n}"}
        result = n
        times.append(s)
        if s >= repeat_under:
            break
    return {"status": "ok", "count": result, "seconds": min(times), "all": times, "note": note}


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def fmt_s(x):
    return f"{x:.4f}" if x < 0.1 else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def pick_queries(walks, g, sizes, per_size, max_count, seed, tag, pick_timeout=math.inf, pick_budget=math.inf):
    """Per size k, the first ``per_size`` of ``12 * per_size`` random walks (seed ``seed * 1000 + k``)
    whose sgsi count is between 1 and ``max_count``: (queries, [one log dict per size]).

    Counting a candidate is what costs: on a large graph with few labels a walk of 6 or 8
    vertices has billions of embeddings. So sgsi's count of a candidate is cancelled after
    ``pick_timeout`` s (the walk is skipped, its count unknown) and the choice for one size stops
    after ``pick_budget`` s (fewer queries). Both are logged and reported, since they choose
    with sgsi's speed: a walk skipped as too slow for sgsi is not run on any engine."""
    import gen
    from sgsi.errors import Cancelled
    out, log = [], []
    for k in sizes:
        cands = gen.random_walk_queries(walks, k, 12 * per_size, seed=seed * 1000 + k)
        st = {"k": k, "walks": len(cands), "tried": 0, "picked": 0, "zero": 0, "over": 0, "slow": 0,
              "budget_spent": False}
        t0 = time.perf_counter()
        for q in cands:
            if st["picked"] == per_size:
                break
            if time.perf_counter() - t0 > pick_budget:
                st["budget_spent"] = True
                break
            st["tried"] += 1
            deadline = time.perf_counter() + pick_timeout
            try:
                c = g.count(q.pattern, device="cpu", cancel=lambda d=deadline: time.perf_counter() > d)
            except Cancelled:
                st["slow"] += 1
                continue
            if c < 1:
                st["zero"] += 1
            elif c > max_count:
                st["over"] += 1
            else:
                q.name = f"{tag}k{k}_{st['picked']}"
                q.info["count"] = c
                out.append(q)
                st["picked"] += 1
        st["seconds"] = time.perf_counter() - t0
        C.say(f"  walks of {k} vertices: {st['picked']} chosen of {st['tried']} counted in {st['seconds']:.1f} s "
              f"({st['over']} over {max_count:.0e}, {st['slow']} not counted in {pick_timeout:g} s, "
              f"{st['zero']} empty{', choice budget spent' if st['budget_spent'] else ''})")
        log.append(st)
    return out, log


SELF_CHECK = [
    ("path_fold", "(a:L0)-[:E0]->(b)-[:E0]->(c)"),           # a = c possible through a 2-cycle
    ("two_cycle", "(a)-[:E0]->(b), (b)-[:E0]->(a)"),
    ("two_labels", "(a)-[:E0]->(b), (a)-[:E1]->(b)"),          # one pair, both edge labels
    ("triangle", "(a:L0)-[:E0]->(b)-[:E1]->(c), (a)-[:E0]->(c)"),
    ("star_out", "(a)-[:E0]->(b:L0), (a)-[:E0]->(c:L0), (a)-[:E1]->(d)"),
]


def self_check(args, engines, threads, data):
    """Every engine against sgsi on a tiny dense graph: [{query, pattern, engine: count, ...}]."""
    import gen
    gdir = os.path.join(data, "selfcheck")
    meta = gen.rmat(gdir, 600, scale=5, shape="small", edge_labels=2, vertex_labels=2, seed=args.seed, device="cpu")
    C.say(f"self-check graph: 600 R-MAT rows on {meta['vertices']} vertices, 2 vertex and 2 edge labels")
    b = Bench(gdir, meta, engines, args.timeout, threads, kuzu_schema="tables")
    if "kuzu" in b.engines:      # the schema of graphs with many labels, checked here too
        kz_prop = b.load_kuzu(threads, "property", tag="kuzu_property")
        b.kz_extra.append(kz_prop)
    qs = [(n, p) for n, p in SELF_CHECK]
    for k in (3, 4, 5):
        for i, q in enumerate(gen.random_walk_queries(gdir, k, 2, seed=77 + k)):
            qs.append((f"walk{k}_{i}", q.pattern))
    rows = []
    for name, pat in qs:
        row = {"query": name, "pattern": pat}
        for e in ["sgsi"] + [e for e in b.engines if e != "sgsi"]:
            status, n, _s, _note = b.run(e, pat, args.forms)
            row[e] = n if status == "ok" else status
        if "kuzu" in b.engines:
            status, n, _s, _note = b.run_kuzu(pat, injective=False)
            row["kuzu_no_injectivity"] = n if status == "ok" else status
            status, n, _s, _note = b.run_kuzu(pat, kz=kz_prop)
            row["kuzu_property_schema"] = n if status == "ok" else status
        rows.append(row)
        C.say(f"  {name:12s} " + "  ".join(f"{e}={row[e]}" for e in row if e not in ("query", "pattern")))
    info = dict(b.info)
    b.close()
    return rows, info


def graph_spec(text):
    """``"1e6"`` -> (1000000, "small"); ``"1e6:watdiv"`` -> (1000000, "watdiv")."""
    import gen
    rows, _, shape = text.partition(":")
    shape = shape or "small"
    if shape not in gen.SHAPES:
        raise SystemExit(f"unknown shape {shape!r} in {text!r}; choose from {', '.join(gen.SHAPES)}")
    return int(float(rows)), shape


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", default="1e4,1e5", help="R-MAT edge rows of the graphs every engine runs; "
                   "ROWS or ROWS:SHAPE (gen.SHAPES; default shape small), e.g. 1e4,1e6:watdiv")
    p.add_argument("--big", default="", help="graphs (as --edges) for sgsi, DuckDB and Kuzu only (e.g. 1e6)")
    p.add_argument("--sizes", default="4,6,8", help="query vertex counts")
    p.add_argument("--per-size", type=int, default=3, help="queries per vertex count and graph")
    p.add_argument("--max-count", type=float, default=1e8, help="skip walks with more sgsi embeddings than this")
    p.add_argument("--pick-timeout", type=float, default=None,
                   help="skip a walk whose sgsi count takes longer than this while choosing (s; default --timeout)")
    p.add_argument("--pick-budget", type=float, default=None,
                   help="stop choosing walks of one size after this (s; default 10 x --pick-timeout)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60, help="per engine, query and run (s)")
    p.add_argument("--runs", type=int, default=3, help="best of this many runs ...")
    p.add_argument("--repeat-under", type=float, default=2.0, help="... rerunning only after runs shorter than this (s)")
    p.add_argument("--engines", default="sgsi," + ",".join(PEERS))
    p.add_argument("--sql", default="join,semijoin", help="DuckDB SQL forms (cpu_vs_duckdb.SQL_FORMS)")
    p.add_argument("--no-self-check", action="store_true")
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "peers"))
    p.add_argument("--results", default=C.RESULTS_DIR)
    p.add_argument("--name", default="peers", help="result file stem")
    args = p.parse_args(argv)
    args.forms = [f for f in args.sql.split(",") if f]
    if args.pick_timeout is None:
        args.pick_timeout = args.timeout
    if args.pick_budget is None:
        args.pick_budget = 10 * args.pick_timeout
    m0 = C.machine()
    threads = os.cpu_count()
    vers = versions()
    wanted = [e for e in args.engines.split(",") if e]
    engines = ["sgsi"] + [e for e in PEERS if e in wanted and installed(vers[e])]
    for e in PEERS:
        if e in wanted and not installed(vers[e]):
            C.say(f"!! {e} {vers[e]}: left out")
    import gen

    mismatches = []
    check_rows, check_info = ([], {})
    if not args.no_self_check:
        check_rows, check_info = self_check(args, engines, threads, args.data)
        for r in check_rows:
            for e in engines[1:]:
                if r.get(e) != r["sgsi"]:
                    msg = f"self-check {r['query']}: sgsi {r['sgsi']} vs {e} {r.get(e)} ({r['pattern']})"
                    C.say("!!! COUNT MISMATCH " + msg)
                    mismatches.append(msg)
            if "kuzu_property_schema" in r and r["kuzu_property_schema"] != r["sgsi"]:
                msg = (f"self-check {r['query']}: sgsi {r['sgsi']} vs kuzu (property schema) "
                       f"{r['kuzu_property_schema']} ({r['pattern']})")
                C.say("!!! COUNT MISMATCH " + msg)
                mismatches.append(msg)

    sizes = [int(x) for x in args.sizes.split(",") if x]
    graphs = [graph_spec(x) + (False,) for x in args.edges.split(",") if x] + \
             [graph_spec(x) + (True,) for x in args.big.split(",") if x]
    rows, ginfo = [], []
    for n_edges, shape, big in graphs:
        eng = [e for e in engines if not (big and e in VF2)]
        # the small-shape graphs keep their folders and query names of before
        sfx = "" if shape == "small" else f"_{shape}"
        gdir = os.path.join(args.data, f"rmat_{n_edges}{sfx}_s{args.seed}")
        gname = f"{n_edges:,}" + ("" if shape == "small" else f" {shape}")
        meta = gen.rmat(gdir, n_edges, shape=shape, seed=args.seed, device="cpu")
        C.say(f"graph: {n_edges:,} R-MAT rows, shape {shape} ({meta['vertex_labels']} vertex and "
              f"{meta['edge_labels']} edge labels), scale {meta['scale']} ({meta['vertices']:,} vertices)")
        b = Bench(gdir, meta, eng, args.timeout, threads)
        b.info.update(shape=shape, name=gname, vertex_labels=meta["vertex_labels"], edge_labels=meta["edge_labels"])
        eng = ["sgsi"] + [e for e in b.engines if e != "sgsi"]
        t = time.perf_counter()
        walks = gen._load_walk_graph(gdir, device="cpu")     # loaded once for every size
        C.say(f"  choosing walks (walk graph loaded in {time.perf_counter() - t:.2f} s)")
        queries, b.info["pick"] = pick_queries(walks, b.g, sizes, args.per_size, args.max_count, args.seed,
                                               f"g{n_edges:.0e}{sfx}_".replace("+0", ""),
                                               args.pick_timeout, args.pick_budget)
        del walks
        for q in queries:
            res = {}
            for e in eng:
                res[e] = timed(b, e, q.pattern, args.runs, args.forms, args.repeat_under)
            sc = res["sgsi"]["count"]
            for e in eng:
                r = res[e]
                if r["status"] == "ok" and e != "sgsi" and r["count"] != sc:
                    r["status"] = "MISMATCH"
                    msg = f"{q.name} on {gname} edges: sgsi {sc} vs {e} {r['count']} ({q.pattern})"
                    C.say("!!! COUNT MISMATCH " + msg)
                    mismatches.append(msg)
                ratio = (r["seconds"] / res["sgsi"]["seconds"]) if r["status"] == "ok" and e != "sgsi" else None
                rows.append({"graph_edges": n_edges, "shape": shape, "distinct_edges": b.info["distinct_edges"],
                             "graph_vertices": meta["vertices"], "query": q.name, "vertices": q.k,
                             "edges": len(q.edges), "engine": e, "status": r["status"], "count": r["count"],
                             "sgsi_count": sc, "seconds": None if r["seconds"] is None else round(r["seconds"], 5),
                             "ratio_vs_sgsi": None if ratio is None else round(ratio, 3),
                             "runs": " ".join(f"{x:.4f}" for x in r["all"]), "note": r["note"], "pattern": q.pattern})
            C.say(f"  {q.name:14s} count {sc:>12,}  " + "  ".join(
                f"{e} {fmt_s(res[e]['seconds']) if res[e]['status'] == 'ok' else res[e]['status']}" for e in eng))
        for e in PEERS:
            if e in VF2 and e in b.workers and b.workers[e].build_s is not None:
                b.info[f"{e}_build_s"] = b.workers[e].build_s
        b.info["engines"] = eng
        b.info["big"] = big
        b.info["queries"] = queries
        ginfo.append(b.info)
        b.close()

    m = C.machine_at_end(m0)
    for r in rows:
        r.update({"commit": m["commit"], "date": m["date"]})
    C.write_csv(os.path.join(args.results, args.name + ".csv"), rows,
                ["date", "commit", "graph_edges", "shape", "distinct_edges", "graph_vertices", "query", "vertices", "edges",
                 "engine", "status", "count", "sgsi_count", "seconds", "ratio_vs_sgsi", "runs", "note", "pattern"])
    md = report(args, m, vers, engines, check_rows, check_info, ginfo, rows, mismatches, argv)
    C.write_text(os.path.join(args.results, args.name + ".md"), md)
    print(md)
    if mismatches:
        C.say(f"!!! {len(mismatches)} COUNT MISMATCH(ES): see the top of {args.name}.md")
        sys.exit(2)


def report(args, m, vers, engines, check_rows, check_info, ginfo, rows, mismatches, argv):
    cmd = "python bench/peers.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = [f"# sgsi (CPU) and its peers\n\n`{cmd.strip()}`\n\n"]
    if mismatches:
        out.append("## !!! COUNT MISMATCHES !!!\n\n" + "\n".join(f"- {x}" for x in mismatches) + "\n\n")
    out.append(C.machine_md(m))
    out.append("- peers: " + "; ".join(f"{k} {v}" for k, v in vers.items()) +
               f"; sgsi CPU backend (NumPy); engines run: {', '.join(engines)}\n")
    missing = [k for k, v in vers.items() if not installed(v)]
    if missing:
        out.append("- **not installed, left out:** " + ", ".join(f"{k} ({vers[k]})" for k in missing) + "\n")
    out.append(f"""
## Setup

- semantics, every engine: injective, non-induced, vertex and edge labels kept, directed,
  every automorphic copy counted; parallel edges with one label are one edge (all peers get
  the deduplicated `(src, dst, label)` edges of the sgsi store; the edge counts are checked equal)
- each query is parsed by `sgsi.pattern.parse_pattern` and written in each peer's form:
  - sgsi: `Graph.count(pattern, device="cpu")` on a store built once per graph
  - DuckDB: `SET threads = {m['nproc']}`, in-memory tables `e(src, dst, label)` (`SELECT DISTINCT`) and
    `v(id, label)`; the `{'` and `'.join(args.forms)}` self-joins of `bench/cpu_vs_duckdb.py` with `<>`
    between every pair of pattern vertices; DuckDB's time is its faster form
  - networkx: `DiGraphMatcher(G, Q, node_match, edge_match).subgraph_monomorphisms_iter()` counted
    (edge attribute: the set of labels of a vertex pair; a pattern edge label must be in it)
  - rustworkx: `vf2_mapping(G, Q, node_matcher, edge_matcher, subgraph=True, induced=False,
    id_order=False)` counted (same matchers; `id_order=False`: the VF2++ order)
  - Kuzu: one node table per vertex label, one rel table per edge label with a `FROM/TO` pair for
    every vertex-label pair that occurs; `MATCH (v0:L1)-[:E0]->(v1:L2), ... WHERE id(v0) <> id(v1)
    AND ... RETURN count(*)`, `num_threads={m['nproc']}`, 2 GiB buffer pool, on disk. A graph with
    more than {KUZU_MAX_PAIRS:,} such (edge label, source label, target label) triples (the `watdiv` shape:
    1,000 vertex labels, about half a million triples, a COPY each) gets the *property* schema
    instead: one node table `{KUZU_VERTEX}(id, label)`, one rel table per edge label `FROM {KUZU_VERTEX} TO
    {KUZU_VERTEX}`, and `MATCH (v0:{KUZU_VERTEX})-[:E0]->(v1:{KUZU_VERTEX}), ... WHERE v0.label = 'L1' AND ...`
- timing: best of up to {args.runs} runs, no rerun after a run of {args.repeat_under:g} s or more;
  per engine, query and run a limit of {args.timeout:g} s (VF2 workers are killed, DuckDB
  interrupted, Kuzu stopped by `set_query_timeout`): `timeout` in the tables
- ratio = peer time / sgsi time (above 1: sgsi faster); geometric means over the queries
  where the peer finished (so a peer with timeouts is flattered by its mean)
- graphs: `gen.rmat` (seed {args.seed}), shape `small` (4 edge and 8 vertex labels, Zipf) unless named
  otherwise (`watdiv`: 86 edge and 1,000 vertex labels)
- queries: random walks (`gen.random_walk_queries`, seed {args.seed}·1000+k) of {args.sizes} vertices;
  per graph and size the first {args.per_size} of {12 * args.per_size} walks whose sgsi count is between 1 and
  {args.max_count:.0e}. While choosing, sgsi's count of a walk is cancelled after {args.pick_timeout:g} s (the
  walk is skipped) and the choice for one size stops after {args.pick_budget:g} s: see *Choosing the walks*.
  This uses sgsi's speed to choose: a walk sgsi does not count in time is run on no engine
- every peer's count is checked equal to sgsi's; a difference is listed at the top as a MISMATCH
- rustworkx 0.18 passes `node_matcher(data, pattern)` but `edge_matcher(pattern, data)` in
  subgraph mode (observed, undocumented); the matchers here tell the two apart by type, so the
  order does not matter (with the documented order assumed, its counts were wrong)

""")
    if check_rows:
        cols = [c for c in check_rows[0] if c not in ("query", "pattern")]
        out.append("## Self-check on a tiny graph\n\n"
                   f"R-MAT, 600 rows on 32 vertices ({check_info.get('distinct_edges')} distinct edges), "
                   "2 vertex and 2 edge labels (dense, with 2-cycles and self-loops), "
                   "so that non-injective matches exist. `kuzu_no_injectivity` is Kuzu's count without the "
                   "`<>` constraints: Kuzu (Cypher) lets two pattern vertices share a node. `kuzu_property_schema` is Kuzu's "
                   "count on the property schema (one node table with a label property), loaded for this check.\n\n"
                   "| query | " + " | ".join(cols) + " | pattern |\n|---|" + "---:|" * len(cols) + "---|\n" +
                   "\n".join(f"| {r['query']} | " + " | ".join(str(r[c]) for c in cols) + f" | `{r['pattern']}` |"
                             for r in check_rows) + "\n\n")
    out.append("## Graphs\n\n| R-MAT rows | shape | scale | vertices | distinct edges | engines | sgsi build (s) | "
               "DuckDB load (s) | Kuzu load (s) | networkx build (s) | rustworkx build (s) |\n"
               "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
    for gi in ginfo:
        def cell(k, gi=gi):
            return f"{gi[k]:.2f}" if k in gi else "–"
        out.append(f"| {gi['edges']:,} | {gi.get('shape', 'small')} | {gi['scale']} | {gi['vertices']:,} | "
                   f"{gi['distinct_edges']:,} | "
                   f"{', '.join(gi['engines'])} | {cell('sgsi_build_s')} | {cell('duckdb_load_s')} | "
                   f"{cell('kuzu_load_s')} | {cell('networkx_build_s')} | {cell('rustworkx_build_s')} |\n")
    for gi in ginfo:
        if "kuzu_error" in gi:
            out.append(f"\nKuzu could not load the {gi['name']}-row graph: {gi['kuzu_error']}\n")
        elif "kuzu_shape" in gi:
            out.append(f"\nKuzu, {gi['name']} rows: {gi['kuzu_schema']} schema, {gi['kuzu_shape']}\n")
    out.append("\n## Choosing the walks\n\nPer graph and size: walks tried (sgsi count started), chosen, "
               f"skipped with a count above {args.max_count:.0e}, skipped as not counted by sgsi in "
               f"{args.pick_timeout:g} s, empty; and the seconds the choice took.\n\n"
               "| graph (R-MAT rows) | k | walks | tried | chosen | over max-count | not counted in time | empty | "
               "choice (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for gi in ginfo:
        for st in gi.get("pick", []):
            out.append(f"| {gi['name']} | {st['k']} | {st['walks']} | {st['tried']} | {st['picked']} | {st['over']} | "
                       f"{st['slow']} | {st['zero']} | {st['seconds']:.1f}"
                       f"{' (budget spent)' if st['budget_spent'] else ''} |\n")
    out.append("\n## Results\n\nEach cell: time in seconds (ratio peer / sgsi).\n")
    summary = []
    for gi in ginfo:
        eng = gi["engines"]
        peers = [e for e in eng if e != "sgsi"]
        gr = [r for r in rows if r["graph_edges"] == gi["edges"] and r["shape"] == gi["shape"]]
        out.append(f"\n### {gi['name']} R-MAT rows ({gi['distinct_edges']:,} distinct edges, "
                   f"{gi['vertices']:,} vertices)\n\n"
                   "| query | k | edges | count | sgsi (s) | " + " | ".join(peers) + " |\n"
                   "|---|---:|---:|---:|---:|" + "---:|" * len(peers) + "\n")
        for q in gi["queries"]:
            by = {r["engine"]: r for r in gr if r["query"] == q.name}
            cells = []
            for e in peers:
                r = by[e]
                if r["status"] == "ok":
                    cells.append(f"{fmt_s(r['seconds'])} ({r['ratio_vs_sgsi']:.3g}×)")
                elif r["status"] == "timeout":
                    cells.append(f"timeout (>{args.timeout:g} s)")
                elif r["status"] == "MISMATCH":
                    cells.append(f"**MISMATCH** {r['count']}")
                else:
                    cells.append(f"error: {r['note'][:60]}")
            s = by["sgsi"]
            out.append(f"| {q.name} | {q.k} | {len(q.edges)} | {s['count']:,} | {fmt_s(s['seconds'])} | " +
                       " | ".join(cells) + " |\n")
        for e in peers:
            rs = [r for r in gr if r["engine"] == e]
            ok = [r["ratio_vs_sgsi"] for r in rs if r["status"] == "ok"]
            summary.append((gi["name"], e, len(ok), len(rs),
                            geomean(ok), sum(r["status"] == "timeout" for r in rs)))
    out.append("\n## Geometric means of peer / sgsi\n\n| R-MAT rows | peer | finished | geomean ratio | timeouts |\n"
               "|---:|---|---:|---:|---:|\n" +
               "\n".join(f"| {g_} | {e} | {ok}/{n} | {gm:.3g} | {to} |".replace("| nan |", "| – |")
                         for g_, e, ok, n, gm, to in summary) + "\n")
    if ginfo and ginfo[0]["queries"]:
        q = ginfo[0]["queries"][0]
        import cpu_vs_duckdb as CD
        qq = as_query(q.pattern)
        out.append(f"\n## One query in every form (`{q.name}`)\n\nsgsi:\n\n```\n{q.pattern}\n```\n\n"
                   + "".join(f"DuckDB `{f}`:\n\n```sql\n{CD.SQL_FORMS[f](qq)}\n```\n\n" for f in args.forms)
                   + f"Kuzu:\n\n```\n{to_cypher(q.pattern)}\n```\n"
                   + (f"\nKuzu, property schema:\n\n```\n{to_cypher(q.pattern, schema='property')}\n```\n"
                      if any(gi.get("kuzu_schema") == "property" for gi in ginfo) else ""))
    out.append("\n## Queries\n\n" + "\n".join(f"- `{q.name}`: `{q.pattern}`" for gi in ginfo for q in gi["queries"]) + "\n")
    return "".join(out)


if __name__ == "__main__":
    main()
