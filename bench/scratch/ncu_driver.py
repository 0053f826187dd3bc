"""Counts one walk twice on the GPU, for a profiler to catch the second count's kernels (probe).

    ncu --kernel-name candidate_bits --launch-skip 1 --launch-count 1 python bench/scratch/ncu_driver.py \\
        --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 --sizes 8 12 --queries 3 --only 0
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks  # noqa: E402

ensure_importable()


def main(argv=None):
    args = probe_parser(__doc__).parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    for qi, pat in walks:
        for _ in range(2):
            print(qi, g.count(pat, device="gpu"), flush=True)
    g.close()


if __name__ == "__main__":
    main()
