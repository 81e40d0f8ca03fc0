// Chapter 3, step c — step b with a shared-memory layout free of bank conflicts (padded rows).
//
// The idea: shared memory is 32 banks, each 4 bytes wide; in one cycle each bank serves one 4-byte
// word, so a request whose addresses fall on the same bank at different words is split into as many
// passes ("wavefronts") as the most-used bank has words. load_matrix_sync compiles to ldmatrix
// (SASS LDSM), which reads 8 rows of 16 bytes per phase. With a row stride of 64 halves = 128 bytes,
// rows r and r + 1 start 128 bytes = 32 banks apart, i.e. in the same bank: all 8 rows hit banks
// 0-3 and the phase takes 8 passes instead of 1. Padding each row by 8 halves (16 bytes) moves row r's
// start by 4r banks: 8 rows then cover banks 0-31 exactly once. The same arithmetic, per tile:
//   K, V, Q [Bc, D + 8] fp16 : stride (D + 8)·2 bytes ≡ 16 (mod 128) → 8 ldmatrix rows in 8 bank groups
//   P       [16, Bc + 8] fp16: the softmax's 8-byte stores: a half-warp writes rows 0..7 at banks 4r + 2h
//   S       [16, Bc + 8] fp32: stride 72 floats ≡ 8 banks (mod 32): store_matrix_sync's 8-byte stores
//                              (4 rows × 32 bytes per half-warp) and the softmax's 16-byte reads
//                              (4 rows × 2 chunks per quarter-warp) land on distinct banks
// Why not an XOR swizzle (store 16-byte chunk c of row r at chunk c ^ (r % 8), no wasted bytes)?
// load_matrix_sync takes a pointer and a row stride `ldm` and computes every address as
// base + row·ldm + col: it cannot follow a permutation inside a row. The stride is all wmma lets us
// choose, and it must be a multiple of 8 halves (16 bytes) — which is why the pad is 8 halves and not
// 1, as a scalar kernel would use. Swizzles need hand-written ldmatrix (or CUTLASS's layouts, ch. 5).
// The padding costs shared memory: 12.5% more per fp16 tile at D = 64.
//
// What changed since step b: the row strides LDQ, LDK, LDV, LDP (+8 halves) and LDS (+8 floats).
// Limitation: the tensor cores are driven through mma.sync (HMMA), the pre-Hopper path: an H100 runs
// its matrix instructions fastest through wgmma (HGMMA), issued by a warpgroup from shared memory,
// which wmma cannot reach; and the softmax still round-trips through shared memory. Chapter 4
// (Triton on Hopper) gets wgmma and keeps the softmax in registers.
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

// Dynamic shared memory, in bytes (the .py launcher computes the same total). Every offset is a multiple
// of 128 bytes, more than wmma's 32-byte alignment rule for the pointers it loads from and stores to.
constexpr int STAGES = 2;            // K/V buffers: tile j is computed from one while tile j + 1 lands in the other
constexpr int PAD_H = 8;             // halves added to each fp16 row: 16 bytes, the least wmma allows
constexpr int PAD_F = 8;             // floats added to each fp32 row
template <int D>
struct Layout {
    static constexpr int LDQ = D + PAD_H, LDK = D + PAD_H, LDV = D + PAD_H;   // halves per row of Q, K, V tiles
    static constexpr int LDS = Bc + PAD_F;            // floats per row of a warp's score tile
    static constexpr int LDP = Bc + PAD_H;            // halves per row of a warp's P tile
    static constexpr int S_WARP = 16 * LDS * 4;       // bytes of one warp's scores  [16, LDS] fp32
    static constexpr int P_WARP = 16 * LDP * 2;       // bytes of one warp's P       [16, LDP] fp16
    static constexpr int K_OFF = 0;                                  // K tiles     [STAGES, Bc, LDK] fp16
    static constexpr int V_OFF = K_OFF + STAGES * Bc * LDK * 2;      // V tiles     [STAGES, Bc, LDV] fp16
    static constexpr int Q_OFF = V_OFF + STAGES * Bc * LDV * 2;      // Q tile      [Br, LDQ] fp16, and later
    static constexpr int QSP = cmax(Br * LDQ * 2, WARPS * (S_WARP + P_WARP));   // the warps' S and P tiles
    static constexpr int MAP_OFF = Q_OFF + QSP;                      // row map     [16, 16] fp32
    static constexpr int ALPHA_OFF = MAP_OFF + 16 * 16 * 4;          // per warp    [WARPS, 16] fp32
    static constexpr int BYTES = ALPHA_OFF + WARPS * 16 * 4;
    static_assert((LDK * 2) % 16 == 0 && (LDS * 4) % 16 == 0, "wmma: ldm must be a multiple of 16 bytes");
    static_assert((Bc * LDK * 2) % 128 == 0 && S_WARP % 128 == 0 && P_WARP % 128 == 0 && QSP % 128 == 0,
                  "128-byte aligned regions");
};
extern __shared__ __align__(128) unsigned char smem[];

