// Chapter 7, step a — one warpgroup on Hopper's own machinery: TMA loads, an mbarrier ring, wgmma.
//
// The idea: three Hopper units replace what chapter 3 did by hand.
//   * TMA (the tensor memory accelerator, PTX cp.async.bulk.tensor, SASS UTMALDG) copies a whole tile
//     from global to shared memory on one thread's request, given a "tensor map" (the driver encodes
//     it on the host: base address, sizes, strides, box size, swizzle) — no address arithmetic per thread.
//   * An mbarrier (a 64-bit barrier object in shared memory) says when a TMA copy has landed: the
//     issuing thread tells it how many bytes to expect (expect_tx), TMA counts them off as they
//     arrive, and the barrier's phase flips when the count reaches zero. Consumers wait on the phase.
//   * wgmma (SASS HGMMA) is a matrix product issued by a whole warpgroup (4 warps, 128 threads):
//     64×N×16 per instruction, B always read straight from shared memory through a 64-bit
//     "matrix descriptor", A from shared memory or registers, fp32 accumulators in registers.
//     It is asynchronous: issue, commit a group, later wait for the group.
// This block is one warpgroup owning Br = 64 query rows (wgmma's M is 64). Q arrives once by TMA;
// K and V tiles flow through a ring of STAGES = 2 shared-memory slots: while tile j is computed from
// one slot, tile j + 1 is already landing in the other. Per tile:
//     S = Q·K_jᵀ   (wgmma, A = Q and B = K_j from shared memory)      [64, Bc] fp32 in registers
//     online softmax on S in registers (the row max and sum never leave the thread's quad)
//     O += P·V_j   (wgmma, A = P from registers, B = V_j from shared memory)  [64, D] fp32 in registers
//
// What changed since chapter 3: mma.sync (HMMA, one warp, 16×8×16) becomes wgmma (HGMMA, a warpgroup,
// 64×N×16, from shared memory without ldmatrix); cp.async per thread becomes one TMA request per tile;
// __syncthreads-counted copies become mbarrier phases; the scores never touch shared memory — the
// accumulator layout of wgmma is documented (below), so the softmax runs on the registers directly, and
// the same registers, rounded to fp16, are already in the layout wgmma wants for its A operand.
//
// Limitation: one warpgroup per block does everything in turn — wait for a tile, two GEMMs, softmax —
// so the tensor cores idle during the softmax and the exp2 units idle during the GEMMs, and one thread
// of the consumers also plays producer. Step b (solutions/07_hopper/attention.cu (step b)) gives loading to its own
// warp and runs two consumer warpgroups per block; step c overlaps softmax with GEMMs.
//
// Why inline PTX and not CuTe: NVRTC compiles this file in a fraction of a second with no headers
// beyond cuda_fp16.h, and every Hopper instruction appears here under its own PTX name (the names the
// PTX ISA manual, Nsight and the SASS use). CuTe (CUTLASS's layout algebra, chapter 5) would build the
// same descriptors and swizzles from layout types — shorter, checked at compile time, but the
// machine's vocabulary is hidden behind templates, and it needs nvcc and CUTLASS's headers.
//
// ---- The plain form of one wgmma -----------------------------------------------------------------
// wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 with A = Q[0:64, 16kk:16kk+16] and
// B = K[0:64, 16kk:16kk+16]ᵀ is, per warpgroup,
//     for (int i = 0; i < 64; ++i)              // query rows (M)
//         for (int j = 0; j < 64; ++j)          //   keys (N)
//             for (int p = 0; p < 16; ++p)      //     a slice of D (K)
//                 S[i][j] += Q[i][16kk + p] * K[j][16kk + p];   // 65536 FMAs, in one instruction
// with S spread over the 128 threads' registers as described in "Accumulator layout" below.
//
// ---- The 128-byte swizzle (what TMA writes and wgmma reads) --------------------------------------
// A tile row of 64 fp16 = 128 bytes = eight 16-byte chunks. Chapter 3 found that 8 consecutive rows
// read at the same column hit the same 4 banks 8 times over, and padded each row by 16 bytes so that
// row r started 4r banks later. Padding wastes bytes, and TMA and wgmma accept no padding: they read a
// fixed set of layouts instead. The 128-byte swizzle stores chunk c of row r at chunk c XOR (r mod 8):
//     byte address a  →  a XOR (((a >> 7) & 7) << 4)        (bits 4-6 ^= bits 7-9)
// so rows 0..7 of one column chunk land on 8 different chunk positions = all 32 banks, with no byte
// wasted. Worked example: row 3, halves 40..47 (chunk 5) of a [rows, 64] fp16 tile at a 1024-byte
// aligned address: unswizzled at 3·128 + 5·16 = 464; swizzled at chunk 5 ^ 3 = 6, byte 3·128 + 96 = 480.
// Row 11 (r mod 8 = 3 again) chunk 5 also goes to chunk 6, at 11·128 + 96. The pattern repeats every
// 8 rows = 1024 bytes (a "swizzle atom"), which is why every tile here starts at a multiple of 1024.
// A row of D = 128 halves is 256 bytes, more than the 128 the swizzle covers: such tiles are stored as
// two [rows, 64] halves one after the other ("boxes": TMA loads each with one request).
//
// ---- The wgmma shared-memory matrix descriptor (64 bits) -----------------------------------------
//     bits  0-13  start address >> 4          (shared-memory byte address of the first element)
//     bits 16-29  leading byte offset >> 4    (LBO)
//     bits 32-45  stride byte offset >> 4     (SBO)
//     bits 49-51  base offset                 (0: our tiles start at a 1024-byte aligned address)
//     bits 62-63  swizzle mode                (1 = 128-byte, 2 = 64-byte, 3 = 32-byte, 0 = none)
// The hardware sees the operand as 8-row groups ("core matrices" are 8 rows × 16 bytes). Two shapes:
//   K-major (the reduction index is contiguous: Q and K tiles, rows of D): an instruction reads 16
//     halves = 32 bytes of each row; SBO = 1024 = the distance between 8-row groups; LBO is unused with
//     a swizzle (set to 1, i.e. 16 bytes). Step kk of the reduction starts 32·(kk mod 4) bytes into the
//     row (within the 128-byte swizzled row: the hardware applies the XOR to the address it forms), in
//     box kk / 4.
//   MN-major (the output index is contiguous: the V tile, [keys, D], is B = V with N = D along its
//     rows): the instruction reads 16 keys = 2 groups of 8 rows, SBO = 1024 between them; LBO = the
//     distance from the box of D-columns 0..63 to the box of 64..127. Step kk (keys 16kk..) starts
//     16·128·kk bytes in. The instruction's "transpose B" flag says B is MN-major.
//
// ---- Accumulator layout (m64nNk16, fp32) ---------------------------------------------------------
// Thread t of the warpgroup (warp w = t / 32, lane l = t % 32) holds N/2 floats d[0..N/2): element
// d[i] is at row 16w + l/4 + 8·((i/2) mod 2), column 8·(i/4) + 2·(l mod 4) + (i mod 2). So each thread
// holds two rows (r0 = 16w + l/4 and r0 + 8), and the four threads of a quad (same l/4) hold all the
// columns of those rows: a row max or sum is a thread's own values, then two shuffles (xor 1, 2).
// The A operand from registers (m64k16 fp16, 4 × 32 bits per thread) has the same row/column pattern:
// a[r] packs d[8kk + 2r], d[8kk + 2r + 1] of the score accumulator for keys 16kk..16kk+15 — so P goes
// from the score registers into the second GEMM without any data movement between threads.
//
// It compiles for sm_90a with no local memory. The descriptor bits and fragment layouts follow the
// PTX ISA and CUTLASS's sm90 layouts; scripts/ch07_gpu.py checks them first with small probe kernels
// (k07_probes.cu).
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

