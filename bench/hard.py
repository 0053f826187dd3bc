"""Hard-query benchmark and acceptance run: yeast / hprd-hard / hprd, one process, one Graph.

Each query is counted with ``Graph.count(path, device, memory_budget, cancel=ev)``; a
``threading.Timer`` sets ``ev`` after ``--timeout`` s. Per query the CSV (written row by row)
holds status (ok / cancelled / error type), count, seconds, when the timer fired and the cancel
latency (fired -> return), the expected count and whether it matched, and memory after the query
(CPU: process RSS; GPU: device free memory). The summary (markdown) gives, per query group
(``dense_16``, ...) and overall, the shares finished within 1 s and 10 s, their median/p90 times,
cancellations, errors by type, count mismatches, cancel latencies and memory growth.

    python bench/hard.py --set yeast --device cpu --sample 40 --timeout 4 --store /tmp/yeast.sgsi \\
        --out /tmp/yeast_cpu.csv --summary /tmp/yeast_cpu.md
    python bench/hard.py --set hprd-hard --device gpu --only 'query_dense_32_*' --out /tmp/hh_gpu.csv
    python bench/hard.py --compare /tmp/hh_cpu.csv /tmp/hh_gpu.csv     # counts both finished must agree

Data sets: ``$SGSI_BENCHMARKS/<set>``, else /work/shared/benchmarks/<set>, else tests/data/benchmarks/<set>.
Run CPU runs under ``prlimit --as=...`` so a runaway query gets MemoryError, not the OOM killer.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import gc
import os
import platform
import random
import re
import shlex
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import sgsi  # noqa: E402
from sgsi.errors import Cancelled  # noqa: E402

FIELDS = ["query", "group", "status", "count", "expected", "match", "seconds", "fired_s", "cancel_latency_s",
          "mem", "mem_growth_mib", "peak_rss_mib", "reordered", "deferred", "symmetry", "search_s", "error"]
ERROR_KINDS = ("BudgetError", "MemoryError", "OutOfMemoryError")


def deferred(stats):
    """The vertices a switched order search moved to be counted last (0 where none)."""
    search = stats.get("order_search") or {}
    return search.get("deferred", 0) if search.get("switched") else 0


def search_seconds(stats):
    """Seconds the order search took (None where none ran)."""
    return (stats.get("order_search") or {}).get("seconds")


def natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def group_of(name):
    """``query_dense_16_3.graph`` -> ``dense_16``."""
    m = re.match(r"(?:query_)?(.+)_\d+\.graph$", name)
    return m.group(1) if m else "other"


def data_dir(args):
    if args.data:
        return args.data
    roots = [os.environ.get("SGSI_BENCHMARKS"), "/work/shared/benchmarks",
             os.path.join(C.REPO_DIR, "tests", "data", "benchmarks")]
    for r in roots:
        if r and os.path.isdir(os.path.join(r, args.set)):
            return os.path.join(r, args.set)
    raise SystemExit(f"benchmark set {args.set!r} not found under {[r for r in roots if r]}")


def pick(names, n, seed):
    """Up to ``n`` names, round-robin over the groups (each shuffled by ``seed`` unless None)."""
    groups = {}
    for q in sorted(names, key=natural):
        groups.setdefault(group_of(q), []).append(q)
    if seed is not None:
        for g, qs in groups.items():
            random.Random(f"{seed}:{g}").shuffle(qs)
    order = [qs[i] for i in range(max(map(len, groups.values()), default=0))
             for _, qs in sorted(groups.items(), key=lambda kv: natural(kv[0])) if i < len(qs)]
    return order[:n] if n else order


class Memory:
    """CPU: process RSS (MiB). GPU: device free memory (GiB); growth in MiB either way."""

    def __init__(self, device):
        self.gpu = device == "gpu"
        if self.gpu:
            import cupy
            self.cupy = cupy
        self.page = os.sysconf("SC_PAGE_SIZE")

    def used_mib(self):
        """What grows: RSS, or device memory in use (total - free)."""
        if self.gpu:
            free, total = self.cupy.cuda.runtime.memGetInfo()
            return (total - free) / 2**20
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page / 2**20

    def show(self, used):
        if self.gpu:
            return f"{(self.cupy.cuda.runtime.memGetInfo()[1] / 2**20 - used) / 1024:.2f} GiB free"
        return f"{used:.0f} MiB RSS"

    def label(self):
        return "device free (GiB)" if self.gpu else "RSS (MiB)"

    def value(self, used):
        return round((self.cupy.cuda.runtime.memGetInfo()[1] / 2**20 - used) / 1024, 3) if self.gpu else round(used, 1)


def count_one(g, path, args):
    """(status, count, seconds, fired_s, error) of one query, with the timer's cancel."""
    ev, fired = threading.Event(), []
    timer = threading.Timer(args.timeout, lambda: (fired.append(time.perf_counter()), ev.set()))
    count, err, status = None, "", "ok"
    t0 = time.perf_counter()
    timer.start()
    try:
        count = g.count(path, device=args.device, memory_budget=args.memory_budget, cancel=ev)
    except Cancelled:
        status = "cancelled"
    except Exception as e:      # MemoryError, BudgetError, cupy's OutOfMemoryError, ...
        status, err = type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""
    t1 = time.perf_counter()
    timer.cancel()
    timer.join()
    return status, count, t1 - t0, (fired[0] - t0 if fired else None), (t1 - fired[0] if fired else None), err


