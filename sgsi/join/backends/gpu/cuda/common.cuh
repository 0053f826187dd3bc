// Shared by every kernel source (cuda/*.cu): PCSR lookups, bit tests, warp and block
// compaction, block scans and the single-pass scans' look-back. launch.py puts this file's text
// in place of each source's #include line before compiling it.
//
// Every kernel has a vectorized array version that is its reference (the ``reference`` named in
// its comment); tests/test_backend_conformance.py compares the two on random inputs.

// Group of vertex v in a PCSR of n_groups groups: (v * 2654435761 mod 2^32) mod n_groups.
__device__ __forceinline__ long long pcsr_group(int v, long long n_groups) {
    unsigned int h = (unsigned int)v * 2654435761u;
    return (long long)(h % (unsigned long long)n_groups);
}

__device__ __forceinline__ bool test_bit(const unsigned int* bits, int v) {
    return (bits[v >> 5] >> (v & 31)) & 1u;
}

// Block-wide compaction counts from each warp's ballot m: (survivors in the warps before
// this thread's, survivors in the block), by a scan of the warp counts in shared memory
// (warp_total: 32 ints). Every thread of the block must call it.
__device__ __forceinline__ int2 block_ballot_scan(unsigned int m, int* warp_total) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    if (lane == 0) warp_total[wid] = __popc(m);
    __syncthreads();
    if (wid == 0) {                           // inclusive scan of the warp counts
        int v = lane < n_warps ? warp_total[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int t = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += t;
        }
        if (lane < n_warps) warp_total[lane] = v;
    }
    __syncthreads();
    return make_int2(wid ? warp_total[wid - 1] : 0, warp_total[n_warps - 1]);
}

#define FULL 0xffffffffu

// Write batching of §5: the lanes' x where ok, appended in lane order from out[at] as one
// batch (a warp ballot); returns how many. Every lane of the warp must call it.
__device__ __forceinline__ int warp_append(bool ok, int x, int* out, long long at) {
    unsigned int m = __ballot_sync(FULL, ok);
    if (ok) out[at + __popc(m & ((1u << (threadIdx.x & 31)) - 1u))] = x;
    return __popc(m);
}

// warp_append over a whole block, in thread order (warp ballots and a scan of the warp
// counts in warp_total, 32 shared ints); returns how many. Every thread must call it.
__device__ __forceinline__ int block_append(bool ok, int x, int* out, long long at, int* warp_total) {
    unsigned int m = __ballot_sync(FULL, ok);
    int2 sums = block_ballot_scan(m, warp_total);
    if (ok) out[at + sums.x + __popc(m & ((1u << (threadIdx.x & 31)) - 1u))] = x;
    __syncthreads();                          // warp_total is rewritten by the next call
    return sums.y;
}

// PCSR lookup of vertex vv by one warp (every lane calls it): lane l reads pair l of the
// group, so one group is one transaction; the warp votes on a match and follows GID on a
// miss. (start, end) of vv's list in the segment's ci, (0, 0) where it is absent.
__device__ __forceinline__ longlong2 warp_pcsr_find(const int* __restrict__ groups, long long n_groups, int theta,
                                                    int vv) {
    int lane = threadIdx.x & 31;
    if (vv < 0 || n_groups == 0) return make_longlong2(0, 0);   // ids are never negative; -1 marks unused slots
    long long g = pcsr_group(vv, n_groups);
    while (true) {
        int pv = -2, po = 0;
        if (lane < theta) {
            pv = groups[(g * theta + lane) * 2];
            po = groups[(g * theta + lane) * 2 + 1];
        }
        unsigned int m = __ballot_sync(FULL, lane < theta - 1 && pv == vv);
        if (m) {
            int s = __ffs(m) - 1;
            return make_longlong2(__shfl_sync(FULL, po, s), __shfl_sync(FULL, po, s + 1));
        }
        int gid = __shfl_sync(FULL, pv, theta - 1);
        if (gid < 0) return make_longlong2(0, 0);
        g = gid;
    }
}

