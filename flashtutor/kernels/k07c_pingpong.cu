// Chapter 7, step c — the overlaps: ping-pong between the two consumer warpgroups, and, inside each,
// the next S = Q·Kᵀ computed while the current softmax runs.
//
// The idea: a consumer's time per tile is GEMM (tensor cores) + softmax (exp2 on the MUFU unit, FMNMX,
// shuffles). In step b the two happen one after the other in each warpgroup, so the tensor cores are
// busy only when the two warpgroups' GEMMs happen to fall into each other's softmax. Two changes:
//   1. Intra-warpgroup pipelining. Per iteration j a warpgroup issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1}
//      together (two wgmma groups), then waits only for S_j (wgmma.wait_group 1: at most the newest
//      group, the P·V, still running) and computes the softmax of S_j while P_{j-1}·V_{j-1} is still on
//      the tensor cores. Only then it waits for the P·V (wait_group 0), rescales O by alpha_j and
//      packs P_j for the next iteration. O after P_{j-1}·V_{j-1} is relative to m_{j-1}, so O·alpha_j
//      with alpha_j = 2^(m_{j-1} - m_j) is relative to m_j, as P_j is: the algebra of step a, reordered.
//      Cost: S_j, P_{j-1} and O live at once (64 + 32 + 64 registers at D = 128).
//   2. Ping-pong. Two named barriers (ids 1 and 2, 256 threads: one warpgroup waits with bar.sync, the
//      other arrives with bar.arrive) hand a "turn" back and forth: a warpgroup issues its GEMMs only in
//      its turn and passes the turn on right after issuing them, so warpgroup 1's GEMMs run while
//      warpgroup 0 does its softmax and the other way round — the tensor cores see back-to-back work.
//      Turns per warpgroup: n_tiles + 1 (S_0 alone; S_j with P_{j-1}·V_{j-1}; P_{n-1}·V_{n-1} alone).
//      Warpgroup 0 starts: warpgroup 1 gives one arrival up front and skips its last one, so both
//      barriers end balanced.
// With K_j and V_{j-1} in use at once, the ring gets a third slot at D = 128 (3 × 64 KB + Q's 32 KB =
// 224 KB, just under the 227 KB a block may have) and a fourth at D = 64.
//
// What changed since step b: the consumer loop (prologue, pipelined body, epilogue), the named-barrier
// turns, Layout<D>::STAGES; the exercise's stop-instead-of-hang plumbing is gone (this file is not an
// exercise).
// Limitation: O is still written with 4-byte stores straight from registers; an epilogue through
// shared memory (stmatrix, then a TMA store) and a persistent grid that overlaps one tile's epilogue
// with the next tile's loads are the next steps (FlashAttention-3 does both).
//
// Not yet run on a GPU (written on a CPU machine; compiles for sm_90a). The header of
// k07a_wgmma_tma.cu explains TMA, the 128-byte swizzle, the wgmma descriptor and fragment layouts;
// the one of solutions/07_hopper/attention.cu (step b) the producer/consumer roles and setmaxnreg.
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

constexpr int CONSUMERS = 2;                  // consumer warpgroups per block (the ping-pong is for two)
constexpr int Br = 64 * CONSUMERS;            // query rows per block: 64 (wgmma's M) per consumer
constexpr int Bc = 128;                       // keys per K/V tile: the N of S = Q·Kᵀ
constexpr int THREADS = 128 * (1 + CONSUMERS);   // producer warpgroup + consumers: 384
constexpr int PRODUCER_REGS = 24;             // setmaxnreg targets (multiples of 8, 24..256):
constexpr int CONSUMER_REGS = 240;            //   128·24 + 256·240 = 64512 ≤ 65536 registers per SM
constexpr int BOX = 64;                       // fp16 columns per TMA box: 128 bytes, the swizzle span
constexpr int SWIZZLE_ATOM = 1024;            // 8 rows × 128 bytes: the swizzle pattern repeats after this
constexpr int TURN_BAR = 1;                   // named barriers TURN_BAR + c (c = 0, 1); 0 is __syncthreads'

