"""Build throughput: time ``sgsi.build`` on an R-MAT graph given as Parquet.

Generates (or reuses) an R-MAT graph with :mod:`gen`, builds the store
through the normal path (``sgsi.build(edges=..., vertices=...)``, default
memory budget) and reports input edges per second. Results go to
``bench/results/build_throughput.md`` and ``.csv``.

    python bench/build_throughput.py [--edges 1e7] [--shape watdiv] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import gen  # noqa: E402
import sgsi  # noqa: E402


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def _count_segments(manifest):
    """Segments over all partitions (manifest layout: partition -> {"segments": [first, count]})."""
    try:
        return sum(int(p["segments"][1]) for p in manifest["partitions"].values())
    except (KeyError, TypeError, IndexError, AttributeError, ValueError):
        return ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=float, default=1e7)
    p.add_argument("--shape", default="watdiv", choices=sorted(gen.SHAPES))
    p.add_argument("--scale", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1, help="builds to time (best is reported)")
    p.add_argument("--memory-budget", default=None, help="default: sgsi's default budget")
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "build"))
    p.add_argument("--regen", action="store_true", help="regenerate the Parquet even if present")
    p.add_argument("--results", default=C.RESULTS_DIR)
    args = p.parse_args(argv)
    n = int(args.edges)
    gdir = os.path.join(args.data, f"rmat_{args.shape}_{n}_s{args.seed}")
    meta_path = os.path.join(gdir, "meta.json")
    if args.regen or not os.path.exists(meta_path):
        C.say(f"generating {n:,} R-MAT edges ({args.shape}) into {gdir}")
        meta = gen.rmat(gdir, n, scale=args.scale, shape=args.shape, seed=args.seed, progress=C.say)
    else:
        with open(meta_path) as f:
            meta = json.load(f)
        C.say(f"reusing {gdir}")
    epath = os.path.join(gdir, "edges.parquet")
    vpath = os.path.join(gdir, "vertices.parquet")
    parquet_bytes = os.path.getsize(epath) + os.path.getsize(vpath)
    out = os.path.join(args.data, "build.sgsi")

    runs = []
    for r in range(args.repeat):
        stages = []
        t0 = time.perf_counter()

        def progress(msg, t0=t0, stages=stages):
            stages.append((time.perf_counter() - t0, msg))
            C.say(msg)

        g = sgsi.build(out, edges=epath, vertices=vpath, memory_budget=args.memory_budget, force=True,
                       progress=progress)
        dt = time.perf_counter() - t0
        info = {"vertices": g.store.n_vertices, "edges": g.store.n_edges}
        g.close()
        runs.append((dt, stages, info))
        C.say(f"build {r + 1}/{args.repeat}: {dt:.1f} s, {n / dt:,.0f} input edges/s")
    best, stages, info = min(runs, key=lambda x: x[0])
    store_bytes = dir_bytes(out)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    m = C.machine()
    row = {
        **{k: m[k] for k in ("date", "commit", "nproc", "ram_gib", "cpu")},
        "shape": args.shape, "scale": meta["scale"], "edge_labels": meta["edge_labels"],
        "vertex_labels": meta["vertex_labels"], "input_edges": n, "distinct_edges": info["edges"],
        "vertices": info["vertices"], "parquet_mb": round(parquet_bytes / 1e6, 1),
        "store_mb": round(store_bytes / 1e6, 1), "memory_budget": manifest["parameters"]["memory_budget"],
        "partitions": len(manifest.get("partitions", {})),
        "segments": _count_segments(manifest),
        "build_s": round(best, 2), "all_build_s": " ".join(f"{x[0]:.2f}" for x in runs),
        "input_edges_per_s": round(n / best), "distinct_edges_per_s": round(info["edges"] / best),
        "peak_rss_mb": round(C.peak_rss_bytes() / 1e6), "gen_s": meta.get("seconds"),
    }
    os.makedirs(args.results, exist_ok=True)
    csv_path = os.path.join(args.results, "build_throughput.csv")
    C.write_csv(csv_path, [row])
    stage_lines = "\n".join(f"    {t:8.1f}s  {msg}" for t, msg in stages)
    md = f"""# Build throughput

`python bench/build_throughput.py --edges {n:g} --shape {args.shape}` — `sgsi.build(edges=..., vertices=...)`
through the normal path (DuckDB ingest, PCSR segments, signatures), memory budget
{'sgsi default' if args.memory_budget is None else args.memory_budget}
({row['memory_budget']:,} bytes), timed wall clock end to end (best of {args.repeat}).

{C.machine_md(m)}
## Input

- R-MAT (a,b,c,d = {meta['a']},{meta['b']},{meta['c']},{meta['d']}), scale {meta['scale']} ({meta['vertices']:,} vertex ids,
  every one in the vertex file), seed {meta['seed']}
- {n:,} generated edge rows → {info['edges']:,} distinct (src, dst, label) edges
- shape `{args.shape}`: {meta['edge_labels']} edge labels, {meta['vertex_labels']} vertex labels (Zipf, exponent 1)
- Parquet (zstd): {row['parquet_mb']} MB; generation took {meta.get('seconds')} s
- store: {row['partitions']} partitions, {row['segments']} segments, segment size {manifest['parameters'].get('segment_edges', '?'):,} edges

## Result

| input edges | distinct edges | vertices | build (s) | input edges/s | distinct edges/s | store (MB) | peak RSS (MB) |
|---:|---:|---:|---:|---:|---:|---:|---:|
| {n:,} | {info['edges']:,} | {info['vertices']:,} | {best:.1f} | {n / best:,.0f} | {info['edges'] / best:,.0f} | {row['store_mb']} | {row['peak_rss_mb']} |

All builds (s): {row['all_build_s']}. Peak RSS is the whole process (generator, DuckDB, writers).

Stages of the best build (sgsi's progress lines, time since the build call):

{stage_lines}
"""
    md_path = os.path.join(args.results, "build_throughput.md")
    C.write_text(md_path, md)
    print(md)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
