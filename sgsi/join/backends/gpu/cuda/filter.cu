// Candidate filtering and refinement (launched from filter.py): the candidate bitsets of a
// vertex segment, refinement rounds, bitset overlaps and weights.

#include "common.cuh"

// out[0] += sum of d[i] over the i whose vertex v[i] is in the bitset (reference:
// CpuBackend.add_bits_weight): a grid-stride loop, warp shuffles, one atomic per warp.
extern "C" __global__ void bits_weight(const unsigned int* __restrict__ bits, const int* __restrict__ v,
                                       const long long* __restrict__ d, long long n, long long* __restrict__ out) {
    long long sum = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (test_bit(bits, v[i])) sum += d[i];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(FULL, sum, o);
    if ((threadIdx.x & 31) == 0 && sum) atomicAdd((unsigned long long*)out, (unsigned long long)sum);
}

// out[0] += sum over jobs j of sum of deg_j[v] over the vertices v of the union of the job's users'
// bitsets (reference: CpuBackend.add_union_degrees), all jobs in one launch, one grid row a job.
// args: the k bitsets' addresses, then each job's offset in args; a job's record there holds the
// address of its degrees (int32, one a vertex), its number of users, then the users (bitset
// indices). A grid-stride loop over the words of the n vertices (every job's degrees have n
// entries; bits at or past n are not read), each thread summing its words' set bits, warp
// shuffles, one atomic per warp.
extern "C" __global__ void union_degrees(const long long* __restrict__ args, int k, long long words, long long n,
                                         long long* __restrict__ out) {
    const long long* job = args + args[k + blockIdx.y];
    const int* deg = (const int*)job[0];
    int n_users = (int)job[1];
    long long sum = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += stride) {
        unsigned int m = 0;
        for (int q = 0; q < n_users; ++q) m |= ((const unsigned int*)args[job[2 + q]])[w];
        long long left = n - (w << 5);
        if (left < 32) m &= left <= 0 ? 0u : (1u << left) - 1u;
        while (m) {
            sum += deg[(w << 5) + __ffs(m) - 1];
            m &= m - 1;
        }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(FULL, sum, o);
    if ((threadIdx.x & 31) == 0 && sum) atomicAdd((unsigned long long*)out, (unsigned long long)sum);
}

