"""GPU counts of walks under module constants set to other values, interleaved in one process (probe).

    python bench/scratch/consts_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 --variants base= rest2=sgsi.join.gpu._ROW_REST_ROWS:2

A variant is NAME=[MODULE.CONSTANT:VALUE[;MODULE.CONSTANT:VALUE...]] (empty: the constants as
they are). Each round counts every query once under each variant, in turn; prints per query and
variant the minimum and median of ``--rounds`` rounds (ms), and checks the counts agree.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import device_sync, ensure_importable, probe_parser, probe_walks  # noqa: E402

ensure_importable()


def parse(spec):
    name, _, body = spec.partition("=")
    sets = []
    for item in filter(None, body.split(";")):
        target, _, value = item.partition(":")
        module, _, const = target.rpartition(".")
        sets.append((importlib.import_module(module), const, int(value)))
    return name, sets


def main():
    ap = probe_parser(__doc__)
    ap.add_argument("--variants", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    variants = [parse(v) for v in args.variants]
    _gdir, g, queries = probe_walks(args)
    sync = device_sync("gpu")
    times = {(i, name): [] for i, _p in queries for name, _s in variants}
    counts = {}
    for r in range(args.rounds + 1):
        for i, pattern in queries:
            for name, sets in variants:
                old = [(m, c, getattr(m, c)) for m, c, _v in sets]
                for m, c, v in sets:
                    setattr(m, c, v)
                try:
                    sync()
                    t = time.perf_counter()
                    n = g.count(pattern, device="gpu")
                    sync()
                    dt = time.perf_counter() - t
                finally:
                    for m, c, v in old:
                        setattr(m, c, v)
                if counts.setdefault(i, n) != n:
                    raise SystemExit(f"COUNT MISMATCH on query {i} under {name}: {n} against {counts[i]}")
                if r:                               # round 0 warms up
                    times[(i, name)].append(dt * 1e3)
    for i, _p in queries:
        print(f"query {i} ({counts[i]:,} matches): " + "  ".join(
            f"{name} {min(times[(i, name)]):.2f} / {statistics.median(times[(i, name)]):.2f}"
            for name, _s in variants), flush=True)


if __name__ == "__main__":
    main()