// One row's list src[0 : c], read by one warp: the entries in cbits (null: all) that are none of
// the row's own vertices (conflicts[k][row], a column each) are appended in order from gba[out]
// (a warp ballot per 32; gba null: only counted). Returns out past them (every lane). Every lane
// of the warp must call it.
__device__ __forceinline__ long long warp_keep_list(const int* __restrict__ src, long long c,
                                                    const unsigned int* __restrict__ cbits,
                                                    const int* const* __restrict__ conflicts, int n_conflicts,
                                                    long long row, long long out,
                                                    int* __restrict__ gba) {
    int lane = threadIdx.x & 31;
    int mine[16];
    int nc = n_conflicts < 16 ? n_conflicts : 16;
    for (int k = 0; k < nc; ++k) mine[k] = conflicts[k][row];
    for (long long base = 0; base < c; base += 32) {
        long long j = base + lane;
        int x = 0;
        bool ok = j < c;
        if (ok) {
            x = src[j];
            if (cbits) ok = test_bit(cbits, x);
            for (int k = 0; k < nc; ++k) ok &= x != mine[k];
            for (int k = nc; k < n_conflicts; ++k) ok &= x != conflicts[k][row];
        }
        out += gba ? warp_append(ok, x, gba, out) : __popc(__ballot_sync(FULL, ok));
    }
    return out;
}

// Exclusive prefix of v over the threads of one block (at most 1024), and the block's total.
// Every thread of the block must call it.
__device__ __forceinline__ long long block_exclusive_scan(long long v, long long* total) {
    __shared__ long long warp_sums[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    long long incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        long long t = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31) warp_sums[wid] = incl;
    __syncthreads();
    if (wid == 0) {                           // inclusive scan of the warp totals
        long long s = lane < n_warps ? warp_sums[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            long long t = __shfl_up_sync(FULL, s, o);
            if (lane >= o) s += t;
        }
        if (lane < n_warps) warp_sums[lane] = s;
    }
    __syncthreads();
    *total = warp_sums[n_warps - 1];
    return (wid ? warp_sums[wid - 1] : 0) + incl - v;
}

// Single-pass scans (decoupled look-back, Merrill & Garland 2016): one launch where a scan in
// tiles took three (the tiles' sums, their scan, the tiles' scans). Tiles are handed out in launch
// order by a ticket counter, so a block waits only on tiles handed out before its own, which are
// running or done. Each tile publishes its aggregate, then finds the prefix before it by looking
// back over its predecessors, 32 at a time, summing aggregates until one has published its
// inclusive prefix, and publishes its own. The state (primitives.py's _ScanState) lives across launches:
// flags[t] = epoch << 2 | status (1: aggregate published, 2: inclusive prefix published), where the
// host gives every launch a new epoch, so that no flag needs clearing; agg and incl hold W values a
// tile; the block holding the last ticket sets the counter back to 0 (the others have theirs).
__device__ __forceinline__ long long take_ticket(unsigned long long* ticket, long long n_tiles) {
    __shared__ long long t;
    if (threadIdx.x == 0) {
        t = (long long)atomicAdd(ticket, 1ULL);
        if (t == n_tiles - 1) atomicExch(ticket, 0ULL);
    }
    __syncthreads();
    return t;
}

