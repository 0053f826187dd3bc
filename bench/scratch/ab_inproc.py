"""A/B of two source trees of sgsi in one process, count by count (probe).

    mkdir -p /tmp/base && git archive HEAD sgsi | tar -x -C /tmp/base
    python bench/scratch/ab_inproc.py --trees /tmp/base . --edges 1e8 --shape watdiv --edge-labels 16 \
        --vertex-labels 64 --sizes 8 12 --queries 3 --only 0 1 2 4 5 --rounds 20

bench/ab.py serves each tree from a process of its own; two processes of one tree differ by up
to a quarter on a light (host-bound) GPU walk, which buries effects of a few percent. Here both
trees' packages are imported into this process (tree A as ``sgsi_a``, tree B as ``sgsi_b``, each
with its own kernels, pools and caches) and each opens the store; every round counts every query
once on each tree, the order alternating round by round. Prints per query the minimum and median
ms of each tree and B/A of both; the counts must agree.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import device_sync, ensure_importable, probe_parser, probe_walks  # noqa: E402

ensure_importable()


def load_tree(tree, name):
    """The sgsi package of directory ``tree`` imported as module ``name``."""
    pkg = os.path.join(os.path.abspath(tree), "sgsi")
    spec = importlib.util.spec_from_file_location(name, os.path.join(pkg, "__init__.py"),
                                                  submodule_search_locations=[pkg])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = probe_parser(__doc__)
    ap.add_argument("--trees", nargs=2, required=True, metavar=("A", "B"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--device", default="gpu")
    args = ap.parse_args()
    gdir, g, queries = probe_walks(args)
    g.close()
    trees = {t: load_tree(path, f"sgsi_{t.lower()}") for t, path in zip("AB", args.trees)}
    for t, path in zip("AB", args.trees):
        engine = sys.modules[f"sgsi_{t.lower()}.join.engine"]
        assert engine.__file__.startswith(os.path.abspath(path)), (t, engine.__file__)
    graphs = {t: mod.open(gdir + ".sgsi") for t, mod in trees.items()}
    sync = device_sync(args.device)
    print(f"A = {args.trees[0]}, B = {args.trees[1]}; {args.rounds} rounds, order alternating; ms", flush=True)
    print("| query | matches | A min / median | B min / median | B/A of the minima | B/A of the medians |")
    print("|---|---:|---:|---:|---:|---:|")
    for qi, pattern in queries:
        times = {"A": [], "B": []}
        counts = set()
        for r in range(args.warm + args.rounds):
            for t in ("AB" if r % 2 == 0 else "BA"):
                sync()
                start = time.perf_counter()
                counts.add(graphs[t].count(pattern, device=args.device, memory_budget=args.budget))
                sync()
                if r >= args.warm:
                    times[t].append((time.perf_counter() - start) * 1e3)
        if len(counts) != 1:
            raise SystemExit(f"COUNT MISMATCH on query {qi}: {counts}")
        a, b = times["A"], times["B"]
        print(f"| {qi} | {counts.pop():,} | {min(a):.2f} / {statistics.median(a):.2f} | "
              f"{min(b):.2f} / {statistics.median(b):.2f} | {min(b) / min(a):.3f} | "
              f"{statistics.median(b) / statistics.median(a):.3f} |", flush=True)


if __name__ == "__main__":
    main()
