"""sgsi (CPU backend) against DuckDB's own SQL self-joins, on one labeled R-MAT graph.

Each query is counted by ``Graph.count(pattern, device='cpu')`` on a store
opened once, and by a DuckDB SQL self-join over the same (deduplicated)
edge table with the same semantics: every pattern edge an edge with that
label and direction, vertex labels through a join to the vertex table, and
all pattern vertices pairwise distinct (injective). The counts must be
equal, or the script stops with an error. Each query runs ``--runs`` times
per system; the best time is reported, and the ratio sgsi / DuckDB (below
1: sgsi faster). DuckDB gets all cores and in-memory tables.

    python bench/cpu_vs_duckdb.py [--edges 1e6] [--runs 3] [--profile]

Results: ``bench/results/cpu_vs_duckdb.md`` and ``.csv`` (and
``cpu_vs_duckdb_profile.txt`` with ``--profile``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import duckdb  # noqa: E402

import gen  # noqa: E402
import sgsi  # noqa: E402
from gen import Query  # noqa: E402

# ---------------------------------------------------------------------------
# The queries: vertex labels and directed labeled edges (i -> j, label).
# Labels are for the `small` shape (L0..L7 Zipf vertex labels, E0..E3 edge labels).
# ---------------------------------------------------------------------------

QUERIES = [
    # triangles
    Query(["L1", "L2", "L1"], [(0, 1, "E0"), (1, 2, "E0"), (0, 2, "E1")], "triangle_transitive"),
    Query(["L1", None, "L2"], [(0, 1, "E0"), (1, 2, "E1"), (2, 0, "E0")], "triangle_cycle"),
    # 4-cycles
    Query(["L1", "L2", "L1", "L3"], [(0, 1, "E0"), (1, 2, "E0"), (2, 3, "E1"), (3, 0, "E0")], "4cycle_directed"),
    Query(["L2", "L1", "L3", "L1"], [(0, 1, "E0"), (2, 1, "E1"), (2, 3, "E0"), (0, 3, "E2")], "4cycle_mixed"),
    # 5-vertex queries
    Query(["L1", "L2", "L3", "L4", "L5"],
          [(0, 1, "E0"), (1, 2, "E0"), (2, 3, "E1"), (3, 4, "E0"), (4, 0, "E2")], "5cycle"),
    Query(["L1", "L2", "L3", "L2", "L6"],
          [(0, 1, "E0"), (1, 2, "E1"), (2, 3, "E0"), (3, 0, "E0"), (4, 0, "E1"), (4, 1, "E0")], "house"),
    Query(["L2", "L1", "L1", "L3", "L5"],
          [(0, 1, "E0"), (0, 2, "E0"), (1, 3, "E1"), (2, 3, "E0"), (1, 2, "E2"), (3, 4, "E1")],
          "diamond_tail"),
]


def sql_literal(x):
    if isinstance(x, (int,)) and not isinstance(x, bool):
        return str(int(x))
    return "'" + str(x).replace("'", "''") + "'"


def to_sql(q: Query, e="e", v="v") -> str:
    """``SELECT count(*)`` of the injective, label-preserving matches of ``q`` as a self-join."""
    frm, where, bind = [], [], {}
    for n, (i, j, lab) in enumerate(q.edges):
        frm.append(f"{e} AS e{n}")
        if lab is not None:
            where.append(f"e{n}.label = {sql_literal(lab)}")
        for u, col in ((i, f"e{n}.src"), (j, f"e{n}.dst")):
            if u in bind:
                where.append(f"{col} = {bind[u]}")
            else:
                bind[u] = col
    for u, lab in enumerate(q.vertex_labels):
        if lab is not None:
            frm.append(f"{v} AS n{u}")
            where.append(f"n{u}.id = {bind[u]}")
            where.append(f"n{u}.label = {sql_literal(lab)}")
    us = sorted(bind)
    for x in range(len(us)):
        for y in range(x + 1, len(us)):
            where.append(f"{bind[us[x]]} <> {bind[us[y]]}")
    return "SELECT count(*) FROM " + ", ".join(frm) + "\nWHERE " + "\n  AND ".join(where)


def to_sql_semijoin(q: Query, e="e", v="v") -> str:
    """The same count, each pattern edge first filtered by its label and its endpoints' labels.

    One CTE per pattern edge: ``SELECT src, dst FROM e WHERE label = .. AND src IN (SELECT id
    FROM v WHERE label = ..) AND dst IN (..)``; then the self-join of the CTEs with the same
    equalities and pairwise ``<>``. Same semantics as :func:`to_sql`; DuckDB plans it far better.
    """
    ctes, frm, where, bind = [], [], [], {}
    for n, (i, j, lab) in enumerate(q.edges):
        conds = []
        if lab is not None:
            conds.append(f"label = {sql_literal(lab)}")
        for u, col in ((i, "src"), (j, "dst")):
            if q.vertex_labels[u] is not None:
                conds.append(f"{col} IN (SELECT id FROM {v} WHERE label = {sql_literal(q.vertex_labels[u])})")
        ctes.append(f"f{n} AS (SELECT src, dst FROM {e}" + (" WHERE " + " AND ".join(conds) if conds else "") + ")")
        frm.append(f"f{n}")
        for u, col in ((i, f"f{n}.src"), (j, f"f{n}.dst")):
            if u in bind:
                where.append(f"{col} = {bind[u]}")
            else:
                bind[u] = col
    us = sorted(bind)
    for x in range(len(us)):
        for y in range(x + 1, len(us)):
            where.append(f"{bind[us[x]]} <> {bind[us[y]]}")
    return ("WITH " + ",\n     ".join(ctes) + "\nSELECT count(*) FROM " + ", ".join(frm) +
            "\nWHERE " + "\n  AND ".join(where))


#: The DuckDB formulations timed for every query; DuckDB's time is the best of them.
SQL_FORMS = {"join": to_sql, "semijoin": to_sql_semijoin}


def timed_duckdb(con, sql, timeout):
    """(seconds, count); interrupts the query after ``timeout`` seconds (then count is None)."""
    timer = threading.Timer(timeout, con.interrupt)
    timer.start()
    t = time.perf_counter()
    try:
        n = con.execute(sql).fetchone()[0]
    except duckdb.InterruptException:
        n = None
    finally:
        timer.cancel()
    return time.perf_counter() - t, n


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=float, default=1e6)
    p.add_argument("--scale", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--edge-labels", type=int, default=4)
    p.add_argument("--vertex-labels", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--walks", type=int, default=2, help="extra random-walk queries of 4 and of 5 vertices")
    p.add_argument("--only", default=None, help="comma-separated query names")
    p.add_argument("--timeout", type=float, default=300, help="DuckDB per-run timeout (s)")
    p.add_argument("--sql", default="join,semijoin", help="DuckDB SQL forms to time: join, semijoin")
    p.add_argument("--profile", action="store_true", help="cProfile the slowest sgsi query")
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "duckdb"))
    p.add_argument("--results", default=C.RESULTS_DIR)
    args = p.parse_args(argv)
    m0 = C.machine()      # the commit of the code this run loads
    n_edges = int(args.edges)
    threads = os.cpu_count()

    gdir = os.path.join(args.data, f"rmat_{n_edges}_s{args.seed}_el{args.edge_labels}_vl{args.vertex_labels}")
    meta = gen.rmat(gdir, n_edges, scale=args.scale, shape="small", edge_labels=args.edge_labels,
                    vertex_labels=args.vertex_labels, seed=args.seed, device="cpu")
    epath, vpath = os.path.join(gdir, "edges.parquet"), os.path.join(gdir, "vertices.parquet")
    C.say(f"graph: {n_edges:,} R-MAT edges, scale {meta['scale']}; building the store")
    t = time.perf_counter()
    g = sgsi.build(os.path.join(gdir, "g.sgsi"), edges=epath, vertices=vpath, force=True)
    build_s = time.perf_counter() - t
    C.say(f"{g} built in {build_s:.1f} s")

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute(f"CREATE TABLE e AS SELECT DISTINCT src::INTEGER AS src, dst::INTEGER AS dst, label "
                f"FROM read_parquet('{epath}')")
    con.execute(f"CREATE TABLE v AS SELECT id::INTEGER AS id, label FROM read_parquet('{vpath}')")
    n_distinct = con.execute("SELECT count(*) FROM e").fetchone()[0]
    if n_distinct != g.store.n_edges:
        raise SystemExit(f"MISMATCH: DuckDB has {n_distinct} distinct edges, the store {g.store.n_edges}")

    queries = list(QUERIES)
    if args.walks:
        for k in (4, 5):
            picked, seed = 0, 100 * k
            cands = gen.random_walk_queries(gdir, k, 40, seed=seed)
            for q in cands:
                if picked == args.walks:
                    break
                c = g.count(q.pattern, device="cpu")
                if 1e3 <= c <= 1e7:
                    q.name = f"walk{k}_{picked}"
                    queries.append(q)
                    picked += 1
    if args.only:
        keep = set(args.only.split(","))
        queries = [q for q in queries if q.name in keep]

    rows = []
    forms = [f for f in args.sql.split(",") if f]
    for q in queries:
        sqls = {f: SQL_FORMS[f](q) for f in forms}
        st, dt = [], {f: [] for f in forms}
        sc = None
        for r in range(args.runs):
            t = time.perf_counter()
            sc = g.count(q.pattern, device="cpu")
            st.append(time.perf_counter() - t)
            for f, sql in sqls.items():
                tt, dc = timed_duckdb(con, sql, args.timeout)
                if dc is None:      # interrupted: report it, count it as the timeout, don't rerun
                    C.say(f"DuckDB ({f}) timed out ({args.timeout} s) on {q.name}")
                    dt[f].append(float("inf"))
                    continue
                dt[f].append(tt)
                if sc != dc:
                    raise SystemExit(f"COUNT MISMATCH on {q.name}: sgsi {sc} vs DuckDB ({f}) {dc}\n"
                                     f"pattern: {q.pattern}\nsql: {sql}")
        best = {f: min(x) for f, x in dt.items()}
        duck = min(best.values())
        if not math.isfinite(duck):
            raise SystemExit(f"every DuckDB form timed out on {q.name}: no count to check against")
        row = {"query": q.name, "vertices": q.k, "edges": len(q.edges), "count": sc,
               "sgsi_s": round(min(st), 4), "duckdb_s": round(duck, 4),
               "duckdb_form": min(best, key=best.get),
               **{f"duckdb_{f}_s": round(best[f], 4) for f in forms},
               "ratio": round(min(st) / duck, 3), "sgsi_all": " ".join(f"{x:.3f}" for x in st),
               "duckdb_all": "; ".join(f + ": " + " ".join(f"{x:.3f}" for x in dt[f]) for f in forms),
               "pattern": q.pattern}
        rows.append(row)
        C.say(f"{q.name:22s} count {sc:>12,}  sgsi {row['sgsi_s']:8.3f}s  " +
              "  ".join(f"duckdb-{f} {best[f]:8.3f}s" for f in forms) + f"  ratio {row['ratio']:.2f}")

    gm = geomean([r["ratio"] for r in rows])
    m = C.machine_at_end(m0)
    for r in rows:
        r.update({"commit": m["commit"], "date": m["date"], "graph_edges": n_edges,
                  "distinct_edges": g.store.n_edges, "scale": meta["scale"]})

    prof_text = ""
    if args.profile and rows:
        slow = [r for r in rows if r["ratio"] > 1]
        target = max(slow or rows, key=lambda r: r["ratio"] if slow else r["sgsi_s"])
        q = next(q for q in queries if q.name == target["query"])
        pr = cProfile.Profile()
        pr.enable()
        g.count(q.pattern, device="cpu")
        pr.disable()
        buf = io.StringIO()
        ps = pstats.Stats(pr, stream=buf).sort_stats("cumulative")
        ps.print_stats(30)
        buf2 = io.StringIO()
        pstats.Stats(pr, stream=buf2).sort_stats("tottime").print_stats(20)
        prof_text = (f"query {q.name} ({'slowest ratio' if slow else 'slowest sgsi time'}): {q.pattern}\n\n"
                     f"== by cumulative time ==\n{buf.getvalue()}\n== by own time ==\n{buf2.getvalue()}")
        C.write_text(os.path.join(args.results, "cpu_vs_duckdb_profile.txt"), prof_text)

    C.write_csv(os.path.join(args.results, "cpu_vs_duckdb.csv"), rows,
                ["date", "commit", "graph_edges", "distinct_edges", "scale", "query", "vertices", "edges", "count",
                 "sgsi_s", "duckdb_s", "duckdb_form", "duckdb_join_s", "duckdb_semijoin_s", "ratio", "sgsi_all", "duckdb_all", "pattern"])
    table = "\n".join(f"| {r['query']} | {r['vertices']} | {r['edges']} | {r['count']:,} | {r['sgsi_s']:.3f} | " +
                      " | ".join(f"{r[f'duckdb_{f}_s']:.3f}" for f in forms) +
                      f" | {r['ratio']:.2f} |" for r in rows)
    head = ("| query | vertices | edges | count | sgsi (s) | " + " | ".join(f"DuckDB {f} (s)" for f in forms) +
            " | ratio sgsi / best DuckDB |\n|---|---:|---:|---:|---:|" + "---:|" * len(forms) + "---:|")
    gm_forms = {f: geomean([r["sgsi_s"] / r[f"duckdb_{f}_s"] for r in rows]) for f in forms}
    pats = "\n".join(f"- `{r['query']}`: `{r['pattern']}`" for r in rows)
    sql_example = "\n\n".join(f"-- {f}\n" + SQL_FORMS[f](queries[0]) for f in forms) if queries else ""
    slower = [r for r in rows if r["ratio"] > 1]
    slower_txt = ("sgsi is slower than DuckDB on: " + ", ".join(f"`{r['query']}` ({r['ratio']:.2f}x)" for r in slower)
                  if slower else "sgsi is at least as fast as DuckDB on every query.")
    md = f"""# sgsi (CPU) vs DuckDB SQL self-joins

