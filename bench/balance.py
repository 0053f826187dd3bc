"""Histogram load balance (SGSI+) vs one warp per row (SGSI) on a skewed graph, side by side.

    python bench/balance.py --edges 1e7 --a 0.65 --sizes 4 5 --queries 4

Generates an R-MAT graph (``--a``: the skew, 0.57 by default as in Graph500;
larger values make larger hubs) with few labels, so that rows of the join
carry lists of very different lengths (4 edge and 8 vertex labels by default,
as the ``small`` shape), builds a store, and makes
random-walk queries. Each query is run once untimed (kernels compile,
segments load), then ``--runs`` times with the load balance on and off,
alternated, in one process on one GPU: counted, and enumerated (the
matches read as Arrow batches, the first ``--max-matches`` of them: the
same rows both ways).

Reported per query and mode: the median wall time each way, and the
median ``expand_seconds`` (device time of the row expansions, the part the
load balance decides: the histogram, the cost model's choice and the
kernels; CUDA events), with their ratios warp-only / balanced (above 1:
the balance wins) and the rows each way took. Counts must agree.
Writes balance.md and balance.csv.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import DATA_DIR, build_store, ensure_importable, machine, machine_at_end, machine_md, say, write_csv, write_text  # noqa: E402

ensure_importable()
import gen  # noqa: E402

from sgsi.errors import Cancelled  # noqa: E402

WAYS = ("rows_warp", "rows_pool", "rows_block", "rows_own")


def _gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _run(g, pattern, mode, device, balanced, timeout, limit=None):
    """(matches, seconds, stats) of one count or enumeration (of the first ``limit`` matches);
    None past ``timeout`` seconds."""
    os.environ["SGSI_LOAD_BALANCE"] = "1" if balanced else "0"
    deadline = time.perf_counter() + timeout
    stop = lambda: time.perf_counter() > deadline   # noqa: E731
    t = time.perf_counter()
    try:
        if mode == "count":
            n = g.count(pattern, device=device, cancel=stop)
        else:
            n = 0
            with g.match(pattern, device=device, cancel=stop, max_rows=limit) as reader:
                for batch in reader:
                    n += batch.num_rows
    except Cancelled:
        return None
    except Exception as e:              # a cancelled stream reaches the reader as ArrowInvalid
        if "cancelled" in str(e):
            return None
        raise
    return n, time.perf_counter() - t, dict(g.last_stats)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=float, default=1e7)
    ap.add_argument("--a", type=float, default=0.57, help="R-MAT a (b = c = (1 - a) / 3.5, d the rest)")
    ap.add_argument("--edge-labels", type=int, default=4)
    ap.add_argument("--vertex-labels", type=int, default=8)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 5])
    ap.add_argument("--queries", type=int, default=4, help="queries per size")
    ap.add_argument("--runs", type=int, default=3, help="timed runs each way (medians reported)")
    ap.add_argument("--modes", nargs="+", default=["count", "match"], choices=["count", "match"])
    ap.add_argument("--max-matches", type=float, default=5e7,
                    help="enumerate at most this many matches of a query (the first ones, the same both ways)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds before a run is stopped")
    ap.add_argument("--device", default="gpu", help="gpu; cpu runs the script without a GPU (no balance there)")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    m0 = machine()
    n_edges = int(args.edges)
    b = c = round((1 - args.a) / 3.5, 6)
    d = 1 - args.a - b - c
    gdir = os.path.join(args.data, f"rmat-a{args.a:g}-{args.edge_labels}x{args.vertex_labels}-{n_edges}")
    if not os.path.exists(os.path.join(gdir, "edges.parquet")):
        t = time.perf_counter()
        gen.rmat(gdir, n_edges, edge_labels=args.edge_labels, vertex_labels=args.vertex_labels,
                 a=args.a, b=b, c=c, d=d, seed=11)
        say(f"generated {n_edges:,} edges in {time.perf_counter() - t:.1f}s")
    g, build_s = build_store(gdir)
    n_stored, n_vertices = g.store.n_edges, g.store.n_vertices
    queries = [(k, q.pattern) for k in args.sizes for q in gen.random_walk_queries(gdir, k, args.queries, seed=k)]
    rows = []
    try:
        for k, pat in queries:
            first = _run(g, pat, "count", args.device, True, args.timeout)
            if first is None:
                say(f"TIMEOUT after {args.timeout:g} s: {pat}")
                rows.append({"k": k, "mode": "count", "timeout": args.timeout, "pattern": pat})
                continue
            matches = first[0]
            for mode in args.modes:
                want = min(matches, int(args.max_matches)) if mode == "match" else matches
                row = _side_by_side(g, pat, mode, want, args)
                row.update({"k": k, "pattern": pat})
                rows.append(row)
                say(row)
    finally:
        g.close()
    m = machine_at_end(m0)
    done = [r for r in rows if not r.get("timeout")]
    fields = ["k", "mode", "matches", "wall_s", "wall_warp_only_s", "wall_gain", "expand_s", "expand_warp_only_s",
              "expand_gain", *WAYS, "timeout", "pattern"]
    write_csv(os.path.join(args.out, "balance.csv"), rows, fields=fields)
    cmd = (f"python bench/balance.py --edges {args.edges:g} --a {args.a:g} --edge-labels {args.edge_labels} "
           f"--vertex-labels {args.vertex_labels} --sizes {' '.join(map(str, args.sizes))} --queries {args.queries} "
           f"--runs {args.runs} --modes {' '.join(args.modes)} --max-matches {args.max_matches:g}")
    lines = ["# Histogram load balance vs one warp per row (same store, same process, alternated runs)", "",
             machine_md(m),
             f"- graph: R-MAT a={args.a:g} b=c={b:g} d={d:g}, {args.edge_labels} edge and {args.vertex_labels} vertex "
             f"labels (Zipf), {n_edges:,} edge rows -> {n_stored:,} stored edges, {n_vertices:,} "
             f"vertices; build {build_s:.1f}s", f"- command: `{cmd}`",
             f"- device: {args.device}; medians of {args.runs} runs each way after one untimed count; `expand` is the "
             "device time of the row expansions (histogram, cost model, kernels; CUDA events); match reads the first "
             f"{args.max_matches:,.0f} matches (the same rows both ways)", ""]
    for mode in args.modes:
        sel = [r for r in done if r["mode"] == mode]
        if sel:
            lines.append(f"**{mode}: warp-only / balanced, geometric mean: expansions {_gm([r['expand_gain'] for r in sel]):.2f}x, "
                         f"whole query {_gm([r['wall_gain'] for r in sel]):.2f}x** over {len(sel)} queries")
    lines += ["", "| k | mode | matches | wall s | warp-only | gain | expand ms | warp-only | gain | rows warp/pool/block/own |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("timeout"):
            lines.append(f"| {r['k']} | count | ? | > {r['timeout']:g} | | | | | | |")
            continue
        lines.append(f"| {r['k']} | {r['mode']} | {r['matches']:,} | {r['wall_s']} | {r['wall_warp_only_s']} | "
                     f"{r['wall_gain']} | {r['expand_s'] * 1e3:.2f} | {r['expand_warp_only_s'] * 1e3:.2f} | "
                     f"{r['expand_gain']} | {'/'.join(str(r[w]) for w in WAYS)} |")
    write_text(os.path.join(args.out, "balance.md"), "\n".join(lines) + "\n")
    say("\n".join(lines[-len(rows) - 2:]))


def _side_by_side(g, pat, mode, matches, args):
    """Medians of ``args.runs`` runs of ``pat`` with the balance on and off, alternated."""
    times = {True: [], False: []}
    expand = {True: [], False: []}
    ways = {}
    for _ in range(args.runs):
        for balanced in (True, False):
            got = _run(g, pat, mode, args.device, balanced, args.timeout,
                       limit=int(args.max_matches) if mode == "match" else None)
            if got is None:
                return {"mode": mode, "matches": matches, "timeout": args.timeout}
            n, secs, stats = got
            if n != matches:
                raise SystemExit(f"COUNT MISMATCH {mode} balanced={balanced}: {n} != {matches} for {pat}")
            times[balanced].append(secs)
            expand[balanced].append(stats.get("expand_seconds", 0.0))
            if balanced:
                ways = {w: stats.get(w, 0) for w in WAYS}
    wall, wall_w = statistics.median(times[True]), statistics.median(times[False])
    exp, exp_w = statistics.median(expand[True]), statistics.median(expand[False])
    return {"mode": mode, "matches": matches, "wall_s": round(wall, 4), "wall_warp_only_s": round(wall_w, 4),
            "wall_gain": round(wall_w / wall, 3), "expand_s": round(exp, 6), "expand_warp_only_s": round(exp_w, 6),
            "expand_gain": round(exp_w / exp, 3) if exp else None, **ways}


if __name__ == "__main__":
    main()
