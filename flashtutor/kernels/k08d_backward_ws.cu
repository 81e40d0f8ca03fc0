// Chapter 8, step d — the backward pass warp-specialized, on chapter 7's tools: TMA tiles, wgmma, a producer
// warpgroup, setmaxnreg.
//
// The idea: step 8c folded dQ into the dK/dV loop and lost on registers (Triton gave one kind of warp 255 registers for
// dK, dV and a dQ tile at once). Here the block has chapter 7b's three roles:
//   warpgroup 0, the producer: its first thread loads K_j and V_j (Bc = 128 keys) once, then streams (Q_i, dO_i)
//     tiles of Br = 64 query rows through a two-slot ring (kv_full, then qdo_full[s] / qdo_empty[s], as 7b's K/V
//     ring); its second warp copies the tile's lse (times log2 e; +inf past S) and delta into the same slot, so the
//     consumers read them from shared memory;
//   warpgroups 1 and 2, the consumers: 64 keys each. Per query tile, all on wgmma, each product issued as soon as its
//   operands exist and waited for only where its result is needed:
//     Sᵀ = K_c·Q_iᵀ, then dPᵀ = V_c·dO_iᵀ   (shared × shared, both K-major: 7b's S = Q·Kᵀ with the roles swapped);
//     wait for Sᵀ (dPᵀ still running): Pᵀ = 2^(Sᵀ·scale·log2 e − lse·log2 e); issue dV_c += Pᵀ·dO_i;
//     wait for dPᵀ (dV running): dSᵀ = Pᵀ ∘ (dPᵀ − delta); issue dK_c += dSᵀ·Q_i (A from registers, B MN-major);
//     dSᵀ to shared memory (128-byte swizzled rows, one per key; two buffers, alternating per tile); once both
//     consumers have written theirs: dQ_i = dS·K over all 128 keys of the block, consumer c computing the 64 columns
//     c·64 … c·64 + 63 (at D = 128; at D = 64 each consumer does all 64 columns over its own 64 keys), with A = dSᵀ
//     read back transposed and K as an MN-major B;
//     wait for dV and dK: release the ring slot; wait for dQ: the 64 × 64 fp32 tile goes to shared memory in the
//     accumulator's own order (each warp writes 256 contiguous bytes: no bank conflicts) and one thread adds it into
//     the fp32 dQ buffer with one bulk reduce copy (cp.reduce.async.bulk … .add.f32). That buffer is the kernel's own scratch, laid out in those 16 KB tiles; a
//     small Triton kernel of the launcher turns it into dQ (reorder and cast).
// Registers (D = 128): dK and dV stay in fp32 for the whole loop (64 + 64 per thread), Sᵀ and dPᵀ (32 + 32) die once
// packed to fp16, the dQ tile takes 32: under the 240 the consumers take with setmaxnreg.
//
// Rows past S. Query rows past S (the last tile) get lse = +inf, so their P, dS and dQ share are 0. Key rows past S
// are masked out of P and dS (TMA reads the next head's rows there), and their dK, dV rows are not stored. Causal: a
// block starts at the query tile holding its first key. The mask is applied only to the tiles that need it: the
// diagonal tiles of causal attention and the block holding the last key.
//
// What changed since step 8c: CUDA instead of Triton, for the roles and the register split Triton cannot express on
// Hopper; dQ through a bulk reduce of a shared-memory tile (8c: a TMA tensor reduce).
// Measured on an H100 (results/ch08-8d-h100-2026-11-27*, one process, alternating with SDPA's cuDNN backward): the
// backward takes 1.09–1.13× cuDNN's time at D = 128 (results/ch08-time-h100-2026-11-27-e.log); the first version,
// with every product waited for at once and lse, delta read from global memory per element, took 1.73–2.04×. Tried
// and slower: storing dQ one tile late, overlapping the next Sᵀ (1.36× against 1.16×); each consumer computing all of
// dQ over its own 64 keys (1.38×); one dQ buffer whose thread waits for the bulk copy's read right after issuing it
// (1.43×); dS from the fp16 P (1.15–1.18× against 1.12–1.16×); dQ converted by each head's last block instead of a
// kernel of its own (results/ch08-8d-h100-2026-11-28: 1.13× against 1.14× not causal, 1.12× against 1.10× causal);
// the producer's idle warps adding dQ, counting each tile's blocks and converting completed tiles (2.01× against
// 1.13×: the consumers wait for their dQ buffers).
// Limitation: the backward also runs delta, zeroes the dQ buffer and converts it (0.03–0.11× cuDNN's time); at
// D = 64 both consumers add a partial dQ tile per query tile; the two consumers meet at a barrier every tile (for dS),
// so one's stall is the other's; small problems are paced by the host (0.2–0.8 ms per backward() call on the H100's).
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