`python bench/cpu_vs_duckdb.py --edges {n_edges:g} --runs {args.runs}`

{C.machine_md(m)}
## Setup

- graph: R-MAT scale {meta['scale']} ({meta['vertices']:,} vertex ids), {n_edges:,} edge rows →
  {g.store.n_edges:,} distinct (src, dst, label) edges; {args.vertex_labels} vertex labels and
  {args.edge_labels} edge labels, both Zipf (exponent 1), seed {args.seed}; store build {build_s:.1f} s
- sgsi: `sgsi.build(...)` once, then `Graph.count(pattern, device="cpu")` on the one open store
  (default memory budget)
- DuckDB {m['duckdb']}: `SET threads = {threads}`; in-memory tables
  `e(src INTEGER, dst INTEGER, label VARCHAR)` = `SELECT DISTINCT` of the edge Parquet and
  `v(id INTEGER, label VARCHAR)`; one `SELECT count(*)` self-join per query, in two forms:
  - `join`: one `e` per pattern edge, one `v` joined per labeled pattern vertex;
  - `semijoin`: one CTE per pattern edge, `e` filtered by its edge label and by
    `src IN (SELECT id FROM v WHERE label = ..)` / `dst IN (..)`, then the self-join of the CTEs;
  both with `<>` between every pair of pattern vertices (injective, as sgsi)
- best of {args.runs} runs each; ratio = sgsi time / best DuckDB form's time (< 1: sgsi faster);
  every DuckDB count checked equal to sgsi's on every run

## Results

{head}
{table}

Geometric mean of sgsi / best-DuckDB ratios: **{gm:.2f}** ({'; '.join(f'vs `{f}` only: {x:.2f}' for f, x in gm_forms.items())}).
{slower_txt}

## Queries

{pats}

SQL of the first query:

```sql
{sql_example}
```
"""
    if prof_text:
        md += ("\n## Profile of the slowest sgsi query\n\nSee `cpu_vs_duckdb_profile.txt` "
               "(cProfile, sorted by cumulative and by own time).\n")
    C.write_text(os.path.join(args.results, "cpu_vs_duckdb.md"), md)
    print(md)
    g.close()


if __name__ == "__main__":
    main()
