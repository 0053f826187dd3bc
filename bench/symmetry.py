"""Symmetry breaking on hard queries: the same queries counted with it and without, side by side.

Picks the queries of a benchmark set that a ``bench/hard.py`` CSV (``--slow-from``) timed over
``--min-seconds`` or did not finish, and whose count plan has a symmetry (|H| > 1, see
``sgsi/join/symmetry.py``); counts each with symmetry breaking and without
(``sgsi.join.query.SYMMETRY``), in turn, in one process, with hard.py's timer and cancel.
Writes a CSV and a markdown summary; counts are checked against ``expected.txt`` and each other.

    python bench/symmetry.py --set yeast --device gpu --slow-from bench/results/hard_yeast_gpu.csv \\
        --timeout 10 --out bench/results/symmetry_yeast_gpu.md
    python bench/symmetry.py --set yeast --device cpu --slow-from bench/results/hard_yeast_cpu.csv \\
        --min-seconds 0.3 --max-seconds 10 --finished-only --timeout 30     # the CPU's finished ones
    python bench/symmetry.py --delta-store /tmp/dynamic-rmat/g.sgsi --since 2 --device cpu \\
        --pattern '(a)-[:E1]-(b)-[:E1]-(c)-[:E1]-(d)-[:E1]-(a)' --out bench/results/symmetry_delta_cpu.md

``--delta-store``: count_delta of each ``--pattern`` since version ``--since`` of a versioned
store (e.g. the one ``bench/dynamic.py --no-compact`` leaves in its --work directory), with
symmetry breaking and without, in turn, the least of ``--repeat`` rounds.

Data sets: as ``bench/hard.py``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import sgsi  # noqa: E402
from hard import count_one, data_dir  # noqa: E402
from sgsi.join import query, symmetry  # noqa: E402
from sgsi.join.plan import make_plan  # noqa: E402

FIELDS = ["query", "symmetry", "joined", "factored", "before_status", "before_s", "expected",
          "on_status", "on_count", "on_s", "off_status", "off_count", "off_s", "speedup"]


def slow(path, lo, hi, unfinished=True):
    """The queries of a hard.py CSV timed in [lo, hi] s, or not finished (``unfinished``)."""
    with open(path) as f:
        return [r for r in csv.DictReader(f)
                if (r["status"] != "ok" and unfinished) or (r["status"] == "ok" and lo <= float(r["seconds"]) <= hi)]


def group_order(g, path):
    """(|H|, joined vertices, factored vertices) of the count plan of the query at ``path``."""
    backend = g._backends.take("cpu")
    try:
        backend.begin(g.store, None)
        plan = make_plan(g.store, sgsi.load_pattern(path), backend, injective=True, refine_rounds=0,
                         factor_leaves=True)
        return symmetry.broken(plan).symmetry, len(plan.order) - plan.factored, plan.factored
    finally:
        backend.end()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="yeast")
    p.add_argument("--data", help="a benchmark folder instead of --set")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--slow-from", help="a bench/hard.py CSV of this set and device")
    p.add_argument("--delta-store", help="a versioned store: time count_delta of --pattern instead")
    p.add_argument("--since", type=int, default=1)
    p.add_argument("--pattern", action="append", default=[])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=float("inf"))
    p.add_argument("--finished-only", action="store_true", help="leave out the queries the CSV did not finish")
    p.add_argument("--on-only", action="store_true", help="count with symmetry breaking only (the CSV's "
                   "time stands for the other side: the unfinished ones, whose other side is the timeout)")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--memory-budget", default=None)
    p.add_argument("--out", default=None, help="markdown (default bench/results/symmetry_<set>_<device>.md)")
    args = p.parse_args(argv)
    if args.delta_store:
        return deltas(args)
    if not args.slow_from:
        p.error("--slow-from (or --delta-store) is required")
    args.out = args.out or os.path.join(C.RESULTS_DIR, f"symmetry_{args.set}_{args.device}.md")
    start = C.machine()
    base = data_dir(args)
    store = os.path.join(C.DATA_DIR, f"{args.set}.sgsi")
    g = sgsi.open(store) if os.path.exists(store) else sgsi.build(store, graph=os.path.join(base, "data.graph"))
    expected = C.expected_counts(base) if os.path.exists(os.path.join(base, "expected.txt")) else {}
    if args.device == "gpu":
        C.say(f"warm-up: {len(C.warm_up_kernels('gpu'))} yeast queries")
    rows = []
    for r in slow(args.slow_from, args.min_seconds, args.max_seconds, not args.finished_only):
        path = os.path.join(base, "queries", r["query"])
        size, joined, factored = group_order(g, path)
        if size == 1:
            continue
        row = {"query": r["query"], "symmetry": size, "joined": joined, "factored": factored,
               "before_status": r["status"], "before_s": r["seconds"], "expected": expected.get(r["query"])}
        for side, on in (("on", True),) + ((("off", False),) if not args.on_only else ()):
            query.SYMMETRY = on
            status, n, s, *_ = count_one(g, path, args)
            row.update({f"{side}_status": status, f"{side}_count": n, f"{side}_s": round(s, 4)})
        query.SYMMETRY = True
        found = {x for x in (row["on_count"], row.get("off_count"), row["expected"]) if x is not None}
        assert len(found) <= 1, (r["query"], found)
        if row["on_status"] == row.get("off_status") == "ok":
            row["speedup"] = round(row["off_s"] / row["on_s"], 2)
        rows.append(row)
        C.say(f"{r['query']}: |H| {size}, on {row['on_status']} {row['on_s']:.3f} s, "
              f"off {row.get('off_status')} {row.get('off_s')} s")
    g.close()
    C.write_csv(os.path.splitext(args.out)[0] + ".csv", rows, FIELDS)
    C.write_text(args.out, report(args, rows, C.machine_at_end(start)))
    print(open(args.out).read())
    return 0


def deltas(args):
    """count_delta of each --pattern with symmetry breaking and without: the least of --repeat."""
    import time
    args.out = args.out or os.path.join(C.RESULTS_DIR, f"symmetry_delta_{args.device}.md")
    start = C.machine()
    g = sgsi.open(args.delta_store)
    rows = []
    for pattern in args.pattern:
        row = {"pattern": pattern}
        for _ in range(args.repeat):
            for side, on in (("on", True), ("off", False)):
                query.SYMMETRY = on
                t = time.perf_counter()
                d = g.count_delta(pattern, since=args.since, device=args.device, memory_budget=args.memory_budget,
                                  progress=False)
                s = time.perf_counter() - t
                row[f"{side}_s"] = round(min(s, row.get(f"{side}_s", s)), 4)
                row.setdefault("symmetry", g.last_stats.get("symmetry"))
                assert row.setdefault("delta", (d["added"], d["removed"])) == (d["added"], d["removed"]), pattern
        query.SYMMETRY = True
        row["speedup"] = round(row["off_s"] / row["on_s"], 2)
        rows.append(row)
        C.say(f"{pattern}: |H| {row['symmetry']}, on {row['on_s']:.3f} s, off {row['off_s']:.3f} s")
    versions = g.store.version
    g.close()
    C.write_csv(os.path.splitext(args.out)[0] + ".csv", rows, ["pattern", "symmetry", "delta", "on_s", "off_s", "speedup"])
    out = [f"# Symmetry breaking in count_delta ({args.device})", "",
           "`python bench/symmetry.py " + " ".join(sys.argv[1:]) + "`", "", C.machine_md(C.machine_at_end(start)),
           f"- store: `{args.delta_store}` at version {versions}, deltas since version {args.since}; each "
           f"pattern counted with symmetry breaking (on) and without (off), in turn, the least of {args.repeat}",
           "- every (added, removed) equal on both sides", "",
           "| pattern | \\|H\\| | added, removed | on (s) | off (s) | off / on |", "|---|---:|---|---:|---:|---:|"]
    out += [f"| `{r['pattern']}` | {r['symmetry']} | {r['delta'][0]:,}, {r['delta'][1]:,} | {r['on_s']:.3f} | "
            f"{r['off_s']:.3f} | {r['speedup']}x |" for r in rows]
    C.write_text(args.out, "\n".join(out) + "\n")
    print(open(args.out).read())
    return 0


def report(args, rows, m):
    def within(side, t):
        return sum(r.get(f"{side}_status") == "ok" and r[f"{side}_s"] <= t for r in rows)
    both = [r for r in rows if r.get("speedup") is not None]
    sp = sorted(r["speedup"] for r in both)
    out = [f"# Symmetry breaking: {args.set}, {args.device}", "",
           "`python bench/symmetry.py " + " ".join(sys.argv[1:]) + "`", "", C.machine_md(m),
           f"- queries: those `{os.path.basename(args.slow_from)}` timed in [{args.min_seconds:g}, "
           f"{args.max_seconds:g}] s" + ("" if args.finished_only else " or did not finish")
           + f", whose count plan has a symmetry: {len(rows)}; "
           f"each counted with symmetry breaking (on) and without (off), in turn, {args.timeout:g} s each",
           f"- finished within 1 s: on {within('on', 1)}, off {within('off', 1)}; within {args.timeout:g} s: "
           f"on {within('on', args.timeout)}, off {within('off', args.timeout)}",
           f"- speedup (off / on) where both finished ({len(both)}): "
           + (f"median {sp[len(sp) // 2]:.2f}x, min {sp[0]:.2f}x, max {sp[-1]:.2f}x" if sp else "-"),
           "- every count equal to the other side's and to expected.txt where known", "",
           "| query | \\|H\\| | joined | factored | before (s) | on (s) | off (s) | off / on | count |",
           "|---|---:|---:|---:|---|---|---|---:|---:|"]
    for r in rows:
        def cell(side):
            status = r.get(f"{side}_status")
            return f"{r[f'{side}_s']:.3f}" if status == "ok" else (status or "not run")
        n = r["on_count"] if r["on_count"] is not None else r.get("off_count")
        out.append(f"| {r['query']} | {r['symmetry']} | {r['joined']} | {r['factored']} | "
                   f"{r['before_s'] if r['before_status'] == 'ok' else r['before_status']} | {cell('on')} | "
                   f"{cell('off')} | {r['speedup'] if r.get('speedup') else '-'} | "
                   f"{'-' if n is None else f'{n:,}'} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
