// Chapter 8, step d (work in progress: compiled and checked by the CPU tier, NOT YET RUN ON A GPU) — the backward
// pass warp-specialized, on chapter 7's tools: TMA tiles, wgmma, a producer warpgroup, setmaxnreg.
//
// The idea: step 8c folded dQ into the dK/dV loop and lost on registers (Triton gave one kind of warp 255 registers for
// dK, dV and a dQ tile at once). Here the block has chapter 7b's three roles:
//   warpgroup 0, the producer: one thread loads K_j and V_j (Bc = 128 keys) once, then streams (Q_i, dO_i) tiles of
//     Br = 64 query rows through a two-slot ring (kv_full, then qdo_full[s] / qdo_empty[s], as 7b's K/V ring);
//   warpgroups 1 and 2, the consumers: 64 keys each. Per query tile, all on wgmma:
//     Sᵀ = K_c·Q_iᵀ and dPᵀ = V_c·dO_iᵀ   (shared × shared, both K-major: 7b's S = Q·Kᵀ with the roles swapped);
//     Pᵀ = 2^(Sᵀ·scale·log2 e − lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ − delta), in registers;
//     dV_c += Pᵀ·dO_i and dK_c += dSᵀ·Q_i  (A from registers, B MN-major in shared memory: 7b's O += P·V);
//     dQ_i += dS_c·K_c: dSᵀ goes to shared memory (128-byte swizzled rows, one per key) and is read back as a
//       transposed A operand; K_c is an MN-major B. The 64 × D fp32 tile goes to shared memory and one thread adds it
//       into the fp32 dQ buffer in global memory with one bulk reduce copy (cp.reduce.async.bulk … .add.f32): the
//       rows of a query tile are contiguous there, so a tile is one copy. The two consumers each add their 64 keys'
//       share (the sum over the block's keys happens in L2).
// Registers (D = 128): dK and dV stay in fp32 for the whole loop (64 + 64 per thread), Sᵀ and dPᵀ (32 + 32) die once
// packed to fp16, dQ (64) lives only for its own wgmma: under the 240 the consumers take with setmaxnreg.
//
// Rows past S. Query rows past S (the last tile) get lse = +inf, so their P, dS and dQ share are 0, and the bulk add
// covers only rows < S. Key rows past S are masked out of P and dS (TMA reads the next head's rows there), and their
// dK, dV rows are not stored. Causal: a block starts at the query tile holding its first key, and every element with
// query < key is masked (also in tiles that need no mask: a later step can split the loop as 8b does).
//
// What changed since step 8c: CUDA instead of Triton, for the roles and the register split Triton cannot express on
// Hopper; dQ through a bulk reduce of a shared-memory tile (8c: a TMA tensor reduce).
// Limitation: not yet run — correctness and speed unknown; lse and delta are read from global memory per element
// (L1/L2 hits) rather than staged by the producer; the mask is computed on every tile.
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

constexpr int CONSUMERS = 2;                  // consumer warpgroups per block
constexpr int Bc = 64 * CONSUMERS;            // keys per block: 64 (wgmma's M) per consumer
constexpr int Br = 64;                        // query rows per streamed tile (the N of Sᵀ, the K of dV, dK)
constexpr int STAGES = 2;                     // (Q, dO) ring slots
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
constexpr int BOX = 64;                       // fp16 columns per TMA box: 128 bytes, the swizzle span
constexpr int SWIZZLE_ATOM = 1024;

