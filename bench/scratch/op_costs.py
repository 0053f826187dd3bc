"""What one device operation costs the host, on small arrays (probe).

    python bench/scratch/op_costs.py

A light GPU count is some 160 device operations and a dozen reads (session 25,
bench/results/session25_100m_h100.md): its time is mostly the host issuing them.
This prints, for each kind of operation the engine issues, the host time per call
(best of ``--rounds`` rounds of ``--calls`` calls, the device synchronised after each
round; the arrays are small, so the device keeps up and the time is the host's).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096, help="elements of the arrays")
    args = ap.parse_args()
    import cupy as cp

    from sgsi.join import gpu, kernels
    from sgsi.join.backend import host_ints
    from sgsi.join.gpu import GpuBackend

    backend = GpuBackend("1GB")
    n = args.n
    a64 = cp.arange(n, dtype=cp.int64)
    a32 = cp.arange(n, dtype=cp.int32)
    idx = cp.asarray(np.random.default_rng(1).integers(0, n, n))
    five = cp.arange(5, dtype=cp.int64)
    mask = a64 % 3 == 0
    empty = kernels.kernel("calib_empty")
    scan_small = kernels.kernel("scan_small_i64")
    out = cp.empty(n, cp.int64)

    def timed(label, fn):
        best = None
        for _ in range(args.rounds):
            cp.cuda.get_current_stream().synchronize()
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            cp.cuda.get_current_stream().synchronize()
            s = (time.perf_counter() - t) / args.calls
            best = s if best is None else min(best, s)
        print(f"| {label} | {best * 1e6:.1f} |", flush=True)

    def nothing():
        return None

    print(f"arrays of {n:,} elements; host us per call, best of {args.rounds} rounds of {args.calls} calls")
    print("| operation | us |\n|---|---:|")
    timed("Python call (baseline)", nothing)
    timed("cp.empty", lambda: cp.empty(n, cp.int64))
    timed("cp.zeros (allocation + memset)", lambda: cp.zeros(n, cp.int64))
    timed("cp.empty in backend.run (its pool as the allocator)", lambda: backend.run(lambda: cp.empty(n, cp.int64)))
    with backend.measuring_memory():        # the allocator that keeps the query's peak
        timed("cp.empty in backend.run, the peak measured", lambda: backend.run(lambda: cp.empty(n, cp.int64)))
    # Allocations inside one run, as a query makes them (backend.run's context entered once).
    hundred = 100

    def allocs():
        for _ in range(hundred):
            cp.empty(n, cp.int64)
    for label, fn in [("cp.empty, default allocator", allocs),
                      ("cp.empty, 100 in one backend.run", lambda: backend.run(allocs))]:
        timed(label + " (per 100)", fn)
    with backend.measuring_memory():
        timed("cp.empty, 100 in one backend.run, the peak measured (per 100)", lambda: backend.run(allocs))
    with cp.cuda.using_allocator(backend.pool.malloc):
        timed("cp.empty, 100 under using_allocator(pool.malloc) entered once (per 100)", allocs)
    timed("empty kernel launch, no arguments", lambda: empty((1,), (32,), ()))
    args16 = (a64, np.int64(n), np.int32(3), a32, a64, np.int64(n), a32, a32, np.int32(1), np.uint64(0), a64, a32,
              np.uint64(0), np.uint64(0), np.int32(1), out)
    timed("empty kernel launch, 16 arguments (arrays and scalars, as row_lists)", lambda: empty((1,), (32,), args16))
    timed("scan_small_i64 launch, 5 arguments", lambda: scan_small((1,), (1024,), (a64, np.int64(n), out, np.int32(0),
                                                                                   np.uint64(0))))
    timed("gpu.scan (an array allocated, one launch)", lambda: gpu.scan(a64))
    timed("cp.take", lambda: cp.take(a32, idx))
    timed("elementwise a + b", lambda: a64 + a64)
    timed("a.astype(int32, copy=False) (no copy)", lambda: a32.astype(cp.int32, copy=False))
    timed("cp.stack of 3", lambda: cp.stack([a32, a32, a32]))
    two = [a64.max(), a64[-1]]
    timed("backend.host_ints of 2 scalars", lambda: host_ints(cp, *two))
    timed("a.copy()", lambda: five.copy())
    timed("cp.asarray of a 5-int host array (a copy in)", lambda: cp.asarray(np.arange(5)))
    timed("cp.asnumpy of 5 ints (a read, device idle)", lambda: cp.asnumpy(five))
    timed("int(a[-1]) (a read, device idle)", lambda: int(a64[-1]))
    timed("gpu.flatnonzero (a launch and a read)", lambda: gpu.flatnonzero(mask))
    timed("a.sum() (reduction, no read)", lambda: a64.sum())


if __name__ == "__main__":
    main()
