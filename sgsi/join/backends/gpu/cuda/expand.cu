// Columnar extension (launched from expand.py): the load-balanced row expansion of §7.

#include "common.cuh"

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
// Rows heavier than both get a launch of their own (flattened, in expand.py).
extern "C" __global__ void expand_rows_block(const long long* __restrict__ rows, const long long* __restrict__ run,
                                             long long n_rows,
                                             const int* __restrict__ flist, const long long* __restrict__ fstart,
                                             const long long* __restrict__ fcnt,
                                             const int* const* __restrict__ conflicts, int n_conflicts,
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
            for (int k = 0; k < n_conflicts; ++k) ok &= x != conflicts[k][row];
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
                                            const int* const* __restrict__ conflicts, int n_conflicts,
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
            for (int k = 0; k < n_conflicts; ++k) ok &= x != conflicts[k][row];
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
                                           const int* const* __restrict__ conflicts, int n_conflicts,
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
        for (int q = 0; q < nc; ++q) mine[q] = conflicts[q][row];
        long long out = at;
#pragma unroll
        for (int k = 0; k < EXPAND_SHORT; ++k) {
            bool ok = k < c;
            for (int q = 0; q < nc; ++q) ok &= x[k] != mine[q];
            for (int q = nc; q < n_conflicts && ok; ++q) ok = x[k] != conflicts[q][row];
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
        long long end = warp_keep_list(flist + sj, cj, nullptr, conflicts, n_conflicts, rj, aj, gba);
        if (lane == 0) fill[rj] = end - fj;
    }
}
