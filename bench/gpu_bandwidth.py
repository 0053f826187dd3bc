"""GPU bandwidth: the signature filter and segment streaming against the device's own rates.

    python bench/gpu_bandwidth.py --vertices 134217728 --edges 1e7 --out bench/results

Side by side in one run on one GPU:

1. **Device copy bandwidth**: ``cupy.copyto`` of a buffer as large as the
   filter's columns; bytes read + written per second, best of ``--runs``.
2. **Signature filter**: ``GpuBackend.candidate_bits`` (the kernel the
   planner runs per vertex segment for up to 32 pattern vertices) over
   ``--vertices`` synthetic vertices, for one pattern vertex: four uint32
   signature columns (a bucket), the label column and one degree mask in,
   the C(u) bitset out. Every query word is non-zero and every vertex
   passes, so every word and mask byte is read: bytes = 4 columns + labels
   + mask + bitset. Reported as bytes per second and as a fraction of 1.
3. **Pinned host-to-device bandwidth**: one copy of a pinned buffer of
   ``--h2d-mb`` MB, timed by CUDA events, best of ``--runs``.
4. **Segment streaming in a join**: an R-MAT store of ``--edges`` edges built
   at ``--store-budget`` (many small segments) and at ``--big-budget`` (fewer,
   larger ones), the GPU backend's segment cache off, and a one-edge pattern
   counted (over the most frequent edge label, and over any label): the join
   reads every segment of that partition, once through the pinned double
   buffers and once straight from the registered file maps (``--modes``).
   Reported: bytes copied, the copy stream's time for them (CUDA events),
   the host time spent filling the pinned buffers, the streamed step's device time (from its start to the
   end of the join's work on its last segment, CUDA events) and the query's
   wall time, each as a rate, and the copy and step rates as fractions of 3.

Writes gpu_bandwidth.md and .csv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import DATA_DIR, ensure_importable, machine, machine_md, say, write_csv, write_text  # noqa: E402

ensure_importable()
import gen  # noqa: E402

import sgsi  # noqa: E402


def _events_best(cp, fn, runs):
    """Best time (s) of ``fn()`` on the current stream, timed by CUDA events."""
    fn()
    best = float("inf")
    for _ in range(runs):
        start = cp.cuda.get_current_stream().record()
        fn()
        end = cp.cuda.get_current_stream().record()
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3)
    return best


def device_copy(cp, nbytes, runs):
    a = cp.ones(nbytes // 4, dtype=cp.uint32)
    b = cp.empty_like(a)
    t = _events_best(cp, lambda: cp.copyto(b, a), runs)
    return {"what": "device copy (cupy.copyto)", "bytes": 2 * a.nbytes, "seconds": t}


def signature_filter(cp, backend, n, runs):
    rng = cp.random.default_rng(1)
    cols = [rng.integers(0, 2**32, n, dtype=cp.uint64).astype(cp.uint32) | cp.uint32(1 << c) for c in range(4)]
    labels = cp.zeros(n, dtype=cp.int32)
    mask = cp.ones(n, dtype=bool)
    parts = [(0, n, [(labels, 0, [(c, 1 << k) for k, c in enumerate(cols)])])]   # every vertex passes
    out = []
    t = _events_best(cp, lambda: out.append(backend.candidate_bits(n, parts, [[mask]])[0]), runs)
    if int(cp.count_nonzero(out[-1] == cp.uint32(0xFFFFFFFF))) != n // 32:
        raise SystemExit("the signature filter dropped a vertex that passes")
    nbytes = sum(int(c.nbytes) for c in cols) + int(labels.nbytes) + int(mask.nbytes) + int(out[-1].nbytes)
    return {"what": f"signature filter (candidate_bits), {n:,} vertices x 4 columns + label + degree mask",
            "bytes": nbytes, "seconds": t}


def pinned_h2d(cp, nbytes, runs):
    import numpy as np
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(mem, np.uint8, nbytes)
    host[:] = 1
    dev = cp.empty(nbytes, dtype=cp.uint8)
    t = _events_best(cp, lambda: dev.set(host), runs)
    return {"what": "pinned host-to-device copy", "bytes": nbytes, "seconds": t}


_BUILT = set()     # stores built by this run: each budget's store is built once, for both modes


def segment_streaming(args, budget, any_label, mode):
    """Count a one-edge pattern on a store built at ``budget``, segment cache off, the segments
    copied through the pinned buffers (``mode`` "pinned") or straight from the registered file
    maps ("mapped"). Returns (pattern, the best run's stats, graph)."""
    if mode == "pinned":
        os.environ["SGSI_GPU_MAPPED_BYTES"] = "0"
    else:
        os.environ.pop("SGSI_GPU_MAPPED_BYTES", None)
    gdir = gen.cached_rmat(args.data, args.edges, args.shape, say=say)
    path = gdir + f"-{budget}.sgsi"
    if path in _BUILT:                                # the other mode's store: built earlier in this run
        g = sgsi.open(path)
    else:
        t = time.perf_counter()
        g = sgsi.build(path, edges=os.path.join(gdir, "edges.parquet"),
                       vertices=os.path.join(gdir, "vertices.parquet"), memory_budget=budget, force=True)
        say(f"built {g} in {time.perf_counter() - t:.1f}s")
        _BUILT.add(path)
    import json
    with open(os.path.join(path, "manifest.json")) as f:
        labels = json.load(f)["edge_labels"]
    top = max(range(len(labels["values"])), key=lambda i: labels["frequency"][i])
    pattern = "(a)-->(b)" if any_label else f"(a)-[:{gen.label_text(labels['values'][top])}]->(b)"
    rows = []
    for run in range(args.runs + 1):
        from sgsi.join.backends.gpu import memory as gpu_memory
        gpu_memory.CACHE_FRACTION = 0                 # every segment is copied, every time
        gpu_memory.device_memory().cache.clear()
        t = time.perf_counter()
        n = g.count(pattern, device="gpu", memory_budget=budget)
        wall = time.perf_counter() - t
        st = dict(g.last_stats)
        if run:                                       # run 0: warm-up (kernel compilation)
            rows.append({"matches": n, "wall_s": wall, **{k: st[k] for k in (
                "segments", "h2d_bytes", "h2d_segment_bytes", "h2d_mapped_bytes", "h2d_seconds", "stage_seconds",
                "stream_seconds")}})
            say(rows[-1])
    g.close()
    return pattern, min(rows, key=lambda r: r["wall_s"]), g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vertices", type=int, default=1 << 27)
    ap.add_argument("--h2d-mb", type=int, default=1024)
    ap.add_argument("--edges", type=float, default=1e7)
    ap.add_argument("--shape", default="watdiv")
    ap.add_argument("--store-budget", default="64MB", help="build and query budget of the first streaming store")
    ap.add_argument("--big-budget", default="1GB", help="the same for the second (larger segments, any label)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--modes", nargs="+", default=["pinned", "mapped"], choices=("pinned", "mapped"),
                    help="how segments reach the device: pinned staging buffers, registered file maps")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    import cupy as cp

    from sgsi.join.backends.gpu.backend import GpuBackend

    m = machine()
    backend = GpuBackend("1GB")
    filt = signature_filter(cp, backend, args.vertices, args.runs)
    copy = device_copy(cp, filt["bytes"] // 2, args.runs)
    h2d = pinned_h2d(cp, args.h2d_mb << 20, args.runs)
    for r in (copy, filt, h2d):
        r["GB_per_s"] = r["bytes"] / r["seconds"] / 1e9
        say(r)
    rows = [copy, filt, h2d]
    cases = []
    cases_to_run = [(budget, any_label, mode) for budget, any_label in ((args.store_budget, False), (args.big_budget, True))
                    for mode in args.modes]
    for budget, any_label, mode in cases_to_run:
        pattern, st, g = segment_streaming(args, budget, any_label, mode)
        seg = st["h2d_segment_bytes"]       # what h2d_seconds, stage_seconds and stream_seconds time
        where = f"`{pattern}` at {budget}, {mode} ({st['h2d_mapped_bytes']:,} bytes from the maps)"

        def rate(sec):
            return seg / sec / 1e9 if sec else float("nan")
        rows += [{"what": f"{where}: segment copies ({st['segments']} segments, copy stream)", "bytes": seg,
                  "seconds": st["h2d_seconds"], "GB_per_s": rate(st["h2d_seconds"])},
                 {"what": f"{where}: filling the pinned buffers (host)", "bytes": seg,
                  "seconds": st["stage_seconds"], "GB_per_s": rate(st["stage_seconds"])},
                 {"what": f"{where}: the streamed step (device, first segment to the join's end on the last)",
                  "bytes": seg, "seconds": st["stream_seconds"], "GB_per_s": rate(st["stream_seconds"])},
                 {"what": f"{where}: the whole query (wall)", "bytes": seg, "seconds": st["wall_s"],
                  "GB_per_s": rate(st["wall_s"])}]
        cases.append((where, st, rate(st["h2d_seconds"]), rate(st["stream_seconds"])))
    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "gpu_bandwidth.csv"), rows)
    lines = ["# GPU bandwidth: signature filter and segment streaming", "", machine_md(m),
             f"- command: `python bench/gpu_bandwidth.py --vertices {args.vertices} --h2d-mb {args.h2d_mb} "
             f"--edges {args.edges:g} --shape {args.shape} --store-budget {args.store_budget} "
             f"--big-budget {args.big_budget} --runs {args.runs} --modes {' '.join(args.modes)}`",
             f"- streaming: an R-MAT {args.shape} store of {g.store.n_edges:,} edges, {g.store.n_vertices:,} vertices, "
             "built at each budget; each query counted at that budget with the segment cache off; "
             "best of the runs by wall time", "",
             "| what | bytes | seconds | GB/s |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['what']} | {r['bytes']:,} | {r['seconds']:.6f} | {r['GB_per_s']:.1f} |")
    lines += ["", f"- signature filter / device copy: **{filt['GB_per_s'] / copy['GB_per_s']:.0%}** (target >= 50%)"]
    for where, st, copy_rate, step_rate in cases:
        lines.append(f"- {where} ({st['matches']:,} matches): segment copies / pinned host-to-device "
                     f"**{copy_rate / h2d['GB_per_s']:.0%}**; the streamed step / pinned host-to-device "
                     f"**{step_rate / h2d['GB_per_s']:.0%}**; whole query / pinned host-to-device "
                     f"{st['h2d_segment_bytes'] / st['wall_s'] / 1e9 / h2d['GB_per_s']:.0%}")
    write_text(os.path.join(args.out, "gpu_bandwidth.md"), "\n".join(lines) + "\n")
    say("\n".join(lines))


if __name__ == "__main__":
    main()
