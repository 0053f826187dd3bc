"""Scale-out benchmark: one query sharded over 1, 2, ... Dask workers (CPU processes, or GPUs).

For each benchmark set, queries are screened in one process (a sample, or those a hard.py CSV
timed between ``--min-seconds`` and ``--max-seconds``); the long ones (over ``--min-seconds``,
default 1 s) and a few short ones (the overhead's side) are then counted on a cluster of each
size in ``--workers`` (all started first and warmed up; their start-up, 1-3 s, is not in the
times: a running cluster's queries see none), in turn with one process, query by query. The
counts must agree with one process and with the set's expected counts. Written: ``--out``
(markdown) and a CSV beside it; the cores the machine gives k processes are measured before and
after (other jobs may share it).

    python bench/scale_out.py --set yeast --workers 1 2 --long 8 --short 0 --max-seconds 10 --repeat 2 \\
        --names query_dense_24_61.graph,query_sparse_32_40.graph,query_sparse_32_43.graph,query_sparse_32_159.graph \\
        --out bench/results/scale_out_cpu.md          # CPU, this machine: yeast's counts of 1-8 s here
    python bench/scale_out.py --set yeast --workers 1 4 8 16 --long 8 --short 0 --max-seconds 30 \\
        --names (the same four) --out bench/results/scale_out_cpu16.md                      # 16 cores
    python bench/scale_out.py --set yeast --set hprd-hard --workers 1 2 --long 8 --short 3 \\
        --pick-from bench/results/hard_yeast_cpu.csv --pick-from bench/results/hard_hprd-hard_cpu.csv  # short ones
    python bench/scale_out.py --device gpu --workers 1 2 4 --set yeast --set hprd-hard --long 8 \\
        --pick-from bench/results/hard_yeast_gpu.csv --pick-from bench/results/hard_hprd-hard_gpu.csv \\
        --out bench/results/scale_out_gpu.md                            # dask-cuda, one worker a GPU
    ... --tasks-per-worker 8 --rows-per-task 16     # the split before df247a3, for a before/after
    ... --round-ratio 1                             # tasks of one size, as before this session's rounds

Data sets: ``$SGSI_BENCHMARKS/<set>``, else /work/shared/benchmarks/<set>, else tests/data/benchmarks/<set>.
``--walks`` instead: random walks (``--sizes``, ``--queries``, seeded by size) of an R-MAT graph
(``--edges``, ``--shape``, ``--edge-labels``, ``--vertex-labels``), generated where missing under
``--graphs`` (default bench/data), as a set named ``walks``::

    python bench/scale_out.py --walks --edges 1e7 --edge-labels 16 --vertex-labels 64 --sizes 12 16 \
        --queries 32 --long 10 --short 0 --sample 64 --out bench/results/scale_out_cpu_rmat.md
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import sgsi  # noqa: E402
from hard import data_dir, group_of, pick  # noqa: E402
from sgsi.errors import Cancelled  # noqa: E402
from sgsi.join import shard  # noqa: E402
from sgsi.shard import driver  # noqa: E402
from sgsi.shard.cluster import connect  # noqa: E402

FIELDS = ["set", "query", "group", "kind", "count", "expected", "one_process_s", "tasks", "driver_s"]


def timed(fn, timeout=None):
    """(result or None on timeout, seconds) of ``fn(cancel)``."""
    ev = threading.Event()
    timer = threading.Timer(timeout, ev.set) if timeout else None
    if timer:
        timer.start()
    t0 = time.perf_counter()
    try:
        return fn(ev), time.perf_counter() - t0
    except Cancelled:
        return None, time.perf_counter() - t0
    finally:
        if timer:
            timer.cancel()


def sets(args):
    """(name, benchmark folder, store path, a function building the store) of each set."""
    if args.walks:
        yield ("walks",) + walk_set(args)
        return
    for name in args.set or ["yeast", "hprd-hard"]:
        args.set = name
        base = data_dir(args)
        store = os.path.join(C.DATA_DIR, f"{name}.sgsi")
        yield name, base, store, lambda store=store, base=base: sgsi.build(store, graph=os.path.join(base, "data.graph"))


def walk_set(args):
    """The ``--walks`` set: (its folder, whose queries/ holds the walks as ``query_walk<k>_<i>.graph``,
    the graph's store path, a function building it)."""
    gdir = C.walk_graph(argparse.Namespace(**{**vars(args), "data": args.graphs}))
    base = f"{gdir}-walks"
    folder = os.path.join(base, "queries")
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):             # another run's walks
        os.remove(os.path.join(folder, name))
    seen = {}
    for k, pattern in C.walk_queries(gdir, args):
        seen[k] = seen.get(k, -1) + 1
        with open(os.path.join(folder, f"query_walk{k}_{seen[k]}.graph"), "w") as f:
            f.write(pattern + "\n")
    return base, gdir + ".sgsi", lambda: C.build_store(gdir)[0]


