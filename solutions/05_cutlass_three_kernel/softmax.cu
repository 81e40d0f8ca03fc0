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
    // BEGIN SOLUTION: pass 1: per-lane online (m, l) over float4 chunks, then a shuffle reduction across the warp; pass 2: p = exp(s - m) / l stored as fp16 over the row's first half, __syncwarp() between each step's loads and stores
    const int i = row % S;                                            // the query's position in its head
    const int n = causal ? i + 1 : S;                                 // keys j < n are kept
    const float* s = scores + (size_t)row * ld;                       // [ld] fp32 scores
    __half* p = reinterpret_cast<__half*>(scores + (size_t)row * ld); // [ld] fp16, over the same bytes

    // Pass 1: each lane walks columns lane·4, lane·4 + 128, ... keeping its own running max m and
    // running sum l of exp(s − m), all in the log2 domain (t = s·log2 e, so exp(s − m) = 2^(t − m)).
    float m = -CUDART_INF_F, l = 0.f;
    for (int c = lane * VEC; c < n; c += WARP * VEC) {
        const float4 x = *reinterpret_cast<const float4*>(s + c);    // [4]; c + 3 < ld since ld % 8 == 0
        float t[VEC] = {x.x, x.y, x.z, x.w};
        float cmax = -CUDART_INF_F;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            t[e] = (c + e < n) ? t[e] * LOG2E : -CUDART_INF_F;        // masked keys weigh exp(-inf) = 0
            cmax = fmaxf(cmax, t[e]);
        }
        const float m_new = fmaxf(m, cmax);                           // finite: column c < n is kept
        l *= exp2_fast(m - m_new);                                        // rescale the old sum to the new max
#pragma unroll
        for (int e = 0; e < VEC; ++e) l += exp2_fast(t[e] - m_new);
        m = m_new;
    }
    // Combine the 32 lanes' (m, l) by butterfly shuffles: after 5 steps every lane holds the row's.
    // A lane that saw no kept column has m = -inf and l = 0; it must add nothing (and -inf - -inf is NaN).
#pragma unroll
    for (int offset = WARP / 2; offset > 0; offset /= 2) {
        const float m_o = __shfl_xor_sync(0xffffffffu, m, offset);
        const float l_o = __shfl_xor_sync(0xffffffffu, l, offset);
        const float m_new = fmaxf(m, m_o);
        l = (m == -CUDART_INF_F ? 0.f : l * exp2_fast(m - m_new)) + (m_o == -CUDART_INF_F ? 0.f : l_o * exp2_fast(m_o - m_new));
        m = m_new;
    }
    const float inv_l = 1.f / l;                                      // l ≥ 1: the max itself adds 2^0

    // Pass 2: every lane runs the same number of steps (the loop bound is the row's, not the lane's),
    // so the whole warp meets at __syncwarp. Step c writes halves [128c, 128c + 128), i.e. the bytes of
    // floats [64c, 64c + 64): only in step 0 do they overlap floats this step reads, so all lanes must
    // hold their scores in registers before any lane stores.
    for (int base = 0; base < ld; base += WARP * VEC) {
        const int c = base + lane * VEC;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < n) x = *reinterpret_cast<const float4*>(s + c);      // masked chunks are not read at all
        __syncwarp();
        if (c < ld) {
            const float t[VEC] = {x.x, x.y, x.z, x.w};
            float q[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) q[e] = (c + e < n) ? exp2_fast(t[e] * LOG2E - m) * inv_l : 0.f;
            const __half2 lo = __floats2half2_rn(q[0], q[1]), hi = __floats2half2_rn(q[2], q[3]);
            uint2 packed;                                             // 4 halves = one 8-byte store
            packed.x = *reinterpret_cast<const unsigned int*>(&lo);
            packed.y = *reinterpret_cast<const unsigned int*>(&hi);
            *reinterpret_cast<uint2*>(p + c) = packed;
        }
    }
    // END SOLUTION
}
