// Chapter 5 exercise — the middle kernel of three: P = softmax(S), one warp per row, written in place.
//
// The idea: the QKᵀ GEMM left the scaled scores s_ij = q_i·k_j / sqrt(D) in an fp32 matrix
// [B·H·S, ld] (ld = S rounded up to a multiple of 8). A warp owns one row i. It finds
//     m_i = max_j s_ij   and   l_i = Σ_j exp(s_ij − m_i)
// in one pass over the row (the online softmax of chapter 4, here per lane and then across the warp),
// then, in a second pass, writes p_ij = exp(s_ij − m_i) / l_i as fp16 over the first half of the
// same row's bytes, where the PV GEMM reads P with a row stride of 2·ld halves.
// What changed since chapter 4: the softmax is a kernel of its own between two library GEMMs. It does
// almost no math per byte (a few instructions per 4-byte score), so its speed is memory's speed.
// Limitation: every score crosses memory: written by the QKᵀ GEMM (4 bytes), read here (4, twice when
// the row falls out of L1 between the passes), P written (2) and read by the PV GEMM (2). That is
// O(S²) traffic per head, the cost that the fused kernels avoid.
//
// Masking: keys j ≥ n_i get p_ij = 0, where n_i = i + 1 for causal attention (key j > i masked) and
// n_i = S otherwise; the padding columns S ≤ j < ld (zero keys the pipeline appended) are masked too.
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float

#define WARP 32                    // threads per warp: one warp per row
#define VEC 4                      // scores per lane per step: one 16-byte float4 load
#define LOG2E 1.4426950408889634f  // log2(e) = 1/ln 2: e^x = 2^(x·log2 e), and 2^x is one MUFU.EX2

// 2^x as the one hardware instruction (MUFU.EX2). exp2f() adds three instructions around it to
// handle results below 2^-126 (denormals); ".ftz" flushes those to 0, harmless for probabilities.
__device__ __forceinline__ float exp2_fast(float x) {
#ifdef __CUDA_ARCH__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);   // compiled for the CPU (the course's tests emulate this kernel without a GPU)
#endif
}

// softmax_rows: grid ⌈rows / warps per block⌉, block = warps per block × 32 threads.
extern "C" __global__ void softmax_rows(float* scores,                // [rows, ld] fp32 in, fp16 P out in place
                                        int rows,                     // B·H·S query rows
                                        int S,                        // keys per row (= queries per head)
                                        int ld,                       // row stride in floats, a multiple of 8
                                        int causal) {
    const int lane = threadIdx.x % WARP;                              // 0..31 within the warp
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= rows) return;                                          // the whole warp leaves together
    // TODO: pass 1: per-lane online (m, l) over float4 chunks, then a shuffle reduction across the
    //       warp; pass 2: p = exp(s - m) / l stored as fp16 over the row's first half, __syncwarp()
    //       between each step's loads and stores.
}
