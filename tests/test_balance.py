"""The load-balance cost model (§7): its threshold search equals brute force over Equation 1."""

import numpy as np

from sgsi.join.balance import POOL_TOP, DeviceCosts, choose_thresholds, plan_cost, warps_suffice, ways_of_bins


def test_thresholds_minimise_equation_1():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 70))
        h = rng.integers(0, 60, n) * (rng.random(n) < 0.7)
        split = float(rng.choice([0.0, rng.random() * 3000]))
        c = DeviceCosts(int(rng.integers(1, 200)), float(rng.random() * 5), float(rng.random() * 400), split)
        b = max(len(h), POOL_TOP + 1) - 1
        best = min(plan_cost(h, c, x3, x1) for x3 in range(b + 1) for x1 in range(max(x3, POOL_TOP), b + 1))
        x3, x1 = choose_thresholds(h, c)
        assert 0 <= x3 <= x1 <= b and x1 >= POOL_TOP
        assert abs(plan_cost(h, c, x3, x1) - best) <= 1e-9 * max(1.0, best)


def test_skewed_workloads_use_blocks_or_launches():
    # Many light rows and a few very heavy ones: the heavy bins must leave the warp strategy.
    h = np.zeros(400)
    h[0] = 100000
    h[399] = 3
    x3, x1 = choose_thresholds(h, DeviceCosts(132, 2.0, 50.0))
    assert x3 < 399


def test_many_medium_rows_share_task_pools():
    # A few hundred rows of 300-900 elements: a warp each leaves most of the device idle, a block
    # each wastes most of its threads; pools spread each SM's rows over all 1024 threads.
    h = np.zeros(40)
    h[10:28] = 20
    x3, x1 = choose_thresholds(h, DeviceCosts(132, 0.5, 50.0))
    assert x3 < 10 and x1 >= POOL_TOP
    assert plan_cost(h, DeviceCosts(132, 0.5, 50.0), x3, x1) < plan_cost(h, DeviceCosts(132, 0.5, 50.0), 39, 39)


def test_suffix_argmin_equals_a_scan():
    from sgsi.join.balance import _suffix_argmin
    rng = np.random.default_rng(5)
    for _ in range(200):
        a = rng.integers(0, 6, int(rng.integers(1, 40))).astype(float)
        want = [i + int(np.argmin(a[i:])) for i in range(a.size)]     # argmin: the first of ties
        assert _suffix_argmin(a).tolist() == want


def test_rows_below_pool_top_stay_on_warps_when_splitting_costs_more():
    """warps_suffice's claim, by brute force over Equation 1 with t_split: rows under 1024
    elements, t_split >= 1024 iterations: no plan beats one warp per row."""
    rng = np.random.default_rng(8)
    for _ in range(300):
        h = rng.integers(0, 5000, POOL_TOP + 1) * (rng.random(POOL_TOP + 1) < 0.5)
        heaviest = int(np.flatnonzero(h).max(initial=0)) * 32 + 31
        c = DeviceCosts(int(rng.integers(1, 200)), float(rng.random() * 3), float(rng.random() * 400),
                        1024.0 + float(rng.random() * 100))
        assert warps_suffice(heaviest, c)
        warps = plan_cost(h, c, POOL_TOP, POOL_TOP)
        assert min(plan_cost(h, c, x3, x1) for x3 in range(POOL_TOP + 1) for x1 in range(POOL_TOP, POOL_TOP + 1)) \
            >= warps - 1e-9
        x3, x1 = choose_thresholds(h, c)
        assert (ways_of_bins(h.size, x3, x1)[h > 0] == 0).all()
    assert not warps_suffice(1024, DeviceCosts(132, 1.0, 500.0, 5000.0))
    assert not warps_suffice(100, DeviceCosts(132, 1.0, 500.0, 1000.0))


def test_a_split_that_saves_less_than_it_costs_is_not_taken():
    h = np.zeros(40)
    h[0], h[39] = 100000, 1            # one row of ~1250 elements among light ones
    c = DeviceCosts(132, 1.0, 50.0)
    x3, x1 = choose_thresholds(h, c)
    assert x3 < 39                       # without t_split the heavy row leaves the warps
    x3, x1 = choose_thresholds(h, DeviceCosts(132, 1.0, 50.0, 1e6))
    assert (x3, x1) == (39, 39)
