"""What a small read costs the host: a device array copied back, against a kernel writing its
result into pinned host memory itself (probe).

    python bench/scratch/mapped_probe.py

A light GPU count reads a few int64 back some 17 times (a summary, a scan's total), each after a
small kernel: the host launches it, queues a copy into a pinned buffer and waits for the stream.
Pinned host memory is addressable from the device under unified addressing, so the kernel can
write its result there itself, then a sequence number; the host then waits for that number to
appear (reading the buffer in a loop) or for the stream. Times per read, best of ``--rounds``
rounds of ``--calls`` reads:

- ``copy``: the kernel writes device memory; ``gpu.read_small`` (copy, stream synchronize);
- ``mapped + sync``: the kernel writes the pinned buffer; the stream is synchronized;
- ``mapped + spin``: the kernel writes the pinned buffer and, after a system fence, the number;
  the host loops until it reads it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

_SOURCE = r"""
extern "C" __global__ void put(long long* out, long long v, int k) {
    if (threadIdx.x < k) out[threadIdx.x] = v + threadIdx.x;
}
extern "C" __global__ void put_flag(long long* out, long long v, int k, volatile long long* flag, long long seq) {
    if (threadIdx.x < k) out[threadIdx.x] = v + threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        *flag = seq;
    }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import cupy as cp

    from sgsi.join import gpu

    mod = cp.RawModule(code=_SOURCE)
    put, put_flag = mod.get_function("put"), mod.get_function("put_flag")
    stream = cp.cuda.get_current_stream()
    dev = cp.zeros(8, cp.int64)
    mem = cp.cuda.alloc_pinned_memory(4096)
    host = np.frombuffer(mem, np.int64)
    ptr = host.ctypes.data                       # the same address on the device (unified addressing)
    print("cupy", cp.__version__, "| device", cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
          "| unified addressing", cp.cuda.runtime.getDeviceProperties(0).get("unifiedAddressing"))

    def timed(label, fn):
        best = None
        for _ in range(args.rounds):
            stream.synchronize()
            t = time.perf_counter()
            for i in range(args.calls):
                fn(i)
            stream.synchronize()
            s = (time.perf_counter() - t) / args.calls
            best = s if best is None else min(best, s)
        print(f"| {label} | {best * 1e6:.2f} |", flush=True)

    def copy(i):
        put((1,), (32,), (dev, np.int64(i), np.int32(5)))
        got = gpu.read_small(dev[:5]).tolist()
        assert got[0] == i

    def mapped_sync(i):
        put((1,), (32,), (np.uint64(ptr), np.int64(i), np.int32(5)))
        stream.synchronize()
        got = host[:5].tolist()
        assert got[0] == i

    seq = [0]

    def mapped_spin(i):
        seq[0] += 1
        s = seq[0]
        put_flag((1,), (32,), (np.uint64(ptr), np.int64(i), np.int32(5), np.uint64(ptr + 8 * 8), np.int64(s)))
        while host[8] != s:
            pass
        got = host[:5].tolist()
        assert got[0] == i

    def launch_only(i):
        put((1,), (32,), (dev, np.int64(i), np.int32(5)))

    print("host us per read\n| way | us |\n|---|---:|")
    timed("launch alone (no read)", launch_only)
    timed("copy (gpu.read_small)", copy)
    timed("mapped + sync", mapped_sync)
    timed("mapped + spin", mapped_spin)


if __name__ == "__main__":
    main()