constexpr int CONSUMERS = 2;                  // consumer warpgroups per block
constexpr int Bc = 64 * CONSUMERS;            // keys per block: 64 (wgmma's M) per consumer
constexpr int Br = 64;                        // query rows per streamed tile (the N of Sᵀ, the K of dV, dK)
constexpr int STAGES = 2;                     // (Q, dO, lse, delta) ring slots
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
constexpr int BOX = 64;                       // fp16 columns per TMA box: 128 bytes, the swizzle span
constexpr int SWIZZLE_ATOM = 1024;
constexpr int DQ_TILE = 64 * 64;              // fp32 elements of one dQ tile: 64 query rows × 64 columns
constexpr int DQ_BUFS = 2;                    // dQ tiles in shared memory per consumer, alternating per query tile
constexpr int BAR_DS = 1, BAR_WG = 2;         // named barriers: both consumers (dS written); one consumer (+ c)

template <int D>
struct Layout {
    static constexpr int BOXES = D / BOX;
    static constexpr bool SPLIT = D == 128;                // dQ: consumer c computes columns 64c .. 64c + 63
    static constexpr int KV_BYTES = Bc * D * 2;            // K or V of the block [BOXES][Bc][64] fp16, swizzled
    static constexpr int T_BYTES = Br * D * 2;             // a Q or dO tile      [BOXES][Br][64] fp16, swizzled
    static constexpr int LD_BYTES = 2 * Br * 4;            // a tile's lse·log2 e and delta [2][Br] fp32
    static constexpr int DS_BYTES = Bc * Br * 2;           // dSᵀ of the block    [Bc keys][Br] fp16, swizzled
    static constexpr int DQ_BYTES = DQ_TILE * 4;           // one consumer's dQ tile, fp32, accumulator order
    static constexpr int K_OFF = 0;
    static constexpr int V_OFF = K_OFF + KV_BYTES;
    static constexpr int Q_OFF = V_OFF + KV_BYTES;          // Q ring  [STAGES] tiles
    static constexpr int DO_OFF = Q_OFF + STAGES * T_BYTES; // dO ring [STAGES] tiles
    static constexpr int DS_OFF = DO_OFF + STAGES * T_BYTES; // [2] buffers, alternating per tile
    static constexpr int DQ_OFF = DS_OFF + 2 * DS_BYTES;
    static constexpr int LD_OFF = DQ_OFF + CONSUMERS * DQ_BUFS * DQ_BYTES;   // [STAGES] slots
    static constexpr int BAR_OFF = LD_OFF + STAGES * LD_BYTES;      // kv_full, qdo_full[STAGES], qdo_empty[STAGES]
    static constexpr int BYTES = BAR_OFF + 8 * (1 + 2 * STAGES);
    static_assert(D % BOX == 0 && D <= 128, "D must be 64 or 128");
    static_assert(T_BYTES % SWIZZLE_ATOM == 0 && DS_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// d[64, N] (+)= A[64, 16] · B[16, N], both in shared memory and both MN-major: hopper.cuh's wgmma_ss with the
// "transpose A" and "transpose B" bits set (its operands are K-major), for dQ = dS·K from dSᵀ and K as stored
// (N = 64: a consumer's 64 columns of dQ).
template <int N> __device__ void wgmma_ss_tt(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d);
#define FT_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                 "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
template <>
__device__ __forceinline__ void wgmma_ss_tt<64>(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 " %32, %33, p, 1, 1, 1, 1;\n}"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#undef FT_D8

// Shared-memory writes made by threads, then read by the asynchronous proxy (wgmma, a bulk copy): fence them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// dst[0 : bytes) += src[0 : bytes) (fp32, global ← shared), done by the copy engine; a bulk group per call.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(reinterpret_cast<u64>(dst)), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N = 0>   // until at most N of this thread's bulk groups still read shared memory
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void st_shared_b32(u32 addr, u32 x) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(x) : "memory");
}
__device__ __forceinline__ void st_shared_v2(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ float2 ld_shared_v2(u32 addr) {
    float2 r;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r.x), "=f"(r.y) : "r"(addr) : "memory");
    return r;
}