// Dynamic shared memory, in bytes (the launcher adds SWIZZLE_ATOM bytes of slack to align the start).
template <int D>
struct Layout {
    static constexpr int STAGES = D == 64 ? 4 : 3;         // K/V ring slots: as many as fit (227 KB per block)
    static constexpr int BOXES = D / BOX;                  // 64-column boxes per row: 1 (D 64) or 2 (D 128)
    static constexpr int Q_BYTES = Br * D * 2;             // Q tile        [BOXES][Br][64] fp16, swizzled
    static constexpr int KV_BYTES = Bc * D * 2;            // a K or V tile [BOXES][Bc][64] fp16, swizzled
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + Q_BYTES;          // K ring       [STAGES] K tiles
    static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;   // V ring    [STAGES] V tiles
    static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES; // mbarriers: q_full, kv_full[STAGES], kv_empty[STAGES]
    static constexpr int BYTES = BAR_OFF + 8 * (1 + 2 * STAGES);
    static_assert(D % BOX == 0, "D must be a multiple of 64");
    static_assert(Q_BYTES % SWIZZLE_ATOM == 0 && KV_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
    static_assert(BYTES + SWIZZLE_ATOM <= 227 * 1024, "a block may have at most 227 KB of shared memory");
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// ---------------------------------------------------------------- the kernel ---------------------
template <int D>
struct Smem {                                      // shared-memory addresses of one block's tiles and barriers
    u32 q, k, v;                                   // Q [BOXES][Br][64]; K, V rings [STAGES][BOXES][Bc][64]
    u32 q_full, kv_full, kv_empty;                 // barriers (kv_full + 8s, kv_empty + 8s for slot s)
    __device__ explicit Smem(u32 base) {
        using L = Layout<D>;
        q = base + L::Q_OFF; k = base + L::K_OFF; v = base + L::V_OFF;
        q_full = base + L::BAR_OFF; kv_full = q_full + 8; kv_empty = kv_full + 8 * L::STAGES;
    }
};

// The producer: one thread posts Q, then every K/V tile into the ring, each slot once it is released.
template <int D>
__device__ __forceinline__ void producer(const Smem<D>& sm, const CUtensorMap* tmQ, const CUtensorMap* tmK,
                                         const CUtensorMap* tmV, int row0, int q0, int n_tiles) {
    using L = Layout<D>;
    constexpr int STAGES = L::STAGES;
    mbar_arrive_expect_tx(sm.q_full, L::Q_BYTES);
#pragma unroll
    for (int b = 0; b < L::BOXES; ++b) tma_load_2d(sm.q + b * Br * 128, tmQ, b * BOX, row0 + q0, sm.q_full);
    for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES, u = j / STAGES;                    // slot, and which fill of it this is
        if (u > 0) mbar_wait(sm.kv_empty + 8 * s, (u - 1) & 1);     // the consumers released fill u - 1
        mbar_arrive_expect_tx(sm.kv_full + 8 * s, 2 * L::KV_BYTES);   // K_j and V_j: 2 · Bc · D · 2 bytes
#pragma unroll
        for (int b = 0; b < L::BOXES; ++b) {
            tma_load_2d(sm.k + s * L::KV_BYTES + b * Bc * 128, tmK, b * BOX, row0 + j * Bc, sm.kv_full + 8 * s);
            tma_load_2d(sm.v + s * L::KV_BYTES + b * Bc * 128, tmV, b * BOX, row0 + j * Bc, sm.kv_full + 8 * s);
        }
    }
}

// Mask keys past S, and (causal) keys after the query, where tile j can have any.
__device__ __forceinline__ void mask_tile(float (&sc)[Bc / 2], int k0, int q0c, int r_lo, int c_lane, int S, int causal) {
    if (k0 + Bc > S || (causal && k0 + Bc - 1 > q0c)) {
#pragma unroll
        for (int i = 0; i < Bc / 2; ++i) {
            const int col = k0 + 8 * (i / 4) + c_lane + (i % 2);
            const int row = q0c + r_lo + 8 * ((i / 2) % 2);
            if (col >= S || (causal && col > row)) sc[i] = -CUDART_INF_F;
        }
    }
}

// The online softmax of this thread's two rows (h = 0: row r_lo, h = 1: r_lo + 8; sc[i] is in row
// (i / 2) % 2): sc becomes p = 2^(s·scale_log2 - m_i), m_i and l_i are updated, alpha = 2^(m_old - m_new).
__device__ __forceinline__ void online_softmax(float (&sc)[Bc / 2], float (&m_i)[2], float (&l_i)[2],
                                               float (&alpha)[2], float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = -CUDART_INF_F;
#pragma unroll
        for (int i = 0; i < Bc / 2; ++i)
            if ((i / 2) % 2 == h) mx = fmaxf(mx, sc[i]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));             // the quad holds the whole row
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_i[h], mx * scale_log2);
        const float base_h = m_new == -CUDART_INF_F ? 0.f : m_new;        // a row with no key yet: avoid inf - inf
        alpha[h] = fast_exp2(m_i[h] - base_h);                            // rescales the old sum and acc; 0 at first
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < Bc / 2; ++i)
            if ((i / 2) % 2 == h) {
                sc[i] = fast_exp2(fmaf(sc[i], scale_log2, -base_h));      // p = 2^(s·scale·log2e - m)
                sum += sc[i];
            }
        l_i[h] = alpha[h] * l_i[h] + sum;                                 // the quad's partial sums: added up at the end
        m_i[h] = m_new;
    }
}

