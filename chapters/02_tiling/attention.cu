// Chapter 2 exercise (step c) — tiled attention with the online softmax, in scalar fp32
// (FlashAttention's algorithm on the CUDA cores).
//
// The idea: a block of 256 threads owns Br = 64 query rows of one (batch, head). It copies its Q
// tile into shared memory once, then streams the keys and values past it, Bc rows at a time: each
// K/V tile crosses from global memory once (16-byte coalesced loads) and serves all 64 query rows.
// The softmax is computed *online*: each row keeps a running max m_i, a running sum l_i and an
// output accumulator acc, and rescales l_i and acc by 2^(m_old − m_new) whenever the max grows. One
// pass over K and V is enough, and no score ever leaves the chip.
// What changed since step b (flashtutor/kernels/k02b_smem_tiles.cu): step b streamed K twice, once
// to find m_i and once more for the sums. With the rescaling, the first pass is gone: K is read
// once and every score q_i·k_j is computed once (step b computed each twice).
// Limitation: the math runs on the fp32 CUDA cores (about 67 TFLOP/s on an H100 SXM), not on the
// tensor cores (about 990) — chapter 3's subject. And within a block, loading a tile and computing
// on it do not overlap; only the other blocks resident on the SM fill that gap.
//
// Notation (FlashAttention papers): Br query rows and Bc keys per tile; for query row i, m_i is the
// running max, l_i the running sum of p_ij = 2^(s_ij − m_i), acc_i the running Σ_j p_ij v_j.
// Scores are in base-2 units: the launcher passes qk_scale = (1/√D)·log2(e), log2(e) = 1/ln 2 =
// 1.44269504, and exp2f(x·log2 e) = e^x, so the result is the same softmax (exp2 is the fast one).
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float

constexpr int THREADS = 256;  // 8 warps per block, seen as a 16×16 grid: ty = tid / 16, tx = tid % 16
constexpr int Br = 64;        // query rows per block (the Q tile)
constexpr int TM = Br / 16;   // 4 query rows per thread: rows 4·ty … 4·ty + 3 of the tile
constexpr unsigned FULL = 0xffffffffu;   // every lane of the warp takes part in a shuffle
static_assert(TM == 4, "the float4 accesses below assume 4 rows per thread");

// The tile sizes that depend on the head dim D. Shared memory per block, all fp32:
//   Qs [Br][D+4] + Ks [Bc][D+4] + Vs [Bc][D] + Ps [Bc][Br+4]
//   D =  64, Bc = 64: 17 408 + 17 408 + 16 384 + 17 408 = 68 608 bytes
//   D = 128, Bc = 32: 33 792 + 16 896 + 16 384 +  8 704 = 75 776 bytes
// An H100/H200 SM has 228 KB of shared memory and 64 K registers; the registers (≤ 128 per thread,
// see __launch_bounds__ at the end) allow two blocks (16 warps) per SM, and so does the shared
// memory. Bc = 64 at D = 128 would need 115 KB and leave room for one block. The launcher
// (attention.py) computes the same sizes.
template <int D>
struct Tile {
    static constexpr int Bc = D == 64 ? 64 : 32;   // keys per K/V tile
    static constexpr int TN = Bc / 16;             // keys per thread: tx, tx + 16, tx + 32, …
    static constexpr int TD = D / 16;              // output columns per thread: 4·tx + 64·g + 0…3
    static constexpr int LDQK = D + 4;             // row stride (floats) of Qs and Ks, padded by 4:
                                                   //   thread tx reads row tx·(D+4), i.e. bank 4·tx:
                                                   //   8 threads of a quarter-warp hit 32 different banks
    static constexpr int LDP = Br + 4;             // row stride of Ps, padded for the same reason
};

// Copy rows row0 … row0 + ROWS − 1 of a [S, D] fp16 matrix into a [ROWS][LD] fp32 tile in shared
// memory, multiplied by `factor`. Rows at or past S are filled with zeros (a zero V row times a zero
// probability is 0; uninitialised memory could hold NaN, and 0 × NaN = NaN).
// The block's THREADS threads copy 16-byte chunks (8 halves): chunk c is row c / (D/8), columns
// 8·(c % (D/8)) … + 7, so consecutive threads read consecutive 16 bytes and a warp reads 512
// contiguous bytes per load instruction — fully coalesced.
template <int D, int ROWS, int LD>
__device__ __forceinline__ void load_tile(float* __restrict__ dst,          // [ROWS][LD] shared
                                          const __half* __restrict__ src,   // [S, D] global
                                          int row0, int S, float factor) {
    // TODO: copy the tile with 16-byte loads (uint4 = 8 halves), one chunk per thread per step;
    //       zeros for rows ≥ S.
}

