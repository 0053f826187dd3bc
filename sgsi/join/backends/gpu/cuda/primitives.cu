// Array primitives (launched from primitives.py): prefix sums, reductions, gathers and stacks,
// run starts, distinct values, bitset ids and counts.

#include "common.cuh"

// Rows of counts[i] slots each, laid end to end (ends: inclusive prefix sum of counts). Adds
// val(i) - val(i - 1) at each row's first slot (val(-1) = 0; val(i) = off[i] where ramp, else i;
// empty rows too, at the slot where the next row starts), and -1 at slot 0 where ramp: a prefix
// sum of mark (zeros, or ones where ramp) then holds at slot j val(row of j), plus j where ramp.
// The row of j is the last row starting at or before j, so the empty rows' marks telescope away.
extern "C" __global__ void row_marks(const long long* __restrict__ ends, const long long* __restrict__ counts,
                                     const long long* __restrict__ off, int ramp, long long n, long long total,
                                     long long* __restrict__ mark) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long begin = ends[i] - counts[i];
    if (begin >= total) return;
    long long d = ramp ? off[i] - (i ? off[i - 1] : 0) - (i ? 0 : 1) : (i ? 1 : 0);
    if (d) atomicAdd((unsigned long long*)&mark[begin], (unsigned long long)d);
}

// Bits of word w of a bitset that stand for vertices below n.
__device__ __forceinline__ unsigned int word_below(const unsigned int* bits, long long w, long long n) {
    unsigned int x = bits[w];
    long long left = n - w * 32;
    return left >= 32 ? x : (left <= 0 ? 0u : x & ((1u << left) - 1u));
}

// Set bits per word, below n (bits_to_ids' first pass).
extern "C" __global__ void word_counts(const unsigned int* __restrict__ bits, long long words, long long n,
                                       long long* __restrict__ counts) {
    long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w < words) counts[w] = __popc(word_below(bits, w, n));
}

// The ids of the set bits below n, in order (reference: CpuBackend.bits_to_ids): word w writes
// its ids from ends[w] - counts[w] (an inclusive scan of word_counts); none at or past size.
extern "C" __global__ void word_ids(const unsigned int* __restrict__ bits, long long words, long long n,
                                    const long long* __restrict__ ends, const long long* __restrict__ counts,
                                    long long size, int* __restrict__ ids) {
    long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= words) return;
    unsigned int x = word_below(bits, w, n);
    long long at = ends[w] - counts[w];
    while (x && at < size) {
        ids[at++] = (int)(w * 32 + __ffs(x) - 1);
        x &= x - 1;
    }
}

extern "C" __global__ void test_bits(const unsigned int* __restrict__ bits, const int* __restrict__ v, long long n,
                                     bool* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = test_bit(bits, v[i]);
}

// Inclusive prefix sum of a small array in one block (primitives.scan's one-launch path; reference:
// numpy.cumsum): each thread sums a run of consecutive values, the block scans the runs' sums,
// then each thread writes its run.
// ``exclusive``: each value's sum before it (out[i] - x[i]) instead. ``sum_out`` (null: none): where
// the sum of all the values goes too (primitives.scan_total: a result slot in pinned host memory).
template <typename T>
__device__ __forceinline__ void scan_small(const T* __restrict__ x, long long n, long long* __restrict__ out,
                                           int exclusive, long long* sum_out) {
    long long per = (n + blockDim.x - 1) / blockDim.x;
    long long a = threadIdx.x * per, b = a + per < n ? a + per : n;
    long long s = 0;
    for (long long i = a; i < b; ++i) s += (long long)x[i];
    long long total;
    long long run = block_exclusive_scan(s, &total);
    for (long long i = a; i < b; ++i) {
        long long v = (long long)x[i];
        run += v;
        out[i] = exclusive ? run - v : run;
    }
    if (sum_out && threadIdx.x == 0) *sum_out = total;
}
extern "C" __global__ void scan_small_i64(const long long* x, long long n, long long* out, int exclusive,
                                          long long* sum_out) {
    scan_small(x, n, out, exclusive, sum_out);
}
extern "C" __global__ void scan_small_i32(const int* x, long long n, long long* out, int exclusive,
                                          long long* sum_out) {
    scan_small(x, n, out, exclusive, sum_out);
}
extern "C" __global__ void scan_small_bool(const bool* x, long long n, long long* out, int exclusive,
                                           long long* sum_out) {
    scan_small(x, n, out, exclusive, sum_out);
}

