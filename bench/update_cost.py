"""Update apply time against the batch and against the deltas before it (issue 44: "applying an
update costs no more than writing its delta").

Builds a store from 90% of an R-MAT graph's edges, applies ``--history`` batches of
``--history-size`` inserted edges (deltas that pile up before the measured ones), then the measured
batches (``--batches`` insertions, ``--mixed`` half insertions, half deletions of edges in the
store). Per batch: ``Graph.update``'s wall time (``apply_s``, with the Graph's reopening), the
update's own time (``update_s``; ``write_s`` of it writes the delta: files, fsyncs, the
manifest), and the first use at the new version: opening the store
(``open_s``) and every labelled ``out`` and ``in`` partition's first touch (``parts_s``), and the
same touch on the updating Graph's store (``same_parts_s``: partitions derived from the previous
version's, built there at the batch before).

    python bench/update_cost.py --edges 2e6 --before b66b25c --out update_cost   # bench/results/<out>.md
    python bench/update_cost.py --edges 2e6 --profile 10000              # cProfile of one batch size

``--before REV`` first runs the same batches with the sgsi of commit REV (``git archive``, in a
subprocess), and the table sets both side by side. Times are wall and process CPU seconds (the
machine is shared: CPU time moves less with the load).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
if "--sgsi" in sys.argv:                 # the sgsi of another commit (see --before)
    sys.path.insert(0, sys.argv[sys.argv.index("--sgsi") + 1])
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import sgsi  # noqa: E402
from sgsi.storage.store import Store  # noqa: E402

FIELDS = ["code", "phase", "batch", "kind", "inserted", "deleted", "version", "apply_s", "apply_cpu_s", "update_s",
          "write_s",
          "open_s", "parts_s", "parts_cpu_s", "same_parts_s", "net_inserted", "net_deleted"]


def touch(st):
    """(s, CPU s) to touch every labelled out and in partition of ``st`` (their first use)."""
    t, c = time.perf_counter(), time.process_time()
    for lab in range(len(st.manifest["edge_labels"]["values"])):
        for direction in ("out", "in"):
            st.partition(lab, direction)
    return time.perf_counter() - t, time.process_time() - c


def first_use(path):
    """(open s, touch s, touch CPU s) of a new reader of the newest version."""
    t = time.perf_counter()
    st = Store(path)
    t_open = time.perf_counter() - t
    t_parts, c_parts = touch(st)
    st.close()
    return t_open, t_parts, c_parts


def before(args):
    """Rows of the same run with the sgsi of commit ``args.before`` (a subprocess)."""
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        tar = subprocess.run(["git", "archive", args.before, "sgsi"], cwd=C.REPO_DIR, check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        out = os.path.join(tmp, "rows.json")
        argv = [a for a in sys.argv[1:]]
        for opt in ("--before", "--out", "--profile"):
            if opt in argv:
                i = argv.index(opt)
                del argv[i:i + 2]
        subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--sgsi", tmp, "--code", args.before,
                        "--json", out], check=True)
        with open(out) as f:
            return json.load(f)


def run(args):
    start = C.machine()
    old = before(args) if args.before else []
    gdir = C.walk_graph(args)
    edges = pq.read_table(os.path.join(gdir, "edges.parquet"))
    n = edges.num_rows
    perm = np.random.default_rng(args.seed).permutation(n)
    n_base = int(round(n * 0.9))
    base, stream = edges.take(perm[:n_base]), edges.take(perm[n_base:])
    gone = base.take(np.random.default_rng(args.seed + 1).permutation(n_base))
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="update-cost-", dir=args.work)
    try:
        pq.write_table(base, os.path.join(work, "base.parquet"))
        path = os.path.join(work, "g.sgsi")
        t = time.perf_counter()
        sgsi.build(path, edges=os.path.join(work, "base.parquet"), vertices=os.path.join(gdir, "vertices.parquet"),
                   memory_budget=args.build_budget).close()
        build_s = time.perf_counter() - t
        C.say(f"built {n_base:,} of {n:,} edges in {build_s:.1f}s")
        plan = [("history", args.history_size, "insert")] * args.history
        plan += [("measured", b, "insert") for b in args.batches] + [("measured", b, "mixed") for b in args.mixed]
        rows, at, dat = [], 0, 0
        g = sgsi.open(path)
        for phase, size, kind in plan:
            n_ins, n_del = (size, 0) if kind == "insert" else (size // 2, size - size // 2)
            ins = os.path.join(work, f"ins-{len(rows)}.parquet")
            pq.write_table(stream.slice(at, n_ins), ins)
            dele = None
            if n_del:
                dele = os.path.join(work, f"del-{len(rows)}.parquet")
                pq.write_table(gone.slice(dat, n_del), dele)
            at, dat = at + n_ins, dat + n_del
            prof = cProfile.Profile() if phase == "measured" and size == args.profile else None
            t, c = time.perf_counter(), time.process_time()
            if prof:
                prof.enable()
            s = g.update(insert=ins, delete=dele)
            if prof:
                prof.disable()
            apply_s, apply_cpu = time.perf_counter() - t, time.process_time() - c
            fprof = cProfile.Profile() if prof and os.environ.get("PROFILE_PARTS") else None
            if fprof:
                fprof.enable()
            same = touch(g.store)[0]              # the updating Graph's own store (derived partitions)
            o, p, pc = first_use(path)
            if fprof:
                fprof.disable()
                pstats.Stats(fprof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile_lines)
            rows.append({"code": args.code, "phase": phase, "batch": C_label(size), "kind": kind,
                         "inserted": n_ins, "deleted": n_del, "version": s["version"], "apply_s": round(apply_s, 4),
                         "apply_cpu_s": round(apply_cpu, 4), "update_s": s["seconds"],
                         "write_s": s.get("write_seconds"), "open_s": round(o, 4),
                         "parts_s": round(p, 4), "parts_cpu_s": round(pc, 4), "same_parts_s": round(same, 4),
                         "net_inserted": s["inserted"],
                         "net_deleted": s["deleted"]})
            C.say(" ".join(f"{k}={v}" for k, v in rows[-1].items()))
            if prof:
                pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile_lines)
        g.close()
        t = time.perf_counter()
        sgsi.open(path).compact()
        compact_s = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    if args.out:
        write(args, old, rows, start, n, n_base, build_s, compact_s)


def C_label(n):
    return f"{n // 1000}K" if n % 1000 == 0 else str(n)


def write(args, old, rows, start, n, n_base, build_s, compact_s):
    m = C.machine_at_end(start)
    C.write_csv(os.path.join(C.RESULTS_DIR, f"{args.out}.csv"), old + rows, FIELDS)
    was = {(r["phase"], r["version"]): r for r in old}

    def pair(r, k):
        o = was.get((r["phase"], r["version"]), {}).get(k)
        return f"{o} → {r[k]}" if o is not None else f"{r[k]}"
    head = ("| phase | batch | kind | +edges | -edges | version | apply s | apply CPU s | update s | of which "
            "writing the delta s | open s | partitions s | partitions CPU s | partitions s, updating Graph |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    body = "".join(f"| {r['phase']} | {r['batch']} | {r['kind']} | {r['inserted']:,} | {r['deleted']:,} | "
                   f"{r['version']} | {pair(r, 'apply_s')} | {pair(r, 'apply_cpu_s')} | {pair(r, 'update_s')} | "
                   f"{r['write_s']} | {pair(r, 'open_s')} | "
                   f"{pair(r, 'parts_s')} | {pair(r, 'parts_cpu_s')} | {pair(r, 'same_parts_s')} |\n" for r in rows)
    cmd = (f"python bench/update_cost.py {C.walk_options(args)} --history {args.history} --history-size "
           f"{args.history_size} --batches {' '.join(map(str, args.batches))} --mixed "
           f"{' '.join(map(str, args.mixed))}" + (f" --before {args.before}" if args.before else "") + f" --out {args.out}")
    C.write_text(os.path.join(C.RESULTS_DIR, f"{args.out}.md"),
                 f"# Update cost: {args.shape} R-MAT, {n_base:,} of {n:,} edges\n\n`{cmd}`\n\n{C.machine_md(m)}\n"
                 f"Cells read before → after (`{args.before}` → this commit) where `--before` is given. Build "
                 f"{build_s:.2f} s; compaction at the end {compact_s:.2f} s (this commit).\n\n{head}{body}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_walk_options(ap, edges=2e6, queries=1)
    ap.add_argument("--data", default=C.DATA_DIR)
    ap.add_argument("--work", default=None, help="scratch folder (default: the system's)")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--build-budget", default=None, help="the build's memory budget (segment sizes)")
    ap.add_argument("--history", type=int, default=8)
    ap.add_argument("--history-size", type=int, default=10000)
    ap.add_argument("--batches", type=int, nargs="*", default=[1000, 10000, 100000])
    ap.add_argument("--mixed", type=int, nargs="*", default=[10000])
    ap.add_argument("--profile", type=int, default=0, help="cProfile the measured batch of this size")
    ap.add_argument("--profile-lines", type=int, default=40)
    ap.add_argument("--out", default=None, help="write bench/results/<out>.csv and .md")
    ap.add_argument("--before", default=None, help="a commit to run first, for the before column")
    ap.add_argument("--sgsi", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--code", default="this", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