template <int D>
struct Smem {
    u32 k, v, q, dO, ds, dq, ld, kv_full, qdo_full, qdo_empty;
    __device__ explicit Smem(u32 base) {
        using L = Layout<D>;
        k = base + L::K_OFF; v = base + L::V_OFF; q = base + L::Q_OFF; dO = base + L::DO_OFF;
        ds = base + L::DS_OFF; dq = base + L::DQ_OFF; ld = base + L::LD_OFF;
        kv_full = base + L::BAR_OFF; qdo_full = kv_full + 8; qdo_empty = qdo_full + 8 * STAGES;
    }
};

// The producer's first thread: K and V of the block once, then every (Q_i, dO_i) tile into the ring, each slot
// once both consumers have released it.
template <int D>
__device__ __forceinline__ void load_tiles(const Smem<D>& sm, const CUtensorMap* tmQ, const CUtensorMap* tmK,
                                           const CUtensorMap* tmV, const CUtensorMap* tmdO, int row0, int k0,
                                           int m_lo, int n_tiles) {
    using L = Layout<D>;
    mbar_arrive_expect_tx(sm.kv_full, 2 * L::KV_BYTES);
#pragma unroll
    for (int b = 0; b < L::BOXES; ++b) {
        tma_load_2d(sm.k + b * Bc * 128, tmK, b * BOX, row0 + k0, sm.kv_full);
        tma_load_2d(sm.v + b * Bc * 128, tmV, b * BOX, row0 + k0, sm.kv_full);
    }
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % STAGES, u = t / STAGES;
        if (u > 0) mbar_wait(sm.qdo_empty + 8 * s, (u - 1) & 1);
        mbar_arrive_expect_tx(sm.qdo_full + 8 * s, 2 * L::T_BYTES);
        const int i0 = m_lo + t * Br;
#pragma unroll
        for (int b = 0; b < L::BOXES; ++b) {
            tma_load_2d(sm.q + s * L::T_BYTES + b * Br * 128, tmQ, b * BOX, row0 + i0, sm.qdo_full + 8 * s);
            tma_load_2d(sm.dO + s * L::T_BYTES + b * Br * 128, tmdO, b * BOX, row0 + i0, sm.qdo_full + 8 * s);
        }
    }
    for (int t = max(0, n_tiles - STAGES); t < n_tiles; ++t) mbar_wait(sm.qdo_full + 8 * (t % STAGES), (t / STAGES) & 1);
}

// The producer's second warp: each tile's lse (times log2 e, +inf past S) and delta (0 past S) into the slot; every
// lane arrives on the slot's full barrier after its own stores (the barrier counts 1 + 32 arrivals).
template <int D>
__device__ __forceinline__ void load_rows(const Smem<D>& sm, const float* __restrict__ LSE,
                                          const float* __restrict__ DELTA, int row0, int m_lo, int n_tiles, int S) {
    using L = Layout<D>;
    const int lane = threadIdx.x % 32;
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % STAGES, u = t / STAGES, i0 = m_lo + t * Br;
        if (u > 0) mbar_wait(sm.qdo_empty + 8 * s, (u - 1) & 1);
        const u32 slot = sm.ld + s * L::LD_BYTES;
#pragma unroll
        for (int r = lane; r < Br; r += 32) {
            const int qi = i0 + r;
            const bool ok = qi < S;
            st_shared_b32(slot + 4 * r, __float_as_uint(ok ? __ldg(LSE + row0 + qi) * 1.4426950408889634f
                                                           : CUDART_INF_F));
            st_shared_b32(slot + 4 * (Br + r), __float_as_uint(ok ? __ldg(DELTA + row0 + qi) : 0.f));
        }
        mbar_arrive(sm.qdo_full + 8 * s);
    }
}