// Sums (W = 1): a scan.
struct SumOp {
    static const int W = 1;
    __device__ static void identity(long long* a) { a[0] = 0; }
    __device__ static void combine(long long* a, const long long* b) { a[0] += b[0]; }
};

// ``sum_out`` (null: none): where the last tile writes the sum of all the values too.
template <typename T>
__device__ __forceinline__ void scan_pass(const T* __restrict__ x, long long n, long long* __restrict__ out,
                                          int exclusive, long long* sum_out, unsigned long long* ticket, int* flags,
                                          long long* agg, long long* incl, int epoch) {
    __shared__ long long s[2];
    __shared__ long long buf[SCAN_SLOT(SCAN_BLOCK_MAX * SCAN_ROUNDS)];
    int b = blockDim.x;
    long long tile = (long long)SCAN_ROUNDS * b;
    long long n_tiles = (n + tile - 1) / tile;
    long long t = take_ticket(ticket, n_tiles);
    long long t0 = t * tile;
#pragma unroll
    for (int r = 0; r < SCAN_ROUNDS; ++r) {
        long long i = t0 + (long long)r * b + threadIdx.x;
        buf[SCAN_SLOT(r * b + threadIdx.x)] = i < n ? (long long)x[i] : 0;
    }
    __syncthreads();
    long long v[SCAN_ROUNDS];
    long long sum = run_load<SCAN_ROUNDS>(buf, v);
    long long total;
    long long before = block_exclusive_scan(sum, &total);
    if (threadIdx.x == 0) s[0] = total;
    __syncthreads();
    look_back<SumOp>(t, s, flags, agg, incl, epoch);
    if (sum_out && t == n_tiles - 1 && threadIdx.x == 0) *sum_out = s[1] + s[0];
    run_store<SCAN_ROUNDS>(buf, v, s[1] + before, exclusive);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < SCAN_ROUNDS; ++r) {
        long long i = t0 + (long long)r * b + threadIdx.x;
        if (i < n) out[i] = buf[SCAN_SLOT(r * b + threadIdx.x)];
    }
}
extern "C" __global__ void scan_pass_i64(const long long* x, long long n, long long* out, int exclusive,
                                         long long* sum_out, SCAN_PASS_ARGS) {
    scan_pass(x, n, out, exclusive, sum_out, ticket, flags, agg, incl, epoch);
}
extern "C" __global__ void scan_pass_i32(const int* x, long long n, long long* out, int exclusive,
                                         long long* sum_out, SCAN_PASS_ARGS) {
    scan_pass(x, n, out, exclusive, sum_out, ticket, flags, agg, incl, epoch);
}
extern "C" __global__ void scan_pass_bool(const bool* x, long long n, long long* out, int exclusive,
                                          long long* sum_out, SCAN_PASS_ARGS) {
    scan_pass(x, n, out, exclusive, sum_out, ticket, flags, agg, incl, epoch);
}

