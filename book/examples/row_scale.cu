// The CUDA primer's first kernel: scale every row of a matrix by its own factor, y[r][c] = s[r] · x[r][c].
//
// One thread per element. The grid has one row of blocks per matrix row (blockIdx.y = the row) and enough
// blocks along x to cover the columns (blockIdx.x · blockDim.x + threadIdx.x = the column). Neighbouring
// threads of a warp handle neighbouring columns, so a warp's 32 loads of x (and its 32 stores of y) fall
// on consecutive addresses: coalesced.
#include <cuda_fp16.h>

extern "C" __global__ void row_scale(const __half* __restrict__ x,   // [rows, cols], fp16
                                     const float* __restrict__ s,    // [rows], one factor per row
                                     __half* __restrict__ y,         // [rows, cols], fp16
                                     int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;   // which column this thread owns
    const int row = blockIdx.y;                              // which row this block works on
    if (row >= rows || col >= cols) return;                  // the last block of a row may stick out
    const size_t i = (size_t)row * cols + col;               // row-major: element (row, col)
    y[i] = __float2half(s[row] * __half2float(x[i]));        // compute in fp32, store fp16
}
