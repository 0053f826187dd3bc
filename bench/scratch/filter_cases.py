"""The filter's bandwidth case and a planner-like selective case, timed; kernel variants side by side (probe).

    python bench/scratch/filter_cases.py [--variants NAME=VALUE,NAME=VALUE ...]

Times ``GpuBackend.candidate_bits`` of the sgsi beside the bench/ directory it runs from (copy
bench/ beside an older tree's sgsi/ to measure that one), by CUDA events (best of ``--runs``):

- **bandwidth**: gpu_bandwidth.py's filter case (2^27 vertices, one pattern vertex, four words and
  a mask, every vertex passing), as a fraction of the device copy of the same bytes;
- **selective**: 2^24 vertices in four segments off word boundaries, power-law labels of 64, 8 and
  12 pattern vertices of a few labels each with 1-3 words and at most one mask, with the stats the
  planner asks for (as in a walk's filter).

Each ``--variants`` entry recompiles the kernels with those ``#define`` lines replaced (the tree's
own source is the first row); every variant's bitsets and stats are checked against the first's.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import gpu_bandwidth as b  # noqa: E402
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from sgsi.join import kernels  # noqa: E402
from sgsi.join.gpu import GpuBackend  # noqa: E402


def use_source(src):
    kernels._module = cp.RawModule(code=src, options=("--std=c++14",))
    kernels._functions.clear()


def variant_source(spec):
    s = kernels._SOURCE
    for item in spec.split(","):
        name, value = item.split("=")
        line = next(x for x in s.splitlines() if x.startswith(f"#define {name} "))
        s = s.replace(line, f"#define {name} {value}")
    return s


def selective_case(seed, k, n=1 << 24):
    rng = np.random.default_rng(seed)
    labels = cp.asarray(np.minimum((64 * rng.random(n) ** 3).astype(np.int32), 63))
    cols = [cp.asarray(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)) for _ in range(8)]
    masks = [cp.asarray(rng.random(n) < 0.6) for _ in range(3)]
    pl = rng.choice([0, 0, 1, 1, 2, 3, 5, 9, 17], size=k)
    tests, ands = [], []
    for u in range(k):
        pairs = [(cols[int(c)], int(1 << rng.integers(32)) | int(1 << rng.integers(32)))
                 for c in rng.choice(8, size=int(rng.integers(1, 4)), replace=False)]
        tests.append((labels, int(pl[u]), pairs) if u % 5 else (None, None, pairs))
        ands.append([masks[u % 3]] if u % 2 else [])
    cuts = [0, n // 4 + 5, n // 2 - 7, 3 * n // 4 + 13, n]
    parts = []
    for a, z in zip(cuts, cuts[1:]):
        parts.append((a, z - a, [(None if l is None else l[a:z], lab, [(c[a:z], q) for c, q in pr])
                                 for l, lab, pr in tests]))
    return n, parts, ands


def run_case(be, case, stats, runs):
    n, parts, ands = case
    k = len(ands)
    res = []

    def go():
        st = cp.zeros(2 * k + 1, cp.int64) if stats else None
        res.append((be.candidate_bits(n, parts, ands, st), st))
    t = b._events_best(cp, go, runs)
    bits, st = res[-1]
    return t, cp.stack(bits).get(), None if st is None else st.get()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="*", default=[])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--bandwidth-only", action="store_true", help="only the bandwidth case (for ncu)")
    args = ap.parse_args()
    be = GpuBackend("4GB")
    sources = [("tree", kernels._SOURCE)] + [(v, variant_source(v)) for v in args.variants]
    sel = [] if args.bandwidth_only else [selective_case(1, 8), selective_case(2, 12)]
    copy = None
    ref = None
    print(kernels.__file__)
    print(f"{'variant':>10} {'bw GB/s':>9} {'of copy':>8} {'k=8 us':>8} {'k=12 us':>8}")
    for name, src in sources:
        use_source(src)
        f = b.signature_filter(cp, be, 1 << 27, args.runs)
        if copy is None:
            copy = b.device_copy(cp, f["bytes"] // 2, args.runs)
            copy_rate = copy["bytes"] / copy["seconds"] / 1e9
        rate = f["bytes"] / f["seconds"] / 1e9
        if args.bandwidth_only:
            print(f"{name:>10} {rate:9.0f} {rate / copy_rate:8.3f}", flush=True)
            continue
        outs, times = [], []
        for case in sel:
            t, bits, st = run_case(be, case, True, args.runs)
            times.append(t)
            outs.append((bits, st))
        if ref is None:
            ref = outs
        same = all(np.array_equal(a[0], r[0]) and np.array_equal(a[1], r[1]) for a, r in zip(outs, ref))
        print(f"{name:>10} {rate:9.0f} {rate / copy_rate:8.3f} {times[0] * 1e6:8.1f} {times[1] * 1e6:8.1f}"
              f"  {'same' if same else 'DIFFERENT'}", flush=True)
    print(f"device copy {copy_rate:.0f} GB/s")


if __name__ == "__main__":
    main()
