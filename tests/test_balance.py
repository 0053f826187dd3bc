"""The load-balance cost model (§7): its threshold search equals brute force."""

import numpy as np

from sgsi.join.balance import DeviceCosts, bin_costs, choose_thresholds


def _cost(h, c, x3, x1):
    w, b, k = bin_costs(h, c)
    return w[:x3 + 1].sum() + b[x3 + 1:x1 + 1].sum() + k[x1 + 1:].sum()


def test_thresholds_minimise_equation_1():
    rng = np.random.default_rng(0)
    for _ in range(300):
        h = rng.integers(0, 60, rng.integers(1, 45)) * (rng.random(rng.integers(1, 45))[:1] < 0.9)
        c = DeviceCosts(int(rng.integers(1, 200)), float(rng.random() * 5), float(rng.random() * 400))
        best = min(_cost(h, c, x3, x1) for x3 in range(len(h)) for x1 in range(x3, len(h)))
        x3, x1 = choose_thresholds(h, c)
        assert 0 <= x3 <= x1 < len(h)
        assert abs(_cost(h, c, x3, x1) - best) <= 1e-9 * max(1.0, best)


def test_skewed_workloads_use_blocks_or_launches():
    # Many light rows and a few very heavy ones: the heavy bins must leave the warp strategy.
    h = np.zeros(400)
    h[0] = 100000
    h[399] = 3
    x3, x1 = choose_thresholds(h, DeviceCosts(132, 2.0, 50.0))
    assert x3 < 399
