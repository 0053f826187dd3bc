"""The load balance's cost model measured on this device (§7): t_sn, t_kl and t_split in
units of one iteration of element work, measured once per device model and kept in
``~/.cache/sgsi/device-costs.json``.
"""

from __future__ import annotations

import json
import os
import time

import cupy as cp
import numpy as np

from ... import balance
from .expand import POOL_ELEMENTS
from .launch import Kernels
from .primitives import scan
from .transfers import to_device_small

kernel = Kernels("calibration")


def device_costs():
    """The :class:`~sgsi.join.balance.DeviceCosts` of this device: measured once per device model, then
    read from the cache file."""
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = int(props["multiProcessorCount"])
    cache = os.path.join(os.path.expanduser("~"), ".cache", "sgsi", "device-costs.json")
    try:
        with open(cache) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if name in known and "t_split" in known[name]:
        k = known[name]
        return balance.DeviceCosts(sms, k["t_sn"], k["t_kl"], k["t_split"])
    a = cp.arange(1 << 20, dtype=cp.int32)
    sink = cp.zeros(1, cp.int32)
    iters = 2048

    def timed(fn, repeat=5):
        fn()
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t) / repeat

    it = kernel("calib_iterations")
    plain = timed(lambda: it((sms,), (1024,), (a, a.size, iters, 0, sink)))
    synced = timed(lambda: it((sms,), (1024,), (a, a.size, iters, 1, sink)))
    empty = kernel("calib_empty")
    launch = timed(lambda: [empty((1,), (32,), ()) for _ in range(100)]) / 100
    split = timed(_split_rows_once) - timed(lambda: _split_rows_once(warps_only=True))
    t_iter = max(plain / iters, 1e-9)
    t_sn = max((synced - plain) / iters, 0.0) / t_iter
    t_kl = launch / t_iter
    t_split = max(split, 0.0) / t_iter
    known[name] = {"t_sn": t_sn, "t_kl": t_kl, "t_split": t_split, "t_iter_s": t_iter, "sms": sms}
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache, "w") as f:
            json.dump(known, f, indent=1)
    except OSError:
        pass
    return balance.DeviceCosts(sms, t_sn, t_kl, t_split)


def _split_rows_once(warps_only=False, n_rows=4096):
    """What :meth:`GpuBackend._expand_rows` does on the host to send rows two ways (the warp way
    and task pools) beyond launching the warp way for all: the sort by way, each way's gathers and
    the pool's set-up (its launch excluded: an empty launch stands for each); for t_split."""
    fcnt = cp.arange(n_rows, dtype=cp.int64) % 64
    rows, run = cp.arange(n_rows, dtype=cp.int64), cp.arange(n_rows, dtype=cp.int64)
    empty = kernel("calib_empty")
    if warps_only:
        empty((1,), (32,), ())
        return
    way_of_bin = np.array([0, 1], np.uint8)
    order = cp.argsort(to_device_small(way_of_bin)[fcnt[run] // balance.BIN])
    half = n_rows // 2
    for sel in (order[:half], order[half:]):
        rows[sel]
        d = run[sel]
        empty((1,), (32,), ())
    pstart = cp.concatenate([cp.zeros(1, cp.int64), scan(fcnt[d])])
    cp.searchsorted(pstart[:-1] // POOL_ELEMENTS, cp.arange(2, dtype=cp.int64))
