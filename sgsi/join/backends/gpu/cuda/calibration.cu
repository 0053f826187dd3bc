// Calibration of the load balance's cost model (launched from calibration.py).

#include "common.cuh"

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
