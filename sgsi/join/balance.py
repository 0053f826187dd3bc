"""Histogram-tuned load balance of per-row work on the GPU (§7).

Rows of a join step carry very different workloads (the lengths of their
candidate lists). They are binned in a histogram of width 32; the cost model
of Equation 1 then decides which rows run on one warp, which share a block's
1024-element task pool with other rows, which run on a whole block, and
which get a launch of their own:

* ``f_warp(i)   = w_i * ceil(|I_i| / (32 |SMs|))``
* ``f_m-warp(i) = (1 + 2 t_sn) * ceil(32 w_i * ceil(|I_i| / |SMs|) / 1024)``
* ``f_block(i)  = (1 + t_sn) * ceil(|I_i| / |SMs|) * ceil(32 w_i / 1024)``
* ``f_kernel(i) = |I_i| * (t_kl + ceil(32 w_i / (1024 |SMs|)))``

with w_i the bin's estimated workload in units of 32 elements (the bin's
midpoint) and t_sn (a block synchronisation) and t_kl (a kernel launch)
measured on the device at start-up, in units of one 32-element iteration.
With W3 = 32 x3, W2 = 1024 (bin ``POOL_TOP`` = 31 is the last below it) and
W1 = 32 x1 (x1 >= 31): bins 0..x3 run on warps, x3+1..31 in task pools,
max(x3, 31)+1..x1 on blocks and the rest on launches of their own. The
thresholds minimise the sum over bins; because the sum separates, prefix
sums and suffix minima find them in O(b) rather than enumerating
(b + 1)^2 pairs.

Leaving the one-launch warp path has a fixed cost of its own in this
implementation, which the paper's in-kernel dispatch does not pay: the host
sorts the rows by way, gathers each way's rows and sets up the extra
launches (t_split, measured at start-up like t_kl). A plan that sends any
row another way pays it once. Rows below W2 gain at most 32 iterations per
bin from another way (the ceilings of Equation 1), so when t_split exceeds
those 32 x 32 iterations and no row reaches W2, warps are the best plan
and the histogram need not be taken at all (:func:`warps_suffice`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BIN = 32
#: The last bin of rows below W2 = 1024 elements, the largest that share a task pool.
POOL_TOP = 1024 // BIN - 1


@dataclass(frozen=True)
class DeviceCosts:
    sms: int        # streaming multiprocessors
    t_sn: float     # one __syncthreads, in iterations
    t_kl: float     # one kernel launch, in iterations
    t_split: float = 0.0    # sending rows more than one way (sort, gathers, set-up), in iterations


def bin_costs(hist: np.ndarray, c: DeviceCosts):
    """Per-bin costs (warp, task pool, block, kernel) of running bin i's rows each way."""
    hist = np.asarray(hist, dtype=np.float64)
    w = np.arange(hist.size) + 0.5                       # workload in 32-element units
    per_sm = np.ceil(hist / c.sms)
    warp = w * np.ceil(hist / (32 * c.sms))
    pool = (1 + 2 * c.t_sn) * np.ceil(BIN * w * per_sm / 1024)
    block = (1 + c.t_sn) * per_sm * np.ceil(BIN * w / 1024)
    kernel = hist * (c.t_kl + np.ceil(BIN * w / (1024 * c.sms)))
    return warp, pool, block, kernel


#: The ways to run a row, in the order of :func:`ways_of_bins`' codes 0..3.
WAYS = ("warp", "pool", "block", "own")


def ways_of_bins(n_bins: int, x3: int, x1: int) -> np.ndarray:
    """The way (index into :data:`WAYS`) each of ``n_bins`` bins runs under thresholds (x3, x1).

    Bins 0..x3 on warps, x3+1..min(31, x1) in task pools, the rest up to x1
    on blocks, and bins past max(x1, x3) on launches of their own (any x3, x1
    given, as the tests do; the model's own choice has x1 >= 31).
    """
    b = np.arange(n_bins)
    way = np.full(n_bins, 3, np.uint8)
    way[b <= max(x1, x3)] = 2
    way[(b > x3) & (b <= min(POOL_TOP, x1))] = 1
    way[b <= x3] = 0
    return way


