// Adversarial chapter-1 kernel: a shared-memory race (for `flashtutor grade --sanitize`).
//
// One thread per query row, TILE query rows of one (batch, head) per block. The keys are walked in
// tiles of TILE rows: the block's threads copy a tile of K into shared memory together (thread t
// copies key row t of the tile), then every thread reads all the rows of the tile for its scores.
// Two barriers make this correct: one after the tile is filled (a thread reads rows that other
// warps wrote) and one before the next tile overwrites it (other warps may still be reading).
// Compiled without RACE_FIXED both are left out — the classic missing __syncthreads(): results
// depend on warp timing, and compute-sanitizer's racecheck reports the hazards with file:line.
// With -DRACE_FIXED=1 (tests/adversarial/ch01_tiled_ok) the same source is race-free and correct.
//
// Scores make a round trip through a global fp32 scratch row, as in the chapter-1 solution.
#include <cuda_fp16.h>
#include <math_constants.h>

#define TILE 64      // threads per block = query rows per block = key rows per shared tile
#define MAX_D 128    // largest head dim the course grades

#ifdef RACE_FIXED
#define TILE_BARRIER() __syncthreads()
#else
#define TILE_BARRIER() ((void)0)   // the bug: no barrier
#endif

extern "C" __global__ void tiled_k_attention(const __half* __restrict__ Q,   // [B, H, S, D]
                                             const __half* __restrict__ K,   // [B, H, S, D]
                                             const __half* __restrict__ V,   // [B, H, S, D]
                                             __half* __restrict__ O,         // [B, H, S, D]
                                             float* __restrict__ scores,     // [B·H·S, S] scratch
                                             int S, int D, float scale, int causal) {
    __shared__ __half Ks[TILE][MAX_D];
    const int t = threadIdx.x;
    const int i = blockIdx.x * TILE + t;            // this thread's query position
    const size_t bh = blockIdx.y;                   // which (batch, head)
    const bool valid = i < S;                       // no early return: every thread takes part in the copies
    const __half* q = Q + (bh * S + i) * D;
    const __half* k = K + bh * S * D;
    const __half* v = V + bh * S * D;
    float* s = scores + (bh * S + i) * (size_t)S;
    const int n_keys = causal ? i + 1 : S;
    // The same tile count for every thread of the block (barriers must be reached by all).
    const int block_keys = causal ? min(S, (int)(blockIdx.x + 1) * TILE) : S;

    float m = -CUDART_INF_F;
    for (int j0 = 0; j0 < block_keys; j0 += TILE) {
        if (j0 + t < S)
            for (int d = 0; d < D; ++d) Ks[t][d] = k[(size_t)(j0 + t) * D + d];
        TILE_BARRIER();   // the tile is complete before anyone reads it
        if (valid) {
            const int j1 = min(j0 + TILE, n_keys);
            for (int j = j0; j < j1; ++j) {
                float dot = 0.f;
                for (int d = 0; d < D; ++d) dot += __half2float(q[d]) * __half2float(Ks[j - j0][d]);
                s[j] = dot * scale;
                m = fmaxf(m, s[j]);
            }
        }
        TILE_BARRIER();   // everyone is done with the tile before it is overwritten
    }
    if (!valid) return;   // past the last barrier: leaving is safe now

    float l = 0.f;
    for (int j = 0; j < n_keys; ++j) {
        const float p = expf(s[j] - m);
        s[j] = p;
        l += p;
    }
    const float inv_l = 1.f / l;
    for (int d = 0; d < D; ++d) {
        float acc = 0.f;
        for (int j = 0; j < n_keys; ++j) acc += s[j] * __half2float(v[(size_t)j * D + d]);
        O[(bh * S + i) * D + d] = __float2half(acc * inv_l);
    }
}
