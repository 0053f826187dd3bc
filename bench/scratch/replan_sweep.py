"""The replan rule's cost factor swept on one backend, in one process (probe).

    python bench/scratch/replan_sweep.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 4 5 --factors 2 1 0.5 0.25 --rounds 10

Sets ``engine.REPLAN_COST_FACTOR`` (the engine replans once its work passes that many times
``refine_cost``, and ``REPLAN_FACTOR`` times the candidates) to each of ``--factors`` in turn,
round by round (the order alternating), and counts each query once a round. Prints per query and
factor the minimum and median ms, whether it replanned and the steps it ran.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import device_sync, ensure_importable, probe_parser, probe_walks  # noqa: E402

ensure_importable()
import sgsi.join.engine as engine_mod  # noqa: E402


def main():
    ap = probe_parser(__doc__)
    ap.add_argument("--factors", type=float, nargs="+", default=[2, 1, 0.5, 0.25])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--device", default="gpu")
    args = ap.parse_args()
    _gdir, g, queries = probe_walks(args)
    sync = device_sync(args.device)
    print("| query | factor | min ms | median ms | replanned | steps |")
    print("|---|---:|---:|---:|---:|---:|")
    for qi, pattern in queries:
        times = {f: [] for f in args.factors}
        seen = {}
        for r in range(args.rounds + 2):
            order = args.factors if r % 2 == 0 else args.factors[::-1]
            for f in order:
                engine_mod.REPLAN_COST_FACTOR = f
                sync()
                t = time.perf_counter()
                n = g.count(pattern, device=args.device)
                sync()
                dt = time.perf_counter() - t
                if r >= 2:
                    times[f].append(dt)
                st = g.last_stats
                seen[f] = (n, st.get("replanned"), st.get("steps"))
        for f in args.factors:
            ts = times[f]
            print(f"| {qi} | {f} | {min(ts) * 1e3:.2f} | {statistics.median(ts) * 1e3:.2f} | {seen[f][1]} | "
                  f"{seen[f][2]} |", flush=True)
        assert len({v[0] for v in seen.values()}) == 1, seen


if __name__ == "__main__":
    main()