// 0, 1, ..., n - 1 (reference: numpy.arange, int64).
extern "C" __global__ void iota_i64(long long n, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

// Sums, maxima and minima of up to 4 int arrays in one launch, for one host read (reference:
// CpuBackend.host_reductions: numpy's sum, max and min, the max and min of an empty array 0). Grid
// (blocks, k): a grid-stride loop over array blockIdx.y, warp shuffles, one partial a block; the
// last block of the launch to finish (``done``, the single-pass state's second counter, which it
// sets back to 0) combines each array's partials into out[j]. Bits 4j, 4j + 1 of ``ops``: array
// j's reduction (0 sum, 1 max, 2 min); bit 4j + 2: its elements are int32 (else int64).
struct ReduceOp {
    int op;
    __device__ long long identity() const {
        return op == 1 ? -0x7fffffffffffffffLL - 1 : op == 2 ? 0x7fffffffffffffffLL : 0;
    }
    __device__ long long operator()(long long a, long long b) const {
        return op == 1 ? (b > a ? b : a) : op == 2 ? (b < a ? b : a) : a + b;
    }
};
extern "C" __global__ void reduce_ints(const void* a0, const void* a1, const void* a2, const void* a3,
                                       long long n0, long long n1, long long n2, long long n3,
                                       int ops, long long* partial, unsigned long long* done,
                                       long long* __restrict__ out) {
    __shared__ long long warp_acc[32];
    __shared__ bool last;
    int j = blockIdx.y;
    const void* a = j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : a3;
    long long n = j == 0 ? n0 : j == 1 ? n1 : j == 2 ? n2 : n3;
    ReduceOp f{(ops >> (4 * j)) & 3};
    bool narrow = (ops >> (4 * j + 2)) & 1;
    long long acc = f.identity();
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc = f(acc, narrow ? (long long)((const int*)a)[i] : ((const long long*)a)[i]);
    for (int o = 16; o > 0; o >>= 1) acc = f(acc, __shfl_down_sync(FULL, acc, o));
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    if (lane == 0) warp_acc[wid] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < n_warps; ++w) acc = f(acc, warp_acc[w]);
        partial[(long long)j * gridDim.x + blockIdx.x] = acc;
        __threadfence();
        last = atomicAdd(done, 1ULL) == (unsigned long long)gridDim.x * gridDim.y - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x < gridDim.y) {
        int q = threadIdx.x;
        ReduceOp g{(ops >> (4 * q)) & 3};
        const volatile long long* p = partial + (long long)q * gridDim.x;
        long long r = g.identity();
        long long nq = q == 0 ? n0 : q == 1 ? n1 : q == 2 ? n2 : n3;
        for (unsigned int b = 0; b < gridDim.x; ++b) r = g(r, p[b]);
        out[q] = nq == 0 ? 0 : r;
    }
    if (threadIdx.x == 0) atomicExch(done, 0ULL);
}

// Indices of the true entries of a bool array, given the inclusive scan of its entries (primitives.
// flatnonzero past one block; reference: numpy.flatnonzero): entry i, if true, is index ends[i] - 1.
extern "C" __global__ void nonzero_at(const bool* __restrict__ x, const long long* __restrict__ ends, long long n,
                                      long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i]) out[ends[i] - 1] = i;
}

// Indices of the true entries of a small bool array, in order, and how many (primitives.flatnonzero's
// one-launch path; reference: numpy.flatnonzero). One block, runs of consecutive entries.
extern "C" __global__ void nonzero_small(const bool* __restrict__ x, long long n, long long* __restrict__ out,
                                         long long* __restrict__ count) {
    long long per = (n + blockDim.x - 1) / blockDim.x;
    long long a = threadIdx.x * per, b = a + per < n ? a + per : n;
    long long s = 0;
    for (long long i = a; i < b; ++i) s += x[i];
    long long total;
    long long at = block_exclusive_scan(s, &total);
    for (long long i = a; i < b; ++i)
        if (x[i]) out[at++] = i;
    if (threadIdx.x == 0) count[0] = total;
}

// Bit v[i] - lo of ``bits`` set for every i (reference: the CPU's mark[v - lo] = True in
// CpuBackend.distinct_index), an atomicOr only where the bit reads unset.
template <typename T>
__device__ __forceinline__ void mark_bits_of(const T* __restrict__ v, long long n, long long lo,
                                             unsigned int* __restrict__ bits) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T k = v[i];
    if (i > 0 && v[i - 1] == k) return;
    claim_bit(bits, (unsigned int)(k - lo));
}

extern "C" __global__ void mark_bits(const int* __restrict__ v, long long n, long long lo,
                                     unsigned int* __restrict__ bits) {
    mark_bits_of(v, n, lo, bits);
}

extern "C" __global__ void mark_bits_i64(const long long* __restrict__ v, long long n, long long lo,
                                         unsigned int* __restrict__ bits) {
    mark_bits_of(v, n, lo, bits);
}

// The distinct values of v and each element's index among them, from the bits of the values
// over [lo, lo + 32 * words) (mark_bits) and the inclusive prefix sum of the words' set bits
// wend (reference: the CPU's CpuBackend.distinct_index): thread w < words writes the
// values of its word's bits from uniq[wend[w] - popc(word)]; thread i < n writes to idx[i] the
// rank of v[i]'s bit.
template <typename T>
__device__ __forceinline__ void distinct_of_bits_of(const unsigned int* __restrict__ bits,
                                                    const long long* __restrict__ wend, long long words, long long lo,
                                                    const T* __restrict__ v, long long n, T* __restrict__ uniq,
                                                    long long* __restrict__ idx) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < words) {
        unsigned int m = bits[i];
        long long at = wend[i] - __popc(m);
        while (m) {
            uniq[at++] = (T)(lo + (i << 5) + __ffs(m) - 1);
            m &= m - 1;
        }
    }
    if (i < n) {
        unsigned int j = (unsigned int)(v[i] - lo), w = j >> 5;
        unsigned int m = bits[w];
        idx[i] = wend[w] - __popc(m) + __popc(m & ((1u << (j & 31)) - 1u));
    }
}