def plan_cost(hist, c: DeviceCosts, x3: int, x1: int) -> float:
    """Equation 1 for thresholds (x3, x1), plus t_split when a row leaves the warps: the
    reference that :func:`choose_thresholds` minimises."""
    hist = _padded(hist)
    costs = np.stack(bin_costs(hist, c))                  # way x bin
    way = ways_of_bins(hist.size, x3, x1)
    split = c.t_split if bool(((way != 0) & (hist > 0)).any()) else 0.0
    return float(costs[way, np.arange(hist.size)].sum()) + split


#: Most iterations Equation 1 can save over warps when every row is below W2 = 1024 elements:
#: up to 32 per bin (a bin's warp cost exceeds any other way's by at most its workload w < 32).
GAIN_BELOW_POOL_TOP = 32 * (POOL_TOP + 1)


def warps_suffice(heaviest: int, c: DeviceCosts) -> bool:
    """Whether the warp way for every row (``expand_rows``: a warp a row, a lane a row of at most 8
    elements) is the best plan for rows of at most ``heaviest`` elements,
    whatever their histogram: below W2 no other way saves more than t_split costs."""
    return heaviest < BIN * (POOL_TOP + 1) and c.t_split >= GAIN_BELOW_POOL_TOP


def choose_thresholds(hist, c: DeviceCosts):
    """(x3, x1) minimising Equation 1 over 0 <= x3 <= b, max(x3, 31) <= x1 <= b.

    The histogram is padded with empty bins to at least 32 bins (b >= 31);
    x1 = b means no own launches.

    >>> choose_thresholds([1000, 10, 0, 0, 1], DeviceCosts(132, 2.0, 500.0))[0] >= 0
    True
    """
    hist = _padded(hist)
    warp, pool, block, kernel = bin_costs(hist, c)
    b, top = hist.size - 1, POOL_TOP
    W = np.cumsum(warp)                                   # W[x] = bins 0..x on warps
    P = np.concatenate([[0.0], np.cumsum(pool)])          # P[k] = bins 0..k-1 in pools
    B = np.concatenate([[0.0], np.cumsum(block)])
    K = np.concatenate([[0.0], np.cumsum(kernel)])
    # Blocks for bins lo..x1, launches after: best x1 >= lo is a suffix minimum of B[x1+1] - K[x1+1].
    tail = B[1:] - K[1:]                                  # indexed by x1
    best_x1 = _suffix_argmin(tail)                        # argmin over x1 >= i of tail
    # x3 < top: pools for x3+1..top, blocks from top+1 (x1 >= top).
    x3s = np.arange(top)
    low = W[x3s] + (P[top + 1] - P[x3s + 1])
    x1_low = int(best_x1[top])
    low = low + (tail[x1_low] - B[top + 1]) + K[b + 1]
    # x3 >= top: no pools, blocks from x3+1.
    x3h = np.arange(top, b + 1)
    x1h = best_x1[x3h]
    high = W[x3h] + (tail[x1h] - B[x3h + 1]) + K[b + 1]
    if low.size and low.min() < high.min():
        best, cost = (int(np.argmin(low)), x1_low), float(low.min())
    else:
        i = int(np.argmin(high))
        best, cost = (int(x3h[i]), int(x1h[i])), float(high.min())
    # The Equation 1 optimum leaves the warps: worth its t_split only if it beats all warps.
    if ((ways_of_bins(b + 1, *best) != 0) & (hist > 0)).any() and cost + c.t_split >= W[b]:
        return b, b
    return best


def _suffix_argmin(a):
    """For each i, the smallest j >= i with a[j] = min(a[i:])."""
    r = a[::-1]
    at_min = r <= np.minimum.accumulate(r)                # r[j] is the running minimum (ties: later j)
    last = np.maximum.accumulate(np.where(at_min, np.arange(r.size), 0))
    return (r.size - 1 - last)[::-1]


def _padded(hist):
    hist = np.asarray(hist, dtype=np.float64)
    if hist.size <= POOL_TOP:
        hist = np.concatenate([hist, np.zeros(POOL_TOP + 1 - hist.size)])
    return hist
