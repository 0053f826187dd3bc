"""The light steps' ``row_lists`` launches of real counts, replayed with other kernels (probe).

    python bench/scratch/row_lists_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 2 4

Records the arguments of every ``GpuBackend.row_lists`` call of one count per query (``fill`` as it
was before the call), then replays each call with the kernel of 2960e19 (``_HEAD``: a warp per row),
the engine's kernel as it is now, and ``row_lists_sub_*`` below (SUB lanes per row, 32 / SUB rows a
warp; lists longer than SUB_LONG read by the whole warp afterwards), each on fresh copies of
``fill`` and the GBA. Every output must equal the first's. Prints, per call, the rows, the longest
room of a row, and the best of 5 device times of each.

Session 27 (H100): sub-warps of 4, 8 and 16 lanes a row were slower than a warp a row on the
walks whose pieces hold long lists; the 2960e19 kernel under launch bounds of 8 blocks an SM was
faster (714 -> 546 us on walk 0's seven calls).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()

_VARIANT = r"""
extern "C" __global__ void __launch_bounds__(256, LB) row_lists_sub_NAME(const int* __restrict__ groups, long long n_groups, int theta,
                                         const int* __restrict__ ci, const int* __restrict__ v, long long n,
                                         const unsigned int* __restrict__ cbits,
                                         const int* __restrict__ conflicts, int n_conflicts,
                                         const long long* __restrict__ F, long long* __restrict__ fill,
                                         int* __restrict__ gba) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, sub = lane / SUB, sl = lane % SUB;
    long long warp0 = (t >> 5) * (32 / SUB);
    if (warp0 >= n) return;
    unsigned int mine_bits = (SUB == 32 ? FULL : ((1u << SUB) - 1u) << (sub * SUB));
    long long row = warp0 + sub;
    bool live = row < n;
    int vv = live ? v[row] : -1;
    bool searching = live && vv >= 0 && n_groups > 0;
    long long g = searching ? pcsr_group(vv, n_groups) : 0;
    long long a = 0, e = 0;
    int k0 = 0;
    while (__any_sync(FULL, searching)) {
        int k = k0 + sl;
        int pv = -2;
        long long pa = 0, pe = 0;
        if (searching && k < theta) pv = groups[(g * theta + k) * 2];
        bool hit = searching && k < theta - 1 && pv == vv;
        if (hit) {
            pa = groups[(g * theta + k) * 2 + 1];
            pe = groups[(g * theta + k + 1) * 2 + 1];
        }
        unsigned int m = __ballot_sync(FULL, hit) & mine_bits;
        int src = m ? __ffs(m) - 1 : sub * SUB;
        long long ga = __shfl_sync(FULL, pa, src), ge = __shfl_sync(FULL, pe, src);
        int last = sub * SUB + (theta - 1 - k0 < SUB ? theta - 1 - k0 : 0);
        int gid = __shfl_sync(FULL, pv, last);
        if (searching) {
            if (m) {
                a = ga;
                e = ge;
                searching = false;
            } else if (k0 + SUB < theta) {
                k0 += SUB;
            } else if (gid < 0) {
                searching = false;
            } else {
                g = gid;
                k0 = 0;
            }
        }
    }
    long long c = e - a, at = 0, kept = 0;
    if (c > 0) at = F[row] + fill[row];
    long long cs = (c > 0 && c <= SUB_LONG) ? c : 0;
    for (long long base = 0; __any_sync(FULL, base < cs); base += SUB) {
        long long j = base + sl;
        bool ok = j < cs;
        int x = 0;
        if (ok) {
            x = ci[a + j];
            if (cbits) ok = test_bit(cbits, x);
            for (int q = 0; q < n_conflicts && ok; ++q) ok = x != conflicts[(long long)q * n + row];
        }
        unsigned int m = __ballot_sync(FULL, ok) & mine_bits;
        if (ok && gba) gba[at + kept + __popc(m & ((1u << lane) - 1u))] = x;
        kept += __popc(m);
    }
    unsigned int long_rows = __ballot_sync(FULL, sl == 0 && c > SUB_LONG);
    while (long_rows) {
        int src = __ffs(long_rows) - 1;
        long_rows &= long_rows - 1;
        long long ra = __shfl_sync(FULL, a, src), rc = __shfl_sync(FULL, c, src), rat = __shfl_sync(FULL, at, src);
        long long end = warp_keep_list(ci + ra, rc, cbits, conflicts, n_conflicts, n, warp0 + src / SUB, rat, gba);
        if (sub == src / SUB) kept = end - rat;
    }
    if (sl == 0 && kept) fill[row] += kept;
}
"""

#: (name, lanes a row, longest list read by them, least blocks an SM (launch bounds))
_SHAPES = [("s8", 8, 64, 4)]


#: The row_lists kernel of 2960e19 (a warp per row, no launch bounds), the baseline.
_HEAD = r"""
extern "C" __global__ void row_lists_head(const int* __restrict__ groups, long long n_groups, int theta,
                                     const int* __restrict__ ci, const int* __restrict__ v, long long n,
                                     const unsigned int* __restrict__ cbits,
                                     const int* __restrict__ conflicts, int n_conflicts,
                                     const long long* __restrict__ F, long long* __restrict__ fill,
                                     int* __restrict__ gba) {
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= n) return;
    longlong2 se = warp_pcsr_find(groups, n_groups, theta, v[warp]);
    long long c = se.y - se.x;
    if (c == 0) return;
    long long out = warp_keep_list(ci + se.x, c, cbits, conflicts, n_conflicts, n, warp, F[warp] + fill[warp], gba);
    if (lane == 0) fill[warp] = out - F[warp];
}
"""


def _variants():
    out = [_HEAD]
    for name, sub, long_, lb in _SHAPES:
        out.append(_VARIANT.replace("NAME", name).replace("SUB_LONG", str(long_)).replace("SUB", str(sub))
                   .replace("LB", str(lb)))
    return "".join(out)


def main(argv=None):
    ap = probe_parser(__doc__)
    args = ap.parse_args(argv)
    import cupy as cp
    import numpy as np
    from sgsi.join import gpu as gpu_mod
    from sgsi.join import kernels
    mod = cp.RawModule(code=kernels._SOURCE + _variants(), options=("--std=c++14",))
    variants = [("engine", 32, kernels.kernel("row_lists"))] + [
        (name, sub, mod.get_function(f"row_lists_sub_{name}")) for name, sub, _l, _b in _SHAPES]
    _gdir, g, walks = probe_walks(args)
    real = gpu_mod.GpuBackend.row_lists
    calls = []

    def recording(self, groups, ci, v, cbits, conflict_cols, F, fill, gba):
        calls.append((self, groups, ci, v.copy(), cbits, [c.copy() for c in conflict_cols], F.copy(), fill.copy(),
                      None if gba is None else int(gba.size)))
        return real(self, groups, ci, v, cbits, conflict_cols, F, fill, gba)

    def timed(launch_with, reps=5):
        """Best device time of ``launch_with(fill, gba)`` on fresh copies; (ms, (fill, gba))."""
        best = None
        for _ in range(reps):
            fill = fill0_box[0].copy()
            gba = None if gba_box[0] is None else cp.full(gba_box[0], -7, cp.int32)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            launch_with(fill, gba)
            b.record()
            b.synchronize()
            ms = cp.cuda.get_elapsed_time(a, b)
            best = ms if best is None else min(best, ms)
        return best, (fill, gba)

    fill0_box, gba_box = [None], [None]
    for qi, pat in walks:
        for _ in range(2):
            g.count(pat, device="gpu")
        calls.clear()
        gpu_mod.GpuBackend.row_lists = recording
        try:
            g.count(pat, device="gpu")
        finally:
            gpu_mod.GpuBackend.row_lists = real
        report(f"\n## query {qi}: {len(calls)} row_lists calls")
        tot = {}
        for self, groups, ci, v, cbits, confs, F, fill0, gba_size in calls:
            n = int(v.size)
            conf = gpu_mod._conflict_table(confs, self._no_conflicts)

            fill0_box[0], gba_box[0] = fill0, gba_size
            vi = cp.ascontiguousarray(v.astype(cp.int32, copy=False))

            def launcher(fn, rows_per_block, threads_per_row):
                def go(fill, gba):
                    fn((((n + rows_per_block - 1) // rows_per_block),), (256,),
                       (groups, np.int64(groups.shape[0]), np.int32(groups.shape[1]), ci, vi, np.int64(n), cbits,
                        conf, np.int32(len(confs)), F, fill, np.uint64(0) if gba is None else gba))
                return go

            t_old, (f_old, g_old) = timed(launcher(mod.get_function("row_lists_head"), 8, 32))
            added = int((f_old - fill0).sum())
            tot[("head", 32)] = tot.get(("head", 32), 0.0) + t_old
            cells = [f"head {t_old * 1e3:7.1f}"]
            for name, sub, fn in variants:
                t_new, (f_new, g_new) = timed(launcher(fn, 256 // 32 * (32 // sub), sub))
                same = bool((f_old == f_new).all()) and (g_old is None or bool((g_old == g_new).all()))
                tot[(name, sub)] = tot.get((name, sub), 0.0) + t_new
                cells.append(f"{name} {t_new * 1e3:7.1f}" + ("" if same else " DIFFERS"))
            longest = int((F[1:] - F[:-1]).max()) if n > 1 else 0
            report(f"   rows {n:>9,} kept {added:>10,} gba {str(gba_size):>10} conf {len(confs)} room<= {longest:>6}: "
                   + ", ".join(cells) + " us")
        report("   total: " + ", ".join(f"{name} {us * 1e3:.1f}" for (name, _s), us in tot.items()) + " us")
    g.close()


if __name__ == "__main__":
    main()