// s[r][j] = Σ_d Qs[4·ty + r][d] · Ks[tx + 16·j][d]: this thread's TM × TN patch of the Br × Bc score
// tile (already × scale·log2 e, folded into Qs). Each step reads 4 values of d at once (float4):
// TM + TN shared loads feed 4·TM·TN fused multiply-adds.
template <int D>
__device__ __forceinline__ void score_tile(float (&s)[TM][Tile<D>::TN], const float* __restrict__ Qs,
                                           const float* __restrict__ Ks, int tx, int ty) {
    constexpr int TN = Tile<D>::TN, LD = Tile<D>::LDQK;
    #pragma unroll
    for (int r = 0; r < TM; ++r)
        #pragma unroll
        for (int j = 0; j < TN; ++j) s[r][j] = 0.f;
    #pragma unroll
    for (int d = 0; d < D; d += 4) {
        float4 k4[TN];                                            // keys tx + 16·j, dims d … d + 3
        #pragma unroll
        for (int j = 0; j < TN; ++j) k4[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * LD + d);
        #pragma unroll
        for (int r = 0; r < TM; ++r) {
            const float4 q4 = *reinterpret_cast<const float4*>(Qs + (ty * TM + r) * LD + d);  // row 4·ty + r
            #pragma unroll
            for (int j = 0; j < TN; ++j) {
                s[r][j] = fmaf(q4.x, k4[j].x, s[r][j]);
                s[r][j] = fmaf(q4.y, k4[j].y, s[r][j]);
                s[r][j] = fmaf(q4.z, k4[j].z, s[r][j]);
                s[r][j] = fmaf(q4.w, k4[j].w, s[r][j]);
            }
        }
    }
}

// Scores that must not count become −∞ (then p = 2^(−∞ − m) = 0): keys at or past S (the last
// tile is partial when S is no multiple of Bc) and, with causal, keys after the query (j > i).
template <int D>
__device__ __forceinline__ void mask_scores(float (&s)[TM][Tile<D>::TN], int k0, int q0, int S, int causal,
                                            int tx, int ty) {
    // TODO: set s[r][j] to −∞ where key k0 + tx + 16·j is ≥ S, or (causal) after query q0 + 4·ty +
    //       r.
}

// acc[r][·] += Σ_key Ps[key][4·ty + r] · Vs[key][this thread's columns]: the P·V product of the tile.
// Thread tx owns columns 4·tx + 64·g + 0…3 (g < D/64), so a quarter-warp reads 128 contiguous bytes
// of a V row per float4 load (no bank conflicts); the 4 probabilities of its rows are one float4.
template <int D>
__device__ __forceinline__ void pv_tile(float (&acc)[TM][Tile<D>::TD], const float* __restrict__ Ps,
                                        const float* __restrict__ Vs, int tx, int ty) {
    constexpr int Bc = Tile<D>::Bc, LDP = Tile<D>::LDP;
    #pragma unroll 8
    for (int key = 0; key < Bc; ++key) {
        const float4 p4 = *reinterpret_cast<const float4*>(Ps + key * LDP + ty * TM);   // p of rows 4·ty … + 3
        const float p[TM] = {p4.x, p4.y, p4.z, p4.w};
        #pragma unroll
        for (int g = 0; g < D / 64; ++g) {
            const float4 v4 = *reinterpret_cast<const float4*>(Vs + key * D + 64 * g + 4 * tx);
            #pragma unroll
            for (int r = 0; r < TM; ++r) {
                acc[r][4 * g + 0] = fmaf(p[r], v4.x, acc[r][4 * g + 0]);
                acc[r][4 * g + 1] = fmaf(p[r], v4.y, acc[r][4 * g + 1]);
                acc[r][4 * g + 2] = fmaf(p[r], v4.z, acc[r][4 * g + 2]);
                acc[r][4 * g + 3] = fmaf(p[r], v4.w, acc[r][4 * g + 3]);
            }
        }
    }
}