def q(xs, p):
    """Nearest-rank percentile ``p`` (0..1) of ``xs``; None when empty."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(-(-p * len(xs) // 1)) - 1))] if xs else None


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def summary_line(name, rows):
    n = len(rows)
    done = [r["seconds"] for r in rows if r["status"] == "ok"]
    lat = [r["cancel_latency_s"] for r in rows if r["status"] == "cancelled" and r["cancel_latency_s"] is not None]
    errs = {k: sum(r["status"] == k for r in rows) for k in ERROR_KINDS}
    other = sum(r["status"] not in ("ok", "cancelled", *ERROR_KINDS) for r in rows)
    mism = sum(r["match"] is False for r in rows)
    within = lambda s: f"{sum(t <= s for t in done)} ({sum(t <= s for t in done) / max(n, 1):.0%})"  # noqa: E731
    grow = max(rows, key=lambda r: r["mem_growth_mib"] or 0, default=None)
    grow_s = f"{grow['mem_growth_mib']:+.0f} ({grow['query']})" if grow and grow["mem_growth_mib"] else "-"
    return (f"| {name} | {n} | {within(1)} | {within(10)} | {fmt(q(done, .5))} | {fmt(q(done, .9))} | "
            f"{sum(r['status'] == 'cancelled' for r in rows)} | " + " | ".join(str(errs[k]) for k in ERROR_KINDS)
            + f" | {other} | {mism} | {fmt(q(lat, .5))} / {fmt(q(lat, .9))} / {fmt(max(lat, default=None))} | {grow_s} |")


def table(rows):
    """The markdown table of ``rows``: a line a group, all, and the split by known counts (where
    some are known and some not: the queries no published solver finished apart)."""
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    lines = [summary_line(g, rs) for g, rs in sorted(groups.items(), key=lambda kv: natural(kv[0]))]
    lines.append(summary_line("**all**", rows))
    unknown = [r for r in rows if r["expected"] is None]
    if unknown and len(unknown) < len(rows):
        lines += [summary_line("with a known count", [r for r in rows if r["expected"] is not None]),
                  summary_line("without one", unknown)]
    return ("| group | queries | ≤ 1 s | ≤ 10 s | median s | p90 s | cancelled | BudgetError | MemoryError | "
            "OutOfMemoryError | other errors | mismatches | cancel latency s (med / p90 / max) | "
            "largest mem growth MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n"
            + "\n".join(lines) + "\n")


def mismatches(rows):
    return "".join(f"\n- MISMATCH {r['query']}: {r['count']} expected {r['expected']}"
                   for r in rows if r["match"] is False)


def summarize(args, rows, mem, before, end, store_s, sel_total, gpu_name):
    others = sorted({r["status"] for r in rows} - {"ok", "cancelled", *ERROR_KINDS})
    errs = [r for r in rows if r["status"] not in ("ok", "cancelled")]
    slow_cancel = [r for r in rows if (r["cancel_latency_s"] or 0) > 1]
    md = f"""# Hard queries: {os.path.basename(os.path.normpath(data_dir(args)))}, {args.device.upper()}