extern "C" __global__ void distinct_of_bits(const unsigned int* __restrict__ bits, const long long* __restrict__ wend,
                                            long long words, long long lo, const int* __restrict__ v, long long n,
                                            int* __restrict__ uniq, long long* __restrict__ idx) {
    distinct_of_bits_of(bits, wend, words, lo, v, n, uniq, idx);
}

extern "C" __global__ void distinct_of_bits_i64(const unsigned int* __restrict__ bits,
                                                const long long* __restrict__ wend, long long words, long long lo,
                                                const long long* __restrict__ v, long long n,
                                                long long* __restrict__ uniq, long long* __restrict__ idx) {
    distinct_of_bits_of(bits, wend, words, lo, v, n, uniq, idx);
}

// key[i] = c0[i] << 32 | c1[i] of two int32 columns (reference: _distinct_tuples' key of two
// columns), and *descents = 1 where a key is less than the one before it (any thread that finds
// one writes it: a plain store of one value; the host zeroes it first). Where CuPy took two casts,
// a shift, an OR, a comparison and an all-reduction.
extern "C" __global__ void pair_key(const int* __restrict__ c0, const int* __restrict__ c1, long long n,
                                    long long* __restrict__ key, long long* descents) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long k = ((long long)c0[i] << 32) | (long long)c1[i];
    key[i] = k;
    if (i > 0 && k < (((long long)c0[i - 1] << 32) | (long long)c1[i - 1])) *descents = 1;
}

// out[idx[i]] = val[i] where equal indices carry equal values (reference:
// CpuBackend.scatter_equal).
extern "C" __global__ void scatter_equal(const long long* __restrict__ idx, const long long* __restrict__ val,
                                         long long n, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long k = idx[i], x = val[i];
    if ((i == 0 || idx[i - 1] != k) && out[k] != x) out[k] = x;
}

// out[x[i]] += 1 for every i, out zeroed (reference: numpy.bincount). The lanes of a warp
// holding the same id elect their lowest lane, which adds for them all: one atomic per
// distinct id of a warp, where an atomic per element serialises on a hub's id.
extern "C" __global__ void count_ids(const long long* __restrict__ x, long long n,
                                     unsigned long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long k = i < n ? x[i] : -1;                  // -1: past n (every lane must match)
    unsigned int same = __match_any_sync(FULL, k);
    if (k >= 0 && (__ffs(same) - 1) == (int)(threadIdx.x & 31)) atomicAdd(out + k, (unsigned long long)__popc(same));
}

// out[x[i]] += w[i] for every i (reference: numpy.add.at), as count_ids: the lowest lane of
// those holding one id adds their weights (summed over the warp's shuffles) in one atomic.
extern "C" __global__ void add_ids(const long long* __restrict__ x, const long long* __restrict__ w, long long n,
                                   unsigned long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long k = i < n ? x[i] : -1;
    long long v = i < n ? w[i] : 0;
    unsigned int same = __match_any_sync(FULL, k);
    long long sum = 0;
    for (int j = 0; j < 32; ++j) {
        long long t = __shfl_sync(FULL, v, j);
        if ((same >> j) & 1u) sum += t;
    }
    if (k >= 0 && (__ffs(same) - 1) == (int)(threadIdx.x & 31)) atomicAdd(out + k, (unsigned long long)sum);
}

// Up to 8 arrays (4 or 8 bytes an element), given by pointer, gathered at idx[0 : n] (idx null:
// their first n elements) as the rows of one k x n array (reference: numpy.stack of numpy.take):
// grid row j writes array j. CuPy's stack takes some 70 us of host time (a device table of the
// arrays, copied in) and its take some 20 us an array; this is one launch for them all.
template <typename T>
__device__ __forceinline__ void stack_rows(const T* a0, const T* a1, const T* a2, const T* a3, const T* a4,
                                           const T* a5, const T* a6, const T* a7, const long long* idx,
                                           long long n, T* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = blockIdx.y;
    const T* a = j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : j == 3 ? a3 : j == 4 ? a4 : j == 5 ? a5 : j == 6 ? a6 : a7;
    out[(long long)j * n + i] = a[idx ? idx[i] : i];
}