// Candidate sets C(u) over one vertex segment [start, start + count) of k <= 32 pattern vertices
// at once (reference: CpuBackend.candidate_bits; more take more launches): a thread per vertex, a
// grid-stride loop of whole warps over blocks of CB_BLOCK threads, CB_BLOCKS_PER_SM of them an SM
// (32 registers a thread). table[u] is where pattern vertex u's record starts in the table: label,
// label column (0: no label test), the number of signature tests, then (column, query word) per
// test, the number of degree masks, then the masks. The table is copied to shared memory (the host
// sizes the launches to fit), so a record is read there; the columns are read through the
// read-only cache.
//
// Each block first groups the pattern vertices by the label they test (column and label): a
// vertex then loads its label once a column and, comparing it with each distinct label, finds the
// pattern vertices whose label it has; only their first SIG_UNROLL signature words and first
// degree mask are read, all at once, then the rest one by one while they pass. A warp then ballots
// its 32 vertices into one word of each bitset, which lane u keeps for pattern vertex u and writes
// (warps start at multiples of 32 vertices; a word shared with the next segment is ORed in).
//
// stats (or null): stats[u] += |C(u) in this segment|, and stats[k + u] |= bit w where C(u) and
// C(w) share a vertex (lane u meets the words the others' lanes hold through shuffles; two sets
// whose label tests differ in one column cannot meet), added once a block: what the planner asks
// of the sets (GpuBackend.candidate_sets).
#define SIG_UNROLL 4
#define CB_BLOCK 256
#define CB_BLOCKS_PER_SM 8
extern "C" __global__ void __launch_bounds__(CB_BLOCK, CB_BLOCKS_PER_SM) candidate_bits(
        const long long* __restrict__ table, int n_table, int k, long long start, long long count,
        long long words, unsigned int* __restrict__ out, unsigned long long* __restrict__ stats) {
    extern __shared__ long long s_table[];
    __shared__ const int* s_dcol[32];             // the distinct label tests: column, label, and
    __shared__ int s_dlabel[32];                  // the pattern vertices testing it
    __shared__ unsigned int s_dmask[32];
    __shared__ int s_nd;
    __shared__ unsigned int s_free;               // the pattern vertices with no label test
    __shared__ unsigned long long s_count[32];
    __shared__ unsigned int s_meets[32];
    for (int j = threadIdx.x; j < n_table; j += blockDim.x) s_table[j] = table[j];
    if (threadIdx.x < 32) {
        s_count[threadIdx.x] = 0;
        s_meets[threadIdx.x] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int nd = 0;
        unsigned int free_ = 0;
        for (int u = 0; u < k; ++u) {
            const long long* a = s_table + s_table[u];
            const int* col = (const int*)a[1];
            if (!col) {
                free_ |= 1u << u;
                continue;
            }
            int d = 0;
            while (d < nd && !(s_dcol[d] == col && s_dlabel[d] == (int)a[0])) ++d;
            if (d == nd) {
                s_dcol[d] = col;
                s_dlabel[d] = (int)a[0];
                s_dmask[d] = 0;
                ++nd;
            }
            s_dmask[d] |= 1u << u;
        }
        s_nd = nd;
        s_free = free_;
    }
    __syncthreads();
    bool track = stats != nullptr;
    int lane = threadIdx.x & 31, nd = s_nd;
    unsigned int free_ = s_free, meets = 0;
    unsigned int mine = 0;          // lane u's count of C(u) (track; a warp's vertices fit 32 bits)
    long long stop = start + count;
    for (long long v = (start & ~31LL) + (long long)blockIdx.x * blockDim.x + threadIdx.x; v - lane < stop;
         v += (long long)gridDim.x * blockDim.x) {
        bool inside = v >= start && v < stop;
        long long i = v - start;
        // The label tests: one load a distinct column, a compare a distinct label.
        unsigned int pass = 0;
        if (inside) {
            pass = free_;
            const int* seen = nullptr;
            int label = 0;
            for (int d = 0; d < nd; ++d) {
                const int* col = s_dcol[d];
                if (col != seen) {
                    label = __ldg(col + i);
                    seen = col;
                }
                if (label == s_dlabel[d]) pass |= s_dmask[d];
            }
        }
        // The signature words and degree masks of the pattern vertices left.
        unsigned int ok_mask = 0;
        for (unsigned int p = pass; p; p &= p - 1u) {
            int j = __ffs(p) - 1;
            const long long* a = s_table + s_table[j];
            int n_tests = (int)a[2];
            const long long* t = a + 3;
            const long long* dm = t + 2 * n_tests;
            int n_ands = (int)dm[0];
            unsigned int w[SIG_UNROLL];
#pragma unroll
            for (int q = 0; q < SIG_UNROLL; ++q)
                w[q] = q < n_tests ? __ldg((const unsigned int*)t[2 * q] + i) : 0u;
            bool ok = n_ands > 0 ? __ldg((const unsigned char*)dm[1] + v) != 0 : true;
#pragma unroll
            for (int q = 0; q < SIG_UNROLL; ++q) {
                unsigned int want = q < n_tests ? (unsigned int)t[2 * q + 1] : 0u;
                ok = ok && (w[q] & want) == want;
            }
            for (int q = SIG_UNROLL; q < n_tests && ok; ++q) {
                unsigned int want = (unsigned int)t[2 * q + 1];
                ok = (__ldg((const unsigned int*)t[2 * q] + i) & want) == want;
            }
            for (int m = 1; m < n_ands && ok; ++m) ok = __ldg((const unsigned char*)dm[1 + m] + v) != 0;
            if (ok) ok_mask |= 1u << j;
        }
        // The ballots, a word of each bitset; lane u keeps and writes pattern vertex u's.
        unsigned int m = 0;
        for (int j = 0; j < k; ++j) {
            unsigned int b = __ballot_sync(FULL, (ok_mask >> j) & 1u);
            if (lane == j) m = b;
        }
        if (m) {
            long long wd = v >> 5;
            unsigned int* o = out + (long long)lane * words + wd;
            if ((wd << 5) >= start && (wd << 5) + 32 <= stop) *o = m;
            else atomicOr(o, m);
        }
        if (track) {
            mine += __popc(m);
            if (__any_sync(FULL, m != 0))
                for (int u = 0; u < k; ++u)
                    if (m & __shfl_sync(FULL, m, u)) meets |= 1u << u;
        }
    }
    if (track) {
        if (mine) atomicAdd(&s_count[lane], (unsigned long long)mine);
        if (meets) atomicOr(&s_meets[lane], meets);
        __syncthreads();
        if (threadIdx.x < k) {
            if (s_count[threadIdx.x]) atomicAdd(stats + threadIdx.x, s_count[threadIdx.x]);
            if (s_meets[threadIdx.x]) atomicOr(stats + k + threadIdx.x, (unsigned long long)s_meets[threadIdx.x]);
        }
    }
}