// A consumer warpgroup: 64 query rows, q0c .. q0c + 63, against every K/V tile the producer loads.
template <int D>
__device__ __forceinline__ void consumer(const Smem<D>& sm, int c, __half* __restrict__ O, int row0, int q0,
                                         int n_tiles, int S, float scale_log2, int causal) {
    using L = Layout<D>;
    constexpr int STAGES = L::STAGES;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;   // within the warpgroup
    const int q0c = q0 + 64 * c;                                          // this warpgroup's first query row
    const u32 sQ = sm.q + c * 64 * 128;                                   // its 64 rows of each Q box
    const int r_lo = 16 * warp + lane / 4;                                // this thread's rows: r_lo, r_lo + 8
    const int c_lane = 2 * (lane % 4);                                    // its first column in each 8-column chunk
    float acc[D / 2];                                                     // O accumulator [64, D] fp32 (this thread's share)
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    float m_i[2] = {-CUDART_INF_F, -CUDART_INF_F};                        // running row max, log2 units
    float l_i[2] = {0.f, 0.f};                                            // running row sum (this thread's columns)
    float sc[Bc / 2];                                                     // scores of the newest tile [64, Bc] fp32
    u32 p[Bc / 16][4];                                                    // P of the previous tile, fp16, A-fragment layout
    float alpha[2];

    auto issue_s = [&](int j) {                                           // S_j = Q·K_jᵀ, one wgmma group
        const u32 k_tile = sm.k + (j % STAGES) * L::KV_BYTES;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;                             // 16 halves = 32 bytes per step, in the row
            const u64 da = make_desc(sQ + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM);
            const u64 db = make_desc(k_tile + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM);
            wgmma_ss<Bc>(sc, da, db, kk > 0);
        }
        wgmma_commit();
    };
    auto issue_pv = [&](int j) {                                          // O += P·V_j, one wgmma group
        const u32 v_tile = sm.v + (j % STAGES) * L::KV_BYTES;
#pragma unroll
        for (int kk = 0; kk < Bc / 16; ++kk)
            wgmma_rs<D>(acc, p[kk], make_desc(v_tile + kk * 16 * 128, Bc * 128, SWIZZLE_ATOM));
        wgmma_commit();
    };
    auto pack_p = [&] {                                                   // keys 16kk..16kk+15 are sc[8kk .. 8kk + 7]
#pragma unroll
        for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[kk][r] = pack_half2(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
    };
    // Ping-pong turns: wait for ours, issue, hand the turn over (see the header for the counting).
    const int turns = n_tiles + 1;
    int turn = 0;
    auto begin_turn = [&] { named_bar_sync(TURN_BAR + c, 256); };
    auto end_turn = [&] {
        if (!(c == 1 && ++turn == turns)) named_bar_arrive(TURN_BAR + 1 - c, 256);
    };
    if (c == 1) named_bar_arrive(TURN_BAR + 0, 256);                      // warpgroup 0 takes the first turn

    // Prologue: S_0 and its softmax (acc is 0: nothing to rescale).
    mbar_wait(sm.q_full, 0);
    mbar_wait(sm.kv_full, 0);                                             // slot 0, fill 0
    begin_turn();
    wgmma_fence();
    issue_s(0);
    end_turn();
    wgmma_wait<0>();
    fence_regs(sc);
    mask_tile(sc, 0, q0c, r_lo, c_lane, S, causal);
    online_softmax(sc, m_i, l_i, alpha, scale_log2);
    pack_p();

    for (int j = 1; j < n_tiles; ++j) {
        mbar_wait(sm.kv_full + 8 * (j % STAGES), (j / STAGES) & 1);      // tile j has landed
        begin_turn();
        fence_regs(acc);                                                  // acc (rescaled) and P_{j-1} are written...
        fence_regs(p);
        wgmma_fence();                                                    // ...before the tensor cores read them
        issue_s(j);                                                       // group 1: S_j
        issue_pv(j - 1);                                                  // group 2: O += P_{j-1}·V_{j-1}
        end_turn();
        wgmma_wait<1>();                                                  // S_j is done; P·V may still run
        fence_regs(sc);
        mask_tile(sc, j * Bc, q0c, r_lo, c_lane, S, causal);
        online_softmax(sc, m_i, l_i, alpha, scale_log2);                  // ...under the P·V
        wgmma_wait<0>();                                                  // P_{j-1}·V_{j-1} is done
        fence_regs(acc);
        if (tid == 0) mbar_arrive(sm.kv_empty + 8 * ((j - 1) % STAGES));  // K_{j-1}, V_{j-1} no longer read
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] *= alpha[(i / 2) % 2];     // O relative to m_j now, as P_j
        pack_p();
    }

    // Epilogue: the last P·V, then O = acc / l.
    begin_turn();
    fence_regs(acc);
    fence_regs(p);
    wgmma_fence();
    issue_pv(n_tiles - 1);
    end_turn();
    wgmma_wait<0>();
    fence_regs(acc);
    if (tid == 0) mbar_arrive(sm.kv_empty + 8 * ((n_tiles - 1) % STAGES));

    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_i[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);                          // the row sum is spread over the quad
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[h] = 1.f / l;                                                 // l > 0: every row sees key 0
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = q0c + r_lo + 8 * h;
        if (row >= S) continue;                                           // padding rows of the last tile
        __half* out = O + (size_t)(row0 + row) * D + c_lane;
