// Chapter 3 exercise (step a of the chapter) — FlashAttention-2 on the tensor cores through nvcuda::wmma.
//
// The idea: the two matrix products of attention, S = Q·Kᵀ and O = P·V, run on the tensor cores as
// 16×16×16 tile products (fp16 in, fp32 accumulate), one warp per 16 query rows. The softmax between
// them stays on the CUDA cores: each warp stores its 16×Bc score tile to shared memory, updates the
// running row max m_i and sum l_i there (the online softmax of chapter 2), and writes P back as fp16
// for the second product. The output accumulator acc (16×D per warp) stays in registers, in fp32.
//
// What changed since chapter 2: the dot products leave the fp32 CUDA cores. A warp-wide
// `wmma::mma_sync` does 16·16·16 = 4096 multiply-adds and compiles to two HMMA.16816 instructions;
// the scalar loop it replaces is
//     for (int i = 0; i < 16; ++i)                 // for each row of the tile
//         for (int j = 0; j < 16; ++j)             //   for each column
//             for (int p = 0; p < 16; ++p)         //     the 16-term dot product
//                 c[i][j] += a[i][p] * b[p][j];    //     4096 FFMAs spread over 32 threads
//
// Rescaling acc without knowing its layout. Each tile, acc must be multiplied row by row by
// alpha_i = exp(m_old - m_new). But which (row, column) the element acc.x[e] of a thread holds is
// unspecified by the wmma API. Three ways out: keep acc in shared memory (load, rescale, store it
// every tile), store each P·V product to shared memory and add it there, or ask the fragment once.
// This kernel asks: at the start it loads a 16×16 matrix whose every element holds its own row index
// into an accumulator fragment, so row_of[e] = that fragment's x[e] is the row of element e — for every
// accumulator fragment of this type, because they all share one layout. Rescaling is then
// acc.x[e] *= alpha[row_of[e]], with alpha in shared memory: 8 shared loads per tile instead of
// moving 16×D floats through shared memory.
//
// Limitation: K and V tiles are loaded with plain synchronous loads, so each tile's memory latency
// is exposed between two __syncthreads (step b, k03b_cp_async.cu, overlaps it with cp.async), and
// the shared-memory rows are exactly 64 or 128 halves long, which makes the tensor-core loads hit one
// memory bank eight times over (step c, k03c_swizzle.cu, pads the rows).
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float
#include <mma.h>              // nvcuda::wmma

using namespace nvcuda;

constexpr int Br = 64;               // query rows per block (FlashAttention's B_r): 4 warps × 16 rows
constexpr int Bc = 64;               // keys per K/V tile (B_c)
constexpr int WARPS = Br / 16;       // 4: a wmma tile is 16 rows tall, so each warp owns 16 query rows
constexpr int THREADS = 32 * WARPS;  // 128 threads per block

// A fragment is a 16×16 tile spread over the 32 threads of a warp, in registers; which thread holds
// which element is up to the compiler. matrix_a/matrix_b are the fp16 operands of c += a·b, the
// accumulator holds c in fp32. Kᵀ needs no transpose: read as column-major, K's rows are Kᵀ's columns.
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;   // 16×16 of Q or P
using FragKt = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;  // 16×16 of Kᵀ
using FragV = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;   // 16×16 of V
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;                  // 16×16 fp32
constexpr int NE = FragC::num_elements;   // 8: the 256 elements of an accumulator over 32 threads

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }

// Dynamic shared memory, in bytes (attention.py computes the same total). Every offset is a multiple
// of 128 bytes, more than wmma's 32-byte alignment rule for the pointers it loads from and stores to.
template <int D>
struct Layout {
    static constexpr int LDQ = D, LDK = D, LDV = D;   // halves per row of the Q, K, V tiles (no padding)
    static constexpr int LDS = Bc;                    // floats per row of a warp's score tile
    static constexpr int LDP = Bc;                    // halves per row of a warp's P tile
    static constexpr int S_WARP = 16 * LDS * 4;       // bytes of one warp's scores  [16, LDS] fp32
    static constexpr int P_WARP = 16 * LDP * 2;       // bytes of one warp's P       [16, LDP] fp16
    static constexpr int K_OFF = 0;                                  // K tile      [Bc, LDK] fp16
    static constexpr int V_OFF = K_OFF + Bc * LDK * 2;               // V tile      [Bc, LDV] fp16
    static constexpr int Q_OFF = V_OFF + Bc * LDV * 2;               // Q tile      [Br, LDQ] fp16, and later
    static constexpr int QSP = cmax(Br * LDQ * 2, WARPS * (S_WARP + P_WARP));   // the warps' S and P tiles
    static constexpr int MAP_OFF = Q_OFF + QSP;                      // row map     [16, 16] fp32
    static constexpr int ALPHA_OFF = MAP_OFF + 16 * 16 * 4;          // per warp    [WARPS, 16] fp32
    static constexpr int BYTES = ALPHA_OFF + WARPS * 16 * 4;
    static_assert((LDK * 2) % 16 == 0 && (LDS * 4) % 16 == 0, "wmma: ldm must be a multiple of 16 bytes");
    static_assert((Bc * LDK * 2) % 128 == 0 && S_WARP % 128 == 0 && P_WARP % 128 == 0 && QSP % 128 == 0,
                  "128-byte aligned regions");
};
extern __shared__ __align__(128) unsigned char smem[];

