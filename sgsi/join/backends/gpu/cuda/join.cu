// Join steps (launched from join.py): PCSR lookups, the first link's gathers, light pieces row
// by row, later links (intersections and membership), piece summaries, own-vertex tests.

#include "common.cuh"

// Whether entry x of a row's list stays: in cbits (null: all) and none of the row's own vertices
// (conflicts[k][row]: a column of own vertices each, read in place).
__device__ __forceinline__ bool entry_kept(int x, const unsigned int* __restrict__ cbits,
                                           const int* const* __restrict__ conflicts, int n_conflicts,
                                           long long row) {
    bool ok = !cbits || test_bit(cbits, x);
    for (int k = 0; k < n_conflicts && ok; ++k) ok = x != conflicts[k][row];
    return ok;
}

// Whether x lies in the sorted list a[lo : hi] (lower-bound search).
__device__ __forceinline__ bool sorted_has(const int* __restrict__ a, long long lo, long long hi, int x) {
    long long b = hi;
    while (lo < b) {
        long long m = (lo + b) >> 1;
        if (a[m] < x) lo = m + 1; else b = m;
    }
    return lo < hi && a[lo] == x;
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

// A later linking edge, entry by entry (reference: backends.membership.member): the thread of
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
    if (sorted_has(ci, se.x, se.y, evals[i])) found[i] = true;
}

// A block's sizes with no set written (reference: CpuBackend.block_counts): row i's
// |C(u) ∩ N(v_i1, l_1) ∩ ... ∩ N(v_ik, l_k)| less its own vertices, a warp a row (k <= 32).
// links holds five int64 a link: its segment's groups, their number, theta, its ci, and the rows'
// vertices at its other end (int32); conflicts a column of own vertices each. Lane j keeps link
// j's list (warp_pcsr_find); the warp walks the shortest, a lane an entry, and binary-searches
// each entry kept in the other lists. With spans (else null), link j's list of row i is written
// at spans[j * n + i].
extern "C" __global__ void block_counts(const long long* __restrict__ links, int k, long long n,
                                        const unsigned int* __restrict__ cbits,
                                        const int* const* __restrict__ conflicts, int n_conflicts,
                                        long long* __restrict__ out, longlong2* __restrict__ spans) {
    int lane = threadIdx.x & 31;
    long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < n; row += warps) {
        long long s = 0, e = 0;
        for (int j = 0; j < k; ++j) {
            const long long* L = links + 5 * j;
            longlong2 se = warp_pcsr_find((const int*)L[0], L[1], (int)L[2], ((const int*)L[4])[row]);
            if (lane == j) { s = se.x; e = se.y; }
        }
        if (spans && lane < k) spans[(long long)lane * n + row] = make_longlong2(s, e);
        long long len = lane < k ? e - s : 0x7fffffffffffffffLL;
        int best = lane;
        for (int o = 16; o; o >>= 1) {          // the shortest list, the lowest link among equals
            long long other = __shfl_xor_sync(FULL, len, o);
            int ob = __shfl_xor_sync(FULL, best, o);
            if (other < len || (other == len && ob < best)) { len = other; best = ob; }
        }
        long long sb = __shfl_sync(FULL, s, best);
        const int* cb = (const int*)links[5 * best + 3];
        long long kept = 0;
        for (long long base = 0; base < len; base += 32) {
            long long at = base + lane;
            int x = at < len ? cb[sb + at] : 0;
            bool ok = at < len && entry_kept(x, cbits, conflicts, n_conflicts, row);
            for (int j = 0; j < k; ++j) {       // every lane takes part in the shuffles
                long long a = __shfl_sync(FULL, s, j), end = __shfl_sync(FULL, e, j);
                if (j != best && ok) ok = sorted_has((const int*)links[5 * j + 3], a, end, x);
            }
            kept += __popc(__ballot_sync(FULL, ok));
        }
        if (lane == 0) out[row] = kept;
    }
}

// A block's sizes per row from its tuples' (reference: CpuBackend.rows_less_own): row i's
// tcount[t] (t = row_tuple[i]) less each of its own vertices (conflicts: a column each; one of
// equal ones) in C(u) and in all k of its tuple's lists, link j's at spans[j * n_tuples + t] in
// ci[j] (as block_counts wrote them for the tuples), a thread a row binary-searching them.
extern "C" __global__ void rows_less_own(const int* const* __restrict__ ci, int k, long long n,
                                         const unsigned int* __restrict__ cbits,
                                         const int* const* __restrict__ conflicts, int n_conflicts,
                                         const long long* __restrict__ tcount,
                                         const longlong2* __restrict__ spans, long long n_tuples,
                                         const long long* __restrict__ row_tuple, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long t = row_tuple[i], c = tcount[t];
    for (int a = 0; a < n_conflicts; ++a) {
        int x = conflicts[a][i];
        bool ok = !cbits || test_bit(cbits, x);
        for (int b = 0; b < a && ok; ++b) ok = conflicts[b][i] != x;
        for (int j = 0; j < k && ok; ++j) {
            longlong2 se = spans[(long long)j * n_tuples + t];
            ok = sorted_has(ci[j], se.x, se.y, x);
        }
        c -= ok;
    }
    out[i] = c;
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
// that are none of the row's own vertices (conflicts[k][row], a column each) are
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
          const int* const* __restrict__ conflicts, int n_conflicts, const long long* __restrict__ F,
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
                long long out = warp_keep_list(ci + se.x, c, cbits, conflicts, n_conflicts, row, f0 + fill[row],
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
                bool ok = j < long_count[s] && entry_kept(ci[long_start[s] + j], cbits, conflicts, n_conflicts, row);
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
                const int* const* __restrict__ conflicts, int n_conflicts, const long long* __restrict__ F,
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
        if (entry_kept(y, cbits, conflicts, n_conflicts, row)) {
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
                                            const int* const* __restrict__ conflicts, int n_conflicts, long long n,
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
        bool ok = j < len && entry_kept(ci[start + j], cbits, conflicts, n_conflicts, row);
        kept += __popc(__ballot_sync(FULL, ok));
    }
    if (lane == 0 && kept) atomicAdd((unsigned long long*)&fill[row], kept);
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

// piece_summary of a piece of at most 4,096 rows in one block (join.py's _SUMMARY_ONE_BLOCK),
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
    hit[i] = a < e && evals[a] <= x && x <= evals[e - 1] && sorted_has(evals, a, e, x);
}

// |S(t_i)| of each row i less the row's vertices found in it (reference:
// CpuBackend.sizes_less_own): one thread per row; its tuple's set evals[sstart[t] : sstart[t]
// + scount[t]] is sorted, and each of the row's vertices (conflicts[k][i], a column each) is
// binary-searched in it. The vertices of a row differ.
extern "C" __global__ void sizes_less_own(const long long* __restrict__ row_tuple,
                                          const long long* __restrict__ sstart, const long long* __restrict__ scount,
                                          const int* __restrict__ evals, const int* const* __restrict__ conflicts,
                                          int n_conflicts, long long n, long long* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long t = row_tuple[i];
    long long a = sstart[t], e = a + scount[t], left = e - a;
    for (int k = 0; k < n_conflicts && left; ++k) {
        if (sorted_has(evals, a, e, conflicts[k][i])) --left;
    }
    out[i] = left;
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