constexpr int Br = 64;               // query rows per block: wgmma's M, one warpgroup
constexpr int Bc = 64;               // keys per K/V tile: the N of S = Q·Kᵀ and the K of O += P·V
constexpr int STAGES = 2;            // K/V ring slots: tile j is computed from one while j + 1 lands
constexpr int THREADS = 128;         // one warpgroup = 4 warps
constexpr int BOX = 64;              // fp16 columns per TMA box: 64 · 2 bytes = the 128-byte swizzle span
constexpr int SWIZZLE_ATOM = 1024;   // 8 rows × 128 bytes: the swizzle pattern repeats after this

// Dynamic shared memory, in bytes (the launcher adds SWIZZLE_ATOM bytes of slack to align the start).
template <int D>
struct Layout {
    static constexpr int BOXES = D / BOX;                  // 64-column boxes per row: 1 (D 64) or 2 (D 128)
    static constexpr int Q_BYTES = Br * D * 2;             // Q tile       [BOXES][Br][64] fp16, swizzled
    static constexpr int KV_BYTES = Bc * D * 2;            // a K or V tile [BOXES][Bc][64] fp16, swizzled
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + Q_BYTES;          // K ring       [STAGES] K tiles
    static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;   // V ring    [STAGES] V tiles
    static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES; // mbarriers: q_full, kv_full[STAGES]
    static constexpr int BYTES = BAR_OFF + 8 * (1 + STAGES);
    static_assert(D % BOX == 0, "D must be a multiple of 64");
    static_assert(Q_BYTES % SWIZZLE_ATOM == 0 && KV_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// ---------------------------------------------------------------- the kernel ---------------------
template <int D>
__device__ __forceinline__ void attention_block(const CUtensorMap* tmQ,   // [B·H·S, D] fp16, box [Br, 64]
                                                const CUtensorMap* tmK,   // [B·H·S, D] fp16, box [Bc, 64]
                                                const CUtensorMap* tmV,   // [B·H·S, D] fp16, box [Bc, 64]
                                                __half* __restrict__ O,   // [B, H, S, D]
                                                int S, float scale_log2, int causal) {
    using L = Layout<D>;
    constexpr int BOXES = L::BOXES;
    // Align the tiles to a swizzle atom (the launcher allocated SWIZZLE_ATOM bytes of slack for this).
    const u32 raw = smem_u32(smem_raw);
    const u32 base = (raw + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const u32 sQ = base + L::Q_OFF;                                  // [BOXES][Br][64]
    const u32 sK = base + L::K_OFF;                                  // [STAGES][BOXES][Bc][64]
    const u32 sV = base + L::V_OFF;                                  // [STAGES][BOXES][Bc][64]
    const u32 q_full = base + L::BAR_OFF;                            // Q has landed
    const u32 kv_full = q_full + 8;                                  // [STAGES]: K_j and V_j have landed

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // Grid (⌈S/Br⌉, B·H); query tiles in reverse order, so that under causal masking the longest
    // blocks start first.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * Br;                     // first query row of this block
    const int row0 = blockIdx.y * S;                                      // this head's first row in [B·H·S, D]
    const int n_key_tiles = (S + Bc - 1) / Bc;
    const int last_row = min(q0 + Br, S) - 1;
    const int n_tiles = causal ? min(n_key_tiles, last_row / Bc + 1) : n_key_tiles;   // causal: skip tiles past the diagonal

    // One thread plays producer: it sets up the barriers and posts every TMA request.
    auto load_kv = [&](int j) {                                           // tile j into slot j % STAGES
        const int s = j % STAGES;
        mbar_arrive_expect_tx(kv_full + 8 * s, 2 * L::KV_BYTES);          // K_j and V_j: 2 · Bc · D · 2 bytes
#pragma unroll
        for (int b = 0; b < BOXES; ++b) {
            tma_load_2d(sK + s * L::KV_BYTES + b * Bc * 128, tmK, b * BOX, row0 + j * Bc, kv_full + 8 * s);
            tma_load_2d(sV + s * L::KV_BYTES + b * Bc * 128, tmV, b * BOX, row0 + j * Bc, kv_full + 8 * s);
        }
    };
    if (tid == 0) {
        tma_prefetch_map(tmQ); tma_prefetch_map(tmK); tma_prefetch_map(tmV);
        mbar_init(q_full, 1);
        for (int s = 0; s < STAGES; ++s) mbar_init(kv_full + 8 * s, 1);
        fence_barrier_init();
    }
    __syncthreads();                                                      // barriers initialised
    if (tid == 0) {
        mbar_arrive_expect_tx(q_full, L::Q_BYTES);
#pragma unroll
        for (int b = 0; b < BOXES; ++b) tma_load_2d(sQ + b * Br * 128, tmQ, b * BOX, row0 + q0, q_full);
        for (int j = 0; j < STAGES && j < n_tiles; ++j) load_kv(j);
    }
    // Rows past S in the last query or key tile are the next head's rows (or zeros past the end of
    // the tensor): finite numbers. Their keys are masked below; their query rows are never stored.

    // This thread's two rows of every accumulator (see "Accumulator layout").
    const int r_lo = 16 * warp + lane / 4;                                // rows r_lo and r_lo + 8 of the block
    const int c_lane = 2 * (lane % 4);                                    // its first column in each 8-column chunk
    float acc[D / 2];                                                     // O accumulator [64, D] fp32 (this thread's share)
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    float m_i[2] = {-CUDART_INF_F, -CUDART_INF_F};                        // running row max, log2 units
    float l_i[2] = {0.f, 0.f};                                            // running row sum (this thread's columns)

    mbar_wait(q_full, 0);
    for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        const int k0 = j * Bc;                                            // first key of tile j
        mbar_wait(kv_full + 8 * s, (j / STAGES) & 1);                     // slot s's (j / STAGES)-th fill

        // S = Q·K_jᵀ: D/16 wgmma steps along D, each 64×Bc×16.
        float sc[Bc / 2];                                                 // scores [64, Bc] fp32 (this thread's share)
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;                        // 16 halves = 32 bytes per step, in the row
            const u64 da = make_desc(sQ + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM);
            const u64 db = make_desc(sK + s * L::KV_BYTES + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM);
            wgmma_ss<Bc>(sc, da, db, kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(sc);

        // Mask keys past S, and (causal) keys after the query, where the tile can have any.
        if (k0 + Bc > S || (causal && k0 + Bc - 1 > q0)) {
#pragma unroll
            for (int i = 0; i < Bc / 2; ++i) {
                const int col = k0 + 8 * (i / 4) + c_lane + (i % 2);
                const int row = q0 + r_lo + 8 * ((i / 2) % 2);
                if (col >= S || (causal && col > row)) sc[i] = -CUDART_INF_F;
            }
        }
        // Online softmax, row by row (h = 0: row r_lo, h = 1: row r_lo + 8).
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = -CUDART_INF_F;
#pragma unroll
            for (int i = 0; i < Bc / 2; ++i)
                if ((i / 2) % 2 == h) mx = fmaxf(mx, sc[i]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));         // the quad holds the whole row
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_i[h], mx * scale_log2);
            const float base_h = m_new == -CUDART_INF_F ? 0.f : m_new;    // a row with no key yet: avoid inf - inf
            alpha[h] = fast_exp2(m_i[h] - base_h);                        // rescales the old sum and acc; 0 at first
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < Bc / 2; ++i)
                if ((i / 2) % 2 == h) {
                    sc[i] = fast_exp2(fmaf(sc[i], scale_log2, -base_h));  // p = 2^(s·scale·log2e - m)
                    sum += sc[i];
                }
            l_i[h] = alpha[h] * l_i[h] + sum;                             // the quad's partial sums: added up at the end
            m_i[h] = m_new;
        }
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] *= alpha[(i / 2) % 2];

        // P (fp16) as wgmma's A operand: keys 16kk..16kk+15 are sc[8kk .. 8kk + 7].
        u32 p[Bc / 16][4];