def candidates(args, base, set_name):
    """Query names to screen: from ``--pick-from`` CSVs of this set (by their times: the likely long
    ones first, then the likely short ones), else a sample."""
    names = sorted(n for n in os.listdir(os.path.join(base, "queries")) if n.endswith(".graph"))
    if args.names:                  # these, long or short by their screen
        return [n for n in args.names.split(",") if n in names], []
    for found in picked(args, set_name):
        rows = [r for r in found if r.get("status") == "ok" and r["query"] in names]
        if not rows:
            continue
        long_ = [r["query"] for r in rows if args.min_seconds <= float(r["seconds"]) <= args.max_seconds]
        short = sorted((r for r in rows if 0.02 <= float(r["seconds"]) < args.min_seconds),
                       key=lambda r: -float(r["seconds"]))
        return pick(long_, 3 * args.long, args.seed), [r["query"] for r in short[:3 * args.short]]
    return pick(names, args.sample, args.seed), []


def screen(g, base, names, args):
    """(long, short) queries with their one-process (count, seconds)."""
    likely_long, likely_short = names
    long_, short = [], []
    for name in likely_long + likely_short:
        if len(long_) >= args.long and len(short) >= args.short:
            break
        if name in likely_long and len(long_) >= args.long and likely_short:
            continue
        path = os.path.join(base, "queries", name)
        n, s = timed(lambda ev: g.count(path, device=args.device, cancel=ev, progress=False), args.max_seconds)
        C.say(f"screen {name}: {n} in {s:.2f} s")
        if n is None:
            continue
        if s >= args.min_seconds and len(long_) < args.long:
            long_.append((name, n, s))
        elif 0.02 <= s < args.min_seconds and len(short) < args.short:
            short.append((name, n, s))
    return long_, short


_BURN = "import time, numpy as np; a = np.random.rand(2_000_000); t = time.perf_counter()\n" \
        "for _ in range(40): np.sort(a)\nprint(time.perf_counter() - t)"