// Start copying rows [row0, row0 + ROWS) of one head's [S, D] matrix into tile[ROWS][LD]; rows past S
// become 0. One 16-byte cp.async per thread and step, consecutive threads on consecutive chunks of a
// row (a warp reads whole 128-byte lines). The copy is asynchronous: the data is only there after
// cp_async_wait and a __syncthreads.
//   cp.async.cg.shared.global [dst], [src], 16, n : copy n bytes (16 or 0) and fill the rest of the
//   16 with zeros; .cg caches in L2 only (the tile is read once per block, L1 would not help).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));   // a shared-memory address
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>   // wait until at most N of this thread's committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

template <int ROWS, int D, int LD>
__device__ __forceinline__ void load_tile_async(__half* tile, const __half* src, int row0, int S) {
    constexpr int CHUNKS = D / 8;                          // 16-byte chunks per row
    static_assert(ROWS * CHUNKS % THREADS == 0, "whole steps only");
#pragma unroll
    for (int it = 0; it < ROWS * CHUNKS / THREADS; ++it) {
        const int c = threadIdx.x + it * THREADS;
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        const bool valid = row0 + r < S;
        // a row past S reads nothing (n = 0), but the address must still be a valid one: row 0
        cp_async_16(tile + r * LD + col, src + (size_t)(valid ? row0 + r : 0) * D + col, valid);
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
    __half* Ks = reinterpret_cast<__half*>(smem + L::K_OFF);                            // [STAGES, Bc, LDK]
    __half* Vs = reinterpret_cast<__half*>(smem + L::V_OFF);                            // [STAGES, Bc, LDV]
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

    // Prologue: three groups in flight, oldest first — Q, K_0, V_0.
    load_tile_async<Br, D, L::LDQ>(Qs, Q, q0, S);
    cp_async_commit();
    load_tile_async<Bc, D, L::LDK>(Ks, K, 0, S);
    cp_async_commit();
    load_tile_async<Bc, D, L::LDV>(Vs, V, 0, S);
    cp_async_commit();
    for (int e = threadIdx.x; e < 16 * 16; e += THREADS) rowmap[e] = (float)(e / 16);   // element (i, j) = i
    cp_async_wait<2>();                                    // Q has landed (K_0, V_0 may still be in flight)
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
        const __half* Kj = Ks + (j % STAGES) * Bc * L::LDK;   // [Bc, LDK] this tile's K
        const __half* Vj = Vs + (j % STAGES) * Bc * L::LDV;   // [Bc, LDV] this tile's V
        cp_async_wait<1>();                                // my copies of K_j are done (V_j may not be)
        __syncthreads();                                   // everyone's K_j is visible, and every warp is done
                                                           // with tile j - 1, whose buffers we refill next
        if (j + 1 < n_tiles) {                             // start tile j + 1; it lands while we compute tile j
            load_tile_async<Bc, D, L::LDK>(Ks + ((j + 1) % STAGES) * Bc * L::LDK, K, k0 + Bc, S);
            cp_async_commit();
            load_tile_async<Bc, D, L::LDV>(Vs + ((j + 1) % STAGES) * Bc * L::LDV, V, k0 + Bc, S);
            cp_async_commit();
        } else {
            cp_async_commit();                             // two empty groups: the wait counts stay the same
            cp_async_commit();
        }

#pragma unroll 2   // two independent score tiles in flight; a full unroll costs registers
        for (int n = 0; n < Bc / 16; ++n) {                // keys k0 + 16n .. k0 + 16n + 15
            FragC s;                                       // 16×16 scores, fp32
            wmma::fill_fragment(s, 0.f);
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {          // the dot product over D, 16 at a time
                FragKt kf;                                 // Kᵀ[16kk.., 16n..] = K rows 16n.., columns 16kk..
                wmma::load_matrix_sync(kf, Kj + n * 16 * L::LDK + kk * 16, L::LDK);
                wmma::mma_sync(s, qf[kk], kf, s);
            }
            wmma::store_matrix_sync(Sw + n * 16, s, L::LDS, wmma::mem_row_major);
        }
        __syncwarp();                                      // the whole score tile is written

        float t[32];                                       // this lane's 32 raw scores of row r
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float4 f = *reinterpret_cast<const float4*>(Sw + r * L::LDS + 8 * k + 4 * h);
            t[4 * k + 0] = f.x; t[4 * k + 1] = f.y; t[4 * k + 2] = f.z; t[4 * k + 3] = f.w;
        }
        if (k0 + Bc > S || (causal && k0 + Bc - 1 > q0)) {   // only the last tile and the diagonal need masks
#pragma unroll
            for (int c = 0; c < 32; ++c) {
                const int key = k0 + 8 * (c / 4) + 4 * h + c % 4;
                if (key >= S || (causal && key > row)) t[c] = -CUDART_INF_F;
            }
        }
        float mx = -CUDART_INF_F;
#pragma unroll
        for (int c = 0; c < 32; ++c) mx = fmaxf(mx, t[c]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // the other half of the row
        // m_i is kept in log2 units, scale·log2(e)·score, so that exp(scale·(s - m)) = exp2(t - m_i).
        const float m_new = fmaxf(m_i, mx * scale_log2);
        // A row with no visible key yet has m_new = -inf; subtracting 0 instead keeps exp2 away from
        // (-inf) - (-inf) = NaN (every p is then exp2(-inf) = 0).
        const float base = m_new == -CUDART_INF_F ? 0.f : m_new;
        const float alpha = fast_exp2(m_i - base);         // rescales the old l_i and acc (0 on the first tile)
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) p[e] = fast_exp2(fmaf(t[4 * k + e], scale_log2, -base));   // one FFMA + MUFU
            sum += (p[0] + p[1]) + (p[2] + p[3]);
            *reinterpret_cast<uint2*>(Pw + r * L::LDP + 8 * k + 4 * h) = pack_half4(p[0], p[1], p[2], p[3]);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_i = alpha * l_i + sum;
        m_i = m_new;
        if (h == 0) alpha_w[r] = alpha;
        __syncwarp();                                      // P and alpha are visible to the whole warp

        cp_async_wait<2>();                                // V_j is done (K_{j+1}, V_{j+1} may not be)
        __syncthreads();                                   // everyone's V_j is visible
        float a[NE];                                       // alpha of the row of each accumulator element
#pragma unroll
        for (int e = 0; e < NE; ++e) a[e] = alpha_w[row_of[e]];
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn)
#pragma unroll
            for (int e = 0; e < NE; ++e) acc[dn].x[e] *= a[e];
