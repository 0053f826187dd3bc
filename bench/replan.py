"""Refinement and the replan rule, side by side in one run, on one R-MAT graph.

    python bench/replan.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \\
        --sizes 8 12 --queries 3 --device gpu --runs 3 --limit 10 --out bench/results

Each random-walk query (the ones bench/gpu_vs_cpu.py draws for the same arguments) is counted three
ways: as the engine does it (``default``: planned on unrefined candidate sets, planned again with
refinement once the join's work reaches ``REPLAN_COST_FACTOR`` times ``refine_cost``), refined before
the join (``up front``), and never refined (``never``). For each query it records the candidate sets'
total size unrefined and refined, ``refine_cost`` (the list entries one refinement round reads), the
join's work of each way (GBA entries reserved plus rows, what the engine compares with its limit), the
work at which ``default`` replanned, and the best time of each way over ``--runs``; a way past
``--limit`` seconds is stopped. The ways are set through the engine's constants and the plan the graph
makes: a measuring tool, not an option of sgsi.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (DATA_DIR, add_walk_options, build_store, ensure_importable, machine, machine_at_end,  # noqa: E402
                     machine_md, say, walk_graph, walk_options, walk_queries, write_csv, write_text)

ensure_importable()
import sgsi.graph as graph_mod  # noqa: E402
from sgsi.errors import Cancelled  # noqa: E402
from sgsi.join import engine as engine_mod  # noqa: E402
from sgsi.join import plan as plan_mod  # noqa: E402
from sgsi.pattern import load_pattern  # noqa: E402

WAYS = ("default", "up front", "never")


@contextlib.contextmanager
def way(name, seen):
    """Counts inside run ``name``'s way; ``seen`` gets each count's work and the work at its replan."""
    make_plan, factor, count = graph_mod.make_plan, engine_mod.REPLAN_FACTOR, engine_mod.Engine.count

    def refined_first(*args, **kwargs):
        kwargs["refine_rounds"] = plan_mod.REFINE_ROUNDS
        return make_plan(*args, **kwargs)

    def counting(engine):
        switch = engine._switch_plan

        def replan():
            seen["work_at_replan"] = engine.work
            engine.work = 0                  # the work of the refined plan alone from here
            switch()
        engine._switch_plan = replan
        seen["work_at_replan"] = None
        n = count(engine)
        seen["work"] = engine.work
        return n

    if name != "default":
        engine_mod.REPLAN_FACTOR = float("inf")          # no replan
    if name == "up front":
        graph_mod.make_plan = refined_first
    engine_mod.Engine.count = counting
    try:
        yield
    finally:
        graph_mod.make_plan, engine_mod.REPLAN_FACTOR, engine_mod.Engine.count = make_plan, factor, count


def best_count(g, pattern, device, runs, limit, seen):
    """(count, best seconds) of ``runs`` counts, or (None, None) once one passes ``limit`` seconds."""
    best, n = None, None
    for _ in range(runs):
        t = time.perf_counter()
        deadline = t + limit
        try:
            n = g.count(pattern, device=device, cancel=lambda: time.perf_counter() > deadline)
        except Cancelled:
            return None, None
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return n, best


def sizes(g, pattern, device):
    """(Σ|C| unrefined, Σ|C| refined, refine_cost) of ``pattern``'s count plan."""
    backend = g._backends.take(device)
    backend.begin(g.store)
    try:
        pat = load_pattern(pattern)
        plans = [backend.run(lambda r=r: plan_mod.make_plan(g.store, pat, backend, refine_rounds=r, factor_leaves=True))
                 for r in (0, plan_mod.REFINE_ROUNDS)]
        cost = backend.run(lambda: plan_mod.refine_cost(g.store, backend, plans[0]))
        return sum(plans[0].candidate_counts), sum(plans[1].candidate_counts), cost
    finally:
        g._backends.give_back(device, backend, False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_walk_options(ap, edges=1e6, queries=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--runs", type=int, default=3, help="timed counts per query and way (after one untimed)")
    ap.add_argument("--limit", type=float, default=30, help="seconds before a count is stopped")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    m0 = machine()
    gdir = walk_graph(args)
    g, _build_s = build_store(gdir)
    queries = walk_queries(gdir, args)
    rows = []
    for k, pattern in queries:
        c0, c2, cost = sizes(g, pattern, args.device)
        row = {"k": k, "candidates": c0, "candidates_refined": c2, "refine_cost": cost, "pattern": pattern}
        counts = set()
        for name in WAYS:
            seen = {}
            with way(name, seen):
                best_count(g, pattern, args.device, 1, args.limit, seen)          # untimed: caches warm
                n, best = best_count(g, pattern, args.device, max(1, args.runs), args.limit, seen)
            tag = name.replace(" ", "_")
            row[f"{tag}_s"] = None if best is None else round(best, 4)
            row[f"{tag}_work"] = seen.get("work") if best is not None else None
            if name == "default":
                row["work_at_replan"] = seen.get("work_at_replan")
            if n is not None:
                counts.add(n)
        if len(counts) > 1:
            raise SystemExit(f"COUNT MISMATCH between the ways {sorted(counts)} for {pattern}")
        row["matches"] = counts.pop() if counts else None
        say(row)
        rows.append(row)
    g.close()
    m = machine_at_end(m0)
    fields = ["k", "matches", "candidates", "candidates_refined", "refine_cost", "work_at_replan", "default_work",
              "up_front_work", "never_work", "default_s", "up_front_s", "never_s", "pattern"]
    write_csv(os.path.join(args.out, "replan.csv"), rows, fields)
    cmd = f"python bench/replan.py {walk_options(args)} --device {args.device} --runs {args.runs} --limit {args.limit:g}"
    fmt = lambda x, unit="": "stopped" if x is None else (f"{x:,}" if isinstance(x, int) else f"{x}{unit}")  # noqa: E731
    lines = ["# Refinement and the replan rule: default, refined up front, never refined", "", machine_md(m),
             f"- command: `{cmd}`",
             f"- default: refined once the work reaches {engine_mod.REPLAN_COST_FACTOR} x refine_cost "
             f"(and {engine_mod.REPLAN_FACTOR} x the candidates); work = GBA entries reserved plus rows; "
             f"times: best of {args.runs} after one untimed count; a count past {args.limit:g} s is stopped", "",
             "| k | matches | candidates | refined candidates | refine_cost | work unrefined | work refined | replanned at | "
             "default s | up front s | never s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['k']} | {fmt(r['matches'])} | {fmt(r['candidates'])} | {fmt(r['candidates_refined'])} | "
                     f"{fmt(r['refine_cost'])} | {fmt(r['never_work'])} | {fmt(r['up_front_work'])} | "
                     f"{'-' if r['work_at_replan'] is None else fmt(r['work_at_replan'])} | {fmt(r['default_s'])} | "
                     f"{fmt(r['up_front_s'])} | {fmt(r['never_s'])} |")
    write_text(os.path.join(args.out, "replan.md"), "\n".join(lines) + "\n")
    say(f"wrote {os.path.join(args.out, 'replan.md')}")


if __name__ == "__main__":
    main()
