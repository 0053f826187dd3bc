"""Micro-benchmark (scratch): marking ids with repeats (a hub spread out, runs, uniform) on the GPU, plain scatter vs warp match vs test-before-write. Output: bench/scratch/scatter_probe.md."""
import cupy as cp, numpy as np, time
src = r'''
#define FULL 0xffffffffu
extern "C" __global__ void k_match(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long k = i < n ? (long long)v[i] : -1;
    unsigned int m = __match_any_sync(FULL, k);
    bool lead = (__ffs(m) - 1) == (int)(threadIdx.x & 31);
    if (lead && k >= 0 && !((threadIdx.x & 31) == 0 && i > 0 && v[i - 1] == k)) mark[k] = true;
}
extern "C" __global__ void k_match32(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int k = i < n ? v[i] : -1;
    unsigned int m = __match_any_sync(FULL, k);
    bool lead = (__ffs(m) - 1) == (int)(threadIdx.x & 31);
    if (lead && k >= 0 && !((threadIdx.x & 31) == 0 && i > 0 && v[i - 1] == k)) mark[k] = true;
}
extern "C" __global__ void k_skip(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = v[i];
    if (i == 0 || v[i - 1] != k) mark[k] = true;
}
extern "C" __global__ void k_test(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = v[i];
    if ((i == 0 || v[i - 1] != k) && !mark[k]) mark[k] = true;
}
extern "C" __global__ void k_test_cg(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = v[i];
    if ((i == 0 || v[i - 1] != k) && !__ldcg((const unsigned char*)(mark + k))) mark[k] = true;
}
extern "C" __global__ void k_plain(const int* v, long long n, bool* mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mark[v[i]] = true;
}
'''
mod = cp.RawModule(code=src)
rng = np.random.default_rng(0)
R = 8_388_608
def dists(n):
    u = rng.integers(0, R, n).astype(np.int32)
    hub = u.copy(); hub[rng.random(n) < 0.4] = R // 2
    few = rng.integers(0, 16, n).astype(np.int32)
    runs = np.repeat(rng.integers(0, R, n // 23 + 1).astype(np.int32), 23)[:n]
    srt = np.sort(u)
    return {"uniform": u, "hub40%": hub, "16 values": few, "runs of 23": runs, "sorted": srt}
def timeit(f, reps=5):
    s, e = cp.cuda.Event(), cp.cuda.Event()
    f(); cp.cuda.Device().synchronize()
    best = 1e9
    for _ in range(reps):
        s.record(); f(); e.record(); e.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(s, e))
    return best
for n in (1_000_000, 8_000_000, 23_000_000):
    for name, h in dists(n).items():
        v = cp.asarray(h)
        mark = cp.zeros(R, dtype=bool)
        ref = np.zeros(R, bool); ref[h] = True
        row = []
        def cupy_scatter():
            mark[v] = True
        row.append(("cupy", timeit(cupy_scatter)))
        g = ((n + 255) // 256,)
        for kn in ("k_plain", "k_match", "k_match32", "k_skip", "k_test", "k_test_cg"):
            mark[:] = False
            k = mod.get_function(kn)
            t = timeit(lambda: k(g, (256,), (v, np.int64(n), mark)))
            assert np.array_equal(cp.asnumpy(mark), ref), kn
            row.append((kn, t))
        # the same after clearing each time (first touch of every mark)
        def cleared(kn):
            k = mod.get_function(kn)
            def f():
                mark.fill(False)
                k(g, (256,), (v, np.int64(n), mark))
            return timeit(f)
        row.append(("fill only", timeit(lambda: mark.fill(False))))
        row.append(("test_cg+fill", cleared("k_test_cg")))
        row.append(("plain+fill", cleared("k_plain")))
        print(f"n={n:>10,} {name:<11} " + "  ".join(f"{a}={b:.3f}" for a, b in row), flush=True)