#pragma unroll 2   // (a full unroll would hold every K or V fragment in registers at once)
        for (int kk = 0; kk < Bc / 16; ++kk) {             // keys 16kk .. 16kk + 15 of the tile
            FragA pf;                                      // P[:, 16kk..], 16×16 fp16
            wmma::load_matrix_sync(pf, Pw + kk * 16, L::LDP);
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {          // output columns 16dn .. 16dn + 15
                FragV vf;                                  // V[16kk.., 16dn..]
                wmma::load_matrix_sync(vf, Vj + kk * 16 * L::LDV + dn * 16, L::LDV);
                wmma::mma_sync(acc[dn], pf, vf, acc[dn]);
            }
        }
    }

    __syncwarp();                                          // every lane is done reading alpha_w for the last
                                                           // tile: the epilogue may reuse it for 1/l_i
    if (h == 0) alpha_w[r] = 1.f / l_i;                    // l_i > 0: every row sees at least key 0
    __syncwarp();
    float inv[NE];
#pragma unroll
    for (int e = 0; e < NE; ++e) inv[e] = alpha_w[row_of[e]];
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn)
#pragma unroll
        for (int e = 0; e < NE; ++e) acc[dn].x[e] *= inv[e];
#pragma unroll
    for (int g = 0; g < D / 64; ++g) {                     // 64 output columns at a time through Sw
#pragma unroll
        for (int t4 = 0; t4 < 4; ++t4)
            wmma::store_matrix_sync(Sw + t4 * 16, acc[4 * g + t4], L::LDS, wmma::mem_row_major);
        __syncwarp();
        store_row<D, L::LDS>(O, Sw, r, h, row, 64 * g, S);
        __syncwarp();                                      // read before the next group overwrites Sw
    }
}

// One entry point per head dim: D is a template parameter, so every loop over D is unrolled and
// every fragment array has a compile-time size (a run-time index would put it in local memory).
extern "C" __global__ void __launch_bounds__(THREADS) wmma_padded_d64(
    const __half* Q, const __half* K, const __half* V, __half* O, int S, float scale_log2, int causal) {
    attention_block<64>(Q, K, V, O, S, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS) wmma_padded_d128(
    const __half* Q, const __half* K, const __half* V, __half* O, int S, float scale_log2, int causal) {
    attention_block<128>(Q, K, V, O, S, scale_log2, causal);
}