template <int D>
struct Layout {
    static constexpr int BOXES = D / BOX;
    static constexpr int KV_BYTES = Bc * D * 2;            // K or V of the block [BOXES][Bc][64] fp16, swizzled
    static constexpr int T_BYTES = Br * D * 2;             // a Q or dO tile      [BOXES][Br][64] fp16, swizzled
    static constexpr int DS_BYTES = 64 * Br * 2;           // one consumer's dSᵀ  [64 keys][Br] fp16, swizzled
    static constexpr int DQ_BYTES = Br * D * 4;            // one consumer's dQ   [Br][D] fp32, row-major
    static constexpr int K_OFF = 0;
    static constexpr int V_OFF = K_OFF + KV_BYTES;
    static constexpr int Q_OFF = V_OFF + KV_BYTES;          // Q ring  [STAGES] tiles
    static constexpr int DO_OFF = Q_OFF + STAGES * T_BYTES; // dO ring [STAGES] tiles
    static constexpr int DS_OFF = DO_OFF + STAGES * T_BYTES;
    static constexpr int DQ_OFF = DS_OFF + CONSUMERS * DS_BYTES;
    static constexpr int BAR_OFF = DQ_OFF + CONSUMERS * DQ_BYTES;   // kv_full, qdo_full[STAGES], qdo_empty[STAGES]
    static constexpr int BYTES = BAR_OFF + 8 * (1 + 2 * STAGES);
    static_assert(D % BOX == 0, "D must be a multiple of 64");
    static_assert(T_BYTES % SWIZZLE_ATOM == 0 && DS_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// d[64, N] (+)= A[64, 16] · B[16, N], both in shared memory and both MN-major: hopper.cuh's wgmma_ss with the
// "transpose A" and "transpose B" bits set (its operands are K-major), for dQ = dS·K from dSᵀ and K as stored.
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
template <>
__device__ __forceinline__ void wgmma_ss_tt<128>(float (&d)[64], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 " %64, %65, p, 1, 1, 1, 1;\n}"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24), FT_D8(32), FT_D8(40), FT_D8(48), FT_D8(56)
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
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void st_shared_b32(u32 addr, u32 x) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(x) : "memory");
}
__device__ __forceinline__ void st_shared_v2(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}

template <int D>
struct Smem {
    u32 k, v, q, dO, ds, dq, kv_full, qdo_full, qdo_empty;
    __device__ explicit Smem(u32 base) {
        using L = Layout<D>;
        k = base + L::K_OFF; v = base + L::V_OFF; q = base + L::Q_OFF; dO = base + L::DO_OFF;
        ds = base + L::DS_OFF; dq = base + L::DQ_OFF;
        kv_full = base + L::BAR_OFF; qdo_full = kv_full + 8; qdo_empty = qdo_full + 8 * STAGES;
    }
};

