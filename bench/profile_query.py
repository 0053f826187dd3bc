"""Profile random-walk queries on one backend with cProfile (where does the time go?).

    python bench/profile_query.py --edges 1e7 --k 12 --queries 3 --device gpu

Prints the top functions by own time and by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import DATA_DIR, ensure_importable, open_or_build  # noqa: E402

ensure_importable()
import gen  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=float, default=1e7)
    ap.add_argument("--shape", default="watdiv")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    n = int(args.edges)
    gdir = gen.cached_rmat(DATA_DIR, n, args.shape)
    g = open_or_build(gdir)
    pats = [q.pattern for q in gen.random_walk_queries(gdir, args.k, args.queries, seed=args.k)]
    for p in pats:                      # warm-up: compilation and caches
        g.count(p, device=args.device)
    t = time.perf_counter()
    pr = cProfile.Profile()
    pr.enable()
    for p in pats:
        g.count(p, device=args.device)
    pr.disable()
    print(f"{len(pats)} queries in {time.perf_counter() - t:.3f}s on {args.device}; last stats {g.last_stats}")
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(args.top)
    st.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
