"""What a kernel launch costs the host through CuPy and through the driver directly (probe).

    python bench/scratch/launch_probe.py

A light GPU count is host-bound: some 50-150 launches, each costing the host CuPy's argument
handling (a Python object a pointer or scalar) on top of ``cuLaunchKernel``. This times, per call
(best of ``--rounds`` rounds of ``--calls`` calls, the device synchronised after each round):

- CuPy's ``Function.__call__`` with 16 arguments as ``row_lists`` takes them (arrays and NumPy
  scalars), and with none;
- ``cupy_backends.cuda.api.driver.launchKernel`` on the same function, its parameters in a reused 8-byte slot
  each (an int64 array written from a list of Python ints, a pointer array to the slots);
- sgsi's ``kernels.Launch`` (the driver's way, the arguments converted in the call), given NumPy
  scalars and given Python ints;
- the pieces: building the ints (``a.data.ptr``, ``int(n)``), writing the slots.

Session 33 (bench/results/session33/launch_probe_h100.txt): 9.4 us through CuPy with the NumPy
scalars made in the call, 4.5 through the driver with the ints built in the call, 8.3 through
Launch given NumPy scalars and 5.8 given Python ints. Launch alone, the call sites still making
NumPy scalars, was no faster in a count (consts_launch_not_landed_h100.txt); with the call sites
passing Python ints, 3-5% (ab_inproc_launch_vs_6ad4ef4_h100.txt).
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
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import cupy as cp
    from cupy_backends.cuda.api import driver

    from sgsi.join import kernels

    print("cupy", cp.__version__)
    n = 4096
    a64 = cp.arange(n, dtype=cp.int64)
    a32 = cp.arange(n, dtype=cp.int32)
    out = cp.empty(n, cp.int64)
    launch = kernels.kernel("calib_empty")      # sgsi's kernels.Launch
    empty = launch.raw                          # CuPy's RawKernel
    stream = cp.cuda.get_current_stream()

    def timed(label, fn):
        best = None
        for _ in range(args.rounds):
            stream.synchronize()
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            stream.synchronize()
            s = (time.perf_counter() - t) / args.calls
            best = s if best is None else min(best, s)
        print(f"| {label} | {best * 1e6:.2f} |", flush=True)

    slots = np.zeros(32, np.int64)
    params = np.array([slots.ctypes.data + 8 * i for i in range(32)], np.uint64)
    params_ptr = int(params.ctypes.data)
    fptr = int(empty.kernel.ptr)      # RawKernel -> cupy.cuda.function.Function

    def direct(grid, block, values):
        slots[:len(values)] = values
        driver.launchKernel(fptr, grid, 1, 1, block, 1, 1, 0, stream.ptr, params_ptr, 0)

    args16 = (a64, np.int64(n), np.int32(3), a32, a64, np.int64(n), a32, a32, np.int32(1), np.uint64(0), a64, a32,
              np.uint64(0), np.uint64(0), np.int32(1), out)

    def ints16():
        return [a64.data.ptr, n, 3, a32.data.ptr, a64.data.ptr, n, a32.data.ptr, a32.data.ptr, 1, 0, a64.data.ptr,
                a32.data.ptr, 0, 0, 1, out.data.ptr]

    pre = ints16()
    print("host us per call\n| operation | us |\n|---|---:|")
    timed("Python call (baseline)", lambda: None)
    timed("CuPy launch, no arguments", lambda: empty((1,), (32,), ()))
    timed("driver launch, no arguments", lambda: direct(1, 32, ()))
    timed("CuPy launch, 16 arguments (the NumPy scalars made beforehand)", lambda: empty((1,), (32,), args16))
    timed("CuPy launch, 16 arguments, the NumPy scalars made in the call", lambda: empty(
        (1,), (32,), (a64, np.int64(n), np.int32(3), a32, a64, np.int64(n), a32, a32, np.int32(1), np.uint64(0),
                      a64, a32, np.uint64(0), np.uint64(0), np.int32(1), out)))
    timed("driver launch, 16 ints made beforehand", lambda: direct(1, 32, pre))
    timed("driver launch, 16 ints made in the call (a.data.ptr)", lambda: direct(1, 32, ints16()))
    timed("kernels.Launch, no arguments", lambda: launch((1,), (32,), ()))
    timed("kernels.Launch, 16 arguments, NumPy scalars made in the call", lambda: launch(
        (1,), (32,), (a64, np.int64(n), np.int32(3), a32, a64, np.int64(n), a32, a32, np.int32(1), np.uint64(0),
                      a64, a32, np.uint64(0), np.uint64(0), np.int32(1), out)))
    timed("kernels.Launch, 16 arguments, Python ints", lambda: launch(
        (1,), (32,), (a64, n, 3, a32, a64, n, a32, a32, 1, 0, a64, a32, 0, 0, 1, out)))
    timed("the 16 ints alone", ints16)
    timed("writing 16 slots alone", lambda: slots.__setitem__(slice(0, 16), pre))
    timed("a.data.ptr", lambda: a64.data.ptr)
    timed("stream.ptr via get_current_stream()", lambda: cp.cuda.get_current_stream().ptr)
    timed("cp.empty(n, int64)", lambda: cp.empty(n, cp.int64))
    timed("cp.zeros(n, int64)", lambda: cp.zeros(n, cp.int64))


if __name__ == "__main__":
    main()