// Pᵀ (into st) and dSᵀ's first factor from Sᵀ and the tile's lse; element (key r_lo + 8h, query 8·n8 + c_lane + e)
// is index 4·n8 + 2·h + e. MASK: zero the elements whose key is past S or (causal) after the query.
template <bool MASK>
__device__ __forceinline__ void softmax_tile(float (&st)[Br / 2], u32 slot, float scale_log2, int i0, int key_lo,
                                             int c_lane, int S, int causal) {
#pragma unroll
    for (int n8 = 0; n8 < Br / 8; ++n8) {
        const float2 lse2 = ld_shared_v2(slot + 4 * (8 * n8 + c_lane));
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = 4 * n8 + 2 * h + e;
                const float p = fast_exp2(fmaf(st[i], scale_log2, -(e ? lse2.y : lse2.x)));
                if (MASK) {
                    const int qi = i0 + 8 * n8 + c_lane + e, key = key_lo + 8 * h;
                    st[i] = (key < S && (!causal || qi >= key)) ? p : 0.f;
                } else {
                    st[i] = p;
                }
            }
    }
}

// acc (64 keys × Br queries) = A·Bᵀ, issued and committed, not waited for: A is this warpgroup's 64 rows of a block
// tile (K or V, boxes of Bc rows), B a Br-row tile (Q or dO), both K-major along D: D/16 steps, each 64×Br×16.
template <int D>
__device__ __forceinline__ void mma_ss_tile(float (&acc)[Br / 2], u32 sA, u32 sB) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u32 in_box = (kk % 4) * 32;
        wgmma_ss<Br>(acc, make_desc(sA + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM),
                     make_desc(sB + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM), kk > 0);
    }
    wgmma_commit();
}

// acc (64 keys × D) += x · B, issued and committed, not waited for: x is a 64 × Br fp32 tile in accumulator registers
// (Pᵀ or dSᵀ), packed here to fp16 A fragments (kept in frag: queries 16kk .. 16kk + 15 are elements 8kk .. 8kk + 7);
// B is the Br × D tile at sB (dO or Q), MN-major: Br/16 steps along the queries, each 64×D×16.
template <int D>
__device__ __forceinline__ void mma_rs_tile(float (&acc)[D / 2], const float (&x)[Br / 2], u32 (&frag)[Br / 16][4],
                                            u32 sB) {
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) frag[kk][r] = pack_half2(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
    fence_regs(acc);
    fence_regs(frag);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk)
        wgmma_rs<D>(acc, frag[kk], make_desc(sB + kk * 16 * 128, Br * 128, SWIZZLE_ATOM));
    wgmma_commit();
}

