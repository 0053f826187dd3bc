"""CUDA kernels of the GPU backend (CuPy RawModule), each small and named.

Every kernel has a vectorized array version that is its reference: the
NumPy code path of the CPU backend (see the ``reference`` named in each
docstring); the GPU tests compare the two on random inputs.

Kernels are compiled on first use; importing this module needs no GPU.
"""

from __future__ import annotations

import threading

import numpy as np

_PREAMBLE_HASH = r"""
// Group of vertex v in a PCSR of n_groups groups: (v * 2654435761 mod 2^32) mod n_groups.
__device__ __forceinline__ long long pcsr_group(int v, long long n_groups) {
    unsigned int h = (unsigned int)v * 2654435761u;
    return (long long)(h % (unsigned long long)n_groups);
}
"""

_PREAMBLE_BITS = r"""
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
"""

_SOURCE = _PREAMBLE_HASH + _PREAMBLE_BITS + r"""
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

// Whether entry x of a row's list stays: in cbits (null: all) and none of the row's own vertices
// (column `row` of the conflicts table, n_conflicts rows of table_rows).
__device__ __forceinline__ bool entry_kept(int x, const unsigned int* __restrict__ cbits,
                                           const int* __restrict__ conflicts, int n_conflicts, long long table_rows,
                                           long long row) {
    bool ok = !cbits || test_bit(cbits, x);
    for (int k = 0; k < n_conflicts && ok; ++k) ok = x != conflicts[(long long)k * table_rows + row];
    return ok;
}

// One row's list src[0 : c], read by one warp: the entries in cbits (null: all) that are none of
// the row's own vertices (column `row` of the conflicts table, n_conflicts rows of table_rows)
// are appended in order from gba[out] (a warp ballot per 32; gba null: only counted). Returns
// out past them (every lane). Every lane of the warp must call it.
__device__ __forceinline__ long long warp_keep_list(const int* __restrict__ src, long long c,
                                                    const unsigned int* __restrict__ cbits,
                                                    const int* __restrict__ conflicts, int n_conflicts,
                                                    long long table_rows, long long row, long long out,
                                                    int* __restrict__ gba) {
    int lane = threadIdx.x & 31;
    int mine[16];
    int nc = n_conflicts < 16 ? n_conflicts : 16;
    for (int k = 0; k < nc; ++k) mine[k] = conflicts[(long long)k * table_rows + row];
    for (long long base = 0; base < c; base += 32) {
        long long j = base + lane;
        int x = 0;
        bool ok = j < c;
        if (ok) {
            x = src[j];
            if (cbits) ok = test_bit(cbits, x);
            for (int k = 0; k < nc; ++k) ok &= x != mine[k];
            for (int k = nc; k < n_conflicts; ++k) ok &= x != conflicts[(long long)k * table_rows + row];
        }
        out += gba ? warp_append(ok, x, gba, out) : __popc(__ballot_sync(FULL, ok));
    }
    return out;
}

// PCSR lookup of vertex vv by one thread: warp_pcsr_find's walk over the group's pairs and its
// overflow chain, a pair at a time.
__device__ __forceinline__ longlong2 pcsr_find(const int* __restrict__ groups, long long n_groups, int theta,
                                               int vv) {
    if (vv < 0 || n_groups == 0) return make_longlong2(0, 0);
    long long g = pcsr_group(vv, n_groups);
    while (true) {
        const int* pairs = groups + g * theta * 2;
        for (int k = 0; k < theta - 1; ++k)
            if (pairs[2 * k] == vv) return make_longlong2(pairs[2 * k + 1], pairs[2 * k + 3]);
        int gid = pairs[2 * (theta - 1)];
        if (gid < 0) return make_longlong2(0, 0);
        g = gid;
    }
}

// A later linking edge, entry by entry (reference: sgsi.join.membership.member): the thread of
// entry i, whose tuple's vertex v = vcol[erow[i]] lies in this segment's source range [lo, hi],
// finds v's list in the segment's PCSR (the threads of one tuple read the same group) and
// binary-searches evals[i] in it (lists are sorted); a hit sets found[i]. A list may continue in
// the next segment: the launches over the segments OR their hits.
extern "C" __global__ void member_entries(const int* __restrict__ groups, long long n_groups, int theta,
                                          const int* __restrict__ ci, int lo, int hi,
                                          const int* __restrict__ vcol, const long long* __restrict__ erow,
                                          const int* __restrict__ evals, long long n, bool* __restrict__ found) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || found[i]) return;
    int v = vcol[erow[i]];
    if (v < lo || v > hi) return;
    longlong2 se = pcsr_find(groups, n_groups, theta, v);
    long long a = se.x, b = se.y;
    int x = evals[i];
    while (a < b) {
        long long m = (a + b) >> 1;
        if (ci[m] < x) a = m + 1; else b = m;
    }
    if (a < se.y && ci[a] == x) found[i] = true;
}

// PCSR lookup (reference: sgsi.partition.pcsr.lookup): one warp per query vertex.
extern "C" __global__ void pcsr_lookup(const int* __restrict__ groups, long long n_groups, int theta,
                                       const int* __restrict__ v, long long n,
                                       long long* __restrict__ start, long long* __restrict__ end) {
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (warp >= n) return;
    longlong2 se = warp_pcsr_find(groups, n_groups, theta, v[warp]);
    if ((threadIdx.x & 31) == 0) { start[warp] = se.x; end[warp] = se.y; }
}

// First link of a light piece, row by row (reference: CpuBackend.row_lists): the rows' vertices'
// lists in one segment's PCSR (warp_pcsr_find, a warp a row), of which the entries in C(u) (cbits)
// that are none of the row's own vertices (the conflict columns, n_conflicts rows of n) are
// appended in order from gba[F_i + fill_i]; with gba null they are only counted into fill_i (F may
// be null then). rows null: rows 0 .. n-1; else the rows rows[0 .. *n_rows) (the rows
// row_lists_short left); the blocks stride over them, per_round (1 to 8) a round.
//
// A warp reads a list of at most 32 entries itself (one round: a load of the entries, their
// bits, a ballot). The longer lists of a round's rows are cut into chunks of 32 entries that the
// block's warps take in turn, so that a block's time is its rows' entries over its warps, not its
// longest list over one warp (a 16K list was 512 rounds of one warp while the others idled). A
// round of fewer rows spreads long lists over more blocks (the host's choice).
// Counting, a chunk's survivors are added to its row's count in shared memory. Appending, the order
// is kept in two passes over a window of ROW_CHUNKS chunks: each chunk's ballot is kept in shared
// memory, a block scan of their counts gives each chunk its place in its row's buffer, and the
// entries are read again (from the cache) and written there.
#define ROW_CHUNKS 1024
__device__ __forceinline__ int row_chunk_slot(const int* chunk_first, int n_long, int g) {
    int s = 0;
    while (s + 1 < n_long && chunk_first[s + 1] <= g) ++s;
    return s;
}

extern "C" __global__ void __launch_bounds__(256, 8)
row_lists(const int* __restrict__ groups, long long n_groups, int theta, const int* __restrict__ ci,
          const int* __restrict__ v, long long n, const unsigned int* __restrict__ cbits,
          const int* __restrict__ conflicts, int n_conflicts, const long long* __restrict__ F,
          long long* __restrict__ fill, int* __restrict__ gba, const long long* __restrict__ rows,
          const unsigned long long* __restrict__ n_rows, int per_round) {
    __shared__ long long long_start[8], long_at[8], long_row[8];
    __shared__ int long_count[8], chunk_first[9], kept[8], n_long;
    __shared__ unsigned int masks[ROW_CHUNKS];
    __shared__ int place[ROW_CHUNKS + 1];
    __shared__ int warp_sum[8];
    long long m = rows ? (long long)*n_rows : n;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (long long base = (long long)blockIdx.x * per_round; base < m; base += (long long)gridDim.x * per_round) {
        if (threadIdx.x == 0) n_long = 0;
        __syncthreads();
        long long i = base + wid;
        if (wid < per_round && i < m) {
            long long row = rows ? rows[i] : i;
            longlong2 se = warp_pcsr_find(groups, n_groups, theta, v[row]);
            long long c = se.y - se.x, f0 = F ? F[row] : 0;
            if (c > 32) {                               // the block's warps share it
                if (lane == 0) {
                    int slot = atomicAdd(&n_long, 1);
                    long_start[slot] = se.x;
                    long_count[slot] = (int)c;
                    long_at[slot] = f0 + fill[row];
                    long_row[slot] = row;
                    kept[slot] = 0;
                }
            } else if (c > 0) {
                long long out = warp_keep_list(ci + se.x, c, cbits, conflicts, n_conflicts, n, row, f0 + fill[row],
                                               gba);
                if (lane == 0) fill[row] = out - f0;
            }
        }
        __syncthreads();
        int nl = n_long;
        if (nl > 0) {                                   // the same for every thread of the block
        if (threadIdx.x == 0) {
            int acc = 0;
            for (int s = 0; s < nl; ++s) { chunk_first[s] = acc; acc += (long_count[s] + 31) >> 5; }
            chunk_first[nl] = acc;
        }
        __syncthreads();
        int chunks = chunk_first[nl];
        for (int w0 = 0; w0 < chunks; w0 += ROW_CHUNKS) {
            int wc = min(ROW_CHUNKS, chunks - w0);
            for (int q = wid; q < wc; q += warps) {     // pass 1: each chunk's survivors
                int g = w0 + q, s = row_chunk_slot(chunk_first, nl, g);
                int j = ((g - chunk_first[s]) << 5) + lane;
                long long row = long_row[s];
                bool ok = j < long_count[s] && entry_kept(ci[long_start[s] + j], cbits, conflicts, n_conflicts, n, row);
                unsigned int mask = __ballot_sync(FULL, ok);
                if (lane == 0) {
                    if (gba) masks[q] = mask;
                    else if (mask) atomicAdd(&kept[s], __popc(mask));
                }
            }
            if (!gba) continue;
            __syncthreads();
            // place[q]: survivors of the window's chunks before q (a thread sums 4 chunks, then a
            // scan of the threads' sums: warp shuffles, then the warps' sums).
            int q0 = threadIdx.x * (ROW_CHUNKS / 256), mine = 0;
            for (int k = 0; k < ROW_CHUNKS / 256; ++k) mine += q0 + k < wc ? __popc(masks[q0 + k]) : 0;
            int incl = mine;
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(FULL, incl, o);
                if (lane >= o) incl += y;
            }
            if (lane == 31) warp_sum[wid] = incl;
            __syncthreads();
            int before = incl - mine;
            for (int w = 0; w < wid; ++w) before += warp_sum[w];
            for (int k = 0; k < ROW_CHUNKS / 256; ++k) {
                place[q0 + k] = before;
                before += q0 + k < wc ? __popc(masks[q0 + k]) : 0;
            }
            if (threadIdx.x == blockDim.x - 1) place[ROW_CHUNKS] = before;
            __syncthreads();
            for (int q = wid; q < wc; q += warps) {     // pass 2: the survivors written in order
                unsigned int mask = masks[q];
                if (mask == 0) continue;
                int g = w0 + q, s = row_chunk_slot(chunk_first, nl, g);
                int first = max(chunk_first[s], w0) - w0;
                if ((mask >> lane) & 1u) {
                    int j = ((g - chunk_first[s]) << 5) + lane;
                    long long at = long_at[s] + kept[s] + (place[q] - place[first]) +
                                   __popc(mask & ((1u << lane) - 1u));
                    gba[at] = ci[long_start[s] + j];
                }
            }
            __syncthreads();
            if (threadIdx.x < nl) {                     // each row's survivors in this window
                int s = threadIdx.x;
                int a = max(chunk_first[s], w0) - w0, b = min(chunk_first[s + 1], w0 + wc) - w0;
                if (a < b) kept[s] += place[b] - place[a];
            }
            __syncthreads();
        }
        __syncthreads();
        if (threadIdx.x < nl) fill[long_row[threadIdx.x]] += kept[threadIdx.x];
        }
        __syncthreads();                                // n_long and the slots are reset next round
    }
}

// row_lists with a thread a row (reference: CpuBackend.row_lists): the thread finds its row's
// list in the PCSR (pcsr_find) and, where it holds at most THREAD_LIST entries, keeps and
// appends (or counts) them itself; the rows of longer lists are appended to rest (a warp's at
// once, *n_rest counting them) for a row_lists launch over them. On the many
// short lists of a large light piece a warp a row leaves 31 lanes idle and needs a warp's round
// of dependent loads per row: a thread a row reads 32 rows' lists at once.
#define THREAD_LIST 32
extern "C" __global__ void __launch_bounds__(256, 8)
row_lists_short(const int* __restrict__ groups, long long n_groups, int theta, const int* __restrict__ ci,
                const int* __restrict__ v, long long n, const unsigned int* __restrict__ cbits,
                const int* __restrict__ conflicts, int n_conflicts, const long long* __restrict__ F,
                long long* __restrict__ fill, int* __restrict__ gba, long long* __restrict__ rest,
                unsigned long long* __restrict__ n_rest, long long* __restrict__ rest_start,
                long long* __restrict__ rest_len, long long* __restrict__ rest_chunks) {
    long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    long long c = 0;
    longlong2 se = make_longlong2(0, 0);
    if (row < n) {
        se = pcsr_find(groups, n_groups, theta, v[row]);
        c = se.y - se.x;
    }
    bool defer = c > THREAD_LIST;
    unsigned int later = __ballot_sync(FULL, defer);
    if (later) {
        int leader = __ffs(later) - 1;
        unsigned long long at = 0;
        if (lane == leader) at = atomicAdd(n_rest, (unsigned long long)__popc(later));
        at = __shfl_sync(FULL, at, leader);
        if (defer) {
            long long slot = at + __popc(later & ((1u << lane) - 1u));
            rest[slot] = row;
            if (rest_start) {                           // for row_lists_spread
                rest_start[slot] = se.x;
                rest_len[slot] = c;
                rest_chunks[slot] = (c + 31) >> 5;
            }
        }
    }
    if (defer || c == 0) return;
    long long had = fill[row], out = gba ? F[row] + had : 0;
    int kept = 0;
    for (const int* x = ci + se.x; x < ci + se.y; ++x) {
        int y = *x;
        if (entry_kept(y, cbits, conflicts, n_conflicts, n, row)) {
            if (gba) gba[out + kept] = y;
            ++kept;
        }
    }
    if (kept) fill[row] = had + kept;
}

// The count of the rows row_lists_short left (gba null: reference CpuBackend.row_lists counting),
// their lists' chunks of 32 entries spread evenly over the grid's warps: the deferred rows'
// chunks, in their order, are cut into one run of consecutive chunks a warp (incl: the inclusive
// prefix sum of each row's chunks, zero past the *n_rest rows). A warp finds its run's first
// row by a binary search, then reads its chunks in turn (32 entries a round), adding each
// row's survivors to fill[row] with one atomic per row it met. A block's rows no longer wait on
// its longest list: the lists of a 16K-entry row are shared by as many warps as need be.
extern "C" __global__ void row_lists_spread(const int* __restrict__ ci, const unsigned int* __restrict__ cbits,
                                            const int* __restrict__ conflicts, int n_conflicts, long long n,
                                            long long* __restrict__ fill, const long long* __restrict__ rest,
                                            const unsigned long long* __restrict__ n_rest,
                                            const long long* __restrict__ rest_start,
                                            const long long* __restrict__ rest_len,
                                            const long long* __restrict__ incl) {
    long long m = (long long)*n_rest;
    if (m == 0) return;
    long long total = incl[m - 1];
    long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    long long per = (total + warps - 1) / warps;
    long long g = w * per, g1 = g + per < total ? g + per : total;
    if (g >= g1) return;
    long long a = 0, b = m - 1;                     // the first row whose chunks end past g
    while (a < b) {
        long long mid = (a + b) >> 1;
        if (incl[mid] > g) b = mid; else a = mid + 1;
    }
    long long s = a, end = incl[s], len = rest_len[s], first = end - ((len + 31) >> 5);
    long long row = rest[s], start = rest_start[s];
    unsigned long long kept = 0;
    for (; g < g1; ++g) {
        if (g >= end) {                             // the next row's chunks
            if (lane == 0 && kept) atomicAdd((unsigned long long*)&fill[row], kept);
            kept = 0;
            ++s;
            first = end;
            end = incl[s];
            len = rest_len[s];
            row = rest[s];
            start = rest_start[s];
        }
        long long j = ((g - first) << 5) + lane;
        bool ok = j < len && entry_kept(ci[start + j], cbits, conflicts, n_conflicts, n, row);
        kept += __popc(__ballot_sync(FULL, ok));
    }
    if (lane == 0 && kept) atomicAdd((unsigned long long*)&fill[row], kept);
}

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

// The rows' buffers packed end to end (reference: CpuBackend.pack_rows): one warp per row
// copies gba[F_i : F_i + fill_i] to vals[O_i : O_i + fill_i], O_i = ends_i - fill_i, and
// writes i as the row of each (erow; null: not written). With it, up to PACK_COLS_4 columns of
// 4-byte and PACK_COLS_8 of 8-byte elements of the rows are taken at the entries' rows (reference:
// numpy.take(column, erow)): entry e of row i gets a_q[i] in out4[q * total + e] (b_q[i] in out8),
// where the take of the packed rows cost a launch of its own and its host time.
#define PACK_COLS_4 6
#define PACK_COLS_8 2
extern "C" __global__ void pack_rows(const int* __restrict__ gba, const long long* __restrict__ F,
                                     const long long* __restrict__ fill, const long long* __restrict__ ends,
                                     long long n, long long* __restrict__ erow, int* __restrict__ vals,
                                     const unsigned int* a0, const unsigned int* a1, const unsigned int* a2,
                                     const unsigned int* a3, const unsigned int* a4, const unsigned int* a5,
                                     int k4, unsigned int* __restrict__ out4, const unsigned long long* b0,
                                     const unsigned long long* b1, int k8, unsigned long long* __restrict__ out8,
                                     long long total) {
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= n) return;
    long long c = fill[warp], s = F[warp], o = ends[warp] - c;
    if (c == 0) return;
    const unsigned int* a[PACK_COLS_4] = {a0, a1, a2, a3, a4, a5};
    const unsigned long long* b[PACK_COLS_8] = {b0, b1};
    unsigned int x[PACK_COLS_4];
    unsigned long long y[PACK_COLS_8];
#pragma unroll
    for (int q = 0; q < PACK_COLS_4; q++) x[q] = q < k4 ? a[q][warp] : 0u;
#pragma unroll
    for (int q = 0; q < PACK_COLS_8; q++) y[q] = q < k8 ? b[q][warp] : 0ull;
    for (long long j = lane; j < c; j += 32) {
        vals[o + j] = gba[s + j];
        if (erow) erow[o + j] = warp;
#pragma unroll
        for (int q = 0; q < PACK_COLS_4; q++)
            if (q < k4) out4[q * total + o + j] = x[q];
#pragma unroll
        for (int q = 0; q < PACK_COLS_8; q++)
            if (q < k8) out8[q * total + o + j] = y[q];
    }
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

// Inclusive prefix sum of a small array in one block (gpu.scan's one-launch path; reference:
// numpy.cumsum): each thread sums a run of consecutive values, the block scans the runs' sums,
// then each thread writes its run.
// ``exclusive``: each value's sum before it (out[i] - x[i]) instead. ``sum_out`` (null: none): where
// the sum of all the values goes too (gpu.scan_total: a result slot in pinned host memory).
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

// piece_summary of a piece of at most 4,096 rows in one block (gpu.py's _SUMMARY_ONE_BLOCK),
// with the rows' exclusive prefix sum of deg written to F where F is given (the offsets of their
// buffers in a light step, Engine._row_sets), and zeros to ``zeros`` (the step's fill counts, which
// then need no memset): each thread takes a run of consecutive rows, as scan_small does.
// One block needs no atomics, so out needs no identities copied in first, and the offsets need
// no scan launch of their own.
extern "C" __global__ void piece_summary_small(long long* __restrict__ deg, const int* __restrict__ col,
                                               long long n, long long* __restrict__ out,
                                               const int* __restrict__ dense, long long* __restrict__ F,
                                               long long* __restrict__ zeros) {
    __shared__ long long part[4][32];
    long long per = (n + blockDim.x - 1) / blockDim.x;
    long long a = threadIdx.x * per, b = a + per < n ? a + per : n;
    long long sum = 0, mx = -1, lo = 0x7fffffffffffffffLL, hi = -0x7fffffffffffffffLL - 1, desc = 0;
    for (long long i = a; i < b; ++i) {
        long long d, v = col[i];
        if (dense) deg[i] = d = dense[v]; else d = deg[i];
        sum += d;
        mx = d > mx ? d : mx;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        desc += i > 0 && col[i] < col[i - 1];
    }
    long long total;
    long long run = block_exclusive_scan(sum, &total);
    for (long long i = a; F && i < b; ++i) {
        F[i] = run;
        run += deg[i];
        zeros[i] = 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
        desc += __shfl_down_sync(FULL, desc, o);
        long long t = __shfl_down_sync(FULL, mx, o);
        mx = t > mx ? t : mx;
        t = __shfl_down_sync(FULL, lo, o);
        lo = t < lo ? t : lo;
        t = __shfl_down_sync(FULL, hi, o);
        hi = t > hi ? t : hi;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        part[0][wid] = mx;
        part[1][wid] = lo;
        part[2][wid] = hi;
        part[3][wid] = desc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < n_warps; ++w) {
            mx = part[0][w] > mx ? part[0][w] : mx;
            lo = part[1][w] < lo ? part[1][w] : lo;
            hi = part[2][w] > hi ? part[2][w] : hi;
            desc += part[3][w];
        }
        out[0] = total;
        out[1] = mx;
        out[2] = lo;
        out[3] = hi;
        out[4] = desc;
    }
}

// Single-pass scans (decoupled look-back, Merrill & Garland 2016): one launch where a scan in
// tiles took three (the tiles' sums, their scan, the tiles' scans). Tiles are handed out in launch
// order by a ticket counter, so a block waits only on tiles handed out before its own, which are
// running or done. Each tile publishes its aggregate, then finds the prefix before it by looking
// back over its predecessors, 32 at a time, summing aggregates until one has published its
// inclusive prefix, and publishes its own. The state (gpu.py's _ScanState) lives across launches:
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

// Sums (W = 1): a scan.
struct SumOp {
    static const int W = 1;
    __device__ static void identity(long long* a) { a[0] = 0; }
    __device__ static void combine(long long* a, const long long* b) { a[0] += b[0]; }
};

// A piece's summary (W = 5): Σ deg, max deg, min col, max col, descents.
struct SummaryOp {
    static const int W = 5;
    __device__ static void identity(long long* a) {
        a[0] = 0; a[1] = -1; a[2] = 0x7fffffffffffffffLL; a[3] = -0x7fffffffffffffffLL - 1; a[4] = 0;
    }
    __device__ static void combine(long long* a, const long long* b) {
        a[0] += b[0];
        a[1] = b[1] > a[1] ? b[1] : a[1];
        a[2] = b[2] < a[2] ? b[2] : a[2];
        a[3] = b[3] > a[3] ? b[3] : a[3];
        a[4] += b[4];
    }
};

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

// Inclusive prefix sum of a large array in one launch (gpu.scan's path past one block; reference:
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
#define SCAN_PASS_ARGS unsigned long long* ticket, int* flags, long long* agg, long long* incl, int epoch
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

// piece_summary of a piece past one block (reference: CpuBackend.piece_summary) in one launch,
// the single-pass scans' way: a tile of ``rounds`` rows a thread (a row a thread a round,
// coalesced); the tiles' summaries are combined by the look-back, and the last tile writes the
// piece's to out (no identities copied in, no atomics). With ``dense`` the rows' degrees are
// gathered from it (int32, every vertex's) and written to deg (reference:
// CpuBackend.piece_degrees). piece_pass_offsets writes the rows' exclusive prefix sum of deg to F
// too (the offsets of their buffers in a light step, Engine._row_sets), in tiles of
// PASS_OFFSETS_ROUNDS rows a thread staged in shared memory, as scan_pass does, and zeros to
// ``zeros`` (the step's fill counts).
#define PASS_OFFSETS_ROUNDS 16
#define PASS_BLOCK 256
template <bool OFFSETS>
__device__ __forceinline__ void piece_pass_tile(long long* __restrict__ deg, const int* __restrict__ col, long long n,
                                                int rounds, long long* __restrict__ out,
                                                const int* __restrict__ dense, long long* __restrict__ F,
                                                long long* __restrict__ zeros, long long* buf,
                                                unsigned long long* ticket, int* flags, long long* agg,
                                                long long* incl, int epoch) {
    __shared__ long long s[10];
    __shared__ long long part[5][32];
    int b = blockDim.x;
    long long tile = (long long)rounds * b;
    long long n_tiles = (n + tile - 1) / tile;
    long long t = take_ticket(ticket, n_tiles);
    long long t0 = t * tile;
    long long a[5];
    SummaryOp::identity(a);
#pragma unroll 4
    for (int r = 0; r < rounds; ++r) {
        long long i = t0 + (long long)r * b + threadIdx.x;
        long long d = 0;
        if (i < n) {
            long long v = col[i];
            if (dense) deg[i] = d = dense[v]; else d = deg[i];
            long long x[5] = {d, d, v, v, i > 0 && col[i] < col[i - 1]};
            SummaryOp::combine(a, x);
        }
        if (OFFSETS) buf[SCAN_SLOT(r * b + threadIdx.x)] = d;
    }
    for (int o = 16; o > 0; o >>= 1) {
        long long u[5];
        for (int w = 0; w < 5; ++w) u[w] = __shfl_down_sync(FULL, a[w], o);
        SummaryOp::combine(a, u);
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n_warps = (b + 31) >> 5;
    if (lane == 0)
        for (int w = 0; w < 5; ++w) part[w][wid] = a[w];
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < n_warps; ++k) {
            long long u[5] = {part[0][k], part[1][k], part[2][k], part[3][k], part[4][k]};
            SummaryOp::combine(a, u);
        }
        for (int w = 0; w < 5; ++w) s[w] = a[w];
    }
    __syncthreads();
    look_back<SummaryOp>(t, s, flags, agg, incl, epoch);
    if (t == n_tiles - 1 && threadIdx.x == 0) {
        long long all[5];
        for (int w = 0; w < 5; ++w) all[w] = s[5 + w];
        SummaryOp::combine(all, s);
        for (int w = 0; w < 5; ++w) out[w] = all[w];
    }
    if (!OFFSETS) return;
    long long v[PASS_OFFSETS_ROUNDS];
    long long sum = run_load<PASS_OFFSETS_ROUNDS>(buf, v);
    long long total;
    run_store<PASS_OFFSETS_ROUNDS>(buf, v, s[5] + block_exclusive_scan(sum, &total), true);
    __syncthreads();
    for (int r = 0; r < PASS_OFFSETS_ROUNDS; ++r) {
        long long i = t0 + (long long)r * b + threadIdx.x;
        if (i < n) {
            F[i] = buf[SCAN_SLOT(r * b + threadIdx.x)];
            zeros[i] = 0;
        }
    }
}
extern "C" __global__ void __launch_bounds__(PASS_BLOCK, 8)
piece_pass(long long* __restrict__ deg, const int* __restrict__ col, long long n, int rounds,
           long long* __restrict__ out, const int* __restrict__ dense, SCAN_PASS_ARGS) {
    piece_pass_tile<false>(deg, col, n, rounds, out, dense, 0, 0, 0, ticket, flags, agg, incl, epoch);
}
extern "C" __global__ void __launch_bounds__(PASS_BLOCK, 4)
piece_pass_offsets(long long* __restrict__ deg, const int* __restrict__ col, long long n,
                   long long* __restrict__ out, const int* __restrict__ dense, long long* __restrict__ F,
                   long long* __restrict__ zeros, SCAN_PASS_ARGS) {
    __shared__ long long buf[SCAN_SLOT(PASS_BLOCK * PASS_OFFSETS_ROUNDS)];
    piece_pass_tile<true>(deg, col, n, PASS_OFFSETS_ROUNDS, out, dense, F, zeros, buf, ticket, flags, agg, incl,
                          epoch);
}

// 0, 1, ..., n - 1 (reference: numpy.arange, int64).
extern "C" __global__ void iota_i64(long long n, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

// Sums, maxima and minima of up to 4 int arrays in one launch, for one host read (reference:
// backend.host_reductions: numpy's sum, max and min, the max and min of an empty array 0). Grid
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

// Indices of the true entries of a bool array, given the inclusive scan of its entries (gpu.
// flatnonzero past one block; reference: numpy.flatnonzero): entry i, if true, is index ends[i] - 1.
extern "C" __global__ void nonzero_at(const bool* __restrict__ x, const long long* __restrict__ ends, long long n,
                                      long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i]) out[ends[i] - 1] = i;
}

// Indices of the true entries of a small bool array, in order, and how many (gpu.flatnonzero's
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

// Whether each row's vertex col[i] is in its tuple's set (reference: CpuBackend.own_hits): one
// thread per row binary-searches its tuple's set evals[sstart[t] : sstart[t] + scount[t]]
// (sorted), where the reference keyed every entry (tuple << 32 | vertex) to search them all.
extern "C" __global__ void own_hit_rows(const long long* __restrict__ row_tuple,
                                        const long long* __restrict__ sstart, const long long* __restrict__ scount,
                                        const int* __restrict__ evals, const int* __restrict__ col, long long n,
                                        bool* __restrict__ hit) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long t = row_tuple[i];
    long long a = sstart[t], e = a + scount[t];
    int x = col[i];
    bool found = false;
    if (a < e && evals[a] <= x && x <= evals[e - 1]) {
        long long lo = a, hi = e;
        while (lo < hi) {
            long long mid = (lo + hi) >> 1;
            if (evals[mid] < x) lo = mid + 1; else hi = mid;
        }
        found = evals[lo] == x;
    }
    hit[i] = found;
}

// |S(t_i)| of each row i less the row's vertices found in it (reference:
// CpuBackend.sizes_less_own): one thread per row; its tuple's set evals[sstart[t] : sstart[t]
// + scount[t]] is sorted, and each of the row's vertices (column i of the conflicts table,
// n_conflicts rows of n) is binary-searched in it. The vertices of a row differ.
extern "C" __global__ void sizes_less_own(const long long* __restrict__ row_tuple,
                                          const long long* __restrict__ sstart, const long long* __restrict__ scount,
                                          const int* __restrict__ evals, const int* __restrict__ conflicts,
                                          int n_conflicts, long long n, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long t = row_tuple[i];
    long long a = sstart[t], e = a + scount[t], left = e - a;
    for (int k = 0; k < n_conflicts && left; ++k) {
        int x = conflicts[(long long)k * n + i];
        long long lo = a, hi = e;
        while (lo < hi) {
            long long mid = (lo + hi) >> 1;
            if (evals[mid] < x) lo = mid + 1; else hi = mid;
        }
        if (lo < e && evals[lo] == x) --left;
    }
    out[i] = left;
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

// First-edge gather of one segment into the Prealloc-Combine GBA (reference:
// CpuBackend.gather_segment). Vertex i's list in the segment is ci[st[i] : en[i]]
// (pcsr_lookup); its entries in C(u) (the bitset) are appended, in order, to its
// buffer from gba[F[i] + fill[i]], and fill[i] grows by their number. One warp per
// vertex: a ballot compacts 32 entries and they are written as one batch. Lists
// longer than ``big`` are left to gather_lists_block.
extern "C" __global__ void gather_lists(const long long* __restrict__ st, const long long* __restrict__ en,
                                        long long n, const int* __restrict__ ci,
                                        const unsigned int* __restrict__ cbits, long long big,
                                        const long long* __restrict__ F, long long* __restrict__ fill,
                                        int* __restrict__ gba) {
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= n) return;
    long long s = st[warp], c = en[warp] - s;
    if (c == 0 || c > big) return;
    long long out = F[warp] + fill[warp];
    for (long long base = 0; base < c; base += 32) {
        long long j = base + lane;
        int x = 0;
        bool ok = j < c;
        if (ok) {
            x = ci[s + j];
            ok = test_bit(cbits, x);
        }
        out += warp_append(ok, x, gba, out);
    }
    if (lane == 0) fill[warp] = out - F[warp];
}

// gather_lists for the vertices whose lists are longer than ``big``: the blocks stride over
// the vertices and each takes those lists, one at a time (no list of them is made first,
// which cost a host read); warp ballots plus a scan of the warp counts in shared memory keep
// the order. A block skips or takes a vertex as a whole, so every thread reaches the
// barriers of block_append.
extern "C" __global__ void gather_lists_block(long long n, const long long* __restrict__ st,
                                              const long long* __restrict__ en, long long big,
                                              const int* __restrict__ ci, const unsigned int* __restrict__ cbits,
                                              const long long* __restrict__ F, long long* __restrict__ fill,
                                              int* __restrict__ gba) {
    __shared__ int warp_total[32];
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        long long s = st[i], c = en[i] - s;
        if (c <= big) continue;
        long long out = F[i] + fill[i];
        for (long long base = 0; base < c; base += blockDim.x) {
            long long j = base + threadIdx.x;
            int x = 0;
            bool ok = j < c;
            if (ok) {
                x = ci[s + j];
                ok = test_bit(cbits, x);
            }
            out += block_append(ok, x, gba, out, warp_total);
        }
        if (threadIdx.x == 0) fill[i] = out - F[i];
    }
}

// Row expansion of a join step (reference: CpuBackend.expand_rows). Row i's
// candidate list is flist[fstart[d] : fstart[d] + fcnt[d]] for d = run[i]; entries
// equal to one of the row's vertices in the conflict columns are dropped
// (injective), the survivors are compacted in order and written from
// out[F_i + fill_i]. Load balance (§7) picks, per row, one of:
//   expand_rows      one warp per row (a warp takes 32 rows, one at a time, short
//                    lists a lane each); a warp ballot compacts 32 entries and
//                    writes them as one batch (the write batching of §5);
//   expand_rows_block one block per row; warp ballots plus a scan of the warp
//                    counts in shared memory keep the order.
//   expand_rows_pool several rows share one block, element by element (below).
// Rows heavier than both get a launch of their own (flattened, in gpu.py).
extern "C" __global__ void expand_rows_block(const long long* __restrict__ rows, const long long* __restrict__ run,
                                             long long n_rows,
                                             const int* __restrict__ flist, const long long* __restrict__ fstart,
                                             const long long* __restrict__ fcnt,
                                             const int* __restrict__ conflicts, int n_conflicts, long long table_rows,
                                             const long long* __restrict__ F, long long* __restrict__ fill,
                                             int* __restrict__ gba) {
    __shared__ int warp_total[32];
    long long task = blockIdx.x;
    if (task >= n_rows) return;
    long long row = rows[task];
    long long d = run[task];
    long long s = fstart[d], c = fcnt[d];
    long long out = F[row] + fill[row];
    for (long long base = 0; base < c; base += blockDim.x) {
        long long j = base + threadIdx.x;
        int x = 0;
        bool ok = j < c;
        if (ok) {
            x = flist[s + j];
            for (int k = 0; k < n_conflicts; ++k) ok &= x != conflicts[(long long)k * table_rows + row];
        }
        out += block_append(ok, x, gba, out, warp_total);
    }
    if (threadIdx.x == 0) fill[row] = out - F[row];
}

// expand_rows_pool: rows of W3..W2 elements share one block's task pool (§7).
// Block b takes the rows bstart[b]..bstart[b+1]-1 (of this launch's rows) and
// streams their concatenated elements (pstart: exclusive prefix of the rows'
// counts) 1024 at a time, one element per thread. Each thread finds its row
// by binary search, tests the conflicts, and a block scan of the survivors
// gives each one its rank within its row, so rows keep their order. The
// last thread of a row's piece adds the piece's survivors to fill[row].
extern "C" __global__ void expand_rows_pool(const long long* __restrict__ rows, const long long* __restrict__ run,
                                            const long long* __restrict__ pstart,
                                            const long long* __restrict__ bstart,
                                            const int* __restrict__ flist, const long long* __restrict__ fstart,
                                            const long long* __restrict__ fcnt,
                                            const int* __restrict__ conflicts, int n_conflicts, long long table_rows,
                                            const long long* __restrict__ F, long long* __restrict__ fill,
                                            int* __restrict__ gba) {
    __shared__ int warp_total[32];
    __shared__ int scan[1024];                // inclusive count of survivors up to each thread
    long long r0 = bstart[blockIdx.x], r1 = bstart[blockIdx.x + 1];
    if (r0 >= r1) return;
    int lane = threadIdx.x & 31;
    long long e_end = pstart[r1];
    for (long long base = pstart[r0]; base < e_end; base += blockDim.x) {
        long long e = base + threadIdx.x;
        bool live = e < e_end, ok = false;
        long long r = r0, row = 0;
        int x = 0;
        if (live) {                           // the last row starting at or before e
            long long lo = r0, hi = r1 - 1;
            while (lo < hi) {
                long long mid = (lo + hi + 1) >> 1;
                if (pstart[mid] <= e) lo = mid; else hi = mid - 1;
            }
            r = lo;
            row = rows[r];
            x = flist[fstart[run[r]] + (e - pstart[r])];
            ok = true;
            for (int k = 0; k < n_conflicts; ++k) ok &= x != conflicts[(long long)k * table_rows + row];
        }
        unsigned int m = __ballot_sync(FULL, ok);
        int incl = block_ballot_scan(m, warp_total).x + __popc(m & ((2u << lane) - 1u));
        scan[threadIdx.x] = incl;
        __syncthreads();
        int before_row = 0;
        if (live) {
            long long first = pstart[r] - base;   // this row's first thread in this round
            before_row = first > 0 ? scan[first - 1] : 0;
            if (ok) gba[F[row] + fill[row] + (incl - 1 - before_row)] = x;
        }
        __syncthreads();                      // every fill[row] read before it changes
        if (live && (e + 1 == pstart[r + 1] || threadIdx.x == blockDim.x - 1))
            fill[row] += incl - before_row;
        __syncthreads();                      // fill and scan are used again next round
    }
}

// Later linking edges (§5; reference: CpuBackend.intersect_lists). Tuple t has one
// sorted list in each of n_lists gathered lists: lcount[j * n_tuples + t] values from
// values[j] + lstart[j * n_tuples + t]. One warp per tuple: its entries are those of its
// shortest list (the first on ties), 32 per round, and an entry survives if every other
// list holds it. Each lane binary-searches each other list; the search window of a list
// starts where the round before found its last entry (entries come sorted), so lists of
// like size are swept through as by a merge, and a long list is searched in log time.
// Survivors are compacted by a warp ballot and written in order from out[off[t]];
// kept[t] is their number.
#define INTERSECT_WINDOWS 16
extern "C" __global__ void intersect_lists(long long n_tuples, int n_lists, const int* const* __restrict__ values,
                                           const long long* __restrict__ lstart,
                                           const long long* __restrict__ lcount,
                                           const long long* __restrict__ off, int* __restrict__ out,
                                           long long* __restrict__ kept) {
    long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (t >= n_tuples) return;
    int p = 0;
    long long pc = lcount[t];
    for (int j = 1; j < n_lists; ++j) {
        long long c = lcount[(long long)j * n_tuples + t];
        if (c < pc) { pc = c; p = j; }
    }
    const int* probe = values[p] + lstart[(long long)p * n_tuples + t];
    long long window[INTERSECT_WINDOWS];
    for (int j = 0; j < INTERSECT_WINDOWS; ++j) window[j] = 0;
    long long o = off[t];
    for (long long r = 0; r < pc; r += 32) {
        long long i = r + lane;
        int last = (int)min(31LL, pc - 1 - r);          // the lane with this round's largest entry
        bool ok = i < pc;
        int x = ok ? probe[i] : 0;
        for (int j = 0; j < n_lists; ++j) {
            if (j == p) continue;
            long long jt = (long long)j * n_tuples + t;
            const int* list = values[j] + lstart[jt];
            long long hi = lcount[jt], a = j < INTERSECT_WINDOWS ? window[j] : 0, b = hi;
            if (ok || lane == last) {                     // lower bound of x in list[a, hi)
                while (a < b) {
                    long long mid = (a + b) >> 1;
                    if (list[mid] < x) a = mid + 1; else b = mid;
                }
                ok = ok && a < hi && list[a] == x;
            }
            long long next = __shfl_sync(FULL, a, last);
            if (j < INTERSECT_WINDOWS) window[j] = next;
        }
        o += warp_append(ok, x, out, o);
    }
    if (lane == 0) kept[t] = o - off[t];
}

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

// Bit v[i] - lo of ``bits`` set for every i (reference: the CPU's mark[v - lo] = True in
// sgsi.join.backend.distinct_index), an atomicOr only where the bit reads unset.
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
// wend (reference: the CPU's sgsi.join.backend.distinct_index): thread w < words writes the
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

// out[0] += the sum of deg over the distinct values of col in [lo, lo + 32 * words), rows with
// equal values having equal deg (reference: CpuBackend.distinct_sum): the row that sets its
// value's bit in ``seen`` (claim_bit) adds its deg. A row whose value repeats the row before it
// makes no test.
extern "C" __global__ void distinct_sum(const int* __restrict__ col, const long long* __restrict__ deg,
                                        long long n, int lo, unsigned int* __restrict__ seen,
                                        long long* __restrict__ out) {
    long long sum = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int v = col[i];
        if (i > 0 && col[i - 1] == v) continue;
        if (claim_bit(seen, (unsigned int)(v - lo))) sum += deg[i];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(FULL, sum, o);
    if ((threadIdx.x & 31) == 0 && sum) atomicAdd((unsigned long long*)out, (unsigned long long)sum);
}

// out[idx[i]] = val[i] where equal indices carry equal values (reference:
// sgsi.join.backend.scatter_equal).
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

// Whether bitsets rows[i] and cols[j] (words uint32 each) share a set bit, for every i, j
// (reference: sgsi.join.backend.Overlaps): out[i * n_cols + j] = 1 where they do (out zeroed).
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

// Calibration kernels for the cost model: one iteration of element work per
// block, with or without a block synchronisation, and an empty launch.
extern "C" __global__ void calib_iterations(const int* __restrict__ a, long long n, int iters, int sync,
                                            int* __restrict__ sink) {
    int acc = 0;
    for (int it = 0; it < iters; ++it) {
        long long j = ((long long)blockIdx.x * blockDim.x + threadIdx.x + (long long)it * 7919) % n;
        acc += a[j] == it;
        if (sync) __syncthreads();
    }
    if (acc == -1) sink[0] = acc;
}

extern "C" __global__ void calib_empty() {}

// expand_rows (the warp way): a warp takes 32 consecutive rows of the launch, whose bookkeeping
// its lanes load together (coalesced, one round of dependent loads for 32 rows, where a warp a
// row took one round a row). A lane whose row's list has at most EXPAND_SHORT entries writes the
// row itself; the longer lists are read by the whole warp, a row at a time (warp_keep_list: a
// ballot per 32 entries). On the 100M graph's 3.5e9 walk, 9.5M rows took 3.1 ms a warp a row
// and 0.21 ms so (one H200).
#define EXPAND_SHORT 8
extern "C" __global__ void expand_rows(const long long* __restrict__ rows, const long long* __restrict__ run,
                                           long long n_rows,
                                           const int* __restrict__ flist, const long long* __restrict__ fstart,
                                           const long long* __restrict__ fcnt,
                                           const int* __restrict__ conflicts, int n_conflicts, long long table_rows,
                                           const long long* __restrict__ F, long long* __restrict__ fill,
                                           int* __restrict__ gba) {
    long long base = (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5) << 5;
    int lane = threadIdx.x & 31;
    if (base >= n_rows) return;
    long long i = base + lane;
    long long row = 0, s = 0, c = 0, f = 0, at = 0;
    if (i < n_rows) {
        row = rows[i];
        long long d = run[i];
        s = fstart[d];
        c = fcnt[d];
        f = F[row];
        at = f + fill[row];
    }
    if (c > 0 && c <= EXPAND_SHORT) {               // a short list: this lane's alone
        int x[EXPAND_SHORT];
#pragma unroll
        for (int k = 0; k < EXPAND_SHORT; ++k) x[k] = k < c ? flist[s + k] : 0;
        int mine[16];
        int nc = n_conflicts < 16 ? n_conflicts : 16;
        for (int q = 0; q < nc; ++q) mine[q] = conflicts[(long long)q * table_rows + row];
        long long out = at;
#pragma unroll
        for (int k = 0; k < EXPAND_SHORT; ++k) {
            bool ok = k < c;
            for (int q = 0; q < nc; ++q) ok &= x[k] != mine[q];
            for (int q = nc; q < n_conflicts && ok; ++q) ok = x[k] != conflicts[(long long)q * table_rows + row];
            if (ok) gba[out++] = x[k];
        }
        fill[row] = out - f;
    }
    unsigned int longs = __ballot_sync(FULL, c > EXPAND_SHORT);
    while (longs) {                                 // the longer lists: the warp, a row at a time
        int j = __ffs(longs) - 1;
        longs &= longs - 1;
        long long rj = __shfl_sync(FULL, row, j), sj = __shfl_sync(FULL, s, j), cj = __shfl_sync(FULL, c, j);
        long long fj = __shfl_sync(FULL, f, j), aj = __shfl_sync(FULL, at, j);
        long long end = warp_keep_list(flist + sj, cj, nullptr, conflicts, n_conflicts, table_rows, rj, aj, gba);
        if (lane == 0) fill[rj] = end - fj;
    }
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
// backend.run_starts): where CuPy took a fill, a comparison launch and their host work.
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
// n for the last (reference: backend.runs).
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
"""

