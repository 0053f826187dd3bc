"""Where the host time of repeated counts goes, by sampling the main thread's stack (probe).

    python bench/scratch/sample_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 --counts 200

A thread reads the main thread's stack every ``--every`` seconds (the interpreter's switch interval
lowered to match) while the main thread counts one query ``--counts`` times. Reports, per query, the
share of samples in each function (inclusive, sgsi's and CuPy's frames) and on each innermost line
(self), which cProfile's per-call overhead would distort on calls of a few microseconds.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def _where(code, line):
    path = code.co_filename
    for mark in ("/sgsi/", "/cupy/", "/bench/"):
        if mark in path:
            path = path[path.index(mark) + 1:]
            break
    else:
        path = os.path.basename(path)
    return f"{path}:{code.co_name}", f"{path}:{line} ({code.co_name})"


def sample(fn, every):
    main = threading.main_thread().ident
    incl, leaf = collections.Counter(), collections.Counter()
    stop = threading.Event()
    n = [0]

    def run():
        while not stop.is_set():
            frame = sys._current_frames().get(main)
            if frame is not None:
                n[0] += 1
                seen = set()
                first = True
                while frame is not None:
                    func, line = _where(frame.f_code, frame.f_lineno)
                    if first:
                        leaf[line] += 1
                        first = False
                    if func not in seen:
                        seen.add(func)
                        incl[func] += 1
                    frame = frame.f_back
            time.sleep(every)

    old = sys.getswitchinterval()
    sys.setswitchinterval(every)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    return n[0], wall, incl, leaf


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--counts", type=int, default=200)
    ap.add_argument("--every", type=float, default=1e-4)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    for qi, pat in walks:
        for _ in range(3):
            g.count(pat, device=args.device)

        def many():
            for _ in range(args.counts):
                g.count(pat, device=args.device)
            if args.device == "gpu":
                import cupy
                cupy.cuda.Device().synchronize()
        n, wall, incl, leaf = sample(many, args.every)
        report(f"\n## query {qi}: {args.counts} counts in {wall:.3f} s ({wall / args.counts * 1e3:.2f} ms a count), "
               f"{n} samples")
        report("   inclusive (share of samples, ms a count):")
        for func, c in incl.most_common(args.top):
            report(f"   {c / n:6.1%} {c / n * wall / args.counts * 1e3:7.3f}  {func}")
        report("   innermost lines:")
        for line, c in leaf.most_common(args.top):
            report(f"   {c / n:6.1%} {c / n * wall / args.counts * 1e3:7.3f}  {line}")
    g.close()


if __name__ == "__main__":
    main()