template <int D>
__device__ __forceinline__ void flash_attention(const __half* __restrict__ Q,   // [B, H, S, D]
                                                const __half* __restrict__ K,   // [B, H, S, D]
                                                const __half* __restrict__ V,   // [B, H, S, D]
                                                __half* __restrict__ O,         // [B, H, S, D]
                                                int S, float qk_scale, int causal) {
    using T = Tile<D>;
    constexpr int Bc = T::Bc, TN = T::TN, TD = T::TD, LDQK = T::LDQK, LDP = T::LDP;
    extern __shared__ float4 smem[];                      // dynamic shared memory, sized by the launcher
    float* Qs = reinterpret_cast<float*>(smem);           // [Br][LDQK]  q · scale · log2 e
    float* Ks = Qs + Br * LDQK;                           // [Bc][LDQK]
    float* Vs = Ks + Bc * LDQK;                           // [Bc][D]
    float* Ps = Vs + Bc * D;                              // [Bc][LDP]   P transposed: Ps[key][row]

    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    // With causal, query block qb needs qb + 1 key tiles: launch the longest ones first, so the
    // short ones fill the gaps at the end instead of a long one starting last.
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qb * Br;                               // first query row of this block
    const size_t head = (size_t)blockIdx.y * S * D;       // (batch, head) slab: blockIdx.y = b·H + h
    Q += head; K += head; V += head; O += head;

    load_tile<D, Br, LDQK>(Qs, Q, q0, S, qk_scale);       // once: the Q tile stays for the whole loop

    float m_i[TM], l_i[TM], acc[TM][TD];                  // per row: running max, this thread's share
    #pragma unroll                                        // of the running sum, its TD output columns
    for (int r = 0; r < TM; ++r) {
        m_i[r] = -CUDART_INF_F;
        l_i[r] = 0.f;
        #pragma unroll
        for (int c = 0; c < TD; ++c) acc[r][c] = 0.f;
    }

    // Keys j > q0 + Br − 1 are masked for every row of the block: with causal, stop before them.
    const int kv_end = causal ? min(S, q0 + Br) : S;
    for (int k0 = 0; k0 < kv_end; k0 += Bc) {
        __syncthreads();                                  // all threads are done with the last Ks, Vs, Ps
        load_tile<D, Bc, LDQK>(Ks, K, k0, S, 1.f);        // [Bc, D] keys k0 … k0 + Bc − 1
        load_tile<D, Bc, D>(Vs, V, k0, S, 1.f);           // [Bc, D] values
        __syncthreads();                                  // the tiles (and Qs, the first time) are complete

        float s[TM][TN];                                  // this thread's patch of the score tile
        score_tile<D>(s, Qs, Ks, tx, ty);
        mask_scores<D>(s, k0, q0, S, causal, tx, ty);

        // TODO: the online-softmax update: row max over the 16 threads of a row, rescale l_i and
        //       acc, p = 2^(s − m) into Ps.
        __syncthreads();                                  // Ps complete before anyone reads it
        pv_tile<D>(acc, Ps, Vs, tx, ty);
    }

    // TODO: add up l_i over the 16 threads of each row, then o = acc / l_i as fp16 for rows < S.
}

// One kernel per head dim (the tile sizes are compile-time constants). Grid: (⌈S/Br⌉, B·H).
// __launch_bounds__(256, 2): at most 256 threads per block, and at most 128 registers per thread so
// that two blocks (2 × 256 × 128 = 65 536, the SM's whole register file) can be resident. Asking for
// three (≤ 80 registers) makes the compiler spill registers to local memory.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
flash_attention_d64(const __half* __restrict__ Q, const __half* __restrict__ K, const __half* __restrict__ V,
                    __half* __restrict__ O, int S, float qk_scale, int causal) {
    flash_attention<64>(Q, K, V, O, S, qk_scale, causal);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
flash_attention_d128(const __half* __restrict__ Q, const __half* __restrict__ K, const __half* __restrict__ V,
                     __half* __restrict__ O, int S, float qk_scale, int causal) {
    flash_attention<128>(Q, K, V, O, S, qk_scale, causal);
}
