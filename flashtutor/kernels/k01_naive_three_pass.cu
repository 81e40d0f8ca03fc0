// Chapter 1 reference — naive attention in three kernels, one thread per output element.
//
// The idea: write attention exactly as the math reads, one kernel per line of it,
//     scores = scale · Q Kᵀ          (scores_kernel:  one thread per score  s_ij)
//     P      = softmax(scores)       (softmax_kernel: one thread per row i)
//     O      = P V                   (pv_kernel:      one thread per output o_id)
// with the B·H·S×S score matrix in global memory, in fp32, between the kernels.
// What changed: nothing yet — this is the first rung of the ladder.
// Limitation: every score is written to HBM and read back twice (4·S² bytes per head each way),
// every q and k element is re-read from memory S times, and the math runs on the fp32 CUDA
// cores, not the tensor cores. Chapter 2 keeps tiles on chip; chapter 3 uses the tensor cores.
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float

// 1. s_ij = scale · q_i · k_j. Grid (⌈S/16⌉, ⌈S/16⌉, B·H), block 16×16: threadIdx.x walks j, so
//    the 16 threads of a half-warp write 16 consecutive scores (one coalesced 64-byte store).
extern "C" __global__ void scores_kernel(const __half* __restrict__ Q,   // [B, H, S, D]
                                         const __half* __restrict__ K,   // [B, H, S, D]
                                         float* __restrict__ scores,     // [B, H, S, S]
                                         int S, int D, float scale, int causal) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;   // key index
    const int i = blockIdx.y * blockDim.y + threadIdx.y;   // query index
    const size_t bh = blockIdx.z;                          // which (batch, head)
    if (i >= S || j >= S) return;                          // the last tile may be partial
    float s;
    if (causal && j > i) {
        s = -CUDART_INF_F;                                     // masked: exp(-inf) = 0 in the softmax
    } else {
        const __half* q = Q + (bh * S + i) * D;            // [D]
        const __half* k = K + (bh * S + j) * D;            // [D]
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot += __half2float(q[d]) * __half2float(k[d]);
        s = dot * scale;
    }
    scores[(bh * S + i) * S + j] = s;
}

// 2. P = softmax(scores), row by row, in place. One thread per row (B·H·S threads).
//    Subtracting the row max first keeps exp() from overflowing: softmax(s) = softmax(s - max s).
extern "C" __global__ void softmax_kernel(float* __restrict__ scores,   // [B·H·S, S], becomes P
                                          int rows, int S) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* s = scores + (size_t)r * S;                     // [S]
    float m = -CUDART_INF_F;
    for (int j = 0; j < S; ++j) m = fmaxf(m, s[j]);
    float l = 0.f;
    for (int j = 0; j < S; ++j) { const float p = expf(s[j] - m); s[j] = p; l += p; }
    const float inv_l = 1.f / l;
    for (int j = 0; j < S; ++j) s[j] *= inv_l;
}

// 3. o_id = Σ_j p_ij · v_jd. Grid (⌈D/blockDim.x⌉, S, B·H): threadIdx.x walks d, so a warp reads
//    consecutive v_jd (coalesced) and writes consecutive o_id.
extern "C" __global__ void pv_kernel(const float* __restrict__ P,    // [B, H, S, S]
                                     const __half* __restrict__ V,   // [B, H, S, D]
                                     __half* __restrict__ O,         // [B, H, S, D]
                                     int S, int D, int causal) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y;
    const size_t bh = blockIdx.z;
    if (d >= D) return;
    const float* p = P + (bh * S + i) * S;                 // [S]
    const __half* v = V + bh * S * D;                      // [S, D]
    const int n_keys = causal ? i + 1 : S;                 // p_ij = 0 for j > i anyway: skip them
    float acc = 0.f;
    for (int j = 0; j < n_keys; ++j) acc += p[j] * __half2float(v[(size_t)j * D + d]);
    O[(bh * S + i) * D + d] = __float2half(acc);
}