// A consumer warpgroup: keys kc0 .. kc0 + 63 against every query tile the producer streams.
template <int D>
__device__ __forceinline__ void consumer(const Smem<D>& sm, int c, float* __restrict__ DQ, __half* __restrict__ DK,
                                         __half* __restrict__ DV, int row0, int k0, int m_lo, int n_tiles,
                                         int q_tiles, int S, float scale, int causal) {
    using L = Layout<D>;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int kc0 = k0 + 64 * c;                                        // this warpgroup's first key
    const int r_lo = 16 * warp + lane / 4;                              // this thread's rows (keys): r_lo, r_lo + 8
    const int c_lane = 2 * (lane % 4);                                  // its first column in each 8-column chunk
    const float scale_log2 = scale * 1.4426950408889634f;
    const u32 sK = sm.k + c * 64 * 128, sV = sm.v + c * 64 * 128;     // this warpgroup's 64 rows of each box
    const u32 sdQ0 = sm.dq + c * DQ_BUFS * L::DQ_BYTES;
    // dQ's operands: at D = 128 all 128 keys (both consumers' dSᵀ) against K's box c; at D = 64 this consumer's
    // 64 keys against its own rows of K.
    constexpr int DQ_KEYS = L::SPLIT ? Bc : 64;
    const u32 dq_a = L::SPLIT ? 0u : u32(c * 64 * 128), dq_b = L::SPLIT ? sm.k + c * Bc * 128 : sK;
    const int dq_block = L::SPLIT ? c : 0;                             // which 64 columns of the query tile
    const bool tail = kc0 + 64 > S;                                      // keys past S in this warpgroup
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

    // The dQ tile to shared memory in the accumulator's order, into the buffer of the two that the bulk add of two
    // tiles ago has finished reading (waited for before the dS barrier), then one bulk add into its 16 KB tile of
    // the dQ buffer in global memory. (One buffer and a barrier before the store: 2 % slower.)
    float dq[32];
    auto store_dq = [&](int qi0, int t) {
        const u32 sdQ = sdQ0 + (t % DQ_BUFS) * L::DQ_BYTES;   // free: see the dS barrier
#pragma unroll
        for (int j = 0; j < 16; ++j)
            st_shared_v2(sdQ + (j * 128 + tid) * 8, dq[2 * j] * scale, dq[2 * j + 1] * scale);
        fence_proxy_async();
        named_bar_sync(BAR_WG + c, 128);
        if (tid == 0) {
            const size_t tile = (size_t)(row0 / S * q_tiles + qi0 / Br) * (D / 64) + dq_block;
            bulk_reduce_add_f32(DQ + tile * DQ_TILE, sdQ, L::DQ_BYTES);
        }
    };

    mbar_wait(sm.kv_full, 0);
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % STAGES, i0 = m_lo + t * Br;
        const u32 sQ = sm.q + s * L::T_BYTES, sdO = sm.dO + s * L::T_BYTES, slot = sm.ld + s * L::LD_BYTES;
        const u32 sdS = sm.ds + (t % 2) * L::DS_BYTES;
        mbar_wait(sm.qdo_full + 8 * s, (t / STAGES) & 1);

        // Sᵀ = K_c·Q_iᵀ, then dPᵀ = V_c·dO_iᵀ: two groups.
        float st[Br / 2], dpt[Br / 2];
        mma_ss_tile<D>(st, sK, sQ);
        mma_ss_tile<D>(dpt, sV, sdO);

        // Pᵀ while dPᵀ runs; then dV_c += Pᵀ·dO_i (Br/16 steps along the queries, 64×D×16, B MN-major).
        wgmma_wait<1>();
        fence_regs(st);
        if (tail || (causal && i0 < kc0 + 64))
            softmax_tile<true>(st, slot, scale_log2, i0, kc0 + r_lo, c_lane, S, causal);
        else
            softmax_tile<false>(st, slot, scale_log2, i0, kc0 + r_lo, c_lane, S, causal);
        u32 pf[Br / 16][4], df[Br / 16][4];
        mma_rs_tile<D>(dv, st, pf, sdO);

        // dSᵀ = Pᵀ ∘ (dPᵀ − delta) while dV runs; then dK_c += dSᵀ·Q_i.
        wgmma_wait<1>();
        fence_regs(dpt);
#pragma unroll
        for (int n8 = 0; n8 < Br / 8; ++n8) {
            const float2 delta = ld_shared_v2(slot + 4 * (Br + 8 * n8 + c_lane));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = 4 * n8 + 2 * h;
                dpt[i] = st[i] * (dpt[i] - delta.x);
                dpt[i + 1] = st[i + 1] * (dpt[i + 1] - delta.y);
            }
        }
        mma_rs_tile<D>(dk, dpt, df, sQ);

        // dSᵀ to shared memory, one 128-byte row per key (Br = 64 fp16), 16-byte chunks swizzled by the row.
