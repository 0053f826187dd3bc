"""A/B of two source trees of sgsi on the same graph, queries and device, interleaved count by count.

    git archive HEAD sgsi | tar -x -C /tmp/base
    python bench/ab.py --trees /tmp/base . --edges 1e8 --sizes 8 12 --queries 3 --device gpu

Each tree serves counts in a process of its own (``sgsi`` imported from that
tree) that opens the store once; both run side by side, and the parent sends
each query to them in turn, A B B A A B ..., so that the drift of a shared
machine falls on both trees alike instead of on whichever ran later. Per
query, ``--warm`` untimed counts on each tree come first (segments read,
kernels compiled), then ``--reps`` timed counts each. Both processes get the
same memory budget (``--budget``; on the GPU 16GB unless given, since the
default, half the free memory, would differ between them). Prints min /
median ms per tree, the ratio of the minima and the median of the paired
ratios B/A; every count must be equal across trees.

Two processes of one tree need not be equally fast: on an H100 host (session 24)
the same tree in both slots measured B/A 1.28 and 1.13 on two light (host-bound)
walks. ``--pairs N`` runs the comparison in N fresh pairs of processes, each pair
started in the other order (A first, then B first, ...), and pools their times:
a slot's luck then falls on both trees.
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


def _serve(args):
    """In a tree's process: count each pattern read from standard input, answering with one JSON
    line (count, seconds) per pattern."""
    sys.path.insert(0, os.path.abspath(args.worker))
    import sgsi
    assert os.path.dirname(os.path.dirname(os.path.abspath(sgsi.__file__))) == os.path.abspath(args.worker)
    sync = device_sync(args.device)
    g = sgsi.open(args.store)
    print("READY", flush=True)
    for line in sys.stdin:
        pat = json.loads(line)
        sync()
        t = time.perf_counter()
        n = g.count(pat, device=args.device, memory_budget=args.budget)
        sync()
        print(json.dumps({"count": n, "s": time.perf_counter() - t}), flush=True)
    g.close()


class _Tree:
    """A tree's serving process."""

    def __init__(self, tree, store, args):
        self.tree = tree
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", tree, "--store", store, "--device", args.device]
        if args.budget:
            cmd += ["--budget", args.budget]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._expect("READY")

    def _expect(self, what):
        line = self.proc.stdout.readline()
        if not line.startswith(what):
            raise SystemExit(f"tree {self.tree} failed (its stderr is above); it said {line!r}")
        return line

    def count(self, pattern):
        self.proc.stdin.write(json.dumps(pattern) + "\n")
        self.proc.stdin.flush()
        got = json.loads(self._expect("{"))
        return got["count"], got["s"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_walk_options(ap, edges=1e7, queries=3)
    ap.add_argument("--trees", nargs=2, metavar=("A", "B"), help="directories holding an sgsi package")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--budget", default=None, help="memory budget of both trees' counts (GPU default: 16GB)")
    ap.add_argument("--warm", type=int, default=2, help="untimed counts per query and tree, first")
    ap.add_argument("--reps", type=int, default=8, help="timed counts per query and tree, interleaved")
    ap.add_argument("--only", type=int, nargs="*", default=None, help="indices of the queries to run")
    ap.add_argument("--pairs", type=int, default=1,
                    help="fresh pairs of serving processes, started in alternating order; times pooled")
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.budget is None and args.device == "gpu":
        args.budget = "16GB"
    if args.worker:
        return _serve(args)
    ensure_importable()
    gdir = walk_graph(args)
    store = gdir + ".sgsi"
    open_or_build(gdir).close()
    queries = walk_queries(gdir, args)
    if args.only is not None:
        queries = [queries[i] for i in args.only]
    times = {(qi, t): [] for qi in range(len(queries)) for t in "AB"}
    paired = {qi: [] for qi in range(len(queries))}
    matches = {}
    for pair in range(args.pairs):
        order = "AB" if pair % 2 == 0 else "BA"
        started = {}
        try:
            for name in order:
                started[name] = _Tree(args.trees["AB".index(name)], store, args)
            a, b = started["A"], started["B"]
            for qi, (k, pat) in enumerate(queries):
                counts = set() if qi not in matches else {matches[qi]}
                for tree in (a, b):
                    for _ in range(args.warm):
                        counts.add(tree.count(pat)[0])
                here = {a: [], b: []}
                for i in range(args.reps):
                    for tree in ((a, b) if i % 2 == 0 else (b, a)):
                        n, s = tree.count(pat)
                        counts.add(n)
                        here[tree].append(s)
                if len(counts) != 1:
                    raise SystemExit(f"COUNT MISMATCH on query {qi}: {counts}")
                matches[qi] = counts.pop()
                times[qi, "A"] += here[a]
                times[qi, "B"] += here[b]
                paired[qi] += [y / x for x, y in zip(here[a], here[b])]
        finally:
            for tree in started.values():
                tree.close()
    report(f"A = {args.trees[0]}, B = {args.trees[1]}; {args.reps} timed counts per tree, interleaved A B B A ..., "
           f"after {args.warm} untimed; {args.pairs} pair(s) of processes; budget {args.budget or 'default'}; ms")
    report("| query | matches | A min / median | B min / median | B/A of the minima | B/A paired (median) |")
    report("|---|---:|---:|---:|---:|---:|")
    for qi, (k, _pat) in enumerate(queries):
        ta, tb = times[qi, "A"], times[qi, "B"]
        report(f"| {qi}: {k} vertices | {matches[qi]:,} | {min(ta) * 1e3:.1f} / {statistics.median(ta) * 1e3:.1f} | "
               f"{min(tb) * 1e3:.1f} / {statistics.median(tb) * 1e3:.1f} | {min(tb) / min(ta):.2f} | "
               f"{statistics.median(paired[qi]):.2f} |")

if __name__ == "__main__":
    main()