#pragma unroll
        for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[kk][r] = pack_half2(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);

        // O += P·V_j: Bc/16 wgmma steps along the keys, each 64×D×16.
        fence_regs(acc);                                                  // the rescaled acc and P are written...
        fence_regs(p);
        wgmma_fence();                                                    // ...before the tensor cores read them
#pragma unroll
        for (int kk = 0; kk < Bc / 16; ++kk) {
            const u64 db = make_desc(sV + s * L::KV_BYTES + kk * 16 * 128, Bc * 128, SWIZZLE_ATOM);
            wgmma_rs<D>(acc, p[kk], db);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(acc);

        __syncthreads();                                                  // all 4 warps are done with slot s
        if (tid == 0 && j + STAGES < n_tiles) load_kv(j + STAGES);        // refill it with tile j + STAGES
    }

    // O = acc / l: the row sum is spread over the quad; add it up first.
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_i[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[h] = 1.f / l;                                                 // l > 0: every row sees key 0
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = q0 + r_lo + 8 * h;
        if (row >= S) continue;                                           // padding rows of the last tile
        __half* out = O + (size_t)(row0 + row) * D + c_lane;
#pragma unroll
        for (int n8 = 0; n8 < D / 8; ++n8) {                              // 2 columns per 8-column chunk
            const int i = 4 * n8 + 2 * h;
            *reinterpret_cast<u32*>(out + 8 * n8) = pack_half2(acc[i] * inv[h], acc[i + 1] * inv[h]);
        }
    }
}

// One entry point per head dim. __launch_bounds__(THREADS, 1): 128 threads, and at least 1 block
// per SM — the register cap at entry is then 255, enough for acc, the scores and P.
extern "C" __global__ void __launch_bounds__(THREADS, 1) wgmma_tma_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<64>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1) wgmma_tma_d128(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<128>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
