"""The vendored benchmark query sets (HPRD, yeast) on the CPU backend.

Builds the store from ``tests/data/benchmarks/<set>/data.graph`` with
``sgsi.build(graph=...)``, opens it once, counts every query that has an
expected count (optionally only those with expected count <= ``--max-count``)
with ``device='cpu'``, checks every count against ``expected.txt`` (a
mismatch is reported and makes the exit status 1), and reports the total
time of the set, best of ``--runs`` runs.

    python bench/hprd_suite.py                              # HPRD, 200 queries
    python bench/hprd_suite.py --set yeast --max-count 1e7

Results: ``bench/results/<set>_suite.md`` and ``.csv`` (per query).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import sgsi  # noqa: E402

BENCH_DATA = os.path.join(C.REPO_DIR, "tests", "data", "benchmarks")


def _natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _family(name):
    """``query_dense_16_3.graph`` -> ``dense_16``."""
    m = re.match(r"query_([a-z]+)_(\d+)_\d+\.graph$", name)
    return f"{m.group(1)}_{m.group(2)}" if m else "other"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="hprd", choices=("hprd", "yeast"))
    p.add_argument("--max-count", type=float, default=None, help="only queries with expected count <= this")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="first N queries only (smoke test)")
    p.add_argument("--memory-budget", default=None)
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "suite"))
    p.add_argument("--results", default=C.RESULTS_DIR)
    p.add_argument("--verbose", action="store_true", help="one line per query")
    args = p.parse_args(argv)
    if hasattr(faulthandler, "register"):
        import signal
        faulthandler.register(signal.SIGUSR1)     # kill -USR1 PID: stack of a long query to stderr
    base = os.path.join(BENCH_DATA, args.set)
    expected = {}
    with open(os.path.join(base, "expected.txt")) as f:
        for line in f:
            if line.strip():
                name, count = line.split()
                expected[name] = int(count)
    names = sorted(expected, key=_natural)
    if args.max_count is not None:
        names = [n for n in names if expected[n] <= args.max_count]
    if args.limit:
        names = names[:args.limit]

    os.makedirs(args.data, exist_ok=True)
    out = os.path.join(args.data, f"{args.set}.sgsi")
    t = time.perf_counter()
    g = sgsi.build(out, graph=os.path.join(base, "data.graph"), force=True)
    build_s = time.perf_counter() - t
    C.say(f"{g} built in {build_s:.2f} s; {len(names)} queries")
    patterns = {n: sgsi.load_pattern(os.path.join(base, "queries", n)) for n in names}

    times = {n: [] for n in names}
    got = {}
    totals = []
    mismatches = []
    for r in range(args.runs):
        t_run = time.perf_counter()
        last_say = t_run
        for i, n in enumerate(names):
            if time.perf_counter() - last_say > 30:
                last_say = time.perf_counter()
                C.say(f"  run {r + 1}: {i}/{len(names)} queries, {last_say - t_run:.0f} s, now {n}")
            t = time.perf_counter()
            c = g.count(patterns[n], device="cpu", memory_budget=args.memory_budget)
            times[n].append(time.perf_counter() - t)
            if args.verbose or times[n][-1] > 10:
                C.say(f"  {n}: {c:,} in {times[n][-1]:.3f} s")
            if c != expected[n]:
                if n not in got:
                    C.say(f"MISMATCH {n}: got {c}, expected {expected[n]}")
                    mismatches.append((n, c, expected[n]))
            got[n] = c
        totals.append(time.perf_counter() - t_run)
        C.say(f"run {r + 1}/{args.runs}: {totals[-1]:.2f} s for {len(names)} queries")
    g.close()

    m = C.machine()
    rows = [{"query": n, "family": _family(n), "vertices": len(patterns[n].vertices),
             "edges": len(patterns[n].edges), "expected": expected[n], "count": got[n],
             "ok": got[n] == expected[n], "best_s": round(min(times[n]), 5),
             "all_s": " ".join(f"{x:.4f}" for x in times[n]), "commit": m["commit"]} for n in names]
    tag = args.set if args.max_count is None else f"{args.set}"
    C.write_csv(os.path.join(args.results, f"{tag}_suite.csv"), rows)

    fams = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r)
    fam_lines = "\n".join(
        f"| {f} | {len(rs)} | {sum(r['best_s'] for r in rs):.3f} | {sum(r['best_s'] for r in rs) / len(rs) * 1e3:.1f} | "
        f"{max(r['best_s'] for r in rs) * 1e3:.1f} | {max(r['expected'] for r in rs):,} |"
        for f, rs in sorted(fams.items(), key=lambda kv: _natural(kv[0])))
    slow = sorted(rows, key=lambda r: -r["best_s"])[:10]
    slow_lines = "\n".join(f"| {r['query']} | {r['vertices']} | {r['edges']} | {r['expected']:,} | "
                           f"{r['best_s'] * 1e3:.1f} |" for r in slow)
    n_ok = sum(r["ok"] for r in rows)
    sel = f"expected count <= {args.max_count:g}" if args.max_count is not None else "all with an expected count"
    cmd = f"python bench/hprd_suite.py --set {args.set}" + (
        f" --max-count {args.max_count:g}" if args.max_count is not None else "") + f" --runs {args.runs}"
    status = ("all counts equal the expected counts" if not mismatches else
              f"**{len(mismatches)} MISMATCHES**: " + ", ".join(f"{n} got {c} expected {e}" for n, c, e in mismatches))
    md = f"""# {args.set.upper()} query suite, CPU backend

`{cmd}`

{C.machine_md(m)}
## Setup

- data graph `tests/data/benchmarks/{args.set}/data.graph` ({g.store.n_vertices:,} vertices,
  {g.store.n_edges:,} directed edges stored, i.e. both directions), built with
  `sgsi.build(graph=...)` in {build_s:.2f} s; store opened once
- queries: {len(names)} ({sel}), each parsed once up front; `Graph.count(pattern, device="cpu")`,
  default memory budget
- every count checked against `expected.txt`: {n_ok}/{len(rows)} correct; {status}

## Result

| total, best of {args.runs} runs (s) | all runs (s) | mean per query (ms) | sum of per-query bests (s) |
|---:|---|---:|---:|
| {min(totals):.3f} | {' '.join(f'{x:.3f}' for x in totals)} | {min(totals) / max(len(names), 1) * 1e3:.2f} | {sum(r['best_s'] for r in rows):.3f} |

By query family (per-query best times):

| family | queries | total (s) | mean (ms) | max (ms) | max expected count |
|---|---:|---:|---:|---:|---:|
{fam_lines}

Slowest queries:

| query | vertices | edges | expected count | best (ms) |
|---|---:|---:|---:|---:|
{slow_lines}

Per-query times: `{tag}_suite.csv`.
"""
    C.write_text(os.path.join(args.results, f"{tag}_suite.md"), md)
    print(md)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