def capacity(k):
    """Cores this machine gives now to ``k`` processes at once: ``k`` x one NumPy sort loop's time
    alone over its time beside ``k - 1`` others (other jobs share the machine)."""
    import subprocess

    def run(n):
        procs = [subprocess.Popen([sys.executable, "-c", _BURN], stdout=subprocess.PIPE, text=True) for _ in range(n)]
        return max(float(p.communicate()[0]) for p in procs)
    alone = run(1)
    return k * alone / run(k) if k > 1 else 1.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", help="yeast, hprd-hard (repeat; default both)")
    p.add_argument("--data", help="a benchmark folder instead of --set")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="cluster sizes (default 1 2)")
    p.add_argument("--long", type=int, default=8, help="queries over --min-seconds a set (default 8)")
    p.add_argument("--short", type=int, default=3, help="queries under it a set, for the overhead (default 3)")
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=10.0, help="longer ones are left out")
    p.add_argument("--names", help="comma-separated query files to screen, instead of --pick-from's")
    p.add_argument("--pick-from", action="append", help="hard.py CSVs whose times pick the queries to screen")
    p.add_argument("--sample", type=int, default=60, help="queries screened a set without --pick-from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=2, help="runs a query and size; the least time is kept")
    p.add_argument("--memory-budget", default=None)
    p.add_argument("--tasks-per-worker", type=int, help="the driver's tasks a worker (default: sgsi's, by device)")
    p.add_argument("--rows-per-task", type=int, help="partial matches a task where the driver can (default: sgsi's)")
    p.add_argument("--round-ratio", type=float, help="how much smaller each round of tasks is (default: sgsi's)")
    p.add_argument("--beyond", type=int, default=0,
                   help="also count N queries that one process did not finish (cancelled in --pick-from, those "
                        "with a known count first) on the largest cluster only, within --beyond-timeout")
    p.add_argument("--beyond-timeout", type=float, default=30.0)
    p.add_argument("--beyond-queries", help="comma-separated query files for --beyond instead of the first N")
    p.add_argument("--out", default=None, help="markdown (default bench/results/scale_out_<device>.md)")
    p.add_argument("--walks", action="store_true", help="random walks of an R-MAT graph instead of --set's")
    p.add_argument("--graphs", default=C.DATA_DIR, help="where --walks' graph is generated and kept")
    C.add_walk_options(p, edges=1e7, queries=24)
    args = p.parse_args(argv)
    args.out = args.out or os.path.join(C.RESULTS_DIR, f"scale_out_{args.device}.md")
    if args.tasks_per_worker:
        driver.TASKS_PER_WORKER = dict.fromkeys(driver.TASKS_PER_WORKER, args.tasks_per_worker)
    if args.rows_per_task:
        shard.AMPLE_ROWS_PER_TASK = args.rows_per_task
    if args.round_ratio:
        shard.ROUND_RATIO = args.round_ratio
    start = C.machine()
    if args.device == "gpu":        # CuPy compiles each kernel at its first use: not in the screen's times
        C.say(f"warm-up: {len(C.warm_up_kernels('gpu'))} yeast queries")
    cores = {k: capacity(k) for k in args.workers}
    C.say(f"cores available to k processes: {cores}")
    rows, beyond = [], []
    graphs = []
    for set_name, base, store, build in sets(args):
        os.makedirs(C.DATA_DIR, exist_ok=True)
        g = sgsi.open(store) if os.path.exists(store) else build()
        graphs.append(g)
        expected = C.expected_counts(base) if os.path.exists(os.path.join(base, "expected.txt")) else {}
        long_, short = screen(g, base, candidates(args, base, set_name), args)
        named = args.beyond_queries.split(",") if args.beyond_queries else None
        for name in named or unfinished(args, set_name, expected)[:args.beyond]:
            beyond.append({"set": set_name, "query": name, "expected": expected.get(name),
                           "path": os.path.join(base, "queries", name), "graph": g})
        for kind, found in (("long", long_), ("short", short)):
            for name, n, s in found:
                rows.append({"set": set_name, "query": name, "group": group_of(name), "kind": kind, "count": n,
                             "expected": expected.get(name), "one_process_s": round(s, 4),
                             "path": os.path.join(base, "queries", name), "graph": g})
    starts = {}                     # cluster size -> seconds its start took
    with contextlib.ExitStack() as stack:
        clients = {}
        for k in args.workers:      # all started first, idle between their runs
            t0 = time.perf_counter()
            clients[k] = stack.enter_context(connect(workers=k, device=args.device))
            starts[k] = time.perf_counter() - t0
            for g in graphs:        # warm-up: the workers import sgsi and open the stores
                g.count("(a)--(b)", device=args.device, client=clients[k], progress=False)
        for r in rows:              # one process and each cluster in turn, --repeat rounds: the least time
            best = {"one": r["one_process_s"], **{k: math.inf for k in args.workers}}
            for _ in range(args.repeat):    # one process again beside the clusters (the screen ran first)
                best["one"] = min(best["one"], timed(lambda ev: r["graph"].count(
                    r["path"], device=args.device, memory_budget=args.memory_budget, progress=False))[1])
                for k, client in clients.items():
                    n, s = timed(lambda ev: r["graph"].count(r["path"], device=args.device, client=client,
                                                            memory_budget=args.memory_budget, progress=False))
                    assert n == r["count"], (r["query"], k, n, r["count"])
                    best[k] = min(best[k], s)
                    r["tasks"] = r["graph"].last_stats.get("tasks")
                    if k == args.workers[-1]:       # the driver's seconds before its tasks, the least
                        r["driver_s"] = min(r.get("driver_s", math.inf), r["graph"].last_stats.get("split_s", math.nan))
            r["one_process_s"] = round(best["one"], 4)
            for k in args.workers:
                r[f"w{k}_s"] = round(best[k], 4)
            C.say(f"{r['query']}: one process {best['one']:.3f} s, " +
                  ", ".join(f"{k} workers {best[k]:.3f} s" for k in args.workers))
        for r in beyond:            # one process did not finish these in --pick-from's timeout
            for k in [None] + args.workers:
                n, s = timed(lambda ev: r["graph"].count(r["path"], device=args.device, cancel=ev, progress=False,
                                                         client=clients.get(k), memory_budget=args.memory_budget),
                             args.beyond_timeout)
                assert n is None or r["expected"] is None or n == r["expected"], (r["query"], n, r["expected"])
                found = [x for x in (r.get("count"), n) if x is not None]
                assert len(set(found)) <= 1, (r["query"], found)
                r["count"] = found[0] if found else None
                r["one" if k is None else f"w{k}"] = None if n is None else round(s, 4)
                C.say(f"beyond {r['query']}: {n} in {s:.2f} s on " + ("one process" if k is None else f"{k} workers"))
    for g in graphs:
        g.close()
    fields = FIELDS + [f"w{k}_s" for k in args.workers]
    C.write_csv(os.path.splitext(args.out)[0] + ".csv", rows, fields)
    cores_after = {k: capacity(k) for k in args.workers}
    C.write_text(args.out, report(args, rows, starts, C.machine_at_end(start), cores, cores_after)
                 + report_beyond(args, beyond))
    print(open(args.out).read())
    return 1 if any(r["expected"] is not None and r["count"] != r["expected"] for r in rows) else 0


def picked(args, set_name):
    """The rows of each of this set's --pick-from CSVs (hard.py's, named ``..._<set>_...``)."""
    for path in args.pick_from or []:
        if f"_{set_name}_" in os.path.basename(path):
            with open(path) as f:
                yield list(csv.DictReader(f))


def unfinished(args, set_name, expected):
    """Queries cancelled in this set's first --pick-from CSV: those with a known count first."""
    rows = next(picked(args, set_name), [])
    names = [r["query"] for r in rows if r.get("status") == "cancelled"]
    return sorted(names, key=lambda n: expected.get(n) is None)


def report_beyond(args, beyond):
    if not beyond:
        return ""
    ks = args.workers
    out = ["", f"## Beyond: queries one process did not finish in --pick-from, within {args.beyond_timeout:g} s", "",
           "| set | query | expected | count | one process (s) | " + " | ".join(f"{k} w (s)" for k in ks)
           + " | " + " | ".join(f"{k} w / 1 w" for k in ks[1:]) + " |", "|---" * (4 + 2 * len(ks)) + "|"]

    def cell(x):
        return "cancelled" if x is None else f"{x:.3f}"
    for r in beyond:
        exp = "-" if r["expected"] is None else f"{r['expected']:,}"
        got = "-" if r["count"] is None else f"{r['count']:,}"
        one, base = r["one"], r[f"w{ks[0]}"]
        speed = ["-" if base is None or r[f"w{k}"] is None else f"{base / r[f'w{k}']:.2f}x" for k in ks[1:]]
        out.append(f"| {r['set']} | {r['query']} | {exp} | {got} | {cell(one)} | "
                   + " | ".join(cell(r[f"w{k}"]) for k in ks) + " | " + " | ".join(speed) + " |")
    out += ["", "- every finished count equal to the others' and to the expected one where known"]
    return "\n".join(out) + "\n"


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(args, rows, starts, m, cores, cores_after):
    ks = args.workers
    base = f"w{ks[0]}_s"
    out = [f"# Scale-out: one query sharded over {', '.join(map(str, ks))} Dask workers ({args.device.upper()})", "",
           "`python bench/scale_out.py " + " ".join(sys.argv[1:]) + "`", "", C.machine_md(m),
           f"- clusters: `LocalCluster` of single-threaded worker processes (GPU: dask-cuda's LocalCUDACluster), "
           f"started in {', '.join(f'{starts[k]:.1f} s ({k})' for k in ks if k in starts)} and not in the times; "
           f"{rows[0]['tasks'] if rows else '?'} tasks a query on the last ({driver.TASKS_PER_WORKER[driver.task_device(args.device)]} a "
           f"worker in rounds each {shard.ROUND_RATIO:g}x smaller, seeds deepened to {shard.AMPLE_ROWS_PER_TASK} partial "
           f"matches a task); one process and each cluster in "
           f"turn, query by query, the least of {args.repeat} rounds",
           f"- budget: {args.memory_budget or 'the default'} per process; every count equal to one process's "
           f"and to the set's expected count",
           "- cores the machine gave k processes at once (k x a NumPy loop's time alone / beside k - 1 more), "
           "before and after: " + ", ".join(f"{k}: {cores[k]:.2f} and {cores_after[k]:.2f}" for k in ks), ""]
    out.append("| set | query | kind | count | one process (s) | " + " | ".join(f"{k} w (s)" for k in ks)
               + f" | driver, {ks[-1]} w (s) | " + " | ".join(f"{k} w / 1 w" for k in ks[1:]) + " |")
    out.append("|---" * (6 + len(ks) + len(ks) - 1) + "|")
    for r in rows:
        speed = [r[base] / r[f"w{k}_s"] for k in ks[1:]]
        out.append(f"| {r['set']} | {r['query']} | {r['kind']} | {r['count']:,} | {r['one_process_s']:.3f} | "
                   + " | ".join(f"{r[f'w{k}_s']:.3f}" for k in ks) + f" | {r.get('driver_s', math.nan):.3f} | "
                   + " | ".join(f"{x:.2f}x" for x in speed) + " |")
    out.append("")
    out.append(f"- driver: the query's seconds on its driver before the tasks (plan, order search, split: "
               f"`last_stats[\"split_s\"]`), the least over the rounds on {ks[-1]} workers")
    for kind in ("long", "short"):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            out.append(f"- {kind}: no query of this kind was found")
            continue
        parts = [f"{k} workers {geomean([r[base] / r[f'w{k}_s'] for r in sel]):.2f}x of 1 worker, "
                 f"{geomean([r['one_process_s'] / r[f'w{k}_s'] for r in sel]):.2f}x of one process" for k in ks]
        out.append(f"- {kind} ({len(sel)} queries; geometric means): " + "; ".join(parts))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
