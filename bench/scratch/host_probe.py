"""Where a light count's host time goes, and what a stalled count is doing (probe).

    python bench/scratch/host_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --light 0 1 --stall 3 --limit 20

For each ``--light`` query: best plain time of 8 counts, then cProfile over 5
counts (Python calls per count; the top functions by own time, then by cumulative time). For each
``--stall`` query: its plan (order, steps, candidate counts, factoring), then a
count cancelled after ``--limit`` seconds while a thread samples the main
thread's stack every 10 ms (the innermost sgsi frames, by share of samples),
and the pieces the engine saw (step vertex, rows, way, first-link entries).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import (DATA_DIR, add_walk_options, device_sync, ensure_importable, open_or_build, report,  # noqa: E402
                     walk_graph, walk_queries)

ensure_importable()

from sgsi.join import engine as engine_mod  # noqa: E402
from sgsi.join.plan import make_plan  # noqa: E402
from sgsi.pattern import load_pattern  # noqa: E402


def light(g, qi, pat, device, sync):
    g.count(pat, device=device)
    ts = []
    for _ in range(8):
        sync()
        t = time.perf_counter()
        n = g.count(pat, device=device)
        sync()
        ts.append(time.perf_counter() - t)
    report(f"\n## light query {qi}: {n:,} matches, best {min(ts) * 1e3:.1f} ms; stats {g.last_stats}")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        g.count(pat, device=device)
    sync()
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    report(f"   {st.total_calls / 5:.0f} Python calls per count")
    st.sort_stats("tottime").print_stats(40)
    st.sort_stats("cumulative").print_stats(45)
    report(s.getvalue())


def plan_summary(g, pat, backend):
    p = make_plan(g.store, load_pattern(pat), backend, refine_rounds=0, factor_leaves=True)
    report(f"   order {p.order}; factored {p.factored}; candidates {p.candidate_counts}")
    for s in p.steps:
        report(f"   step u{s.vertex}: links {[(k.other, k.label_id, k.direction, k.edges) for k in s.links]} "
               f"conflicts {s.conflicts}")
    for lg in p.leaf_groups:
        report(f"   leaf group {lg}")
    for t in p.subtrees:
        report(f"   subtree {t}")


def stall(g, qi, pat, device, limit):
    report(f"\n## stalled query {qi}: {pat}")
    backend = g._take_backend(device, None)[1]
    plan_summary(g, pat, backend)
    pieces = []
    orig = engine_mod.Engine._pieces

    def pieces_logged(self, chunk, step, lim):
        for piece, deg, how in orig(self, chunk, step, lim):
            pieces.append((step.vertex, engine_mod._n_rows(piece), how.way, how.total, time.perf_counter()))
            yield piece, deg, how
    engine_mod.Engine._pieces = pieces_logged
    main = threading.main_thread().ident
    samples = collections.Counter()
    leaf = collections.Counter()
    stop = threading.Event()

    def sampler():
        while not stop.wait(0.01):
            f = sys._current_frames().get(main)
            sites = []
            while f is not None:
                if "/sgsi/" in f.f_code.co_filename:
                    sites.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}:{f.f_lineno}")
                f = f.f_back
            if sites:
                samples[" < ".join(sites[:4])] += 1
                leaf[sites[0]] += 1
    cancel = threading.Event()
    timer = threading.Timer(limit, cancel.set)
    th = threading.Thread(target=sampler, daemon=True)
    t0 = time.perf_counter()
    timer.start()
    th.start()
    try:
        n = g.count(pat, device=device, cancel=cancel)
        report(f"   finished: {n:,} in {time.perf_counter() - t0:.1f} s")
    except Exception as e:                  # the cancellation
        report(f"   stopped after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {e}")
    stop.set()
    timer.cancel()
    engine_mod.Engine._pieces = orig
    total = sum(leaf.values()) or 1
    report("   innermost sgsi frame, share of samples:")
    for site, c in leaf.most_common(15):
        report(f"     {100 * c / total:5.1f}%  {site}")
    report("   stacks (4 innermost sgsi frames):")
    for site, c in samples.most_common(8):
        report(f"     {100 * c / total:5.1f}%  {site}")
    by = collections.Counter()
    for u, rows, way, tot, _t in pieces:
        by[(u, way)] += 1
    report(f"   {len(pieces)} pieces; by (step vertex, way): {dict(by)}")
    for p in pieces[:12] + pieces[-12:]:
        report(f"     u{p[0]} rows {p[1]:,} {p[2]} entries {p[3]:,} at {p[4] - t0:.2f} s")


def census(g, qi, pat, device):
    """The pieces of one count: step vertex, way, rows, first-link entries, longest list, distinct
    first-link vertices (read with extra syncs: a census, not a timing)."""
    xp = g._take_backend(device, None)[1].xp
    rows = []
    orig = engine_mod.Engine._pieces

    def logged(self, chunk, step, lim):
        for piece, deg, how in orig(self, chunk, step, lim):
            col = piece[step.links[0].other]
            rows.append((step.vertex, len(step.links), how.way, int(deg.size), int(deg.sum()),
                         int(deg.max()) if deg.size else 0, int(xp.unique(col).size) if col.size else 0,
                         lim.gba_entries, lim.chunk_rows))
            yield piece, deg, how
    engine_mod.Engine._pieces = logged
    try:
        n = g.count(pat, device=device)
    finally:
        engine_mod.Engine._pieces = orig
    report(f"\n## pieces of query {qi} ({n:,} matches): vertex, links, way, rows, entries, longest, distinct, "
           f"cap, chunk_rows")
    for r in rows:
        report("   " + " ".join(f"{x:,}" if isinstance(x, int) else str(x) for x in r))


def main():
    ap = argparse.ArgumentParser()
    add_walk_options(ap, edges=1e7, queries=3)
    ap.add_argument("--light", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--stall", type=int, nargs="*", default=[])
    ap.add_argument("--limit", type=float, default=20)
    ap.add_argument("--pieces", type=int, nargs="*", default=[])
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--data", default=DATA_DIR)
    args = ap.parse_args()
    gdir = walk_graph(args)
    queries = walk_queries(gdir, args)
    g = open_or_build(gdir)
    sync = device_sync(args.device)
    for qi in args.light:
        light(g, qi, queries[qi][1], args.device, sync)
    for qi in args.pieces:
        census(g, qi, queries[qi][1], args.device)
    for qi in args.stall:
        stall(g, qi, queries[qi][1], args.device, args.limit)
    g.close()


if __name__ == "__main__":
    main()
