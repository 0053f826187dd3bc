"""The vendored benchmark query sets (HPRD, yeast) on the CPU (or GPU) backend.

Builds the store from ``tests/data/benchmarks/<set>/data.graph`` with
``sgsi.build(graph=...)``, opens it once, counts every query that has an
expected count (optionally only those with expected count <= ``--max-count``)
with ``device='cpu'`` (``--device gpu``: the GPU backend), checks every count against ``expected.txt`` (a
mismatch is reported and makes the exit status 1), and reports the total
time of the set, best of ``--runs`` runs. ``--workers N`` counts N queries at
once, in N worker processes (with ``--device gpu``, one GPU each), handing
each query to whichever worker is free, highest expected count first.

    python bench/hprd_suite.py                              # HPRD, 200 queries
    python bench/hprd_suite.py --set yeast --max-count 1e7
    python bench/hprd_suite.py --set yeast --device gpu     # results: yeast_gpu_suite.md
    python bench/hprd_suite.py --set yeast --device gpu --workers 4   # 4 GPUs

Results: ``bench/results/<set>_suite.md`` and ``.csv`` (per query).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from multiprocessing.connection import wait

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


def _worker_env(i, n_workers, device):
    """Worker ``i``'s environment: on the GPU, the i-th visible GPU only."""
    if device != "gpu":
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(j) for j in range(n_workers)]
    if len(gpus) < n_workers:
        raise SystemExit(f"--workers {n_workers} but CUDA_VISIBLE_DEVICES={visible} has {len(gpus)} GPUs")
    return {"CUDA_VISIBLE_DEVICES": gpus[i]}


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="hprd", choices=("hprd", "yeast"))
    p.add_argument("--max-count", type=float, default=None, help="only queries with expected count <= this")
    p.add_argument("--min-count", type=float, default=None, help="only queries with expected count > this")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="first N queries only (smoke test)")
    p.add_argument("--only", default=None, help="comma-separated query file names")
    p.add_argument("--memory-budget", default=None)
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "suite"))
    p.add_argument("--results", default=C.RESULTS_DIR)
    p.add_argument("--verbose", action="store_true", help="one line per query")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds per query, from when it is handed to a worker, before it is stopped and "
                        "reported as a timeout (0: none)")
    p.add_argument("--workers", type=int, default=1,
                   help="count N queries at once in N worker processes (--device gpu: one GPU each, "
                        "CUDA_VISIBLE_DEVICES=i), highest expected count first")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.workers > 1 and args.device == "cpu":
        C.say(f"note: {args.workers} CPU workers share this machine's {os.cpu_count()} cores: "
              "per-query times are not those of a query counted alone")
    m0 = C.machine()      # the commit of the code this run loads
    base = os.path.join(BENCH_DATA, args.set)
    expected = C.expected_counts(base)
    names = sorted(expected, key=_natural)
    if args.max_count is not None:
        names = [n for n in names if expected[n] <= args.max_count]
    if args.min_count is not None:
        names = [n for n in names if expected[n] > args.min_count]
    if args.only:
        keep = set(args.only.split(","))
        names = [n for n in names if n in keep or n.removesuffix(".graph") in keep]
    if args.limit:
        names = names[:args.limit]
    # One worker: natural order. Several: the heaviest first, so that they do not end the run alone.
    order = names if args.workers == 1 else sorted(names, key=lambda n: (-expected[n], _natural(n)))

    os.makedirs(args.data, exist_ok=True)
    # The store is built at the query budget too (its segments must fit it twice).
    out = os.path.join(args.data, f"{args.set}.sgsi" if args.memory_budget is None
                       else f"{args.set}-{args.memory_budget}.sgsi")
    t = time.perf_counter()
    g = sgsi.build(out, graph=os.path.join(base, "data.graph"), memory_budget=args.memory_budget, force=True)
    build_s = time.perf_counter() - t
    C.say(f"{g} built in {build_s:.2f} s; {len(names)} queries")
    patterns = {n: sgsi.load_pattern(os.path.join(base, "queries", n)) for n in names}
    n_vertices, n_edges = g.store.n_vertices, g.store.n_edges
    g.close()

    times = {n: [] for n in names}
    ran_on = {n: [] for n in names}      # the worker of each timed run (and of a timeout)
    got = {}
    totals, walls = [], []
    mismatches = []
    timed_out = {}
    import signal
    signal.signal(signal.SIGTERM, _interrupt)    # killed: stop the workers too (see the finally below)
    workers = []
    ok = False
    try:
        for i in range(args.workers):
            workers.append(C.CountWorker(out, args.device, _worker_env(i, args.workers, args.device)))
        for w in workers:
            w.wait_ready()           # all warmed up before the first run's clock starts
        for r in range(args.runs):
            t_run = time.perf_counter()
            last_say = t_run
            run_total = 0.0
            todo = [n for n in order if n not in timed_out][::-1]     # pop(): the next query
            n_todo = len(todo)
            running = {}             # worker index -> the query it counts
            while todo or running:
                for i, w in enumerate(workers):
                    if todo and i not in running and w.wait_ready(0):
                        running[i] = todo.pop()
                        w.submit(patterns[running[i]], device=args.device, memory_budget=args.memory_budget)
                now = time.perf_counter()
                if now - last_say > 30:
                    last_say = now
                    C.say(f"  run {r + 1}: {n_todo - len(todo) - len(running)}/{n_todo} queries, "
                          f"{now - t_run:.0f} s, now {', '.join(running.values())}")
                # Sleep until an answer, the next deadline, or (while queries wait) a restarted worker's warm-up.
                waiting = [w for i, w in enumerate(workers) if i in running or todo]
                deadlines = [workers[i].submitted + args.timeout for i in running] if args.timeout else []
                answered = wait(waiting, max(0.0, min([now + 30] + deadlines) - now))
                now = time.perf_counter()
                for i in list(running):
                    w = workers[i]
                    if w not in answered and not (args.timeout and now >= w.submitted + args.timeout):
                        continue
                    n = running.pop(i)
                    res = w.result(args.timeout)      # at once: the answer, or None (the worker restarts)
                    ran_on[n].append(i)
                    on = f" [worker {i}]" if len(workers) > 1 else ""
                    if res is None:
                        timed_out[n] = args.timeout
                        C.say(f"  TIMEOUT {n} (expected {expected[n]:,}) after {args.timeout:g} s{on}; "
                              "skipped from now on")
                        continue
                    c, dt, _stats = res
                    times[n].append(dt)
                    run_total += dt
                    if args.verbose or dt > 10:
                        C.say(f"  {n}: {c:,} in {dt:.3f} s{on}")
                    if c != expected[n] and n not in got:
                        C.say(f"MISMATCH {n}: got {c}, expected {expected[n]}")
                        mismatches.append((n, c, expected[n]))
                    got[n] = c
            walls.append(time.perf_counter() - t_run)
            totals.append(run_total)
            C.say(f"run {r + 1}/{args.runs}: {run_total:.2f} s in count() for {len(names) - len(timed_out)} queries "
                  f"({walls[-1]:.2f} s wall" + (f", {len(workers)} workers)" if len(workers) > 1 else ")"))
        ok = True
    finally:
        for w in workers:
            w.close(force=not ok)

        def counted_rows(done, commit):
            return [{"query": n, "family": _family(n), "vertices": len(patterns[n].vertices),
                     "edges": len(patterns[n].edges), "expected": expected[n], "count": got[n],
                     "ok": got[n] == expected[n], "best_s": round(min(times[n]), 5),
                     "all_s": " ".join(f"{x:.4f}" for x in times[n]),
                     "worker": ran_on[n][times[n].index(min(times[n]))], "commit": commit} for n in done]
        tag = args.set + ("" if args.device == "cpu" else f"_{args.device}")
        if not ok:      # stopped (a signal, an error): keep what was counted
            partial = os.path.join(args.results, f"{tag}_suite.partial.csv")
            C.write_csv(partial, counted_rows([n for n in names if times[n]], C.git_commit()))
            C.say(f"stopped: the {sum(1 for n in names if times[n])} queries counted so far are in {partial}")
    names_done = [n for n in names if n not in timed_out]

    m = C.machine_at_end(m0)
    rows = counted_rows(names_done, m["commit"])
    rows += [{"query": n, "family": _family(n), "vertices": len(patterns[n].vertices),
              "edges": len(patterns[n].edges), "expected": expected[n], "count": None, "ok": None,
              "best_s": None, "all_s": f"timeout {timed_out[n]:g}", "worker": ran_on[n][-1],
              "commit": m["commit"]} for n in timed_out]
    C.write_csv(os.path.join(args.results, f"{tag}_suite.csv"), rows)

    done = [r for r in rows if r["best_s"] is not None]
    fams = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r)

    def fam_line(f, rs):
        ok = [r for r in rs if r["best_s"] is not None]
        tot = sum(r["best_s"] for r in ok)
        return (f"| {f} | {len(ok)} | {len(rs) - len(ok)} | {tot:.3f} | {tot / max(len(ok), 1) * 1e3:.1f} | "
                f"{max((r['best_s'] for r in ok), default=0) * 1e3:.1f} | {max(r['expected'] for r in rs):,} |")

    fam_lines = "\n".join(fam_line(f, rs) for f, rs in sorted(fams.items(), key=lambda kv: _natural(kv[0])))
    slow = sorted(done, key=lambda r: -r["best_s"])[:10]
    slow_lines = "\n".join(f"| {r['query']} | {r['vertices']} | {r['edges']} | {r['expected']:,} | "
                           f"{r['best_s'] * 1e3:.1f} |" for r in slow)
    to_lines = "\n".join(f"| {n} | {len(patterns[n].vertices)} | {len(patterns[n].edges)} | {expected[n]:,} | "
                         f"> {timed_out[n]:g} |" for n in timed_out)
    n_ok = sum(bool(r["ok"]) for r in rows)
    sel = " and ".join(([f"expected count > {args.min_count:g}"] if args.min_count is not None else [])
                       + ([f"expected count <= {args.max_count:g}"] if args.max_count is not None else [])
                       ) or "all with an expected count"
    cmd = f"python bench/hprd_suite.py --set {args.set}" + (
        f" --min-count {args.min_count:g}" if args.min_count is not None else "") + (
        f" --max-count {args.max_count:g}" if args.max_count is not None else "") + f" --runs {args.runs}" + (
        f" --timeout {args.timeout:g}") + (f" --only {args.only}" if args.only else "") + (
        f" --limit {args.limit}" if args.limit else "") + (f" --device {args.device}" if args.device != "cpu" else "") + (
        f" --workers {args.workers}" if args.workers > 1 else "")
    status = ("all counts equal the expected counts" if not mismatches else
              f"**{len(mismatches)} MISMATCHES**: " + ", ".join(f"{n} got {c} expected {e}" for n, c, e in mismatches))
    if timed_out:
        status += (f"; **{len(timed_out)} queries stopped at the {args.timeout:g} s timeout** (not verified, not "
                   f"in the totals)")
    stop = f"(so a query past `--timeout {args.timeout:g}` s can be stopped)"
    if args.workers == 1:
        how = f"in one worker process that opens the store once {stop}"
    else:
        how = (f"in {args.workers} worker processes at once, each opening the store once {stop}"
               + (" and seeing one GPU (`CUDA_VISIBLE_DEVICES`)" if args.device == "gpu" else
                  " and sharing the CPU cores (a query's time is not that of the query counted alone)")
               + "; each query goes to whichever worker is free (`worker` in the CSV), highest expected count "
                 "first, and its timeout runs from then")
    wall_note = ("" if args.workers == 1 else
                 f"\nThe total is the sum of the per-query times. With {args.workers} workers counting at once, a "
                 f"run's wall time is shorter than that sum, by up to {args.workers}x (the time of queries stopped "
                 "at the timeout is in the wall time only).\n")
    md = f"""# {args.set.upper()} query suite, {args.device.upper()} backend

`{cmd}`

{C.machine_md(m)}
## Setup

- data graph `tests/data/benchmarks/{args.set}/data.graph` ({n_vertices:,} vertices,
  {n_edges:,} directed edges stored, i.e. both directions), built with
  `sgsi.build(graph=...)` in {build_s:.2f} s
- queries: {len(names)} ({sel}); `Graph.count(pattern, device="{args.device}")`, default memory budget,
  {how}; each query's time is measured around `count()` (pattern parsing excluded)
- every count checked against `expected.txt`: {n_ok}/{len(rows)} correct; {status}

## Result

| queries timed | total, best of {args.runs} runs (s) | all runs (s) | wall, all runs (s) | mean per query (ms) | sum of per-query bests (s) |
|---:|---:|---|---|---:|---:|
| {len(done)} | {min(totals):.3f} | {' '.join(f'{x:.3f}' for x in totals)} | {' '.join(f'{x:.3f}' for x in walls)} | {min(totals) / max(len(done), 1) * 1e3:.2f} | {sum(r['best_s'] for r in done):.3f} |
{wall_note}
By query family (per-query best times):

| family | queries | timeouts | total (s) | mean (ms) | max (ms) | max expected count |
|---|---:|---:|---:|---:|---:|---:|
{fam_lines}

Slowest queries:

| query | vertices | edges | expected count | best (ms) |
|---|---:|---:|---:|---:|
{slow_lines}
"""
    if timed_out:
        md += f"""
Queries stopped at the timeout:

| query | vertices | edges | expected count | time (s) |
|---|---:|---:|---:|---:|
{to_lines}
"""
    md += f"\nPer-query times: `{tag}_suite.csv`.\n"
    C.write_text(os.path.join(args.results, f"{tag}_suite.md"), md)
    print(md)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
