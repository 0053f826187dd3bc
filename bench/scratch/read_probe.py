"""Host cost of reading a few device int64s back (probe).

    python bench/scratch/read_probe.py

Per read (best of 5 rounds of 2,000, the device idle, a launch before each read so that the
read waits for queued work as the engine's do): ``cp.asnumpy``, ``int(a[-1])``, and a copy
into a pinned buffer of our own (``copy_to_host_async``, then the stream's or an event's
synchronize), and ``ndarray.get(out=pinned)``.
"""

import os
import sys

import numpy as np
import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h2d_probe import best  # noqa: E402

SRC = r"""
extern "C" __global__ void touch(long long* out) { out[threadIdx.x] += 1; }
"""


def main():
    touch = cp.RawModule(code=SRC).get_function("touch")
    a = cp.zeros(6, cp.int64)
    mem = cp.cuda.alloc_pinned_memory(4096)
    pinned = np.frombuffer(mem, np.int64, 512)
    stream = cp.cuda.get_current_stream()
    rows = {}
    rows["launch only"] = best(lambda: touch((1,), (6,), (a,)))

    def asnumpy():
        touch((1,), (6,), (a,))
        return [int(x) for x in cp.asnumpy(a)]
    rows["launch + cp.asnumpy, 6 ints"] = best(asnumpy)

    def intlast():
        touch((1,), (6,), (a,))
        return int(a[-1])
    rows["launch + int(a[-1])"] = best(intlast)

    def own():
        touch((1,), (6,), (a,))
        a.data.copy_to_host_async(pinned.ctypes.data, a.nbytes, stream)
        stream.synchronize()
        return pinned[:6].tolist()
    rows["launch + copy_to_host_async to pinned + stream.synchronize"] = best(own)

    def own_event():
        touch((1,), (6,), (a,))
        a.data.copy_to_host_async(pinned.ctypes.data, a.nbytes, stream)
        e = stream.record()
        e.synchronize()
        return pinned[:6].tolist()
    rows["launch + copy_to_host_async + event.synchronize"] = best(own_event)

    def get_out():
        touch((1,), (6,), (a,))
        return a.get(out=pinned[:6]).tolist()
    rows["launch + a.get(out=pinned)"] = best(get_out)
    for k, v in rows.items():
        print(f"{v:8.2f} us  {k}")


if __name__ == "__main__":
    main()