// The hits of one vertex's list ci[se.x : se.y], read by its warp: bit k where an entry is in
// the bitset of pattern vertex ends[k] (n_ends of them), ORed into h, the reading stopping once
// every bit (all) is set; every lane returns them (refine_hits, refine_fused).
__device__ __forceinline__ unsigned int list_hits(const int* __restrict__ ci, longlong2 se,
                                                  const unsigned int* __restrict__ bits, long long words,
                                                  const int* __restrict__ ends, int n_ends, unsigned int all,
                                                  unsigned int h, int lane) {
    for (long long base = se.x; base < se.y && h != all; base += 32) {
        long long j = base + lane;
        if (j < se.y) {
            int x = ci[j];
            for (int k = 0; k < n_ends; ++k) h |= (unsigned int)test_bit(bits + (long long)ends[k] * words, x) << k;
        }
        for (int o = 16; o; o >>= 1) h |= __shfl_xor_sync(FULL, h, o);
    }
    return h;
}

// A refinement round's hits for one partition segment (reference: CpuBackend.refine_drop,
// which looks the lists up and calls list_hits). One warp per word w of the candidate
// bitsets (rows of `words` words in `bits`): the vertices of the word in [v_lo, v_hi] that
// are candidates of any pattern vertex of args[0 : n_users] are taken in turn; the warp finds
// each one's list in the segment (warp_pcsr_find) and sets bit k of hit[v] when an entry is a
// candidate of pattern vertex args[n_users + k] (n_ends of them, at most 32), stopping once
// every bit is set (hit[v - hit_base]: the hits of one window of vertices). Lists continuing in
// the next segment add their bits at the next launch.
extern "C" __global__ void refine_hits(const int* __restrict__ groups, long long n_groups, int theta,
                                       const int* __restrict__ ci, const unsigned int* __restrict__ bits,
                                       long long words, const int* __restrict__ args, int n_users, int n_ends,
                                       int v_lo, int v_hi, long long hit_base, unsigned int* __restrict__ hit) {
    long long w = (long long)(v_lo >> 5) + (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (w > (long long)(v_hi >> 5)) return;
    unsigned int u = 0;
    for (int k = 0; k < n_users; ++k) u |= bits[(long long)args[k] * words + w];
    long long v = (w << 5) + lane;
    unsigned int m = __ballot_sync(FULL, ((u >> lane) & 1u) && v >= v_lo && v <= v_hi);
    unsigned int all = n_ends >= 32 ? FULL : (1u << n_ends) - 1u;
    const int* ends = args + n_users;
    while (m) {
        int vv = (int)((w << 5) + __ffs(m) - 1);
        m &= m - 1u;
        longlong2 se = warp_pcsr_find(groups, n_groups, theta, vv);
        unsigned int h = list_hits(ci, se, bits, words, ends, n_ends, all, hit[vv - hit_base], lane);
        if (lane == 0) hit[vv - hit_base] = h;
        __syncwarp();
    }
}

// refine_hits and refine_drop in one launch, for a window of vertices whose lists all lie in one
// segment (GpuBackend._refine_partition): one warp per word w of the window's words
// w0 .. w0 + n_words - 1. The warp takes the word's candidates of any pattern vertex of
// args[0 : n_users] in [v_lo, v_hi] in turn, as refine_hits does; the lane of a vertex keeps its
// hits in a register, where refine_hits wrote them to a hit array that refine_drop read back
// over every word of the window in a launch of its own. Then, per pattern vertex args[i] with
// need args[n_users + n_ends + i], the vertices keep their bit of its row of `keep` only where
// their hits have every bit of the need (a ballot; the warp owns the word). A word with no
// candidate of any of them has nothing to drop.
extern "C" __global__ void refine_fused(const int* __restrict__ groups, long long n_groups, int theta,
                                        const int* __restrict__ ci, const unsigned int* __restrict__ bits,
                                        long long words, const int* __restrict__ args, int n_users, int n_ends,
                                        int v_lo, int v_hi, long long w0, long long n_words, long long n,
                                        unsigned int* __restrict__ keep) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((t >> 5) >= n_words) return;              // whole warps: the grid is 32 threads a word
    int lane = threadIdx.x & 31;
    long long w = w0 + (t >> 5), v = (w << 5) + lane;
    unsigned int u = 0;
    for (int k = 0; k < n_users; ++k) u |= bits[(long long)args[k] * words + w];
    if (!u) return;
    unsigned int m = __ballot_sync(FULL, ((u >> lane) & 1) && v >= v_lo && v <= v_hi);
    unsigned int all = n_ends >= 32 ? FULL : (1u << n_ends) - 1u;
    const int* ends = args + n_users;
    unsigned int mine = 0;
    while (m) {
        int bit = __ffs(m) - 1;
        int vv = (int)((w << 5) + bit);
        m &= m - 1u;
        longlong2 se = warp_pcsr_find(groups, n_groups, theta, vv);
        unsigned int h = list_hits(ci, se, bits, words, ends, n_ends, all, 0u, lane);
        if (lane == bit) mine = h;
        __syncwarp();
    }
    const unsigned int* needs = (const unsigned int*)(args + n_users + n_ends);
    for (int i = 0; i < n_users; ++i) {
        unsigned int need = needs[i];
        unsigned int kept = __ballot_sync(FULL, v < n && (mine & need) == need);
        if (lane == 0) keep[(long long)args[i] * words + w] &= kept;
    }
}