_module = None


def module():
    """The compiled RawModule (compiled once, on first use)."""
    global _module, _cupy, _ndarray, _driver
    if _module is None:
        import cupy
        from cupy_backends.cuda.api import driver
        _cupy, _ndarray, _driver = cupy, cupy.ndarray, driver
        _module = cupy.RawModule(code=_SOURCE, options=("--std=c++14",))
    return _module


_functions = {}


def kernel(name):
    """The compiled kernel ``name`` as a :class:`Launch` (looked up in the module once)."""
    fn = _functions.get(name)
    if fn is None:
        fn = _functions[name] = Launch(module().get_function(name))
    return fn


#: Parameter slots of a thread's (8 bytes each, :class:`Launch`): the most arguments a launch takes.
_SLOTS = 64

_U64 = (1 << 64) - 1


class Launch:
    """A kernel of the module, called as CuPy calls a ``RawKernel``: ``launch(grid, block, args,
    shared_mem=0)`` on the current stream, through ``cuLaunchKernel`` itself: each argument goes
    into an 8-byte slot of a buffer of the thread's (an array's device address, an integer's value)
    and the driver takes the slots' addresses, where CuPy made a Python object of each argument and
    converted it. 16 arguments, the integers given as Python ints, cost the host 5.8 us, against 9.4
    through CuPy with NumPy scalars (one H100 host, probe launch_probe, in git history), and a light count
    is some 50 to 150 launches that the host issues while the device waits.

    Every parameter of the module's kernels is a pointer or an integer (tests/test_kernels_source.py
    checks the source): the driver copies each parameter's size from the start of its slot, the
    low bytes of the little-endian value, so an ``int`` parameter reads the value the slot holds.
    Arguments may be CuPy arrays (their address, as CuPy passes them), Python ints (the fast case)
    and bools, and NumPy integer scalars."""

    __slots__ = ("raw", "_ptrs")

    def __init__(self, raw):
        self.raw = raw                      # the cupy RawKernel (compiled per device when first asked)
        self._ptrs = {}                     # device id -> CUfunction

    def __call__(self, grid, block, args, shared_mem=0):
        if len(args) > _SLOTS:
            raise ValueError(f"a launch of {len(args)} arguments: kernels.Launch takes at most {_SLOTS}")
        cp = _cupy
        dev = cp.cuda.runtime.getDevice()
        fn = self._ptrs.get(dev)
        if fn is None:
            fn = self._ptrs[dev] = int(self.raw.kernel.ptr)
        values = [a if type(a) is int else a.data.ptr if type(a) is _ndarray else int(a) for a in args]
        slots, unsigned, params = _params()
        try:
            slots[:len(values)] = values
        except OverflowError:               # an unsigned 64-bit value past the int64 range
            unsigned[:len(values)] = [v & _U64 for v in values]
        g, b = len(grid), len(block)
        _driver.launchKernel(fn, grid[0], grid[1] if g > 1 else 1, grid[2] if g > 2 else 1,
                             block[0], block[1] if b > 1 else 1, block[2] if b > 2 else 1,
                             shared_mem, cp.cuda.get_current_stream().ptr, params, 0)


_cupy = _ndarray = _driver = None
_slots = threading.local()


def _params():
    """This thread's parameter slots (int64, and the same memory as uint64) and the address of the
    array of pointers to them (``kernelParams``)."""
    got = getattr(_slots, "got", None)
    if got is None:
        slots = np.zeros(_SLOTS, np.int64)
        pointers = np.array([slots.ctypes.data + 8 * i for i in range(_SLOTS)], np.uint64)
        _slots.pointers = pointers          # kept alive with the thread's slots
        got = _slots.got = (slots, slots.view(np.uint64), int(pointers.ctypes.data))
    return got
