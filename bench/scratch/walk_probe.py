"""The fused walk (Engine._walk) against the engine's steps, and its caps, on the walks of one graph (probe).

    python bench/scratch/walk_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 4 5 --entries 24 26 28

One process, one store: per setting (the walk off, then each ``--entries`` cap, as a power of 2)
and query, the min / median ms of ``--reps`` counts after one untimed, the depth the walk reached,
the entries it read and the rows of its levels.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import device_sync, ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def main():
    ap = probe_parser(__doc__)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--entries", type=int, nargs="*", default=[24, 26, 28])
    ap.add_argument("--rows", type=int, default=20)
    args = ap.parse_args()
    _gdir, g, queries = probe_walks(args)
    from sgsi.join import engine, gpu
    sync = device_sync("gpu")
    seen = {}
    plain = gpu.GpuBackend.walk

    def walk(self, *a):
        got = plain(self, *a)
        seen["levels"] = None if got is None else (got.levels, got.stopped, got.entries)
        return got
    gpu.GpuBackend.walk = walk
    engine.WALK_ROWS = 1 << args.rows
    report("| setting | query | ms min / median | walked | stopped | entries | levels |")
    report("|---|---:|---:|---:|---:|---:|---|")
    for setting in ["off"] + args.entries:
        engine.WALK = setting != "off"
        if setting != "off":
            engine.WALK_ENTRIES = 1 << setting
        for qi, pat in queries:
            seen.clear()
            g.count(pat, device="gpu")
            ts = []
            for _ in range(args.reps):
                sync()
                t = time.perf_counter()
                g.count(pat, device="gpu")
                sync()
                ts.append((time.perf_counter() - t) * 1e3)
            lv = seen.get("levels")
            report(f"| {setting} | {qi} | {min(ts):.2f} / {statistics.median(ts):.2f} | {g.last_stats['walked']} | "
                   f"{lv[1] if lv else ''} | {lv[2] if lv else ''} | {lv[0] if lv else ''} |")
    g.close()


if __name__ == "__main__":
    main()
