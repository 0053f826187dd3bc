"""The CPU backend's candidate filter on the random walks of one generated graph (probe).

    python bench/scratch/cpu_filter_probe.py --edges 1e8 --shape watdiv --edge-labels 16 \
        --vertex-labels 64 --sizes 8 12 --queries 3

Per query, the best of ``--rounds`` ms of: ``plan._filter_args`` (the filter's arguments),
``CpuBackend.candidate_bits`` on them, ``counts_and_overlaps`` of its sets, and the whole
``plan._filtered_sets`` as make_plan calls it; then the sets' sizes. The label indexes and degree
masks are made before the first round (kept between queries, as in a count).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def best_ms(fn, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    from sgsi.join import plan as P
    from sgsi.join.backend import CpuBackend
    from sgsi.pattern import load_pattern
    store, be = g.store, CpuBackend()
    for qi, text in walks:
        pat = load_pattern(text)
        vlabel = [None if v.label is None else store.vertex_label_id(v.label) for v in pat.vertices]
        edge_ids = {e: P.ANY_LABEL if e.label is None else store.edge_label_id(e.label) for e in pat.edges}
        inc = list(P._incident(pat, edge_ids))
        fa = P._filter_args(store, be, vlabel, inc, True)
        bits = be.candidate_bits(*fa)
        t_args = best_ms(lambda: P._filter_args(store, be, vlabel, inc, True), args.rounds)
        t_bits = best_ms(lambda: be.candidate_bits(*fa), args.rounds)
        t_counts = best_ms(lambda: be.counts_and_overlaps(bits), args.rounds)
        t_all = best_ms(lambda: P._filtered_sets(store, be, vlabel, inc, True, False), args.rounds)
        report(f"query {qi}: filter args {t_args:.1f}, candidate_bits {t_bits:.1f}, counts {t_counts:.1f}, "
               f"_filtered_sets {t_all:.1f} ms; sizes {be.popcounts(bits)}")


if __name__ == "__main__":
    main()
