"""Where a count's time goes, phase by phase, with the device synchronised at each boundary.

    python bench/phases.py --edges 1e8 --sizes 8 12 --queries 3 --device gpu

For each random-walk query: the best plain wall time of ``--runs`` counts, then
one count with the planner's and the engine's phases wrapped (the device is
synchronised on entry and exit of each, so the times are the phase's own, at
the price of extra syncs: their sum is above the plain time). Each phase gets
its calls, inclusive and exclusive milliseconds. With PyTorch present, one more
count runs under its profiler (CUPTI sees CuPy's kernels too) for the summed
kernel time and the number of kernel launches and copies: wall time far above
kernel time is time spent on the host (Python, launches, synchronisation).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (DATA_DIR, add_walk_options, device_sync, ensure_importable, open_or_build, report,  # noqa: E402
                     walk_graph, walk_queries)

ensure_importable()

from sgsi.join import engine as engine_mod  # noqa: E402
from sgsi.join import plan as plan_mod  # noqa: E402

#: (module or class, attribute) of the phases timed.
PHASES = [(plan_mod, n) for n in ("make_plan", "_filtered_sets", "_candidates", "_refine", "refine_cost", "_order",
                                  "_factored_vertices", "_step", "_leaf_group")] + \
         [(engine_mod.Engine, n) for n in ("_roots", "_pieces", "_sets", "_sets_whole", "_row_sets", "_gather",
                                           "_other_lists", "_finish", "_extension", "_count_leaves", "_block_sizes",
                                           "_subtree_counts", "_row_counts", "_degrees", "_member", "_count")] + \
         [(engine_mod._TuplesOf, "__init__"), (engine_mod, "refine_cost")]


class PhaseClock:
    """Inclusive and exclusive time per phase, the device synchronised at each boundary."""

    def __init__(self, sync):
        self.sync = sync
        self.stack = []                     # [name, start, child time]
        self.table = {}                     # name -> [calls, inclusive, exclusive]

    def _enter(self, name):
        self.sync()
        self.stack.append([name, time.perf_counter(), 0.0])

    def _leave(self):
        self.sync()
        name, start, child = self.stack.pop()
        spent = time.perf_counter() - start
        row = self.table.setdefault(name, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += spent
        row[2] += spent - child
        if self.stack:
            self.stack[-1][2] += spent

    def wrap(self, name, fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*a, **k):
                it = fn(*a, **k)
                while True:
                    self._enter(name)
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                    finally:
                        self._leave()
                    yield item
            return gen

        @functools.wraps(fn)
        def call(*a, **k):
            self._enter(name)
            try:
                return fn(*a, **k)
            finally:
                self._leave()
        return call

    def install(self):
        saved = []
        for owner, attr in PHASES:
            fn = owner.__dict__[attr]
            saved.append((owner, attr, fn))
            label = (owner.__name__.rsplit(".", 1)[-1] + "." + attr)
            setattr(owner, attr, self.wrap(label, fn))
        # Names bound at import elsewhere (graph.py calls make_plan through its own import).
        import sgsi.graph as graph_mod
        saved.append((graph_mod, "make_plan", graph_mod.make_plan))
        graph_mod.make_plan = plan_mod.make_plan
        return saved

    @staticmethod
    def uninstall(saved):
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


def kernel_profile(count):
    """(kernel ms, kernel launches, memcpy ms, memcpys, {kernel name: [ms, launches]}) of one
    ``count()`` under torch's profiler, or None without PyTorch."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        count()
    k_us = k_n = c_us = c_n = 0
    by_name = {}
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        name = ev.name.lower()
        if "memcpy" in name or "memset" in name:
            c_us += ev.device_time
            c_n += 1
        else:
            k_us += ev.device_time
            k_n += 1
            row = by_name.setdefault(ev.name[:60], [0.0, 0])
            row[0] += ev.device_time / 1e3
            row[1] += 1
    return k_us / 1e3, k_n, c_us / 1e3, c_n, by_name


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_walk_options(ap, edges=1e7, queries=3)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--runs", type=int, default=5, help="plain timed counts per query (the best is kept)")
    ap.add_argument("--top", type=int, default=14, help="phases shown per query, by exclusive time")
    ap.add_argument("--kernels", type=int, default=8, help="kernels shown per query, by device time")
    ap.add_argument("--only", type=int, nargs="*", default=None, help="indices of the queries to run")
    ap.add_argument("--data", default=DATA_DIR)
    args = ap.parse_args(argv)
    gdir = walk_graph(args)
    g = open_or_build(gdir)
    queries = walk_queries(gdir, args)
    if args.only is not None:
        queries = [queries[i] for i in args.only]
    sync = device_sync(args.device)
    for qi, (k, pat) in enumerate(queries):
        count = functools.partial(g.count, pat, device=args.device)
        n = count()                                       # untimed: segments read, kernels compiled
        best = min(_timed(count, sync) for _ in range(args.runs))
        clock = PhaseClock(sync)
        saved = clock.install()
        try:
            t = time.perf_counter()
            count()
            sync()
            wrapped = time.perf_counter() - t
        finally:
            PhaseClock.uninstall(saved)
        report(f"\n## query {qi}: {k} vertices, {n:,} matches; best plain {best * 1e3:.1f} ms, "
            f"wrapped {wrapped * 1e3:.1f} ms; stats {g.last_stats}")
        report(f"   {pat}")
        kp = kernel_profile(count) if args.device == "gpu" else None
        if kp is not None:
            report(f"   kernels {kp[0]:.2f} ms in {kp[1]} launches; copies/memsets {kp[2]:.2f} ms in {kp[3]}")
            for name, (ms, calls) in sorted(kp[4].items(), key=lambda kv: -kv[1][0])[:args.kernels]:
                report(f"     {name:<60} {calls:>5} {ms:>8.2f} ms")
        report(f"   {'phase':<28} {'calls':>6} {'incl ms':>9} {'excl ms':>9}")
        rows = sorted(clock.table.items(), key=lambda kv: -kv[1][2])
        for name, (calls, incl, excl) in rows[:args.top]:
            report(f"   {name:<28} {calls:>6} {incl * 1e3:>9.2f} {excl * 1e3:>9.2f}")
    g.close()


def _timed(count, sync):
    sync()
    t = time.perf_counter()
    count()
    sync()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