// Copy rows [row0, row0 + ROWS) of one head's [S, D] matrix into tile[ROWS][LD]; rows past S become 0.
// 16 bytes (8 halves) per thread and step; consecutive threads take consecutive chunks of a row, so a
// warp reads whole 128-byte lines. Zeros matter: garbage past S could be NaN, and 0·NaN is NaN.
template <int ROWS, int D, int LD>
__device__ __forceinline__ void load_tile(__half* tile, const __half* src, int row0, int S) {
    constexpr int CHUNKS = D / 8;                          // 16-byte chunks per row
    static_assert(ROWS * CHUNKS % THREADS == 0, "whole steps only");
#pragma unroll
    for (int it = 0; it < ROWS * CHUNKS / THREADS; ++it) {
        const int c = threadIdx.x + it * THREADS;
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (row0 + r < S) val = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * D + col);
        *reinterpret_cast<uint4*>(tile + r * LD + col) = val;
    }
}

// Four fp32 values rounded to fp16, packed into 8 bytes for one store.
__device__ __forceinline__ uint2 pack_half4(float a, float b, float c, float d) {
    __half2 lo = __floats2half2_rn(a, b), hi = __floats2half2_rn(c, d);
    return make_uint2(*reinterpret_cast<unsigned*>(&lo), *reinterpret_cast<unsigned*>(&hi));
}

// 2^x in one instruction on the special-function unit (SASS MUFU.EX2). exp2f() wraps the same
// instruction in a range fix-up for results below 2^-126, which a probability can round to 0 (.ftz).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Write columns [c0, c0 + 64) of one output row from the warp's fp32 staging tile Sw[16][LDS] to O as
// fp16. The lane pair (r, h) of a row takes the 4-float chunks 2k + h, k = 0..7.
template <int D, int LDS>
__device__ __forceinline__ void store_row(__half* O, const float* Sw, int r, int h, int row, int c0, int S) {
    if (row >= S) return;                                  // padding rows of the last query tile
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const float4 f = *reinterpret_cast<const float4*>(Sw + r * LDS + 8 * k + 4 * h);
        *reinterpret_cast<uint2*>(O + (size_t)row * D + c0 + 8 * k + 4 * h) = pack_half4(f.x, f.y, f.z, f.w);
    }
}

