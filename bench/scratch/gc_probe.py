"""How much of a count's time Python's cyclic garbage collector takes (probe).

    python bench/scratch/gc_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 4 --counts 30 --device gpu

One process opens the store; per query, after 3 untimed counts, rounds of one count with the
collector as it is ("on") and one with it disabled around the count ("off"), ``--counts`` rounds.
The collections that ran during the "on" counts are timed through ``gc.callbacks``. Prints
min / median ms per mode and the collections' number and time per generation.
"""

from __future__ import annotations

import collections
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--counts", type=int, default=30)
    ap.add_argument("--device", default="gpu")
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    sync = (lambda: None)
    if args.device == "gpu":
        import cupy
        sync = cupy.cuda.Device().synchronize
    started, spent = {}, collections.defaultdict(lambda: [0, 0.0])
    watching = [False]

    def watch(phase, info):
        if not watching[0]:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
        else:
            r = spent[info["generation"]]
            r[0] += 1
            r[1] += time.perf_counter() - started["t"]

    gc.callbacks.append(watch)
    report(f"objects tracked after opening: {len(gc.get_objects()):,}; thresholds {gc.get_threshold()}")
    for qi, pat in walks:
        for _ in range(3):
            g.count(pat, device=args.device)
        times = {"on": [], "off": []}
        spent.clear()
        for _ in range(args.counts):
            for mode in ("on", "off"):
                sync()
                if mode == "off":
                    gc.disable()
                watching[0] = mode == "on"
                t = time.perf_counter()
                g.count(pat, device=args.device)
                sync()
                times[mode].append(time.perf_counter() - t)
                watching[0] = False
                gc.enable()
        cells = "; ".join(f"{m}: {min(v) * 1e3:.2f} / {statistics.median(v) * 1e3:.2f} ms" for m, v in times.items())
        per_gen = ", ".join(f"gen{gen} {n} x, {s * 1e3:.2f} ms" for gen, (n, s) in sorted(spent.items()))
        report(f"query {qi}: {cells}; collections during the {args.counts} 'on' counts: {per_gen or 'none'}")
    g.close()


if __name__ == "__main__":
    main()