`python {' '.join(shlex.quote(a) for a in sys.argv)}`

- machine: `{platform.platform()}`, {os.cpu_count()} CPUs (`{C.cpu_model()}`){f', GPU `{gpu_name}`' if gpu_name else ''}
- sgsi commit `{C.git_commit()}`; date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}
- {len(rows)} of {sel_total} selected queries run; timeout {args.timeout:g} s (cancel event); memory budget {args.memory_budget or 'engine default'}; store `{args.store}` ({store_s})
- memory {mem.label()}: before the first query {mem.value(before)}, at the end {mem.value(end)}; peak RSS {C.peak_rss_bytes() / 2**20:.0f} MiB

{table(rows)}"""
    md += f"\nOther error types: {', '.join(others)}\n" if others else ""
    md += mismatches(rows)
    md += "".join(f"\n- {r['status']} {r['query']} after {r['seconds']:.2f} s: {r['error']}" for r in errs[:20])
    md += "".join(f"\n- slow cancel {r['query']}: {r['cancel_latency_s']:.2f} s after the timer"
                  for r in slow_cancel[:20])
    return md + "\n"


def load_rows(path):
    """A hard.py CSV's rows, typed as a run makes them (for :func:`merged`)."""
    def num(x):
        return None if x in ("", None) else float(x)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["seconds"], r["cancel_latency_s"] = float(r["seconds"]), num(r["cancel_latency_s"])
        r["mem_growth_mib"] = num(r["mem_growth_mib"])
        r["expected"] = r["expected"] or None
        r["match"] = {"True": True, "False": False}.get(r["match"])
    return rows


def merged(paths):
    """The table of several runs' CSVs as one (a set run in parts, e.g. one device call each):
    the groups, all, and the split by known counts; each query once (a later file's row wins)."""
    rows = {}
    for p in paths:
        rows.update({r["query"]: r for r in load_rows(p)})
    rows = list(rows.values())
    return table(rows) + mismatches(rows)