#pragma unroll
        for (int n8 = 0; n8 < D / 8; ++n8) {                              // 2 columns per 8-column chunk
            const int i = 4 * n8 + 2 * h;
            *reinterpret_cast<u32*>(out + 8 * n8) = pack_half2(acc[i] * inv[h], acc[i + 1] * inv[h]);
        }
    }
}

template <int D>
__device__ __forceinline__ void attention_block(const CUtensorMap* tmQ,   // [B·H·S, D] fp16, box [Br, 64]
                                                const CUtensorMap* tmK,   // [B·H·S, D] fp16, box [Bc, 64]
                                                const CUtensorMap* tmV,   // [B·H·S, D] fp16, box [Bc, 64]
                                                __half* __restrict__ O,   // [B, H, S, D]
                                                int S, float scale_log2, int causal) {
    // Align the tiles to a swizzle atom (the launcher allocated SWIZZLE_ATOM bytes of slack for this).
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const Smem<D> sm(base);
    const int wg = threadIdx.x / 128;                                     // 0: producer, 1..CONSUMERS: consumers
    // Grid (⌈S/Br⌉, B·H); query tiles in reverse order, so that under causal masking the longest
    // blocks start first.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * Br;                     // first query row of this block
    const int row0 = blockIdx.y * S;                                      // this head's first row in [B·H·S, D]
    const int n_key_tiles = (S + Bc - 1) / Bc;
    const int last_row = min(q0 + Br, S) - 1;
    const int n_tiles = causal ? min(n_key_tiles, last_row / Bc + 1) : n_key_tiles;   // causal: skip tiles past the diagonal

    if (threadIdx.x == 0) {
        tma_prefetch_map(tmQ); tma_prefetch_map(tmK); tma_prefetch_map(tmV);
        mbar_init(sm.q_full, 1);
        for (int s = 0; s < Layout<D>::STAGES; ++s) {
            mbar_init(sm.kv_full + 8 * s, 1);                             // the producer's arrive + TMA's bytes
            mbar_init(sm.kv_empty + 8 * s, CONSUMERS);                    // one arrival per consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();                                                      // the last block-wide barrier: roles split here

    if (wg == 0) {
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) producer<D>(sm, tmQ, tmK, tmV, row0, q0, n_tiles);
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        consumer<D>(sm, wg - 1, O, row0, q0, n_tiles, S, scale_log2, causal);
    }
}

// One entry point per head dim. __launch_bounds__(THREADS, 1) caps registers at entry (168), which
// setmaxnreg needs; the consumers then raise theirs to CONSUMER_REGS.
extern "C" __global__ void __launch_bounds__(THREADS, 1) pingpong_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<64>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1) pingpong_d128(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<128>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