// The producer: K and V of the block once, then every (Q_i, dO_i) tile into the ring, each slot once it is released.
template <int D>
__device__ __forceinline__ void producer(const Smem<D>& sm, const CUtensorMap* tmQ, const CUtensorMap* tmK,
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

// A consumer warpgroup: keys kc0 .. kc0 + 63 against every query tile the producer streams.
template <int D>
__device__ __forceinline__ void consumer(const Smem<D>& sm, int c, const float* __restrict__ LSE,
                                         const float* __restrict__ DELTA, float* __restrict__ DQ,
                                         __half* __restrict__ DK, __half* __restrict__ DV, int row0, int k0,
                                         int m_lo, int n_tiles, int S, float scale, int causal) {
    using L = Layout<D>;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int kc0 = k0 + 64 * c;                                        // this warpgroup's first key
    const int r_lo = 16 * warp + lane / 4;                              // this thread's rows (keys): r_lo, r_lo + 8
    const int c_lane = 2 * (lane % 4);                                  // its first column in each 8-column chunk
    const float scale_log2 = scale * 1.4426950408889634f;
    const u32 sK = sm.k + c * 64 * 128, sV = sm.v + c * 64 * 128;     // this warpgroup's 64 rows of each box
    const u32 sdS = sm.ds + c * L::DS_BYTES, sdQ = sm.dq + c * L::DQ_BYTES;
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

    mbar_wait(sm.kv_full, 0);
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % STAGES, i0 = m_lo + t * Br;
        const u32 sQ = sm.q + s * L::T_BYTES, sdO = sm.dO + s * L::T_BYTES;
        mbar_wait(sm.qdo_full + 8 * s, (t / STAGES) & 1);

        // Sᵀ = K_c·Q_iᵀ and dPᵀ = V_c·dO_iᵀ: D/16 steps along D, each 64×Br×16.
        float st[Br / 2], dpt[Br / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;
            wgmma_ss<Br>(st, make_desc(sK + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM),
                         make_desc(sQ + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM), kk > 0);
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;
            wgmma_ss<Br>(dpt, make_desc(sV + (kk / 4) * Bc * 128 + in_box, 16, SWIZZLE_ATOM),
                         make_desc(sdO + (kk / 4) * Br * 128 + in_box, 16, SWIZZLE_ATOM), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(st);
        fence_regs(dpt);

        // Pᵀ and dSᵀ, element (key r_lo + 8h, query 8·n8 + c_lane + e) is index 4·n8 + 2·h + e.
#pragma unroll
        for (int n8 = 0; n8 < Br / 8; ++n8)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int qi = i0 + 8 * n8 + c_lane + e;
                const bool q_ok = qi < S;
                const float lse2 = q_ok ? __ldg(LSE + row0 + qi) * 1.4426950408889634f : CUDART_INF_F;
                const float delta = q_ok ? __ldg(DELTA + row0 + qi) : 0.f;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int i = 4 * n8 + 2 * h + e, key = kc0 + r_lo + 8 * h;
                    const bool keep = key < S && (!causal || qi >= key);
                    const float p = keep ? fast_exp2(fmaf(st[i], scale_log2, -lse2)) : 0.f;
                    st[i] = p;
                    dpt[i] = p * (dpt[i] - delta);
                }
            }
        // As wgmma A operands (K = the tile's queries): queries 16kk..16kk+15 are elements 8kk .. 8kk + 7.
        u32 pf[Br / 16][4], df[Br / 16][4];
#pragma unroll
        for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                pf[kk][r] = pack_half2(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
                df[kk][r] = pack_half2(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
            }

        // dV_c += Pᵀ·dO_i, dK_c += dSᵀ·Q_i: Br/16 steps along the queries, each 64×D×16, B MN-major.
        fence_regs(dv);
        fence_regs(dk);
        fence_regs(pf);
        fence_regs(df);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Br / 16; ++kk)
            wgmma_rs<D>(dv, pf[kk], make_desc(sdO + kk * 16 * 128, Br * 128, SWIZZLE_ATOM));
#pragma unroll
        for (int kk = 0; kk < Br / 16; ++kk)
            wgmma_rs<D>(dk, df[kk], make_desc(sQ + kk * 16 * 128, Br * 128, SWIZZLE_ATOM));
        wgmma_commit();

        // dSᵀ to shared memory, one 128-byte row per key (Br = 64 fp16), 16-byte chunks swizzled by the row.
#pragma unroll
        for (int n8 = 0; n8 < Br / 8; ++n8)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r_lo + 8 * h;
                st_shared_b32(sdS + row * 128 + ((n8 ^ (row % 8)) * 16) + c_lane * 2,
                              df[n8 / 2][(n8 % 2) * 2 + h]);
            }
        wgmma_wait<0>();                                                // dV, dK done: Q_i and dO_i are read
        fence_regs(dv);
        fence_regs(dk);
        if (tid == 0) mbar_arrive(sm.qdo_empty + 8 * s);                // release the slot
        fence_proxy_async();                                            // dSᵀ written: visible to wgmma
        named_bar_sync(1 + c, 128);

        // dQ_i (this warpgroup's keys) = dS_c·K_c: 64/16 steps along the keys, each 64×D×16, A and B MN-major.
        float dq[D / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 64 / 16; ++kk)
            wgmma_ss_tt<D>(dq, make_desc(sdS + kk * 16 * 128, 64 * 128, SWIZZLE_ATOM),
                           make_desc(sK + kk * 16 * 128, Bc * 128, SWIZZLE_ATOM), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(dq);

        // The tile to shared memory (after the previous bulk add has read it), then one bulk add of its rows < S.
        if (tid == 0) bulk_wait_read();
        named_bar_sync(1 + c, 128);
#pragma unroll
        for (int n8 = 0; n8 < D / 8; ++n8)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r_lo + 8 * h, i = 4 * n8 + 2 * h;
                st_shared_v2(sdQ + (row * D + 8 * n8 + c_lane) * 4, dq[i] * scale, dq[i + 1] * scale);
            }
        fence_proxy_async();
        named_bar_sync(1 + c, 128);
        if (tid == 0) {
            const int rows = min(Br, S - i0);
            if (rows > 0) bulk_reduce_add_f32(DQ + (size_t)(row0 + i0) * D, sdQ, rows * D * 4);
        }
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
    const int n_tiles = (S - m_lo + Br - 1) / Br;

    if (threadIdx.x == 0) {
        tma_prefetch_map(tmQ); tma_prefetch_map(tmK); tma_prefetch_map(tmV); tma_prefetch_map(tmdO);
        mbar_init(sm.kv_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(sm.qdo_full + 8 * s, 1);
            mbar_init(sm.qdo_empty + 8 * s, CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) producer<D>(sm, tmQ, tmK, tmV, tmdO, row0, k0, m_lo, n_tiles);
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        consumer<D>(sm, wg - 1, LSE, DELTA, DQ, DK, DV, row0, k0, m_lo, n_tiles, S, scale, causal);
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
