"""Every sgsi kernel launch of one GPU count, in order, with its grid, device time and caller (probe).

    python bench/scratch/kernel_log.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 --out DIR

Wraps ``sgsi.join.kernels.kernel`` so that each launch records a CUDA event before and after it
(no synchronisation: the events are read once the count is done) and the host clock. Writes
``DIR/kernels_<q>.txt``: per launch, the host time since the count began (us), the host time
since the previous launch (us), the device time (us), the kernel, its grid and the engine frames
that called it; then the device time per kernel and per calling line. CuPy's own operations
(take, scans, reductions, memsets) are not listed: see timeline.py for all device events.
"""

from __future__ import annotations

import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def _callers(depth=4):
    out = []
    f = sys._getframe(2)
    while f is not None and len(out) < depth:
        path = f.f_code.co_filename
        if "/sgsi/" in path:
            out.append(f"{os.path.basename(path)}:{f.f_lineno}:{f.f_code.co_name}")
        f = f.f_back
    return out


class _Logged:
    def __init__(self, name, fn, log):
        self.name, self.fn, self.log = name, fn, log

    def __call__(self, grid, block, args, **kw):
        import cupy as cp
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        self.fn(grid, block, args, **kw)
        b.record()
        self.log.append((time.perf_counter(), self.name, grid, block, a, b, _callers()))


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy as cp
    from sgsi.join import kernels
    _gdir, g, walks = probe_walks(args)
    real = kernels.kernel
    for qi, pat in walks:
        for _ in range(3):
            g.count(pat, device="gpu")
        log = []
        kernels.kernel = lambda name: _Logged(name, real(name), log)
        try:
            t0 = time.perf_counter()
            n = g.count(pat, device="gpu")
            cp.cuda.Device().synchronize()
            wall = time.perf_counter() - t0
        finally:
            kernels.kernel = real
        stats = g.thread_last_stats()
        by_name, by_line = collections.Counter(), collections.Counter()
        lines = []
        prev = t0
        for t, name, grid, block, a, b, callers in log:
            dev = cp.cuda.get_elapsed_time(a, b) * 1e3
            by_name[name] += dev
            by_line[callers[1] if len(callers) > 1 else "?"] += dev
            lines.append(f"{(t - t0) * 1e6:9.0f} {(t - prev) * 1e6:7.0f} {dev:8.1f} {name:<22} {str(grid):<14} "
                         + " < ".join(callers))
            prev = t
        report(f"\n## query {qi}: {n:,} matches, {wall * 1e3:.2f} ms with the events, {len(log)} sgsi launches, "
               f"device {sum(by_name.values()) / 1e3:.3f} ms in them; stats {stats}")
        for name, us in by_name.most_common():
            report(f"   {us:9.1f} us  {name}")
        for line, us in by_line.most_common(12):
            report(f"   {us:9.1f} us  from {line}")
        if args.out:
            with open(os.path.join(args.out, f"kernels_{qi}.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
    g.close()


if __name__ == "__main__":
    main()