def compare(a, b):
    ra, rb = ({r["query"]: r for r in load_rows(p)} for p in (a, b))
    both = [k for k in ra if k in rb and ra[k]["status"] == rb[k]["status"] == "ok"]
    diff = [k for k in both if int(ra[k]["count"]) != int(rb[k]["count"])]
    for k in sorted(diff, key=natural):
        print(f"DIFFER {k}: {ra[k]['count']} ({a}) vs {rb[k]['count']} ({b})")
    only = lambda x, y: sum(x[k]["status"] == "ok" and (k not in y or y[k]["status"] != "ok") for k in x)  # noqa: E731
    print(f"{len(both)} queries finished in both, {len(diff)} differ; finished only in A: {only(ra, rb)}, "
          f"only in B: {only(rb, ra)}; common queries: {len(set(ra) & set(rb))}")
    return 1 if diff else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="yeast", help="yeast, hprd-hard, hprd")
    p.add_argument("--data", help="a benchmark folder (data.graph, queries/, expected.txt optional)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--memory-budget", default=None, help="e.g. 2GB (default: the engine's)")
    p.add_argument("--queries", type=int, help="the first N, round-robin over the groups")
    p.add_argument("--sample", type=int, help="N at random (--seed), round-robin over the groups")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", help="query file glob, e.g. 'query_dense_32_*'")
    p.add_argument("--names", help="a file of query file names, one a line (e.g. a CSV's slow ones)")
    p.add_argument("--store", help="store folder, built when missing (default bench/data/<set>[-budget].sgsi)")
    p.add_argument("--no-warm-up", action="store_true", help="GPU: skip compiling the kernels before timing")
    p.add_argument("--out", default=None, help="CSV (default /tmp/hard_<set>_<device>.csv)")
    p.add_argument("--summary", default=None, help="markdown (default: next to --out)")
    p.add_argument("--compare", nargs=2, metavar=("A.csv", "B.csv"))
    p.add_argument("--merge", nargs="+", metavar="CSV", help="print one table of these runs' CSVs (a set run in parts)")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.merge:
        print(merged(args.merge))
        return 0

    base = data_dir(args)
    tag = os.path.basename(os.path.normpath(base))
    suffix = f"-{args.memory_budget}" if args.memory_budget else ""
    args.store = args.store or os.path.join(C.DATA_DIR, f"{tag}{suffix}.sgsi")
    args.out = args.out or f"/tmp/hard_{tag}_{args.device}.csv"
    args.summary = args.summary or os.path.splitext(args.out)[0] + ".md"
    exp_path = os.path.join(base, "expected.txt")
    expected = C.expected_counts(base) if os.path.exists(exp_path) else {}
    names = [n for n in os.listdir(os.path.join(base, "queries")) if n.endswith(".graph")]
    if args.only:
        names = [n for n in names if fnmatch.fnmatch(n, args.only)]
    if args.names:
        wanted = set(open(args.names).read().split())
        names = [n for n in names if n in wanted]
    names = pick(names, args.sample or args.queries, args.seed if args.sample else None)

    mem = Memory(args.device)
    gpu_name = None
    if args.device == "gpu":
        props = mem.cupy.cuda.runtime.getDeviceProperties(mem.cupy.cuda.Device().id)
        gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        if not args.no_warm_up:
            C.say(f"warm-up: {len(C.warm_up_kernels('gpu'))} yeast queries")
    t = time.perf_counter()
    if os.path.exists(args.store):
        g, store_s = sgsi.open(args.store), "reused"
    else:
        os.makedirs(os.path.dirname(os.path.abspath(args.store)), exist_ok=True)
        g = sgsi.build(args.store, graph=os.path.join(base, "data.graph"), memory_budget=args.memory_budget)
        store_s = f"built in {time.perf_counter() - t:.1f} s"
    C.say(f"{g} ({store_s}); {len(names)} queries, timeout {args.timeout:g} s, {args.device}")

    rows = []
    gc.collect()
    before = prev = mem.used_mib()
    try:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            f.flush()
            for i, name in enumerate(names, 1):
                status, count, secs, fired, lat, err = count_one(g, os.path.join(base, "queries", name), args)
                used = mem.used_mib()
                exp = expected.get(name)
                r = {"query": name, "group": group_of(name), "status": status, "count": count, "expected": exp,
                     "match": None if exp is None or count is None else count == exp, "seconds": round(secs, 4),
                     "fired_s": None if fired is None else round(fired, 4),
                     "cancel_latency_s": None if lat is None else round(lat, 4), "mem": mem.value(used),
                     "mem_growth_mib": round(used - prev, 1), "peak_rss_mib": round(C.peak_rss_bytes() / 2**20),
                     "reordered": g.last_stats.get("reordered") if status == "ok" else None,
                     "deferred": deferred(g.last_stats) if status == "ok" else None,
                     "symmetry": g.last_stats.get("symmetry") if status == "ok" else None,
                     "search_s": search_seconds(g.last_stats) if status == "ok" else None, "error": err}
                prev = used
                rows.append(r)
                w.writerow(r)
                f.flush()
                C.say(f"[{i}/{len(names)}] {name} {status} {'' if count is None else count} {secs:.3f}s"
                      + (f" (cancel +{lat:.3f}s)" if lat is not None else "") + f" {mem.show(used)}"
                      + (" MISMATCH expected %s" % exp if r["match"] is False else "") + (f" {err}" if err else ""))
    finally:
        gc.collect()
        end = mem.used_mib()
        md = summarize(args, rows, mem, before, end, store_s, len(names), gpu_name)
        print(md)
        with open(args.summary, "w") as f:
            f.write(md)
        g.close()
    return 1 if any(r["match"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
