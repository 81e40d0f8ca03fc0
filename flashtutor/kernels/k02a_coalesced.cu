// Chapter 2, step a — coalesced loads: one warp per query row, its 32 lanes split the head dim.
//
// The idea: chapter 1's row kernel gave each *thread* a query row, and that made most of its memory
// accesses wasteful. The 32 threads of a warp read K and V one 2-byte element per load instruction
// (all 32 ask for the same k_jd: a broadcast), while every access to q_i and to the score rows
// touched 32 different rows at once: 32 separate 32-byte sectors per instruction, 2 or 4 useful
// bytes in each. Here a *warp* owns a query row and its 32 lanes split the D values of every k_j
// and v_j row: lane L reads the half2 pairs L, L + 32, …, so one load instruction brings 128
// contiguous, useful bytes (one coalesced access). The price: a dot product q_i·k_j is now spread
// over 32 lanes, and a warp-shuffle reduction (5 steps) adds it up.
// The three loops of chapter 1 stay: (1) scores s_j and their max m, written to the scratch row,
// (2) p_j = e^(s_j − m) and their sum l, (3) o = Σ_j p_j v_j / l. The scratch row is read and
// written 32 consecutive scores at a time, one per lane (coalesced too), and loop 3 reads each p_j
// once and hands it to the other lanes with a shuffle, instead of re-reading the row for every d.
// What changed since chapter 1's row kernel (solutions/01_naive_cuda/attention.cu): who does the
// work of a row — a warp instead of a thread — and so the shape of every memory access.
// Limitation: every warp still reads all of K and V for its own row (S² rows of K and of V per
// head in all, served mostly by the L2 cache), and the S scores of each row still make a round trip
// through global memory. Step b shares K and V between the rows of a block through shared memory.
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float

constexpr unsigned FULL = 0xffffffffu;   // every lane of the warp takes part in a shuffle

// The sum of x over the 32 lanes of a warp, in every lane: a butterfly of 5 shuffles. After the
// step with offset o, each lane holds the sum of a group of 2·o lanes (xor pairs lane L with L ^ o).
__device__ __forceinline__ float warp_sum(float x) {
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

// One warp per query row. D = 64 or 128: each lane holds D/64 half2 pairs of a row (1 or 2).
template <int D>
__device__ __forceinline__ void warp_row_attention(const __half* __restrict__ Q,   // [B, H, S, D]
                                                   const __half* __restrict__ K,   // [B, H, S, D]
                                                   const __half* __restrict__ V,   // [B, H, S, D]
                                                   __half* __restrict__ O,         // [B, H, S, D]
                                                   float* __restrict__ scores,     // [B·H·S, S] scratch
                                                   int rows, int S, float scale, int causal) {
    constexpr int H2 = D / 64;                               // half2 pairs per lane: lane L has L, L + 32
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // this warp's query row
    if (r >= rows) return;                                   // the whole warp leaves together
    const int i = r % S;                                     // position of the query in its sequence
    const size_t bh = r / S;                                 // which (batch, head)
    const __half2* q = reinterpret_cast<const __half2*>(Q + (size_t)r * D);    // [D/2]
    const __half2* k = reinterpret_cast<const __half2*>(K + bh * S * D);       // [S, D/2]
    const __half2* v = reinterpret_cast<const __half2*>(V + bh * S * D);       // [S, D/2]
    float* s = scores + (size_t)r * S;                       // [S] this row's scratch
    const int n_keys = causal ? i + 1 : S;                   // keys j > i are masked out

    float2 qf[H2];                                           // this lane's share of q_i, in fp32
    #pragma unroll
    for (int c = 0; c < H2; ++c) qf[c] = __half22float2(q[c * 32 + lane]);

    // 1. s_j = scale · q·k_j, and the row max m. Keys go in groups of 32: lane L keeps s_(j0+L),
    //    and the group is stored with one coalesced 128-byte store.
    float m = -CUDART_INF_F;
    for (int j0 = 0; j0 < n_keys; j0 += 32) {
        const int n = min(32, n_keys - j0);
        float mine = 0.f;
        #pragma unroll 4
        for (int jj = 0; jj < n; ++jj) {
            const __half2* kj = k + (size_t)(j0 + jj) * (D / 2);   // row k_j: the warp reads D·2 contiguous bytes
            float part = 0.f;                                       // this lane's part of q·k_j
            #pragma unroll
            for (int c = 0; c < H2; ++c) {
                const float2 kf = __half22float2(kj[c * 32 + lane]);
                part = fmaf(qf[c].x, kf.x, part);
                part = fmaf(qf[c].y, kf.y, part);
            }
            const float sj = warp_sum(part) * scale;         // every lane now holds s_j
            m = fmaxf(m, sj);
            mine = lane == jj ? sj : mine;
        }
        if (lane < n) s[j0 + lane] = mine;
    }
    // 2. p_j = e^(s_j − m) and l = Σ_j p_j. Lane L takes j = L, L + 32, …: the same entries it stored
    //    in loop 1, so it reads its own writes and needs no synchronisation with other lanes.
    float l = 0.f;
    for (int j = lane; j < n_keys; j += 32) {
        const float p = expf(s[j] - m);
        s[j] = p;
        l += p;
    }
    l = warp_sum(l);
    // 3. o = Σ_j p_j v_j / l. Lane L loads p_(j0+L) (its own entry again) and broadcasts it to the
    //    warp with a shuffle; the v_j row is read like k_j in loop 1: one coalesced load per pair.
    float2 acc[H2];
    #pragma unroll
    for (int c = 0; c < H2; ++c) acc[c] = make_float2(0.f, 0.f);
    for (int j0 = 0; j0 < n_keys; j0 += 32) {
        const int n = min(32, n_keys - j0);
        const float p_mine = lane < n ? s[j0 + lane] : 0.f;
        #pragma unroll 4
        for (int jj = 0; jj < n; ++jj) {
            const float p = __shfl_sync(FULL, p_mine, jj);   // p_(j0+jj), from lane jj to all
            const __half2* vj = v + (size_t)(j0 + jj) * (D / 2);
            #pragma unroll
            for (int c = 0; c < H2; ++c) {
                const float2 vf = __half22float2(vj[c * 32 + lane]);
                acc[c].x = fmaf(p, vf.x, acc[c].x);
                acc[c].y = fmaf(p, vf.y, acc[c].y);
            }
        }
    }
    const float inv_l = 1.f / l;
    __half2* o = reinterpret_cast<__half2*>(O + (size_t)r * D);    // [D/2]
    #pragma unroll
    for (int c = 0; c < H2; ++c) o[c * 32 + lane] = __floats2half2_rn(acc[c].x * inv_l, acc[c].y * inv_l);
}

// Block: 128 threads = 4 warps = 4 query rows. Grid: ⌈B·H·S / 4⌉ blocks. One kernel per head dim.
extern "C" __global__ void coalesced_d64(const __half* __restrict__ Q, const __half* __restrict__ K,
                                         const __half* __restrict__ V, __half* __restrict__ O,
                                         float* __restrict__ scores, int rows, int S, float scale, int causal) {
    warp_row_attention<64>(Q, K, V, O, scores, rows, S, scale, causal);
}

extern "C" __global__ void coalesced_d128(const __half* __restrict__ Q, const __half* __restrict__ K,
                                          const __half* __restrict__ V, __half* __restrict__ O,
                                          float* __restrict__ scores, int rows, int S, float scale, int causal) {
    warp_row_attention<128>(Q, K, V, O, scores, rows, S, scale, causal);
}
