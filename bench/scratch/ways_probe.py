"""The replanned walks' first attempt: each query counted as the engine does it (``default``) and
refined before the join (``up front``), on each backend named, in one process (probe).

    python bench/scratch/ways_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 2 5 --devices gpu cpu

Prints per query, backend and way: the count, the best time of ``--runs`` (after one untimed count),
the join's work and the work at which ``default`` replanned (bench/replan.py's ways and bookkeeping).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks  # noqa: E402

ensure_importable()
import replan  # noqa: E402


def main():
    ap = probe_parser(__doc__)
    ap.add_argument("--devices", nargs="+", default=["gpu", "cpu"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60)
    args = ap.parse_args()
    _gdir, g, queries = probe_walks(args)
    for i, pattern in queries:
        for device in args.devices:
            for name in ("default", "up front"):
                seen = {}
                with replan.way(name, seen):
                    replan.best_count(g, pattern, device, 1, args.limit, seen)
                    n, best = replan.best_count(g, pattern, device, args.runs, args.limit, seen)
                ms = "stopped" if best is None else f"{best * 1e3:9.2f} ms"
                print(f"query {i} {device} {name:9s} {n} {ms} work {seen.get('work')} "
                      f"replanned at {seen.get('work_at_replan')}", flush=True)


if __name__ == "__main__":
    main()
