"""Out-of-core end to end: generate an R-MAT graph, build its store, query it from DuckDB.

    python bench/billion.py --edges 1e9 --queries 20 --k 12 --memory-budget 16GB

The issue-6 run, at any size. Each stage is timed, and the whole run too:

1. :func:`gen.rmat` writes a WatDiv-like R-MAT graph (86 edge labels, 1,000
   vertex labels, Zipf) as Parquet, on the GPU where present;
2. ``sgsi build --lean --theta 2 --memory-budget B`` builds the store through
   the command line (a subprocess; its progress lines are kept). Lean: the
   random-walk queries have labelled, directed edges only;
3. :func:`gen.random_walk_queries` makes the queries (each has a match);
4. each query runs through DuckDB, ``SELECT match_count(store, pattern,
   memory_budget := B)``, with the same budget, so a store larger than B
   must stream its segments; per query: time, matches, segments and bytes
   read, bytes copied to the GPU and the copy engine's rate.

Writes ``billion-<edges>.md`` and ``.csv`` under ``--out``. A query that
runs past ``--timeout`` seconds is cancelled (``con.interrupt()``) and
recorded as such.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import duckdb  # noqa: E402
import gen  # noqa: E402

import sgsi  # noqa: E402
from sgsi.budget import parse_size  # noqa: E402


def _gb(n):
    return f"{n / 1e9:.2f} GB"


def build(gdir, store, budget, theta, say):
    """``sgsi build`` in a subprocess; returns (seconds, progress lines)."""
    cmd = [sys.executable, "-m", "sgsi", "build", "--edges", os.path.join(gdir, "edges.parquet"),
           "--vertices", os.path.join(gdir, "vertices.parquet"), "--out", store, "--lean", "--theta", str(theta),
           "--memory-budget", budget, "--force"]
    say(" ".join(cmd[1:]))
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stderr:
        lines.append(line.rstrip())
        say("  build: " + line.rstrip())
    if p.wait() != 0:
        raise SystemExit(f"sgsi build failed ({p.returncode}): {lines[-1] if lines else ''}")
    return time.perf_counter() - t, lines


def run_queries(store, queries, budget, timeout, device, say):
    con = duckdb.connect()
    reg = sgsi.register(con, device=device)
    rows = []
    for name, pattern in queries:
        timer = threading.Timer(timeout, reg.interrupt)
        timer.start()
        t = time.perf_counter()
        try:
            n = con.execute("SELECT match_count(?, ?, memory_budget := ?)", [store, pattern, budget]).fetchone()[0]
            status = "ok"
        except duckdb.Error as e:
            n, status = None, ("timeout" if "ancel" in str(e) or "nterrupt" in str(e) else f"error: {e}")
        finally:
            timer.cancel()
        dt = time.perf_counter() - t
        st = reg.last_stats if status == "ok" else {}
        h2d, h2d_s = st.get("h2d_bytes", 0) or 0, st.get("h2d_seconds", 0) or 0
        seg = st.get("h2d_segment_bytes", 0) or 0      # the copies h2d_seconds times
        rows.append({"query": name, "budget": budget, "status": status, "seconds": round(dt, 3), "matches": n,
                     "device": st.get("device"), "segments": st.get("segments"),
                     "segment_bytes": st.get("segment_bytes"), "h2d_bytes": h2d,
                     "h2d_segment_bytes": seg, "h2d_seconds": round(h2d_s, 4),
                     "h2d_GBps": round(seg / h2d_s / 1e9, 1) if h2d_s else None,
                     "stage_seconds": round(st.get("stage_seconds", 0) or 0, 3),
                     "cache_hits": st.get("cache_hits"), "device_peak_bytes": st.get("device_peak_bytes"),
                     "pattern": pattern})
        say(f"{name}: {status} {n} matches in {dt:.2f}s, {st.get('segments')} segments, "
            f"{_gb(st.get('segment_bytes') or 0)} read, {_gb(h2d)} to the GPU")
    con.close()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=float, default=1e9)
    ap.add_argument("--shape", default="watdiv")
    ap.add_argument("--k", type=int, default=12, help="query vertices")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7, help="graph seed (queries use seed k)")
    ap.add_argument("--memory-budget", default="16GB", help="build and query budget")
    ap.add_argument("--also-budgets", nargs="*", default=[],
                    help="run the queries again at these budgets (larger ones: in-core, for the scaling plots)")
    ap.add_argument("--theta", type=int, default=2)
    ap.add_argument("--label-type", choices=("str", "int"), default="int")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per query before it is cancelled")
    ap.add_argument("--data", default=C.DATA_DIR)
    ap.add_argument("--keep", action="store_true", help="keep the Parquet files and the store")
    ap.add_argument("--out", default=C.RESULTS_DIR)
    args = ap.parse_args(argv)
    parse_size(args.memory_budget)                  # a bad budget fails now, not after the build
    n_edges = int(args.edges)
    m0 = C.machine()
    t0 = time.perf_counter()

    def say(msg):
        C.say(f"[{time.perf_counter() - t0:7.1f}s] {msg}")

    gdir = os.path.join(args.data, f"billion-{args.shape}-{n_edges}-seed{args.seed}")
    store = gdir + ".sgsi"
    stages = {}
    t = time.perf_counter()
    if not os.path.exists(os.path.join(gdir, "edges.parquet")):
        gen.rmat(gdir, n_edges, shape=args.shape, seed=args.seed, label_type=args.label_type, device="auto")
    stages["generate"] = time.perf_counter() - t
    parquet_bytes = sum(os.path.getsize(os.path.join(gdir, f)) for f in os.listdir(gdir))
    say(f"generated {n_edges:,} edges: {_gb(parquet_bytes)} of Parquet in {stages['generate']:.1f}s")

    stages["build"], build_lines = build(gdir, store, args.memory_budget, args.theta, say)
    with sgsi.open(store) as g:
        manifest = g.store.manifest
        n_vertices, stored_edges = g.store.n_vertices, g.store.n_edges
    store_bytes = sum(f["bytes"] for f in manifest["files"].values())
    say(f"built in {stages['build']:.1f}s: {n_vertices:,} vertices, {stored_edges:,} edges, {_gb(store_bytes)}")

    t = time.perf_counter()
    queries = [(q.name, q.pattern) for q in gen.random_walk_queries(gdir, args.k, args.queries, seed=args.k)]
    stages["queries made"] = time.perf_counter() - t
    say(f"{len(queries)} random-walk queries of {args.k} vertices in {stages['queries made']:.1f}s")

    t = time.perf_counter()
    rows = run_queries(store, queries, args.memory_budget, args.timeout, args.device, say)
    stages["queries run"] = time.perf_counter() - t
    total = time.perf_counter() - t0
    extra = []
    for b in args.also_budgets:
        say(f"again at budget {b}")
        extra += run_queries(store, queries, b, args.timeout, args.device, say)
    ok = [r for r in rows if r["status"] == "ok"]
    mean = sum(r["seconds"] for r in ok) / len(ok) if ok else float("nan")
    h2d = sum(r["h2d_bytes"] for r in ok)
    h2d_s = sum(r["h2d_seconds"] for r in ok)
    h2d_seg = sum(r["h2d_segment_bytes"] for r in ok)
    say(f"mean {mean:.2f}s per query over {len(ok)} of {len(rows)}; whole run {total:.1f}s")

    m = C.machine_at_end(m0)
    tag = f"{n_edges:g}".replace("+", "") + ("" if args.seed == 7 else f"-seed{args.seed}")
    os.makedirs(args.out, exist_ok=True)
    C.write_csv(os.path.join(args.out, f"billion-{tag}.csv"), rows + extra)
    lines = [f"# Out-of-core end to end: {n_edges:,} edges", "", C.machine_md(m),
             f"- command: `python bench/billion.py --edges {args.edges:g} --seed {args.seed} --queries {args.queries} --k {args.k} "
             f"--memory-budget {args.memory_budget} --theta {args.theta} --label-type {args.label_type}`",
             f"- graph: R-MAT {args.shape} (seed {args.seed}), {n_edges:,} edge rows -> {stored_edges:,} distinct "
             f"edges, {n_vertices:,} vertices; Parquet {_gb(parquet_bytes)}",
             f"- store: lean, theta {args.theta}, built at budget {args.memory_budget}: {_gb(store_bytes)} "
             f"({store_bytes / max(stored_edges, 1):.1f} bytes per edge)",
             f"- queries: {len(rows)} random walks of {args.k} vertices through DuckDB `match_count` with "
             f"`memory_budget := '{args.memory_budget}'`", "",
             "| stage | seconds |", "|---|---:|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in stages.items()]
    lines += [f"| **whole run** | **{total:.1f}** |", "",
              f"**Mean time per query: {mean:.2f} s** ({len(ok)} of {len(rows)} completed"
              f"{'' if len(ok) == len(rows) else f'; the others stopped at {args.timeout:g} s or failed'}). "
              f"Copied to the GPU: {_gb(h2d)}, of which {_gb(h2d_seg)} of segments through the pinned "
              f"buffers in {h2d_s:.2f} s of copy-engine time"
              f"{f' ({h2d_seg / h2d_s / 1e9:.1f} GB/s)' if h2d_s else ''}.", "",
              "| query | status | s | matches | segments | read | to GPU | copy GB/s | stage s | device peak |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['query']} | {r['status']} | {r['seconds']} | {r['matches'] if r['matches'] is not None else ''} "
                     f"| {r['segments']} | {_gb(r['segment_bytes'] or 0)} | {_gb(r['h2d_bytes'])} | "
                     f"{r['h2d_GBps'] or ''} | {r['stage_seconds']} | {_gb(r['device_peak_bytes'] or 0)} |")
    for b in args.also_budgets:
        ok_b = [r for r in extra if r["budget"] == b and r["status"] == "ok"]
        if ok_b:
            lines += ["", f"At budget {b} (after the run above): mean {sum(r['seconds'] for r in ok_b) / len(ok_b):.2f} s "
                          f"per query over {len(ok_b)}, {_gb(sum(r['h2d_bytes'] for r in ok_b))} copied to the GPU."]
    lines += ["", "Build progress:", "", "```"] + build_lines + ["```", "", "Patterns:", ""]
    lines += [f"- {r['query']}: `{r['pattern']}`" for r in rows]
    C.write_text(os.path.join(args.out, f"billion-{tag}.md"), "\n".join(lines) + "\n")
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(gdir, ignore_errors=True)
    print(json.dumps({"edges": n_edges, "mean_s": None if math.isnan(mean) else round(mean, 3),
                      "whole_run_s": round(total, 1), **{k: round(v, 1) for k, v in stages.items()}}))


if __name__ == "__main__":
    main()
