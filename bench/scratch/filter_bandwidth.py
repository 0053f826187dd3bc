"""The signature filter's bandwidth case of gpu_bandwidth.py alone, beside the device copy (probe).

    python bench/scratch/filter_bandwidth.py

Runs gpu_bandwidth's ``signature_filter`` (2^27 vertices, every vertex passing: every word read)
and ``device_copy`` of the same bytes, and prints both rates and their ratio, with the sgsi it
imported (the sgsi beside the bench/ directory it runs from: copy bench/ beside an older tree's sgsi/
to measure that one in the same call, as session 27 did).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import gpu_bandwidth as b  # noqa: E402
import cupy as cp  # noqa: E402

import sgsi  # noqa: E402
from sgsi.join.gpu import GpuBackend  # noqa: E402

be = GpuBackend("1GB")
f = b.signature_filter(cp, be, 1 << 27, 5)
c = b.device_copy(cp, f["bytes"] // 2, 5)
for r in (c, f):
    r["GB_per_s"] = r["bytes"] / r["seconds"] / 1e9
print(sgsi.__file__, f"filter {f['GB_per_s']:.0f} GB/s, copy {c['GB_per_s']:.0f} GB/s, "
      f"ratio {f['GB_per_s'] / c['GB_per_s']:.3f}")
