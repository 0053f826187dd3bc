"""Why light queries are slower in gpu_vs_cpu.py's worker than in ab.py's (probe).

    python bench/scratch/light_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1

One process, one store, the given queries; each measurement is the min / median
ms of ``--reps`` counts after one untimed count. The worker differs from ab.py's
server in: the default memory budget (half the free memory, resolved per query)
against 16GB; the yeast kernel warm-up; the store-wide warm-up count
``(a)-->(b)-->(c)``; the SGSI_LOAD_BALANCE toggle. Each is switched on in turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import (DATA_DIR, add_walk_options, device_sync, ensure_importable, open_or_build, report,  # noqa: E402
                     walk_graph, walk_queries, warm_up_kernels)

ensure_importable()


def main():
    ap = argparse.ArgumentParser()
    add_walk_options(ap, edges=1e7, queries=3)
    ap.add_argument("--only", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--data", default=DATA_DIR)
    args = ap.parse_args()
    gdir = walk_graph(args)
    queries = [walk_queries(gdir, args)[i] for i in args.only]
    g = open_or_build(gdir)
    sync = device_sync("gpu")

    def measure(label, budget):
        for qi, (_k, pat) in zip(args.only, queries):
            g.count(pat, device="gpu", memory_budget=budget)
            ts = []
            for _ in range(args.reps):
                sync()
                t = time.perf_counter()
                g.count(pat, device="gpu", memory_budget=budget)
                sync()
                ts.append((time.perf_counter() - t) * 1e3)
            report(f"| {label} | {budget or 'default'} | {qi} | {min(ts):.1f} / {statistics.median(ts):.1f} |")

    report("| state | budget | query | ms min / median |")
    report("|---|---|---:|---:|")
    measure("plain", "16GB")
    measure("plain", None)
    warm_up_kernels("gpu")
    measure("after yeast warm-up", "16GB")
    measure("after yeast warm-up", None)
    g.count("(a)-->(b)-->(c)", device="gpu")
    measure("after store-wide warm-up", "16GB")
    measure("after store-wide warm-up", None)
    for lb in ("1", "0", "1"):
        os.environ["SGSI_LOAD_BALANCE"] = lb
        measure(f"SGSI_LOAD_BALANCE={lb}", None)
    g.close()


if __name__ == "__main__":
    main()
