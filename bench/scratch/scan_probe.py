"""Device and host time of the scans and the piece summary, by size, for one source tree (probe).

    python bench/scratch/scan_probe.py --tree .base/3cabecd
    python bench/scratch/scan_probe.py --tree .

For each size n: ``gpu.scan`` of int64 and of bool values, and ``piece_degrees`` of n rows over
8,388,608 vertices (the degrees gathered from a dense array, as the engine's steps do), each run
``--reps`` times: the best device time (CUDA events around the call) and the best host time of
the call (the device synchronised before it; the call's own host work, its launches queued).
Needs no graph: run it for two trees in one call to compare them on one machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=".")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sizes", type=float, nargs="*", default=[5e3, 5e4, 3e5, 2e6, 7e6, 2e7])
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.tree))
    import cupy as cp
    import numpy as np

    from sgsi.join import gpu
    backend = gpu.GpuBackend("8GB")
    rng = np.random.default_rng(1)
    n_vertices = 1 << 23
    dense = cp.asarray(rng.integers(0, 50, n_vertices).astype(np.int32))
    print(f"tree {os.path.abspath(args.tree)} ({gpu.__file__})")
    print("| n | what | device us (best) | host us (best) |")
    print("|---:|---|---:|---:|")
    for n in [int(x) for x in args.sizes]:
        cases = {
            "scan int64": (lambda a=cp.asarray(rng.integers(0, 100, n)): gpu.scan(a)),
            "scan bool": (lambda a=cp.asarray(rng.random(n) < 0.3): gpu.scan(a)),
            "piece_degrees": (lambda c=cp.asarray(rng.integers(0, n_vertices, n).astype(np.int32)):
                              backend.piece_degrees(dense, c)),
        }
        for name, fn in cases.items():
            fn()
            dev, host = [], []
            for _ in range(args.reps):
                cp.cuda.Device().synchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                t = time.perf_counter()
                e0.record()
                fn()
                e1.record()
                host.append(time.perf_counter() - t)
                e1.synchronize()
                dev.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
            print(f"| {n:,} | {name} | {min(dev):.1f} | {min(host) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
