// Chapter 7 (step b of the chapter) — warp specialization: a producer warpgroup feeds two consumer
// warpgroups through a TMA + mbarrier ring, and setmaxnreg moves registers from one to the others.
//
// The idea: in step a one warpgroup did everything in turn, and one of its threads also issued the
// TMA requests between tiles. Here the block has three warpgroups with fixed roles:
//   warpgroup 0, the producer: one thread issues every TMA request (Q once, then K_j, V_j into the
//     ring), waiting only for a slot to be released; the other 127 threads have nothing to do;
//   warpgroups 1 and 2, the consumers: 64 query rows each (Br = 128 per block), both reading the same
//     K/V slots: S = Q·K_jᵀ and O += P·V_j on wgmma, the online softmax in registers, as in step a.
// The ring now needs two barriers per slot: kv_full[s] (the producer's expect_tx + TMA's bytes: "tile
// landed") and kv_empty[s] (one arrival per consumer warpgroup: "done reading, refill it"). Phases:
// slot s holds tiles s, s + STAGES, s + 2·STAGES, …; tile j is fill u = j / STAGES of its slot, so
// consumers wait kv_full[s] for parity u & 1, and the producer, before fill u ≥ 1, waits kv_empty[s]
// for the release of fill u - 1, parity (u - 1) & 1.
//
// Registers: the block has 384 threads, so at launch each may have 65536 / 384 = 170 registers (168,
// a multiple of 8). The producer needs a handful, the consumers hold S [64, 128] and O [64, D] in fp32
// (64 + 64 registers at D = 128), P in fp16 (32) and addresses. setmaxnreg (sm_90a) rebalances per
// warpgroup at run time: the producer gives back down to 24, each consumer takes up to 240:
//     128 · 24 + 2 · 128 · 240 = 64512 ≤ 65536.
// ptxas honours it only with a register cap at entry (__launch_bounds__(384, 1)) and when each role is
// one branch of a single if/else (otherwise it warns C7508 "setmaxnreg ignored").
//
// Causal masking skips whole tiles: a block of rows q0..q0+127 needs key tiles up to its last row
// only (the producer never loads the others), and only tiles crossing the diagonal or the end of the
// sequence are masked element by element.
//
// What changed since step a: the roles (producer warpgroup / 2 consumer warpgroups), kv_empty barriers and
// the phase arithmetic, Br = 128 and Bc = 128 (wgmma N = 128 for S), setmaxnreg.
// The consumers' `ready` flag and the producer's check of `abort` exist for the exercise: an
// unwritten wait leaves `ready` false, the consumers stop at once and raise `abort`, and the producer,
// instead of waiting forever for a slot nobody will release, waits for its copies in flight and
// leaves — the output stays unwritten (NaN under the grader) instead of the kernel hanging.
//
// Limitation: each consumer still runs its two GEMMs and its softmax one after the other (wgmma wait
// right after each GEMM): while a warpgroup computes exp2, the tensor cores only have the other
// warpgroup's GEMMs, whenever they happen to coincide. Step c orders them (ping-pong) and overlaps
// the next Q·Kᵀ with the current softmax within a warpgroup.
//
// The header of k07a_wgmma_tma.cu explains TMA, the 128-byte swizzle, the wgmma descriptor and
// fragment layouts.
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

constexpr int CONSUMERS = 2;                  // consumer warpgroups per block
constexpr int Br = 64 * CONSUMERS;            // query rows per block: 64 (wgmma's M) per consumer
constexpr int Bc = 128;                       // keys per K/V tile: the N of S = Q·Kᵀ
constexpr int STAGES = 2;                     // K/V ring slots
constexpr int THREADS = 128 * (1 + CONSUMERS);   // producer warpgroup + consumers: 384
constexpr int PRODUCER_REGS = 24;             // setmaxnreg targets (multiples of 8, 24..256):
constexpr int CONSUMER_REGS = 240;            //   128·24 + 256·240 = 64512 ≤ 65536 registers per SM
constexpr int BOX = 64;                       // fp16 columns per TMA box: 128 bytes, the swizzle span
constexpr int SWIZZLE_ATOM = 1024;            // 8 rows × 128 bytes: the swizzle pattern repeats after this