template <int D>
__device__ __forceinline__ void attention_block(const __half* __restrict__ Q,   // [B, H, S, D]
                                                const __half* __restrict__ K,   // [B, H, S, D]
                                                const __half* __restrict__ V,   // [B, H, S, D]
                                                __half* __restrict__ O,         // [B, H, S, D]
                                                int S, float scale_log2, int causal) {
    using L = Layout<D>;
    static_assert(Bc == 64 && D % 64 == 0, "the softmax and the epilogue walk 64 columns per lane pair");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __half* Ks = reinterpret_cast<__half*>(smem + L::K_OFF);                            // [Bc, LDK]
    __half* Vs = reinterpret_cast<__half*>(smem + L::V_OFF);                            // [Bc, LDV]
    __half* Qs = reinterpret_cast<__half*>(smem + L::Q_OFF);                            // [Br, LDQ]
    float* Sw = reinterpret_cast<float*>(smem + L::Q_OFF + warp * L::S_WARP);           // [16, LDS]
    __half* Pw = reinterpret_cast<__half*>(smem + L::Q_OFF + WARPS * L::S_WARP + warp * L::P_WARP);  // [16, LDP]
    float* rowmap = reinterpret_cast<float*>(smem + L::MAP_OFF);                        // [16, 16]
    float* alpha_w = reinterpret_cast<float*>(smem + L::ALPHA_OFF) + warp * 16;         // [16]

    // Grid (⌈S/Br⌉, B·H). Query tiles in reverse order: with causal=True the last tiles see the most
    // keys, and starting them first keeps the SMs busy to the end.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * Br;      // first query row of this block
    const size_t head = (size_t)blockIdx.y * S * D;        // offset of this (batch, head) slab
    Q += head; K += head; V += head; O += head;

    load_tile<Br, D, L::LDQ>(Qs, Q, q0, S);
    for (int e = threadIdx.x; e < 16 * 16; e += THREADS) rowmap[e] = (float)(e / 16);   // element (i, j) = i
    __syncthreads();

    FragA qf[D / 16];                                      // this warp's 16×D slice of Q, kept in registers
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(qf[kk], Qs + warp * 16 * L::LDQ + kk * 16, L::LDQ);
    int row_of[NE];                                        // row (0..15) of accumulator element x[e]
    {
        FragC map;
        wmma::load_matrix_sync(map, rowmap, 16, wmma::mem_row_major);
#pragma unroll
        for (int e = 0; e < NE; ++e) row_of[e] = (int)map.x[e];
    }
    FragC acc[D / 16];                                     // 16×D fp32 output accumulator, D/16 tiles wide
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) wmma::fill_fragment(acc[dn], 0.f);

    // The softmax works on rows: lanes 2r and 2r + 1 share row r of the warp's 16 (h = which of the pair).
    const int r = lane / 2, h = lane % 2;
    const int row = q0 + warp * 16 + r;                    // this lane pair's query row
    float m_i = -CUDART_INF_F;                             // running max of the row's scaled scores (log2 units)
    float l_i = 0.f;                                       // running sum of exp2(t - m_i) over the row

    const int n_keys_tiles = (S + Bc - 1) / Bc;
    // causal: tiles starting past this block's last query row are fully masked and skipped
    const int n_tiles = causal ? min(n_keys_tiles, (q0 + Br - 1) / Bc + 1) : n_keys_tiles;
    for (int j = 0; j < n_tiles; ++j) {
        const int k0 = j * Bc;                             // first key of this tile
        __syncthreads();                                   // every warp is done with the previous K, V (and Q)
        load_tile<Bc, D, L::LDK>(Ks, K, k0, S);
        load_tile<Bc, D, L::LDV>(Vs, V, k0, S);
        __syncthreads();                                   // the tiles are complete

        // TODO: S_w = Q_w·K_jᵀ on the tensor cores: for each 16-key block n, a FragC over D/16
        //       mma_sync of qf[kk] and K (as FragKt, at Ks + 16n·LDK + 16kk), stored to Sw + 16n
        //       (row-major, LDS); then __syncwarp().

        // TODO: the online softmax of row r (its columns 8k + 4h .. 8k + 4h + 3 of Sw, k = 0..7):
        //       mask keys ≥ S (and > row if causal) to -inf, new max m_i in log2 units (combine the
        //       lane pair with __shfl_xor_sync), alpha = fast_exp2(m_old - m_new), p =
        //       fast_exp2(score·scale_log2 - m_new) as fp16 into Pw (pack_half4), l_i = alpha·l_i +
        //       row sum; alpha_w[r] = alpha; __syncwarp().

        // TODO: acc.x[e] *= alpha_w[row_of[e]] for every accumulator tile, then acc[dn] += P (FragA
        //       at Pw + 16kk, LDP) · V_j (FragV at Vs + 16kk·LDV + 16dn, LDV) with mma_sync.
    }

    __syncwarp();                                          // every lane is done reading alpha_w for the last
                                                           // tile: the epilogue may reuse it for 1/l_i
    // TODO: O = acc / l_i: put 1/l_i in alpha_w[r], __syncwarp, scale acc like alpha, then for each
    //       64 columns store 4 accumulator tiles to Sw (LDS), __syncwarp, store_row<D, L::LDS>(O,
    //       Sw, r, h, row, 64g, S), __syncwarp.
}

// One entry point per head dim: D is a template parameter, so every loop over D is unrolled and
// every fragment array has a compile-time size (a run-time index would put it in local memory).
extern "C" __global__ void __launch_bounds__(THREADS) wmma_attention_d64(
    const __half* Q, const __half* K, const __half* V, __half* O, int S, float scale_log2, int causal) {
    attention_block<64>(Q, K, V, O, S, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS) wmma_attention_d128(
    const __half* Q, const __half* K, const __half* V, __half* O, int S, float scale_log2, int causal) {
    attention_block<128>(Q, K, V, O, S, scale_log2, causal);
}
