// One 16×16×16 tile product on the tensor cores (the idea of chapter 3), next to the plain loop it
// replaces, so their SASS can be compared: HMMA for the first, FFMA for the second.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

// One warp: C[16×16] = A[16×16] · B[16×16], fp16 inputs, fp32 accumulation.
extern "C" __global__ void tile_wmma(const __half* A, const __half* B, float* C) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;   // A, spread over the warp
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;   // B, column-major
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;                 // C, fp32
    wmma::fill_fragment(c, 0.f);
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(C, c, 16, wmma::mem_row_major);
}

// The same product with one thread per element of C (256 threads): what mma_sync replaces.
extern "C" __global__ void tile_loop(const __half* A, const __half* B, float* C) {
    const int i = threadIdx.x / 16, j = threadIdx.x % 16;
    float acc = 0.f;
    for (int p = 0; p < 16; ++p) acc += __half2float(A[i * 16 + p]) * __half2float(B[j * 16 + p]);
    C[i * 16 + j] = acc;
}
