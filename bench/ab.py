"""A/B of two source trees of sgsi on the same graph, queries and device, alternated.

    git archive HEAD sgsi | tar -x -C /tmp/base
    python bench/ab.py --trees /tmp/base . --edges 1e8 --sizes 8 12 --queries 3 --device gpu

Each round runs every tree in a process of its own (``sgsi`` imported from
that tree), which opens the store once and counts each query ``--reps``
times, keeping the last ``--keep`` (the first ones read segments and compile
kernels). Rounds alternate the trees (A, B, A, B, ...), so that a drift of a
shared machine shows up as a difference between rounds, not between trees.
Prints min / median ms per query, tree and round, and the ratio of the
medians of the minima; every count must be equal across trees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (DATA_DIR, add_walk_options, device_sync, ensure_importable, open_or_build, report,  # noqa: E402
                     walk_graph, walk_queries)


def _worker(args):
    """In the tree's process: the counts and times of every query, as one JSON line."""
    sys.path.insert(0, os.path.abspath(args.worker))
    import sgsi
    assert os.path.dirname(os.path.dirname(os.path.abspath(sgsi.__file__))) == os.path.abspath(args.worker)
    sync = device_sync(args.device)
    g = sgsi.open(args.store)
    out = []
    for pat in json.loads(args.patterns):
        times, n = [], None
        for _ in range(args.reps):
            sync()
            t = time.perf_counter()
            n = g.count(pat, device=args.device)
            sync()
            times.append(time.perf_counter() - t)
        out.append({"count": n, "times": times[-args.keep:]})
    print("RESULT " + json.dumps(out), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_walk_options(ap, edges=1e7, queries=3)
    ap.add_argument("--trees", nargs=2, metavar=("A", "B"), help="directories holding an sgsi package")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--keep", type=int, default=5)
    ap.add_argument("--only", type=int, nargs="*", default=None, help="indices of the queries to run")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--patterns", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    ensure_importable()
    gdir = walk_graph(args)
    store = gdir + ".sgsi"
    open_or_build(gdir).close()
    queries = walk_queries(gdir, args)
    if args.only is not None:
        queries = [queries[i] for i in args.only]
    pats = json.dumps([p for _k, p in queries])
    results = {}                                          # (round, tree) -> per query dicts
    for r in range(args.rounds):
        for tree in args.trees:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", tree, "--store", store, "--patterns", pats,
                   "--device", args.device, "--reps", str(args.reps), "--keep", str(args.keep)]
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            got = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            line = [x for x in got.stdout.splitlines() if x.startswith("RESULT ")]
            if got.returncode or not line:
                raise SystemExit(f"tree {tree} failed:\n{got.stdout}\n{got.stderr}")
            results[r, tree] = json.loads(line[-1][len("RESULT "):])
    a, b = args.trees
    report(f"A = {a}, B = {b}; ms min / median of the last {args.keep} of {args.reps} counts")
    head = " | ".join(f"round {r + 1} {x}" for r in range(args.rounds) for x in "AB")
    report(f"| query | matches | {head} | B/A (minima) |")
    report("|---|---:|" + "---:|" * (2 * args.rounds) + "---:|")
    for qi, (k, _pat) in enumerate(queries):
        counts = {results[key][qi]["count"] for key in results}
        if len(counts) != 1:
            raise SystemExit(f"COUNT MISMATCH on query {qi}: {counts}")
        cells, mins = [], {a: [], b: []}
        for r in range(args.rounds):
            for tree in (a, b):
                ts = results[r, tree][qi]["times"]
                mins[tree].append(min(ts))
                cells.append(f"{min(ts) * 1e3:.1f} / {statistics.median(ts) * 1e3:.1f}")
        ratio = statistics.median(mins[b]) / statistics.median(mins[a])
        report(f"| {qi}: {k} vertices | {counts.pop():,} | " + " | ".join(cells) + f" | {ratio:.2f} |")


if __name__ == "__main__":
    main()