// Dynamic shared memory, in bytes (the launcher adds SWIZZLE_ATOM bytes of slack to align the start).
template <int D>
struct Layout {
    static constexpr int BOXES = D / BOX;                  // 64-column boxes per row: 1 (D 64) or 2 (D 128)
    static constexpr int Q_BYTES = Br * D * 2;             // Q tile        [BOXES][Br][64] fp16, swizzled
    static constexpr int KV_BYTES = Bc * D * 2;            // a K or V tile [BOXES][Bc][64] fp16, swizzled
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + Q_BYTES;          // K ring       [STAGES] K tiles
    static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;   // V ring    [STAGES] V tiles
    static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES; // mbarriers: q_full, kv_full[STAGES], kv_empty[STAGES]
    static constexpr int ABORT_OFF = BAR_OFF + 8 * (1 + 2 * STAGES);   // u32: the consumers gave up (exercise stub)
    static constexpr int BYTES = ABORT_OFF + 8;
    static_assert(D % BOX == 0, "D must be a multiple of 64");
    static_assert(Q_BYTES % SWIZZLE_ATOM == 0 && KV_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// ---------------------------------------------------------------- the kernel ---------------------
template <int D>
struct Smem {                                      // shared-memory addresses of one block's tiles and barriers
    u32 q, k, v;                                   // Q [BOXES][Br][64]; K, V rings [STAGES][BOXES][Bc][64]
    u32 q_full, kv_full, kv_empty;                 // barriers (kv_full + 8s, kv_empty + 8s for slot s)
    volatile u32* abort;                           // set by consumers that gave up (the exercise stub)
    __device__ explicit Smem(u32 base) {
        using L = Layout<D>;
        q = base + L::Q_OFF; k = base + L::K_OFF; v = base + L::V_OFF;
        q_full = base + L::BAR_OFF; kv_full = q_full + 8; kv_empty = kv_full + 8 * STAGES;
        abort = reinterpret_cast<volatile u32*>(smem_raw + (base - smem_u32(smem_raw)) + L::ABORT_OFF);
    }
};

// The producer: one thread posts Q, then every K/V tile into the ring, each slot once it is released.
template <int D>
__device__ __forceinline__ void producer(const Smem<D>& sm, const CUtensorMap* tmQ, const CUtensorMap* tmK,
                                         const CUtensorMap* tmV, int row0, int q0, int n_tiles) {
    using L = Layout<D>;
    mbar_arrive_expect_tx(sm.q_full, L::Q_BYTES);
#pragma unroll
    for (int b = 0; b < L::BOXES; ++b) tma_load_2d(sm.q + b * Br * 128, tmQ, b * BOX, row0 + q0, sm.q_full);
    int j = 0;
    for (; j < n_tiles; ++j) {
        const int s = j % STAGES, u = j / STAGES;                    // slot, and which fill of it this is
        if (u > 0 && !mbar_wait_or_abort(sm.kv_empty + 8 * s, (u - 1) & 1, sm.abort))
            break;                                                   // the consumers gave up (exercise stub)
        mbar_arrive_expect_tx(sm.kv_full + 8 * s, 2 * L::KV_BYTES);   // K_j and V_j: 2 · Bc · D · 2 bytes
#pragma unroll
        for (int b = 0; b < L::BOXES; ++b) {
            tma_load_2d(sm.k + s * L::KV_BYTES + b * Bc * 128, tmK, b * BOX, row0 + j * Bc, sm.kv_full + 8 * s);
            tma_load_2d(sm.v + s * L::KV_BYTES + b * Bc * 128, tmV, b * BOX, row0 + j * Bc, sm.kv_full + 8 * s);
        }
    }
    // Before leaving, let the last copies land: a block must not end with TMA still writing into its
    // shared memory. (In a working kernel the consumers have waited for them already: this returns at once.)
    for (int t = max(0, j - STAGES); t < j; ++t) mbar_wait(sm.kv_full + 8 * (t % STAGES), (t / STAGES) & 1);
}

// A consumer warpgroup: 64 query rows, q0c .. q0c + 63, against every K/V tile the producer loads.
template <int D>
__device__ __forceinline__ void consumer(const Smem<D>& sm, int c, __half* __restrict__ O, int row0, int q0,
                                         int n_tiles, int S, float scale_log2, int causal) {
    using L = Layout<D>;
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

    mbar_wait(sm.q_full, 0);
    bool unwritten = false;
    for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES;
        const int k0 = j * Bc;                                            // first key of tile j
        bool ready = false;                                               // slot s holds tile j
        // TODO: wait until slot s holds tile j — kv_full[s] (address sm.kv_full + 8 * s) completes
        //       once per fill, and tile j is fill j / STAGES of its slot, so wait for parity (j /
        //       STAGES) & 1 with mbar_wait; then set ready = true.
        if (!ready) {                                                     // the exercise's stub: stop, write nothing,
            if (tid == 0) *sm.abort = 1;                                  // and tell the producer not to wait for us
            unwritten = true;
            break;
        }

        // S = Q·K_jᵀ: D/16 wgmma steps along D, each 64×Bc×16.
        float sc[Bc / 2];                                                 // scores [64, Bc] fp32 (this thread's share)
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;                             // 16 halves = 32 bytes per step, in the row
            const u64 da = make_desc(sQ + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM);
            const u64 db = make_desc(sm.k + s * L::KV_BYTES + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM);
            wgmma_ss<Bc>(sc, da, db, kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(sc);

        // Mask keys past S, and (causal) keys after the query, where the tile can have any.
        if (k0 + Bc > S || (causal && k0 + Bc - 1 > q0c)) {
#pragma unroll
            for (int i = 0; i < Bc / 2; ++i) {
                const int col = k0 + 8 * (i / 4) + c_lane + (i % 2);
                const int row = q0c + r_lo + 8 * ((i / 2) % 2);
                if (col >= S || (causal && col > row)) sc[i] = -CUDART_INF_F;
            }
        }
        // Online softmax, row by row: h = 0 is row r_lo, h = 1 is row r_lo + 8; element sc[i] is in row
        // h = (i / 2) % 2. Afterwards sc holds p = 2^(s·scale_log2 - m_i), and acc is rescaled.
        float alpha[2];
        // TODO: for each h: mx = the max of the row's sc[i] over this thread, then over its quad
        //       (__shfl_xor_sync with 1 and 2); m_new = max(m_i[h], mx · scale_log2); base = m_new,
        //       or 0 if m_new is -inf (no key yet: avoids inf - inf); alpha[h] = fast_exp2(m_i[h] -
        //       base); sc[i] = fast_exp2(sc[i] · scale_log2 - base) (one fmaf) summed into this
        //       thread's part of the row sum; l_i[h] = alpha[h] · l_i[h] + sum; m_i[h] = m_new.
        //       Then acc[i] *= alpha[(i / 2) % 2].

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
            const u64 db = make_desc(sm.v + s * L::KV_BYTES + kk * 16 * 128, Bc * 128, SWIZZLE_ATOM);
            wgmma_rs<D>(acc, p[kk], db);
        }
        wgmma_commit();
        wgmma_wait<0>();                                                  // this warpgroup's reads of slot s are done
        fence_regs(acc);

        // TODO: release slot s: one arrival per consumer warpgroup (its thread tid == 0) on
        //       kv_empty[s] (sm.kv_empty + 8 * s) with mbar_arrive — the barrier was initialised to
        //       expect CONSUMERS arrivals.
    }
    if (unwritten) return;

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
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(sm.kv_full + 8 * s, 1);                             // the producer's arrive + TMA's bytes
            mbar_init(sm.kv_empty + 8 * s, CONSUMERS);                    // one arrival per consumer warpgroup
        }
        *sm.abort = 0;
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
extern "C" __global__ void __launch_bounds__(THREADS, 1) ws_attention_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<64>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1) ws_attention_d128(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, float scale_log2, int causal) {
    attention_block<128>(&tmQ, &tmK, &tmV, O, S, scale_log2, causal);
}