extern "C" __global__ void stack_rows_4(const unsigned int* a0, const unsigned int* a1, const unsigned int* a2,
                                        const unsigned int* a3, const unsigned int* a4, const unsigned int* a5,
                                        const unsigned int* a6, const unsigned int* a7, const long long* idx,
                                        long long n, unsigned int* __restrict__ out) {
    stack_rows(a0, a1, a2, a3, a4, a5, a6, a7, idx, n, out);
}

extern "C" __global__ void stack_rows_8(const unsigned long long* a0, const unsigned long long* a1,
                                        const unsigned long long* a2, const unsigned long long* a3,
                                        const unsigned long long* a4, const unsigned long long* a5,
                                        const unsigned long long* a6, const unsigned long long* a7,
                                        const long long* idx, long long n, unsigned long long* __restrict__ out) {
    stack_rows(a0, a1, a2, a3, a4, a5, a6, a7, idx, n, out);
}

// out[i] = a[idx[i]] for i < n, a negative index counting from the end of a (``alen`` values)
// (reference: numpy.take of 1-D arrays): CuPy's take costs some 20 us of host time a call and an
// int32 index a conversion to int64 before it; this is one launch, on either index type.
template <typename T, typename I, typename U = T>
__device__ __forceinline__ void take_values(const T* __restrict__ a, long long alen, const I* __restrict__ idx,
                                            long long n, U* __restrict__ out) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long k = idx[i];
        out[i] = a[k < 0 ? k + alen : k];
    }
}

extern "C" __global__ void take_4_i32(const unsigned int* a, long long alen, const int* idx, long long n,
                                      unsigned int* out) {
    take_values(a, alen, idx, n, out);
}

extern "C" __global__ void take_4_i64(const unsigned int* a, long long alen, const long long* idx, long long n,
                                      unsigned int* out) {
    take_values(a, alen, idx, n, out);
}

extern "C" __global__ void take_8_i32(const unsigned long long* a, long long alen, const int* idx, long long n,
                                      unsigned long long* out) {
    take_values(a, alen, idx, n, out);
}

extern "C" __global__ void take_8_i64(const unsigned long long* a, long long alen, const long long* idx,
                                      long long n, unsigned long long* out) {
    take_values(a, alen, idx, n, out);
}

// int32 values taken as int64 (reference: numpy.take(a, idx).astype(int64)), where the cast was
// a launch of its own.
extern "C" __global__ void take_wide_i32(const int* a, long long alen, const int* idx, long long n, long long* out) {
    take_values(a, alen, idx, n, out);
}

extern "C" __global__ void take_wide_i64(const int* a, long long alen, const long long* idx, long long n,
                                         long long* out) {
    take_values(a, alen, idx, n, out);
}

// new[i] = whether v[i] starts a run of equal values (i == 0 or v[i] != v[i - 1]) (reference:
// CpuBackend.run_starts): where CuPy took a fill, a comparison launch and their host work.
template <typename T>
__device__ __forceinline__ void run_starts(const T* __restrict__ v, long long n, bool* __restrict__ out) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = i == 0 || v[i] != v[i - 1];
}

extern "C" __global__ void run_starts_i32(const int* v, long long n, bool* out) {
    run_starts(v, n, out);
}

extern "C" __global__ void run_starts_i64(const long long* v, long long n, bool* out) {
    run_starts(v, n, out);
}

// The ends (exclusive) of k runs that start at start[0 : k] in n values: the next run's start,
// n for the last (reference: CpuBackend.runs).
extern "C" __global__ void run_ends(const long long* start, long long k, long long n, long long* end) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) end[j] = j + 1 < k ? start[j + 1] : n;
}

// Up to 8 int64 scalars, given by pointer, into out[0 : k] (reference: numpy.stack of them), for
// one host read of them all.
extern "C" __global__ void gather_scalars(const long long* s0, const long long* s1, const long long* s2,
                                         const long long* s3, const long long* s4, const long long* s5,
                                         const long long* s6, const long long* s7, int k, long long* out) {
    int j = threadIdx.x;
    if (j >= k) return;
    const long long* s = j == 0 ? s0 : j == 1 ? s1 : j == 2 ? s2 : j == 3 ? s3 : j == 4 ? s4 : j == 5 ? s5 :
                         j == 6 ? s6 : s7;
    out[j] = *s;
}
