"""Build throughput: time ``sgsi.build`` on an R-MAT graph given as Parquet.

Generates (or reuses) an R-MAT graph with :mod:`gen`, builds the store
through the normal path (``sgsi.build(edges=..., vertices=...)``, default
memory budget) and reports input edges per second. Results go to
``bench/results/build_throughput.md`` and ``.csv``.

With ``--baseline-rev REV`` (or ``--baseline-src DIR``, a directory holding an
older ``sgsi`` package) the same input is also built by that code, in a
subprocess, right before the timed builds, and the results record both
(before/after on the same machine, input and load).

    python bench/build_throughput.py [--edges 1e7] [--shape watdiv] [--repeat 1] [--baseline-rev 8d970da]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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


_BASELINE_SNIPPET = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import sgsi
stages = []
t0 = time.perf_counter()
def progress(msg):
    stages.append((time.perf_counter() - t0, msg))
    print(msg, file=sys.stderr, flush=True)
budget = None if sys.argv[5] == "" else sys.argv[5]
g = sgsi.build(sys.argv[2], edges=sys.argv[3], vertices=sys.argv[4], memory_budget=budget, force=True,
               progress=progress)
dt = time.perf_counter() - t0
g.close()
print(json.dumps({"seconds": dt, "stages": stages, "file": sgsi.__file__}))
"""


def baseline_source(rev, data_dir):
    """Extract ``rev`` with ``git archive`` (no change to the repository) into the data directory."""
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=C.REPO_DIR, capture_output=True, text=True,
                            check=True).stdout.strip()
    dest = os.path.join(data_dir, f"baseline-{commit}")
    if not os.path.isdir(os.path.join(dest, "sgsi")):
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit, "sgsi"], cwd=C.REPO_DIR, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest, commit


def run_baseline(src, out, epath, vpath, budget):
    """Build with the sgsi package under ``src`` in a subprocess; returns its seconds and stages."""
    C.say(f"baseline build with {src}")
    r = subprocess.run([sys.executable, "-c", _BASELINE_SNIPPET, os.path.abspath(src), out, epath, vpath,
                        budget or ""], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"baseline build failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if not os.path.abspath(res["file"]).startswith(os.path.abspath(src)):
        raise RuntimeError(f"baseline imported sgsi from {res['file']}, not from {src}")
    shutil.rmtree(out, ignore_errors=True)
    C.say(f"baseline: {res['seconds']:.1f} s")
    return res


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
    p.add_argument("--baseline-rev", default=None, help="also time the build of this git revision (before/after)")
    p.add_argument("--baseline-src", default=None, help="also time the sgsi package in this directory")
    p.add_argument("--baseline-label", default=None, help="how to name the baseline (default: its commit)")
    args = p.parse_args(argv)
    m0 = C.machine()      # the commit of the code this run loads
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

    baseline = None
    if args.baseline_rev or args.baseline_src:
        if args.baseline_src:
            bsrc, blabel = args.baseline_src, args.baseline_label or os.path.basename(os.path.normpath(args.baseline_src))
        else:
            bsrc, blabel = baseline_source(args.baseline_rev, args.data)
            blabel = args.baseline_label or blabel
        baseline = run_baseline(bsrc, os.path.join(args.data, "baseline.sgsi"), epath, vpath, args.memory_budget)
        baseline["label"] = blabel

    from sgsi.storage import segment_writer
    workers = segment_writer.pcsr_workers()
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
    m = C.machine_at_end(m0)
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
        "pcsr_workers": workers,
        "baseline": baseline["label"] if baseline else "",
        "baseline_build_s": round(baseline["seconds"], 2) if baseline else "",
        "speedup": round(baseline["seconds"] / best, 2) if baseline else "",
    }
    os.makedirs(args.results, exist_ok=True)
    csv_path = os.path.join(args.results, "build_throughput.csv")
    C.write_csv(csv_path, [row])
    stage_lines = "\n".join(f"    {t:8.1f}s  {msg}" for t, msg in stages)
    before_after = ""
    if baseline:
        b_lines = "\n".join(f"    {t:8.1f}s  {msg}" for t, msg in baseline["stages"])
        before_after = f"""
## Before / after

Same input, same machine, one after the other (the baseline first, in a subprocess).

| code | build (s) | input edges/s |
|---|---:|---:|
| before: `{baseline['label']}` | {baseline['seconds']:.1f} | {n / baseline['seconds']:,.0f} |
| after: `{m['commit']}` | {best:.1f} | {n / best:,.0f} |

Speedup: {baseline['seconds'] / best:.1f}x. Stages of the baseline build:

{b_lines}
"""
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
PCSR builder threads: {workers} (`SGSI_BUILD_WORKERS`; default: cores - 2, at most 8).
{before_after}
Stages of the best build (sgsi's progress lines, time since the build call):

{stage_lines}
"""
    md_path = os.path.join(args.results, "build_throughput.md")
    C.write_text(md_path, md)
    print(md)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
