"""GPU backend vs CPU backend, side by side in one run, on one R-MAT graph.

    python bench/gpu_vs_cpu.py --edges 1e7 --sizes 4 6 8 --queries 5 --out bench/results

Generates an R-MAT graph with Zipf vertex and edge labels, builds a store,
makes random-walk queries (each has at least one match) and counts each on
both backends (store opened once, one warm-up query first, and each query once untimed before its timed GPU runs). Counts must be
equal. Writes gpu_vs_cpu.md and .csv with per-query times, the ratio, the
geometric mean, and the GPU backend's streaming statistics.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import DATA_DIR, ensure_importable, machine, machine_md, say, write_csv, write_text  # noqa: E402

ensure_importable()
import gen  # noqa: E402

import sgsi  # noqa: E402


def _gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=float, default=1e7)
    ap.add_argument("--shape", default="watdiv")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8])
    ap.add_argument("--queries", type=int, default=5, help="queries per size")
    ap.add_argument("--cpu-limit", type=float, default=1e9, help="skip the CPU run of a query whose GPU count exceeds this")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    n_edges = int(args.edges)
    gdir = gen.cached_rmat(args.data, n_edges, args.shape, say=say)
    store = gdir + ".sgsi"
    t = time.perf_counter()
    g = sgsi.build(store, edges=os.path.join(gdir, "edges.parquet"), vertices=os.path.join(gdir, "vertices.parquet"),
                   force=True)
    build_s = time.perf_counter() - t
    say(f"built {g} in {build_s:.1f}s")
    queries = []
    for k in args.sizes:
        for q in gen.random_walk_queries(gdir, k, args.queries, seed=k):
            queries.append((k, q.pattern if hasattr(q, "pattern") else str(q)))
    g.count(queries[0][1], device="gpu")          # warm-up: kernel compilation, caches
    rows = []
    for k, pat in queries:
        g.count(pat, device="gpu")      # untimed: the query's segments are read from disk once, for both runs
        t = time.perf_counter()
        n_gpu = g.count(pat, device="gpu")
        t_gpu = time.perf_counter() - t
        st = dict(g.last_stats)
        os.environ["SGSI_LOAD_BALANCE"] = "0"          # the same query with one warp per row (SGSI vs SGSI+)
        t = time.perf_counter()
        n_nolb = g.count(pat, device="gpu")
        t_nolb = time.perf_counter() - t
        os.environ["SGSI_LOAD_BALANCE"] = "1"
        if n_nolb != n_gpu:
            raise SystemExit(f"COUNT MISMATCH balanced={n_gpu} warp-only={n_nolb} for {pat}")
        t_cpu = n_cpu = None
        if n_gpu <= args.cpu_limit:
            t = time.perf_counter()
            n_cpu = g.count(pat, device="cpu")
            t_cpu = time.perf_counter() - t
            if n_cpu != n_gpu:
                raise SystemExit(f"COUNT MISMATCH gpu={n_gpu} cpu={n_cpu} for {pat}")
        rows.append({"k": k, "matches": n_gpu, "gpu_s": round(t_gpu, 4), "cpu_s": None if t_cpu is None else round(t_cpu, 4),
                     "ratio": None if t_cpu is None else round(t_cpu / t_gpu, 2),
                     "gpu_warp_only_s": round(t_nolb, 4), "balance_gain": round(t_nolb / t_gpu, 2),
                     "rows_warp": st.get("rows_warp", 0), "rows_pool": st.get("rows_pool", 0),
                     "rows_block": st.get("rows_block", 0),
                     "rows_own": st.get("rows_own", 0),
                     "h2d_bytes": st.get("h2d_bytes"), "segments": st.get("segments"), "pattern": pat})
        say(rows[-1])
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    m = machine()
    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "gpu_vs_cpu.csv"), rows)
    lines = ["# GPU backend vs CPU backend (count, same store, same run)", "", machine_md(m),
             f"- graph: R-MAT {args.shape}, {n_edges:,} edge rows -> {g.store.n_edges:,} stored edges, "
             f"{g.store.n_vertices:,} vertices; build {build_s:.1f}s", f"- command: `python bench/gpu_vs_cpu.py --edges {args.edges:g} "
             f"--shape {args.shape} --sizes {' '.join(map(str, args.sizes))} --queries {args.queries}`", "",
             f"**Geometric mean speed-up GPU over CPU: {gm:.1f}x** over {len(ratios)} queries", "",
             f"Histogram load balance vs one warp per row (geometric mean): {_gm([r['balance_gain'] for r in rows]):.2f}x", "",
             "| k | matches | GPU s | GPU warp-only s | CPU s | CPU/GPU | rows warp/pool/block/own | H2D bytes | segments |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['matches']:,} | {r['gpu_s']} | {r['gpu_warp_only_s']} | {r['cpu_s']} | {r['ratio']} | "
                     f"{r['rows_warp']}/{r['rows_pool']}/{r['rows_block']}/{r['rows_own']} | {r['h2d_bytes']} | {r['segments']} |")
    write_text(os.path.join(args.out, "gpu_vs_cpu.md"), "\n".join(lines) + "\n")
    say(f"geomean {gm:.2f}x")


if __name__ == "__main__":
    main()
