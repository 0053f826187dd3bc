"""How far the GPU's walk counts are from their device time, and the geomean each bound allows (probe).

    python bench/scratch/host_bound.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 4 5

For each walk, in one process on one store:

- the GPU count's wall time, min and median of ``--reps`` plain counts after ``--warm`` untimed;
- one count under torch's profiler (CUPTI, as bench/scratch/timeline.py): the time the device was
  busy, the host's time inside synchronizing calls (waiting on the device), launches and reads;
- the CPU backend's best of ``--cpu-reps`` counts after one untimed.

Then the geometric mean of CPU over GPU three ways: as measured; with the GPU at its device-busy
time (a host that costs nothing: the ceiling of any host-side work); and with the GPU at its
host-only time (wall less the waits: what a count would take if the host never waited, the floor of
syncs removed alone, Python as it is).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()

from timeline import _union, profile_count  # noqa: E402

_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
          "cuStreamSynchronize", "cuMemcpyDtoH")


def _timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def _profiled(count):
    host, dev = profile_count(count)
    t0 = min(h[0] for h in host)
    t1 = max(max(h[1] for h in host), max(d[1] for d in dev))
    waited = [b - a for a, b, n in host if n.startswith(_WAITS) and not n.startswith("cudaMemcpyAsync")]
    launches = sum(1 for _a, _b, n in host if n == "cuLaunchKernel")
    busy = _union([(a, b) for a, b, _n in dev])
    return (t1 - t0) / 1e6, busy / 1e6, sum(waited) / 1e6, launches, len(waited)


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cpu-reps", type=int, default=3)
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    rows = []
    for qi, pat in walks:
        gpu = lambda: g.count(pat, device="gpu")        # noqa: E731
        n = gpu()
        for _ in range(args.warm):
            gpu()
        g_min, g_med = _timed(gpu, args.reps)
        wall, busy, waits, launches, syncs = _profiled(gpu)
        g.count(pat, device="cpu")
        c_min, c_med = _timed(lambda: g.count(pat, device="cpu"), args.cpu_reps)
        rows.append((qi, n, g_min, g_med, wall, busy, waits, launches, syncs, c_min))
        report(f"walk {qi}: {n:,} matches; GPU {g_min * 1e3:.2f} / {g_med * 1e3:.2f} ms (min / median); "
               f"profiled {wall * 1e3:.2f} ms, device busy {busy * 1e3:.2f} ms, host waiting {waits * 1e3:.2f} ms "
               f"in {syncs} waits, {launches} launches; CPU {c_min:.3f} s")
    g.close()
    report("\n| walk | matches | GPU ms (min / median) | profiled ms | device busy ms | host-only ms | "
           "launches | waits | CPU s | ratio | ratio at device busy | ratio at host-only |")
    report("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    measured, ceiling, no_wait = [], [], []
    for qi, n, g_min, g_med, wall, busy, waits, launches, syncs, c_min in rows:
        host_only = wall - waits
        measured.append(c_min / g_min)
        ceiling.append(c_min / busy)
        no_wait.append(c_min / max(host_only, busy))
        report(f"| {qi} | {n:,} | {g_min * 1e3:.2f} / {g_med * 1e3:.2f} | {wall * 1e3:.2f} | {busy * 1e3:.2f} | "
               f"{host_only * 1e3:.2f} | {launches} | {syncs} | {c_min:.3f} | {measured[-1]:.1f} | "
               f"{ceiling[-1]:.1f} | {no_wait[-1]:.1f} |")
    report(f"\ngeomean CPU/GPU: measured {_geomean(measured):.1f}x; at device busy {_geomean(ceiling):.1f}x; "
           f"at host-only (no waits, the host's work as it is) {_geomean(no_wait):.1f}x")


if __name__ == "__main__":
    main()
