"""Whether a GPU count is slower after the machine sat idle, and in a worker process (probe).

    python bench/scratch/idle_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 --counts 8

Per query, in this process: ``--counts`` counts back to back; then ``--counts`` counts each after
``--idle`` seconds of sleep; then the same two in a :class:`CountWorker` (a spawned process that
serves counts through a pipe, as gpu_vs_cpu.py times them). Every count is timed around
``Graph.count`` alone. Prints min / median ms of each.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import CountWorker, ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def _cell(ts):
    return f"{min(ts) * 1e3:7.2f} / {statistics.median(ts) * 1e3:7.2f}"


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--counts", type=int, default=8)
    ap.add_argument("--idle", type=float, default=1.0)
    ap.add_argument("--device", default="gpu")
    args = ap.parse_args(argv)
    gdir, g, walks = probe_walks(args)
    store = gdir + ".sgsi"
    worker = CountWorker(store, args.device)

    def here(pat):
        t = time.perf_counter()
        g.count(pat, device=args.device)
        return time.perf_counter() - t

    def there(pat):
        return worker.count(pat, device=args.device)[1]

    report("ms, min / median | here back to back | here after idle | worker back to back | worker after idle")
    for qi, pat in walks:
        cells = []
        for fn in (here, there):
            for _ in range(3):
                fn(pat)
            cells.append(_cell([fn(pat) for _ in range(args.counts)]))
            idle = []
            for _ in range(args.counts):
                time.sleep(args.idle)
                idle.append(fn(pat))
            cells.append(_cell(idle))
        report(f"query {qi} | " + " | ".join(cells))
    worker.close()
    g.close()


if __name__ == "__main__":
    main()