// The drop of a refinement round for one partition, over the words w0 .. w0 + n_words - 1 of
// the bitsets (reference: CpuBackend.refine_drop): one warp per word, a lane per vertex v of
// it, so the hits are read and zeroed coalesced (a thread per word read and zeroed 32 hits
// each, 32 cache lines a warp instruction). For each pattern vertex args[i] (i < n_users) with
// need args[n_users + n_ends + i], v stays in its row of `keep` only where its hit
// (hit[v - hit_base]) has every bit of the need: a ballot of the lanes, and lane 0 masks the
// word (the warp owns it: no atomics). The hits are then zeroed, for the round's next partition.
extern "C" __global__ void refine_drop(unsigned int* __restrict__ keep, long long words, long long w0,
                                       long long n_words, const int* __restrict__ args, int n_users, int n_ends,
                                       unsigned int* __restrict__ hit, long long hit_base, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((t >> 5) >= n_words) return;              // whole warps: the grid is 32 threads a word
    int lane = threadIdx.x & 31;
    long long w = w0 + (t >> 5), v = (w << 5) + lane;
    unsigned int h = v < n ? hit[v - hit_base] : 0u;
    const unsigned int* needs = (const unsigned int*)(args + n_users + n_ends);
    for (int i = 0; i < n_users; ++i) {
        unsigned int need = needs[i];
        unsigned int m = __ballot_sync(FULL, v < n && (h & need) == need);
        if (lane == 0) keep[(long long)args[i] * words + w] &= m;
    }
    if (v < n) hit[v - hit_base] = 0u;
}

// Which segments of a partition hold a candidate of any pattern vertex of users[0 : n_users]
// (reference: stream.segments_of's search): one thread per word w of the bitsets; a word
// with candidates flags every segment whose source range [first[s], last[s]) meets the span
// of its candidates (a segment between two of them too: a flag only costs a launch).
extern "C" __global__ void segments_meeting(const unsigned int* __restrict__ bits, long long words,
                                            const int* __restrict__ users, int n_users,
                                            const int* __restrict__ ranges, int n_seg,
                                            unsigned char* __restrict__ flags) {
    long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= words) return;
    unsigned int u = 0;
    for (int k = 0; k < n_users; ++k) u |= bits[(long long)users[k] * words + w];
    if (!u) return;
    int lo = (int)(w << 5) + __ffs(u) - 1, hi = (int)(w << 5) + 31 - __clz(u);
    const int* first = ranges;
    const int* last = ranges + n_seg;      // exclusive ends
    int a = 0, b = n_seg;                  // the first segment whose range ends above lo
    while (a < b) {
        int mid = (a + b) >> 1;
        if (last[mid] <= lo) a = mid + 1; else b = mid;
    }
    for (int s = a; s < n_seg && first[s] <= hi; ++s) flags[s] = 1;
}

// out[r] += the set bits of bitset rows[r] (words uint32 each), for each grid row r (out zeroed):
// a grid-stride loop over the words, warp shuffles, one atomic per warp. (CuPy's reduction over
// rows compiled a CUB kernel for each size class of the bitsets: seconds on a graph's first query.)
extern "C" __global__ void popcount_rows(const unsigned int* const* __restrict__ rows, long long words,
                                         long long* __restrict__ out) {
    const unsigned int* a = rows[blockIdx.y];
    long long sum = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += stride) sum += __popc(a[w]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(FULL, sum, o);
    if ((threadIdx.x & 31) == 0 && sum) atomicAdd((unsigned long long*)out + blockIdx.y, (unsigned long long)sum);
}

// Whether bitsets rows[i] and cols[j] (words uint32 each) share a set bit, for every i, j
// (reference: backends.base.Overlaps): out[i * n_cols + j] = 1 where they do (out zeroed).
// Each pair gets per_pair blocks, each ORing the ANDs of a stretch of the words.
extern "C" __global__ void bitset_overlaps(const unsigned int* const* __restrict__ rows,
                                           const unsigned int* const* __restrict__ cols, int n_cols,
                                           long long words, int per_pair, int* __restrict__ out) {
    long long pair = blockIdx.x / per_pair;
    int part = blockIdx.x % per_pair;
    const unsigned int* a = rows[pair / n_cols];
    const unsigned int* b = cols[pair % n_cols];
    unsigned int acc = 0;
    for (long long w = (long long)part * blockDim.x + threadIdx.x; w < words; w += (long long)per_pair * blockDim.x)
        acc |= a[w] & b[w];
    if (__syncthreads_or(acc != 0u) && threadIdx.x == 0) out[pair] = 1;
}