// Tile t's prefix: s[0:W] holds the tile's aggregate (in shared memory); on return s[W:2W] holds
// the combined aggregates of the tiles before it (the identity for tile 0). Every thread of the
// block must call it; the first warp does the work.
template <typename Op>
__device__ __forceinline__ void look_back(long long t, long long* s, int* flags, long long* agg, long long* incl,
                                          int epoch) {
    const int W = Op::W;
    if (threadIdx.x < 32) {
        int lane = threadIdx.x;
        long long pre[W];
        Op::identity(pre);
        if (lane == 0) {
            long long* dst = (t == 0 ? incl : agg) + t * W;
            for (int w = 0; w < W; ++w) dst[w] = s[w];
            __threadfence();
            atomicExch(&flags[t], (epoch << 2) | (t == 0 ? 2 : 1));
        }
        for (long long end = t; end > 0; end -= 32) {        // the window of tiles [end - 32, end)
            long long j = end - 1 - lane;
            int f = 0;
            long long v[W];
            Op::identity(v);
            if (j >= 0) {
                do { f = *(volatile int*)&flags[j]; } while ((f >> 2) != epoch);
                __threadfence();
                const volatile long long* src = ((f & 3) == 2 ? incl : agg) + j * W;
                for (int w = 0; w < W; ++w) v[w] = src[w];
            }
            unsigned int done = __ballot_sync(FULL, j >= 0 && (f & 3) == 2);
            if (done && lane > __ffs(done) - 1) Op::identity(v);      // behind the nearest inclusive prefix
            for (int o = 16; o > 0; o >>= 1) {
                long long u[W];
                for (int w = 0; w < W; ++w) u[w] = __shfl_down_sync(FULL, v[w], o);
                Op::combine(v, u);
            }
            Op::combine(pre, v);                              // lane 0's is the window's
            if (done) break;
        }
        if (lane == 0) {
            if (t > 0) {
                long long in[W];
                for (int w = 0; w < W; ++w) in[w] = pre[w];
                Op::combine(in, s);
                for (int w = 0; w < W; ++w) incl[t * W + w] = in[w];
                __threadfence();
                atomicExch(&flags[t], (epoch << 2) | 2);
            }
            for (int w = 0; w < W; ++w) s[W + w] = pre[w];
        }
    }
    __syncthreads();
}

// Inclusive prefix sum of a large array in one launch (primitives.scan's path past one block; reference:
// numpy.cumsum): a tile of SCAN_ROUNDS values a thread (blocks of at most SCAN_BLOCK_MAX threads),
// read in rounds of a value a thread (coalesced) into shared memory; each thread then scans a run
// of SCAN_ROUNDS consecutive values there, the block scans the runs' sums once, the tile looks
// back, and the values go out as they came in. Shared slots are padded one in 16, so that the
// threads' runs fall in different banks. ``exclusive``: each value's sum before it instead.
#define SCAN_ROUNDS 8
#define SCAN_BLOCK_MAX 512
#define SCAN_SLOT(k) ((k) + ((k) >> 4))

// This thread's run of R consecutive values of a tile staged in shared memory (buf, slots
// SCAN_SLOT) into v; returns their sum.
template <int R>
__device__ __forceinline__ long long run_load(const long long* buf, long long* v) {
    long long sum = 0;
    int mine = threadIdx.x * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        v[r] = buf[SCAN_SLOT(mine + r)];
        sum += v[r];
    }
    return sum;
}

// The run's prefix sums back to buf, from acc (the sum of the values before the run): inclusive,
// or with ``exclusive`` each value's sum before it.
template <int R>
__device__ __forceinline__ void run_store(long long* buf, const long long* v, long long acc, bool exclusive) {
    int mine = threadIdx.x * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        acc += v[r];
        buf[SCAN_SLOT(mine + r)] = exclusive ? acc - v[r] : acc;
    }
}

#define SCAN_PASS_ARGS unsigned long long* ticket, int* flags, long long* agg, long long* incl, int epoch

// Writes to indices with many repeats (a hub's rows; a column an extension repeated row by
// row): a plain scatter serialises on the repeated address (one hub in 40% of 23M ids: 1.3 ms
// on an H100, against 0.4 ms for a test before the write). Where the write is idempotent, an
// element equal to the one before it writes nothing (runs), and the others write only where the
// target does not hold the value yet: the repeats of a hub read it instead, which does not
// serialise (a stale read only writes the value once more).

// Sets bit j of ``bits``; true for the one caller that set it. A bit read set already costs no
// atomic (the repeats of a hub's id read it instead of serialising on its word).
__device__ __forceinline__ bool claim_bit(unsigned int* bits, unsigned int j) {
    unsigned int bit = 1u << (j & 31);
    if (bits[j >> 5] & bit) return false;
    return !(atomicOr(&bits[j >> 5], bit) & bit);
}