#pragma unroll
        for (int n8 = 0; n8 < Br / 8; ++n8)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = 64 * c + r_lo + 8 * h;
                st_shared_b32(sdS + row * 128 + ((n8 ^ (row % 8)) * 16) + c_lane * 2, df[n8 / 2][(n8 % 2) * 2 + h]);
            }
        fence_proxy_async();                                            // dSᵀ written: visible to wgmma
        // The bulk add that read this tile's dQ buffer (two tiles ago) is done reading it: every thread that
        // passes the barrier below may write the buffer.
        if (tid == 0) bulk_wait_read<DQ_BUFS - 1>();
        if (L::SPLIT) named_bar_sync(BAR_DS, 2 * 128);                  // both halves of dSᵀ are in place
        else named_bar_sync(BAR_WG + c, 128);

        // dQ_i's 64 columns = dS·K: DQ_KEYS/16 steps along the keys, 64×64×16, A and B MN-major.
        fence_regs(dq);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DQ_KEYS / 16; ++kk)
            wgmma_ss_tt<64>(dq, make_desc(sdS + dq_a + kk * 16 * 128, 64 * 128, SWIZZLE_ATOM),
                            make_desc(dq_b + kk * 16 * 128, Bc * 128, SWIZZLE_ATOM), kk > 0);
        wgmma_commit();
        wgmma_wait<1>();                                                // dV, dK done: Q_i, dO_i, lse, delta read
        fence_regs(dv);
        fence_regs(dk);
        if (tid == 0) mbar_arrive(sm.qdo_empty + 8 * s);                // release the slot
        wgmma_wait<0>();
        fence_regs(dq);
        store_dq(i0, t);
    }
    if (tid == 0) bulk_wait_all();

    // dK = scale·Σ dSᵀ Q, dV = Σ Pᵀ dO, fp16, rows (keys) < S.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = kc0 + r_lo + 8 * h;
        if (key >= S) continue;
        __half* gk = DK + (size_t)(row0 + key) * D + c_lane;
        __half* gv = DV + (size_t)(row0 + key) * D + c_lane;
#pragma unroll
        for (int n8 = 0; n8 < D / 8; ++n8) {
            const int i = 4 * n8 + 2 * h;
            *reinterpret_cast<u32*>(gk + 8 * n8) = pack_half2(dk[i] * scale, dk[i + 1] * scale);
            *reinterpret_cast<u32*>(gv + 8 * n8) = pack_half2(dv[i], dv[i + 1]);
        }
    }
}

template <int D>
__device__ __forceinline__ void backward_block(const CUtensorMap* tmQ, const CUtensorMap* tmK,
                                               const CUtensorMap* tmV, const CUtensorMap* tmdO,
                                               const float* LSE, const float* DELTA, float* DQ, __half* DK,
                                               __half* DV, int S, float scale, int causal) {
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const Smem<D> sm(base);
    const int wg = threadIdx.x / 128;
    const int k0 = blockIdx.x * Bc;                                     // first key of this block
    const int row0 = blockIdx.y * S;                                    // this head's first row in [B·H·S, ·]
    const int m_lo = causal ? (k0 / Br) * Br : 0;                       // causal: queries before k0 see no key here
    const int q_tiles = (S + Br - 1) / Br;
    const int n_tiles = q_tiles - m_lo / Br;

    if (threadIdx.x == 0) {
        tma_prefetch_map(tmQ); tma_prefetch_map(tmK); tma_prefetch_map(tmV); tma_prefetch_map(tmdO);
        mbar_init(sm.kv_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(sm.qdo_full + 8 * s, 1 + 32);                     // the TMA thread + the row warp's lanes
            mbar_init(sm.qdo_empty + 8 * s, CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) load_tiles<D>(sm, tmQ, tmK, tmV, tmdO, row0, k0, m_lo, n_tiles);
        else if (threadIdx.x / 32 == 1) load_rows<D>(sm, LSE, DELTA, row0, m_lo, n_tiles, S);
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        consumer<D>(sm, wg - 1, DQ, DK, DV, row0, k0, m_lo, n_tiles, q_tiles, S, scale, causal);
    }
}
extern "C" __global__ void __launch_bounds__(THREADS, 1) ws_backward_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* LSE,
    const float* DELTA, float* DQ, __half* DK, __half* DV, int S, float scale, int causal) {
    backward_block<64>(&tmQ, &tmK, &tmV, &tmdO, LSE, DELTA, DQ, DK, DV, S, scale, causal);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1) ws_backward_d128(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO, const float* LSE,
    const float* DELTA, float* DQ, __half* DK, __half* DV, int S, float scale, int causal) {
    backward_block<128>(&tmQ, &tmK, &tmV, &tmdO, LSE, DELTA, DQ, DK, DV, S, scale, causal);
}
