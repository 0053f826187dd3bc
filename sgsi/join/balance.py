"""Histogram-tuned load balance of per-row work on the GPU (§7).

Rows of a join step carry very different workloads (the lengths of their
candidate lists). They are binned in a histogram of width 32; the cost model
of Equation 1 then decides which rows run on one warp, which on a whole
block, and which get a launch of their own:

* ``f_warp(i)  = w_i * ceil(|I_i| / (32 |SMs|))``
* ``f_block(i) = (1 + t_sn) * ceil(|I_i| / |SMs|) * ceil(32 w_i / 1024)``
* ``f_kernel(i) = |I_i| * (t_kl + ceil(32 w_i / (1024 |SMs|)))``

with w_i the bin's estimated workload in units of 32 elements (the bin's
midpoint) and t_sn (a block synchronisation) and t_kl (a kernel launch)
measured on the device at start-up, in units of one 32-element iteration.
The thresholds x3 (warp | block) and x1 (block | own launch) minimise the
sum over bins; because the sum separates, a suffix minimum finds them in
O(b) rather than enumerating (b + 1)^2 pairs.

The paper's fourth way, several warps of a block sharing a 1024-element task
pool (W3..W2), is not built: rows in that range go to the warp or block
strategy, whichever the model prefers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BIN = 32


@dataclass(frozen=True)
class DeviceCosts:
    sms: int        # streaming multiprocessors
    t_sn: float     # one __syncthreads, in iterations
    t_kl: float     # one kernel launch, in iterations


def bin_costs(hist: np.ndarray, c: DeviceCosts):
    """Per-bin costs (warp, block, kernel) of running bin i's rows each way."""
    hist = np.asarray(hist, dtype=np.float64)
    w = np.arange(hist.size) + 0.5                       # workload in 32-element units
    warp = w * np.ceil(hist / (32 * c.sms))
    block = (1 + c.t_sn) * np.ceil(hist / c.sms) * np.ceil(BIN * w / 1024)
    kernel = hist * (c.t_kl + np.ceil(BIN * w / (1024 * c.sms)))
    return warp, block, kernel


def choose_thresholds(hist, c: DeviceCosts):
    """(x3, x1): bins <= x3 on a warp, x3 < bin <= x1 on a block, the rest on own launches.

    Minimises Equation 1 over 0 <= x3 <= x1 <= b (x1 = b: no own launches).

    >>> choose_thresholds([1000, 10, 0, 0, 1], DeviceCosts(132, 2.0, 500.0))[0] >= 0
    True
    """
    hist = np.asarray(hist, dtype=np.float64)
    if hist.size == 0:
        return 0, 0
    warp, block, kernel = bin_costs(hist, c)
    W = np.cumsum(warp)                                   # bins 0..x3 on warps
    B = np.concatenate([[0.0], np.cumsum(block)])         # B[k] = bins 0..k-1 on blocks
    K = np.concatenate([[0.0], np.cumsum(kernel)])
    b = hist.size - 1
    # C(x3, x1) = W[x3] + (B[x1+1] - B[x3+1]) + (K[b+1] - K[x1+1])
    tail = B[1:] - K[1:]                                  # indexed by x1
    suffix_min = np.minimum.accumulate(tail[::-1])[::-1]
    best = W - B[1:] + suffix_min + K[b + 1]
    x3 = int(np.argmin(best))
    x1 = x3 + int(np.argmin(tail[x3:]))
    return x3, x1
