"""GPU backend vs CPU backend, side by side in one run, on one R-MAT graph.

    python bench/gpu_vs_cpu.py --edges 1e7 --sizes 4 6 8 --queries 5 --out bench/results

Generates an R-MAT graph with Zipf vertex and edge labels, builds a store,
makes random-walk queries (each has at least one match) and counts each on
both backends, each in a worker process that opened the store once (so a count
past ``--cpu-timeout``/``--gpu-timeout`` can be stopped; a CPU count stopped
makes its ratio a lower bound). Before its timed runs each backend counts the
query untimed until ``--warm`` seconds of counting have passed (at least once:
the GPU's first count reads the query's segments from disk). A GPU that sat
idle while the CPU counted the previous query starts slow: in session 27 a light
walk counted 4.3 ms back to back and 9.7 ms (median) one second after idling
(`git show a0d0bcb:bench/scratch/idle_probe.py`), and one untimed count did not
cover it. Counts must be equal. Writes gpu_vs_cpu.md and .csv with per-query
times, the ratio, the geometric mean, and the GPU backend's streaming statistics.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (DATA_DIR, CountWorker, add_walk_options, build_store, ensure_importable, machine,  # noqa: E402
                     machine_at_end, machine_md, say, walk_graph, walk_options, walk_queries, write_csv, write_text)

ensure_importable()


def _best(worker, runs, pattern, timeout=None, **kw):
    """The fastest of ``runs`` timed counts (count, seconds, stats) and the median of their
    seconds; None once one is stopped."""
    best, times = None, []
    for _ in range(max(1, runs)):
        got = worker.count(pattern, timeout, **kw)
        if got is None:
            return None
        times.append(got[1])
        if best is None or got[1] < best[1]:
            best = got
    return (*best, statistics.median(times))


def _warm(worker, pattern, seconds, timeout=None, **kw):
    """Untimed counts of ``pattern`` until ``seconds`` of counting have passed (at least one);
    False once one is stopped at ``timeout``."""
    spent = 0.0
    while True:
        got = worker.count(pattern, timeout, **kw)
        if got is None:
            return False
        spent += got[1]
        if spent >= seconds:
            return True


def _with_median(best, median):
    """A table cell: the best time, and the median of the runs where it differs."""
    return f"{best}" if median is None or median == best else f"{best} ({median})"


def _gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_walk_options(ap, edges=1e7, queries=5)
    ap.add_argument("--cpu-limit", type=float, default=None,
                    help="skip the CPU run of a query whose GPU count exceeds this (default: 1e9, none with --cpu-timeout)")
    ap.add_argument("--cpu-timeout", type=float, default=0,
                    help="seconds before a CPU count is stopped (0: none); its ratio is then a lower bound")
    ap.add_argument("--gpu-timeout", type=float, default=0, help="seconds before a GPU count is stopped (0: none)")
    ap.add_argument("--warm", type=float, default=0.25,
                    help="seconds of untimed counts of each query on each backend before its timed runs "
                         "(at least one count)")
    ap.add_argument("--runs", type=int, default=1,
                    help="timed runs per query and setting, on both backends alike; the best is kept")
    ap.add_argument("--cores", type=int, nargs="*", default=None,
                    help="CPU cores both workers run on, the same for both (default: any). On a shared VM the "
                         "host's vCPUs differ: a light GPU count took 2.6 ms on one and 4.1 on another "
                         "(`git show a0d0bcb:bench/results/session35/affinity_h100.txt`)")
    ap.add_argument("--gpu-device", default="gpu", help=argparse.SUPPRESS)   # "cpu": a smoke test without a GPU
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    if args.cpu_limit is None:
        args.cpu_limit = math.inf if args.cpu_timeout else 1e9
    n_edges = int(args.edges)
    m0 = machine()
    gdir = walk_graph(args)
    with open(os.path.join(gdir, "meta.json")) as f:
        meta = json.load(f)
    labels = f"{meta['edge_labels']} edge, {meta['vertex_labels']} vertex labels"
    store = gdir + ".sgsi"
    g, build_s = build_store(gdir)
    n_stored, n_vertices = g.store.n_edges, g.store.n_vertices
    g.close()
    queries = walk_queries(gdir, args)
    # Each backend counts in a worker process of its own that opened the store once (and warmed
    # up), so that a count past its timeout can be stopped.
    gpu, cpu = CountWorker(store, args.gpu_device, cores=args.cores), CountWorker(store, "cpu", cores=args.cores)
    balanced, warp_only = {"SGSI_LOAD_BALANCE": "1"}, {"SGSI_LOAD_BALANCE": "0"}   # SGSI+ vs SGSI
    rows = []
    try:
        for k, pat in queries:
            row = {"k": k, "matches": None, "gpu_s": None, "gpu_warp_only_s": None, "cpu_s": None, "ratio": None,
                   "cpu_timeout": None, "pattern": pat}
            rows.append(row)
            # untimed first: the query's segments are read from disk once, for the timed runs,
            # and the device and host are busy again after the CPU's counts of the last query
            if not _warm(gpu, pat, args.warm, args.gpu_timeout, device=args.gpu_device, env=balanced):
                say(f"GPU TIMEOUT after {args.gpu_timeout:g} s: {pat}")
                row["gpu_timeout"] = args.gpu_timeout
                continue
            n_gpu, t_gpu, st, med_gpu = _best(gpu, args.runs, pat, device=args.gpu_device, env=balanced)
            n_nolb, t_nolb, _, _ = _best(gpu, args.runs, pat, device=args.gpu_device, env=warp_only)
            if n_nolb != n_gpu:
                raise SystemExit(f"COUNT MISMATCH balanced={n_gpu} warp-only={n_nolb} for {pat}")
            row.update({"matches": n_gpu, "gpu_s": round(t_gpu, 4), "gpu_median_s": round(med_gpu, 4),
                        "gpu_warp_only_s": round(t_nolb, 4),
                        "balance_gain": round(t_nolb / t_gpu, 2),
                        **{key: st.get(key, 0) for key in ("rows_warp", "rows_pool", "rows_block", "rows_own",
                                                           "h2d_bytes", "segments", "steps", "chunks")}})
            if n_gpu <= args.cpu_limit:
                got = None
                if _warm(cpu, pat, args.warm, args.cpu_timeout, device="cpu"):
                    got = _best(cpu, args.runs, pat, args.cpu_timeout, device="cpu")
                if got is None:
                    row["cpu_timeout"] = args.cpu_timeout
                    row["ratio"] = round(args.cpu_timeout / t_gpu, 2)       # a lower bound
                else:
                    n_cpu, t_cpu, _, med_cpu = got
                    if n_cpu != n_gpu:
                        raise SystemExit(f"COUNT MISMATCH gpu={n_gpu} cpu={n_cpu} for {pat}")
                    row.update({"cpu_s": round(t_cpu, 4), "cpu_median_s": round(med_cpu, 4),
                                "ratio": round(t_cpu / t_gpu, 2), "median_ratio": round(med_cpu / med_gpu, 2)})
            say(row)
    finally:
        gpu.close()
        cpu.close()
    m = machine_at_end(m0)
    counted = [r for r in rows if r["cpu_s"] is not None]         # both backends counted
    done = [r["ratio"] for r in counted]
    bounded = [r["ratio"] for r in rows if r["ratio"]]
    gm = _gm(done)
    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "gpu_vs_cpu.csv"), rows,
              fields=["k", "matches", "gpu_s", "gpu_warp_only_s", "cpu_s", "cpu_timeout", "ratio", "balance_gain",
                      "rows_warp", "rows_pool", "rows_block", "rows_own", "h2d_bytes", "segments", "steps", "chunks",
                      "gpu_timeout", "gpu_median_s", "cpu_median_s", "median_ratio", "pattern"])
    cmd = (f"python bench/gpu_vs_cpu.py {walk_options(args)} --cpu-limit {args.cpu_limit:g}"
           + (f" --cpu-timeout {args.cpu_timeout:g}" if args.cpu_timeout else "")
           + (f" --gpu-timeout {args.gpu_timeout:g}" if args.gpu_timeout else "")
           + (f" --runs {args.runs}" if args.runs > 1 else "") + f" --warm {args.warm:g}"
           + (f" --cores {' '.join(map(str, args.cores))}" if args.cores else ""))
    gpu_out = [r for r in rows if r.get("gpu_timeout")]
    lines = ["# GPU backend vs CPU backend (count, same store, same run)", "", machine_md(m),
             f"- graph: R-MAT {args.shape} ({labels}, Zipf), {n_edges:,} edge rows -> {n_stored:,} stored edges, "
             f"{n_vertices:,} vertices; build {build_s:.1f}s", f"- command: `{cmd}`",
             "- each backend counts in a worker process of its own that opened the store once; each query is "
             f"counted untimed on the GPU until {args.warm:g} s of counting have passed (at least once: its segments "
             "are read from disk), then timed balanced and warp-only, then counted untimed on the CPU the same way "
             "and timed" + (f"; each time is the best of {args.runs} runs" if args.runs > 1 else "")
             + (f"; both workers on CPU cores {args.cores}" if args.cores else ""), "",
             f"**Geometric mean speed-up GPU over CPU: {gm:.1f}x** over the {len(done)} queries both backends counted"]
    if len(bounded) > len(done):
        lines[-1] += (f"; **at least {_gm(bounded):.1f}x** over {len(bounded)} queries, counting the "
                     f"{len(bounded) - len(done)} CPU runs stopped at {args.cpu_timeout:g} s at that time")
    if gpu_out:
        lines[-1] += (f"; {len(gpu_out)} queries stopped on the GPU at {args.gpu_timeout:g} s (not counted)")
    if args.runs > 1 and done:
        # The medians of the runs, beside the best: how far the host's noise moves the ratio.
        lines += ["", f"The same from the medians of the {args.runs} runs: "
                  f"{_gm([r['median_ratio'] for r in counted]):.1f}x"]
    lines += ["", f"Histogram load balance vs one warp per row (geometric mean): "
              f"{_gm([r.get('balance_gain') for r in rows]):.2f}x", "",
              "| k | matches | GPU s (median) | GPU warp-only s | CPU s (median) | CPU/GPU | rows warp/pool/block/own | "
              "steps | segments |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("gpu_timeout"):
            lines.append(f"| {r['k']} | ? | > {r['gpu_timeout']:g} | | | | | | |")
            continue
        cpu_s = f"> {r['cpu_timeout']:g}" if r["cpu_timeout"] else _with_median(r["cpu_s"], r.get("cpu_median_s"))
        ratio = f">= {r['ratio']}" if r["cpu_timeout"] else r["ratio"]
        lines.append(f"| {r['k']} | {r['matches']:,} | {_with_median(r['gpu_s'], r['gpu_median_s'])} | "
                     f"{r['gpu_warp_only_s']} | {cpu_s} | {ratio} | "
                     f"{r['rows_warp']}/{r['rows_pool']}/{r['rows_block']}/{r['rows_own']} | {r['steps']} | "
                     f"{r['segments']} |")
    write_text(os.path.join(args.out, "gpu_vs_cpu.md"), "\n".join(lines) + "\n")
    say(f"geomean {gm:.2f}x")


if __name__ == "__main__":
    main()
