// Chapter 7, step c — the overlaps: ping-pong between the two consumer warpgroups, and, inside each,
// the next S = Q·Kᵀ computed while the current softmax runs; separate K and V rings; a persistent grid.
//
// The idea: a consumer's time per tile is GEMM (tensor cores) + softmax (exp2 on the MUFU unit, FMNMX,
// shuffles). In step b the two happen one after the other in each warpgroup, so the tensor cores are
// busy only when the two warpgroups' GEMMs happen to fall into each other's softmax. Two changes:
//   1. Intra-warpgroup pipelining. Per iteration j a warpgroup issues S_j = Q·K_jᵀ, then rescales O by
//      alpha_{j-1} (registers only: S_j is on the tensor cores meanwhile), then issues O += P_{j-1}·V_{j-1}
//      — two wgmma groups in flight. It waits only for S_j (wgmma.wait_group 1: at most the newest group,
//      the P·V, still running) and computes the softmax of S_j while P_{j-1}·V_{j-1} is still on the
//      tensor cores; then it waits for the P·V (wait_group 0) and packs P_j for the next iteration.
//      O after P_{j-2}·V_{j-2} is relative to m_{j-2}; O·alpha_{j-1}, alpha_{j-1} = 2^(m_{j-2} - m_{j-1}),
//      is relative to m_{j-1}, as P_{j-1} is: the algebra of step a, reordered.
//      Cost: S_j, P_{j-1} and O live at once (88 + 44 + 64 registers at D = 128 with 176-key tiles).
//   2. Ping-pong. Two named barriers (ids 1 and 2, 256 threads: one warpgroup waits with bar.sync, the
//      other arrives with bar.arrive) hand a "turn" back and forth: a warpgroup issues its GEMMs only in
//      its turn and passes the turn on right after issuing them, so warpgroup 1's GEMMs run while
//      warpgroup 0 does its softmax and the other way round — the tensor cores see back-to-back work.
//      Turns per warpgroup and work tile: n_tiles + 1 (S_0 alone; S_j with P_{j-1}·V_{j-1};
//      P_{n-1}·V_{n-1} alone). Warpgroup 0 starts: warpgroup 1 gives one arrival up front and skips
//      its very last one, so both barriers end balanced. With three consumers (D = 64, below) the turn
//      goes round, c to c + 1 mod 3, and the last one gives the arrival up front and skips its last.
// K and V have rings of their own (a full and an empty barrier per slot each), because they are freed
// at different times: K_j as soon as S_j is done, V_j only after P_j·V_j. The producer loads in the
// order the consumers use them (K_0, then K_j before V_{j-1}), and K runs a tile ahead of V.
// Tiles: Br = 64 query rows per consumer; Bc keys per K/V tile chosen per head dim and masking:
// Bc = 176 at D = 128 (fewer per-tile costs — the rescale of O, the row reductions, the waits, the
// turns — per key; FlashAttention-3's choice), 128 at D = 64. The row max and sum of the softmax are
// computed as four partial results each (SOFTMAX_SPLIT), not as one chain of dependent instructions.
// Consumers: two at D = 128 (Br = 128). At D = 64 a consumer's softmax (Bc exp2 per row on the MUFU unit,
// which does 16 a cycle) takes about as long as its GEMMs (Bc·64·4 flops per row), so while one consumer
// does its softmax the other's GEMMs alone cannot keep the tensor cores busy: the launcher compiles a second
// kernel with three (CONSUMERS_D64 = 3, Br = 192, FlashAttention-3's choice at D = 64), whose tensor cores
// have two other consumers' GEMMs to run during each softmax, and takes it wherever its wider work tiles
// do not leave more of the grid idle in the last round than they gain (k07c_pingpong.py, consumers()).
// Three consumers get 160 registers each (512 threads), enough for S, P and O at Bc = 128, not at 160. With
// masking, that kernel's query blocks end at S, so a partial block is the first, short one (work_tile).
// Persistent grid: one block per SM (the launcher sizes the grid). Each block walks work tiles (work tile
// = Br query rows of one head) until none is left; the producer posts each tile's number in shared memory
// beside its Q, and loads the next tile's Q as soon as every consumer has finished its last S = Q·Kᵀ,
// so the next tile's first loads overlap this tile's last P·V and its output stores. Without masking the
// tiles are all alike and a block takes every gridDim.x-th one. With causal masking a tile's length grows
// with its query block, so a fixed share would leave some SMs with more work than others: there a block
// takes the next tile from a counter in global memory (an atomicAdd), and the tiles are numbered heaviest
// first, in groups of heads whose K and V fit in L2 together. The kernel's last block resets the counter.
// Split last round (D = 128, no masking): where the number of work tiles is not a multiple of the grid, the
// last round of the static walk would keep a few SMs busy for a whole tile while the rest wait (4 of 132 at
// B4 H32 S4096 D128: 31.03 rounds). Each tile of that round is split along the keys into one part per idle
// block (work_item); a part writes its unnormalized O, row max and row sum to a workspace, and the last part
// to finish adds them up, as chapter 6's split-KV kernel does in a kernel of its own.
//
// What changed since step b: the consumer loop (prologue, pipelined body, epilogue), the named-barrier
// turns, K and V rings with their own barriers and depth (as many slots as fit in 227 KB, up to 4),
// the tile width per head dim, the split row reductions, the work-tile loop (with its counter), the Q
// full/empty barriers, three consumers at D = 64 and the split last round; the exercise's stop-instead-of-hang plumbing is gone
// (this file is not an exercise).
// Limitation: O is still written with 4-byte stores straight from registers (FlashAttention-3 goes
// through shared memory and a TMA store), and a work tile's first Q·Kᵀ waits for its Q, which can only
// be loaded once every consumer is done with the last one (one Q buffer at D = 128: a second does not fit
// next to two 44 KB K and V slots each; at D = 64, where it fits, Q_SLOTS_D64 = 2 measured within the noise);
// at S = 4096 the last key tile holds 48 of its 176 keys (3% of the tensor-core work is padding: 64-key
// GEMMs for that tile made the kernel 1-2.5% slower on every shape, results/ch07-issue28-h100-2026-11-28/14);
// and at D = 64 the last round is not split (no gain measured there). The
// split round's parts each start a pipeline of their own, so they recover less than the partial round
// costs: with 132 heads instead of 128 at B4 H32 S4096 D128 (32 full rounds, none partial) both this kernel
// and SDPA ran at 4-5% more TFLOP/s before the split (results/ch07-issue28-h100-2026-11-28/5-tail-probe.log).
//
// The header of k07a_wgmma_tma.cu explains TMA, the 128-byte swizzle, the wgmma descriptor and
// fragment layouts; the one of solutions/07_hopper/attention.cu (step b) the producer/consumer roles
// and setmaxnreg.
#include "hopper.cuh"   // mbarriers, TMA, wgmma, setmaxnreg in inline PTX: flashtutor/cuda/hopper.cuh

// Keys per K/V tile, per head dim and masking. The launcher (k07c_pingpong.py, TILES) passes the same
// numbers as defines; other values compile too (16 ≤ Bc ≤ 192, a multiple of 16 with a wgmma_ss<Bc> —
// 64, 128 in hopper.cuh, 160, 176, 192 below), which is how scripts/ch07_gpu.py --sweep tries them.
#ifndef BC_D64
#define BC_D64 128
#endif
#ifndef BC_D64_CAUSAL
#define BC_D64_CAUSAL 128
#endif
#ifndef BC_D128
#define BC_D128 176
#endif
#ifndef BC_D128_CAUSAL
#define BC_D128_CAUSAL 176
#endif
#ifndef DYNAMIC_D64
#define DYNAMIC_D64 0                         // compile the dynamic walk (a work-tile counter) at D = 64 too
#endif
#ifndef DYNAMIC_D128
#define DYNAMIC_D128 1                        // ... at D = 128 (the launcher's SCHEDULE uses it there, with masking)
#endif
#ifndef MAX_STAGES
#define MAX_STAGES 4                          // ring slots (K and V each) at most, however many would fit
#endif
#ifndef FT_DESC_INC
#define FT_DESC_INC 0                         // 1: wgmma descriptors built once per tile, stepped by adds
#endif
#ifndef SPLIT_TAIL_D64
#define SPLIT_TAIL_D64 0                      // 1: at D = 64 the static walk's last, partial round is split (work_item)
#endif
#ifndef SPLIT_TAIL_D128
#define SPLIT_TAIL_D128 1                     // ... at D = 128 (the launcher splits it without masking)
#endif
#ifndef END_ALIGN_WIDE
#define END_ALIGN_WIDE 1                      // with masking, the three-consumer kernel's query blocks end at S
#endif
#ifndef Q_SLOTS_D64
#define Q_SLOTS_D64 1                         // Q buffers at D = 64 (2: the next tile's Q loads during this one; no gain)
#endif
#ifndef SOFTMAX_SPLIT
#define SOFTMAX_SPLIT 4                       // partial row maxima and sums per thread and row (1: one chain)
#endif
#ifndef EXP2_FMA_EVERY
#define EXP2_FMA_EVERY 0                      // 0: every exp2 on MUFU; k: one score in k by polynomial on the FMA pipe
#endif

#ifndef CONSUMERS_D64
#define CONSUMERS_D64 2                       // consumer warpgroups at D = 64 (2 or 3; 2 at D = 128)
#endif
// The roles of one head dim's kernel: consumer warpgroups taking turns on the tensor cores, 64 query rows
// (wgmma's M) each, and one producer warpgroup; the registers each role asks setmaxnreg for.
template <int D>
struct Roles {
    static constexpr int CONSUMERS = D == 64 ? CONSUMERS_D64 : 2;
    static constexpr int Br = 64 * CONSUMERS;                 // query rows per work tile
    static constexpr int THREADS = 128 * (1 + CONSUMERS);     // producer warpgroup + consumers: 384 (512)
    static constexpr int PRODUCER_REGS = 24;                  // setmaxnreg targets (multiples of 8, 24..256):
    static constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;   // 128·24 + 256·240 = 64512 ≤ 65536
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;   // what __launch_bounds__(THREADS, 1) gives: 168 (128)
    // setmaxnreg.inc takes registers only from those its own block gave back (the block's pool), never from the
    // SM's spare ones, and waits until they are there: the consumers' raise must be covered by the producer's
    // cut, or they wait forever (producer 32 and consumers 240 hang: 136·128 registers freed, 72·256 wanted).
    static_assert((LAUNCH_REGS - PRODUCER_REGS) * 128 >= (CONSUMER_REGS - LAUNCH_REGS) * 128 * CONSUMERS,
                  "the consumers' setmaxnreg.inc would wait forever for registers the producer never frees");
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "two or three consumer warpgroups");
    static constexpr bool END_ALIGN = END_ALIGN_WIDE && CONSUMERS == 3;   // with masking, blocks end at S (work_tile)
    static constexpr bool SPLIT_TAIL = D == 64 ? SPLIT_TAIL_D64 : SPLIT_TAIL_D128;   // a split last round (work_item)
};
constexpr int BOX = 64;                       // fp16 columns per TMA box: 128 bytes, the swizzle span
constexpr int SWIZZLE_ATOM = 1024;            // 8 rows × 128 bytes: the swizzle pattern repeats after this
constexpr int TURN_BAR = 1;                   // named barriers TURN_BAR + c (c = 0, 1[, 2]); 0 is __syncthreads'
constexpr int BLOCK_SMEM = 227 * 1024;        // the most dynamic shared memory a block may have

// ---- wider wgmma shapes for S = Q·Kᵀ (hopper.cuh has N = 64 and 128; the same form, more registers) ----
#define K07_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                  "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
template <>
__device__ __forceinline__ void wgmma_ss<160>(float (&d)[80], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %82, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n160k16.f32.f16.f16"
                 " {"
                 "  %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "  %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79},"
                 " %80, %81, p, 1, 1, 0, 0;\n}"
                 : K07_D8(0), K07_D8(8), K07_D8(16), K07_D8(24), K07_D8(32), K07_D8(40), K07_D8(48), K07_D8(56),
                   K07_D8(64), K07_D8(72)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_ss<176>(float (&d)[88], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %90, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16"
                 " {"
                 "  %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "  %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "  %80, %81, %82, %83, %84, %85, %86, %87},"
                 " %88, %89, p, 1, 1, 0, 0;\n}"
                 : K07_D8(0), K07_D8(8), K07_D8(16), K07_D8(24), K07_D8(32), K07_D8(40), K07_D8(48), K07_D8(56),
                   K07_D8(64), K07_D8(72), K07_D8(80)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_ss<192>(float (&d)[96], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %98, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16"
                 " {"
                 "  %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "  %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "  %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95},"
                 " %96, %97, p, 1, 1, 0, 0;\n}"
                 : K07_D8(0), K07_D8(8), K07_D8(16), K07_D8(24), K07_D8(32), K07_D8(40), K07_D8(48), K07_D8(56),
                   K07_D8(64), K07_D8(72), K07_D8(80), K07_D8(88)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#undef K07_D8

// 2^x on the FMA pipe, for x ≤ 0 (a score minus its row max): round x to n (adding 1.5·2^23 leaves n in
// the low mantissa bits), 2^(x-n) by a cubic on [-1/2, 1/2] (relative error 7.5e-5, under fp16's
// 2.4e-4), and n added to the exponent field. Below -120 it returns 2^-120·(…), not 0: harmless, as
// such a p is rounded to 0 in fp16 and adds < 1e-36 to a row sum ≥ 1.
__device__ __forceinline__ float exp2_poly(float x) {
    x = fmaxf(x, -120.f);
    const float t = __fadd_rn(x, 12582912.f);            // 1.5·2^23: the float's low bits hold round(x)
    const float f = __fsub_rn(x, __fsub_rn(t, 12582912.f));   // x - round(x), in [-1/2, 1/2]
    const float p = fmaf(fmaf(fmaf(0.055171460f, f, 0.24261086f), f, 0.69326097f), f, 0.99992812f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

constexpr int FMA_EVERY = EXP2_FMA_EVERY > 0 ? EXP2_FMA_EVERY : 1;   // (a divisor even when unused)

// Dynamic shared memory of one tile configuration, in bytes (the launcher adds SWIZZLE_ATOM of slack).
template <int D, int BC>
struct Tiles {
    static constexpr int BOXES = D / BOX;                  // 64-column boxes per row: 1 (D 64) or 2 (D 128)
    static constexpr int Br = Roles<D>::Br;
    static constexpr int Q_BYTES = Br * D * 2;             // Q tile        [BOXES][Br][64] fp16, swizzled
    static constexpr int Q_SLOTS = D == 64 ? Q_SLOTS_D64 : 1;   // Q buffers: work tile t uses t % Q_SLOTS
    static constexpr int KV_BYTES = BC * D * 2;            // a K or V tile [BOXES][BC][64] fp16, swizzled
    static constexpr int FIT = (BLOCK_SMEM - SWIZZLE_ATOM - Q_SLOTS * Q_BYTES - 8 * (3 * Q_SLOTS + 4 * MAX_STAGES))
                               / (2 * KV_BYTES);
    static constexpr int STAGES = FIT < MAX_STAGES ? FIT : MAX_STAGES;   // slots per ring (K and V each)
    static constexpr int Q_OFF = 0;                        // Q buffers    [Q_SLOTS] Q tiles
    static constexpr int K_OFF = Q_OFF + Q_SLOTS * Q_BYTES;   // K ring    [STAGES] K tiles
    static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;   // V ring    [STAGES] V tiles
    static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES; // q_full[Q], q_empty[Q], k_full[S], k_empty[S], v_full[S], v_empty[S]
    static constexpr int WORK_OFF = BAR_OFF + 8 * (2 * Q_SLOTS + 4 * STAGES);   // per Q buffer, the work tile posted (an int)
    static constexpr int BYTES = WORK_OFF + 8 * Q_SLOTS;
    static_assert(D % BOX == 0, "D must be a multiple of 64");
    static_assert(BC % 16 == 0 && BC >= 16 && BC <= 256, "Bc: a multiple of 16 (wgmma's K for P·V), at most 256");
    static_assert(STAGES >= 2, "two slots per ring at least");
    static_assert(Q_BYTES % SWIZZLE_ATOM == 0 && KV_BYTES % SWIZZLE_ATOM == 0, "tiles start on swizzle atoms");
    static_assert(BYTES + SWIZZLE_ATOM <= BLOCK_SMEM, "a block may have at most 227 KB of shared memory");
};
// What the launcher allocates per head dim: the larger of the two configurations (masked or not).
template <int D>
struct Layout {
    static constexpr int A = Tiles<D, D == 64 ? BC_D64 : BC_D128>::BYTES;
    static constexpr int B = Tiles<D, D == 64 ? BC_D64_CAUSAL : BC_D128_CAUSAL>::BYTES;
    static constexpr int BYTES = A > B ? A : B;
};
extern __shared__ __align__(1024) unsigned char smem_raw[];

// ---------------------------------------------------------------- the kernel ---------------------
template <int D, int BC>
struct Smem {                                      // shared-memory addresses of one block's tiles and barriers
    u32 base;                                      // the rest are constant offsets from it, computed where used
    using T = Tiles<D, BC>;                        // (held as ten registers, they made the producer spill)
    __device__ explicit Smem(u32 b) : base(b) {}
    __device__ u32 q(int i = 0) const { return base + T::Q_OFF + i * T::Q_BYTES; }   // Q buffer i [BOXES][Br][64]
    __device__ u32 k() const { return base + T::K_OFF; }            // K ring [STAGES][BOXES][BC][64]
    __device__ u32 v() const { return base + T::V_OFF; }            // V ring, the same
    __device__ u32 q_full(int i = 0) const { return base + T::BAR_OFF + 8 * i; }     // Q buffer i landed
    __device__ u32 q_empty(int i = 0) const { return q_full(T::Q_SLOTS + i); }      // every consumer is done with it
    __device__ u32 k_full() const { return q_full(2 * T::Q_SLOTS); }  // per slot s: + 8s
    __device__ u32 k_empty() const { return k_full() + 8 * T::STAGES; }
    __device__ u32 v_full() const { return k_empty() + 8 * T::STAGES; }
    __device__ u32 v_empty() const { return v_full() + 8 * T::STAGES; }
    __device__ u32 work(int i = 0) const { return base + T::WORK_OFF + 8 * i; }   // the work tile of Q buffer i (an int)
};

// A work tile: Br query rows of one head. The numbering puts the heaviest tiles first (with causal
// masking a head's last query rows need the most key tiles) without scattering the heads over L2: heads
// go in groups of `group` (the launcher sizes a group so that its K and V fit in L2 together), and inside
// a group the order is query block, last first, then head:
//   w = g · (group · n_qblocks) + (n_qblocks - 1 - query block) · group + (head - g · group).
// group = 1 is head-major, each head's last query block first.
struct Work {
    int row0;                                      // the head's first row in [B·H·S, D]
    int q0;                                        // the tile's first query row
    int n_tiles;                                   // key tiles it needs (causal: up to its last row)
    int k0 = 0;                                    // its first key tile (a part of a split tile: its keys')
    int part = -1;                                 // a part's slot in the workspace; -1: a whole tile
};
template <int D, int BC, bool GROUPED>
__device__ __forceinline__ Work work_tile(int w, int n_qblocks, int heads, int group, int S, int causal) {
    int head, qb;
    if constexpr (GROUPED) {
        const int span = group * n_qblocks;
        const int g = w / span, r = w - g * span;
        const int in_group = min(group, heads - g * group);              // the last group may be smaller
        head = g * group + r % in_group;
        qb = r / in_group;
    } else {                                                             // group = 1
        head = w / n_qblocks;
        qb = w - head * n_qblocks;
    }
    constexpr int Br = Roles<D>::Br;
    // With masking, the padding rows of a partial query block cost as many key tiles as the block's last row
    // needs: in the last block, all of them — at S = 4096 and Br = 192 two of its three warpgroups compute every
    // key tile for nothing. Blocks that end at S put the padding in the first block instead, which needs one key
    // tile (rows below 0 are masked in every column and never stored; for the first head the TMA fills them
    // with zeros, for the others it loads the previous head's last rows). Only in the three-consumer kernel,
    // whose 192 rows divide no power of two (the others: 128 rows, S a multiple of 128 in most uses).
    const int q0 = Roles<D>::END_ALIGN && causal ? S - (qb + 1) * Br : (n_qblocks - 1 - qb) * Br;
    const int n_key_tiles = (S + BC - 1) / BC;
    const int last_row = min(q0 + Br, S) - 1;
    return {head * S, q0, causal ? min(n_key_tiles, last_row / BC + 1) : n_key_tiles};
}

// The split last round. Without masking every work tile takes as long, so when their number is not a multiple of
// the grid the static walk's last round keeps only a few SMs busy (4 of 132 at B4 H32 S4096 D128, for a
// whole round). There the launcher passes split > 1: the n_full = n_work - n_work % gridDim.x tiles of the
// full rounds are walked as before, and each tile of the last round becomes `split` parts of consecutive
// key tiles, one per block — items n_full … n_full + split · (n_work - n_full) - 1 of the walk. A part
// leaves its unnormalized O, row max and row sum in a workspace; the last part to finish (a counter per
// tile, consumer and warp) adds them up and writes O.
template <int D, int BC, bool GROUPED>
__device__ __forceinline__ Work work_item(int w, int n_full, int split, int n_qblocks, int heads, int group, int S,
                                          int causal) {
    if (Roles<D>::SPLIT_TAIL && !GROUPED && split > 1 && w >= n_full) {      // static walks only
        const int slot = w - n_full, chunk = slot % split;
        Work wk = work_tile<D, BC, GROUPED>(n_full + slot / split, n_qblocks, heads, group, S, causal);
        const int n = wk.n_tiles;
        wk.k0 = chunk * n / split;
        wk.n_tiles = (chunk + 1) * n / split - wk.k0;
        wk.part = slot;
        return wk;
    }
    return work_tile<D, BC, GROUPED>(w, n_qblocks, heads, group, S, causal);
}

// The producer: one thread posts, per work tile, Q, then K_0, then K_j and V_{j-1} for j = 1…n-1, then
// V_{n-1} — each into its ring's next slot once the consumers have released that slot.
template <int D, int BC, bool DYNAMIC>
__device__ __forceinline__ void producer(const Smem<D, BC>& sm, const CUtensorMap* tmQ, const CUtensorMap* tmK,
                                         const CUtensorMap* tmV, int n_qblocks, int n_work, int heads, int group,
                                         int S, int causal, int* sched, int n_full, int split) {
    using T = Tiles<D, BC>;
    constexpr int STAGES = T::STAGES;
    int nk = 0, nv = 0;                                              // K and V tiles posted so far (all work tiles)
    auto post = [&](u32 ring, u32 full, u32 empty, const CUtensorMap* map, int& n, int row) {
        const int s = n % STAGES, u = n / STAGES;                    // slot, and which fill of it this is
        if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);           // the consumers released fill u - 1
        mbar_arrive_expect_tx(full + 8 * s, T::KV_BYTES);
#pragma unroll
        for (int b = 0; b < T::BOXES; ++b) tma_load_2d(ring + s * T::KV_BYTES + b * BC * 128, map, b * BOX, row, full + 8 * s);
        ++n;
    };
    // The work tiles: from the counter (dynamic), or every gridDim.x-th from blockIdx.x (static).
    int w = DYNAMIC ? atomicAdd(sched, 1) : blockIdx.x;
    for (int t = 0;; ++t) {                                          // t: work tiles of this block so far
        const int qs = t % T::Q_SLOTS, qu = t / T::Q_SLOTS;          // its Q buffer, and which fill of it
        if constexpr (DYNAMIC) {
            if (qu > 0) mbar_wait(sm.q_empty(qs), (qu - 1) & 1);       // the consumers finished that buffer's last Q·Kᵀ
            st_shared(sm.work(qs), w);                                 // read by the consumers once q_full completes
            if (w >= n_work) {
                mbar_arrive(sm.q_full(qs));                            // "no more": q_full completes without a copy
                break;
            }
        } else {                                                       // the consumers walk the same tiles themselves
            if (w >= n_work) break;
            if (qu > 0) mbar_wait(sm.q_empty(qs), (qu - 1) & 1);
        }
        const Work wk = work_item<D, BC, DYNAMIC>(w, n_full, split, n_qblocks, heads, group, S, causal);
        mbar_arrive_expect_tx(sm.q_full(qs), T::Q_BYTES);
#pragma unroll
        for (int b = 0; b < T::BOXES; ++b) tma_load_2d(sm.q(qs) + b * T::Br * 128, tmQ, b * BOX, wk.row0 + wk.q0, sm.q_full(qs));
        const int kv0 = wk.row0 + wk.k0 * BC;                          // the first key row it needs
        post(sm.k(), sm.k_full(), sm.k_empty(), tmK, nk, kv0);
        for (int j = 1; j < wk.n_tiles; ++j) {
            post(sm.k(), sm.k_full(), sm.k_empty(), tmK, nk, kv0 + j * BC);
            post(sm.v(), sm.v_full(), sm.v_empty(), tmV, nv, kv0 + (j - 1) * BC);
        }
        post(sm.v(), sm.v_full(), sm.v_empty(), tmV, nv, kv0 + (wk.n_tiles - 1) * BC);
        w = DYNAMIC ? atomicAdd(sched, 1) : w + (int)gridDim.x;
    }
    // Every block takes from the counter until it reads n_work or more, so once all gridDim.x blocks
    // have counted themselves out here, nobody reads it any more: the last one resets it for the next
    // launch on this stream (kernels on one stream run one after the other).
    if (DYNAMIC) {
        __threadfence();
        if (atomicAdd(sched + 1, 1) == (int)gridDim.x - 1) {
            sched[0] = 0;
            sched[1] = 0;
        }
    }
    // The consumers wait for every tile posted here before they finish, so no copy is still writing
    // into shared memory when the block ends.
}

// Mask keys past S, and (causal) keys after the query, where the tile can have any.
template <int BC>
__device__ __forceinline__ void mask_tile(float (&sc)[BC / 2], int k0, int q0c, int r_lo, int c_lane, int S, int causal) {
    if (k0 + BC > S || (causal && k0 + BC - 1 > q0c)) {
#pragma unroll
        for (int i = 0; i < BC / 2; ++i) {
            const int col = k0 + 8 * (i / 4) + c_lane + (i % 2);
            const int row = q0c + r_lo + 8 * ((i / 2) % 2);
            if (col >= S || (causal && col > row)) sc[i] = -CUDART_INF_F;
        }
    }
}

// The online softmax of this thread's two rows (h = 0: row r_lo, h = 1: r_lo + 8; sc[i] is in row
// (i / 2) % 2): sc becomes p = 2^(s·scale_log2 - m_i), m_i and l_i are updated, alpha = 2^(m_old - m_new).
// The row max and the row sum are each SOFTMAX_SPLIT partial results combined at the end: a single
// running max (or sum) over the Bc/4 scores of a row is a chain of dependent instructions, each
// waiting for the one before (ncu: the "wait" stall), and this chain is on the critical path between
// two of the warpgroup's turns.
template <int BC>
__device__ __forceinline__ void online_softmax(float (&sc)[BC / 2], float (&m_i)[2], float (&l_i)[2],
                                               float (&alpha)[2], float scale_log2) {
    constexpr int PER_ROW = BC / 4;                                       // this thread's scores in each row
    constexpr int SPLIT = SOFTMAX_SPLIT;
    static_assert(PER_ROW % SPLIT == 0, "SOFTMAX_SPLIT must divide Bc / 4");
    float part[2][SPLIT];
    float base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < SPLIT; ++k) part[h][k] = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < PER_ROW; ++j)                                     // score j of row h is sc[4(j/2) + 2h + j%2]
#pragma unroll
        for (int h = 0; h < 2; ++h) part[h][j % SPLIT] = fmaxf(part[h][j % SPLIT], sc[4 * (j / 2) + 2 * h + j % 2]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = part[h][0];
#pragma unroll
        for (int k = 1; k < SPLIT; ++k) mx = fmaxf(mx, part[h][k]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));             // the quad holds the whole row
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_i[h], mx * scale_log2);
        base[h] = m_new == -CUDART_INF_F ? 0.f : m_new;                   // a row with no key yet: avoid inf - inf
        alpha[h] = fast_exp2(m_i[h] - base[h]);                           // rescales the old sum and acc; 0 at first
        m_i[h] = m_new;
#pragma unroll
        for (int k = 0; k < SPLIT; ++k) part[h][k] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < PER_ROW; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int i = 4 * (j / 2) + 2 * h + j % 2;
            const float x = fmaf(sc[i], scale_log2, -base[h]);            // p = 2^(s·scale·log2e - m)
            sc[i] = (EXP2_FMA_EVERY > 0 && (i / 4) % FMA_EVERY == FMA_EVERY - 1) ? exp2_poly(x) : fast_exp2(x);
            part[h][j % SPLIT] += sc[i];
        }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = part[h][0];
#pragma unroll
        for (int k = 1; k < SPLIT; ++k) sum += part[h][k];
        l_i[h] = alpha[h] * l_i[h] + sum;                                 // the quad's partial sums: added up at the end
    }
}

// A consumer warpgroup: 64 query rows of each work tile, against every K/V tile the producer loads.
template <int D, int BC, bool DYNAMIC>
__device__ __forceinline__ void consumer(const Smem<D, BC>& sm, int c, __half* __restrict__ O, int n_qblocks,
                                         int n_work, int heads, int group, int S, float scale_log2, int causal,
                                         int n_full, int split, float* __restrict__ ws, int* __restrict__ counts) {
    using T = Tiles<D, BC>;
    constexpr int STAGES = T::STAGES;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;   // within the warpgroup
    u32 sQ = sm.q() + c * 64 * 128;                                         // its 64 rows of each Q box (this tile's buffer)
    const int r_lo = 16 * warp + lane / 4;                                // this thread's rows: r_lo, r_lo + 8
    const int c_lane = 2 * (lane % 4);                                    // its first column in each 8-column chunk
    float acc[D / 2];                                                     // O accumulator [64, D] fp32 (this thread's share)
    float m_i[2], l_i[2];                                                 // running row max (log2 units) and sum
    float sc[BC / 2];                                                     // scores of the newest tile [64, BC] fp32
    u32 p[BC / 16][4];                                                    // P of the previous tile, fp16, A-fragment layout
    float alpha[2];                                                       // the rescale O owes since the last P·V
    int nk = 0, nv = 0;                                                   // K and V tiles consumed (the producer's count)

    auto issue_s = [&](int s) {                                           // S = Q·K_sᵀ, one wgmma group
        const u32 k_tile = sm.k() + s * T::KV_BYTES;
#if FT_DESC_INC
        const u64 dq0 = make_desc(sQ, 16, SWIZZLE_ATOM);                  // FT_DESC_INC: built once, stepped by adds
        const u64 dk0 = make_desc(k_tile, 16, SWIZZLE_ATOM);
#endif
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 in_box = (kk % 4) * 32;                             // 16 halves = 32 bytes per step, in the row
#if FT_DESC_INC
            const u64 da = dq0 + (((kk / 4) * T::Br * 128 + in_box) >> 4);
            const u64 db = dk0 + (((kk / 4) * BC * 128 + in_box) >> 4);
#else
            const u64 da = make_desc(sQ + (kk / 4) * T::Br * 128 + in_box, 16, SWIZZLE_ATOM);
            const u64 db = make_desc(k_tile + (kk / 4) * BC * 128 + in_box, 16, SWIZZLE_ATOM);
#endif
            wgmma_ss<BC>(sc, da, db, kk > 0);
        }
        wgmma_commit();
    };
    auto issue_pv = [&](int s) {                                          // O += P·V_s, one wgmma group
        const u32 v_tile = sm.v() + s * T::KV_BYTES;
#if FT_DESC_INC
        const u64 dv0 = make_desc(v_tile, BC * 128, SWIZZLE_ATOM);
#endif
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk)
#if FT_DESC_INC
            wgmma_rs<D>(acc, p[kk], dv0 + kk * 16 * 128 / 16);
#else
            wgmma_rs<D>(acc, p[kk], make_desc(v_tile + kk * 16 * 128, BC * 128, SWIZZLE_ATOM));
#endif
        wgmma_commit();
    };
    auto pack_p = [&] {                                                   // keys 16kk..16kk+15 are sc[8kk .. 8kk + 7]
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[kk][r] = pack_half2(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
    };
    auto rescale_o = [&] {                                                // O relative to the newest max, as P is
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] *= alpha[(i / 2) % 2];
    };
    auto wait_k = [&] { const int s = nk % STAGES; mbar_wait(sm.k_full() + 8 * s, (nk / STAGES) & 1); return s; };
    auto wait_v = [&] { const int s = nv % STAGES; mbar_wait(sm.v_full() + 8 * s, (nv / STAGES) & 1); return s; };
    auto release = [&](u32 empty, int s, int& n) { if (tid == 0) mbar_arrive(empty + 8 * s); ++n; };

    // Ping-pong turns: wait for ours, issue, hand the turn over (see the header for the counting).
    constexpr int N = Roles<D>::CONSUMERS;                                // the turn goes round: c → c + 1 mod N
    bool last_turn = false;                                               // the block's very last turn (static walk)
    auto begin_turn = [&] { named_bar_sync(TURN_BAR + c, 256); };
    auto end_turn = [&] {
        if (!(c == N - 1 && last_turn)) named_bar_arrive(TURN_BAR + (N == 2 ? 1 - c : (c + 1) % N), 256);
    };
    if (c == N - 1) named_bar_arrive(TURN_BAR + 0, 256);                  // warpgroup 0 takes the first turn

    int w = DYNAMIC ? 0 : blockIdx.x;                                     // static: the producer's walk, known here
    for (int t = 0;; ++t) {                                               // t: work tiles of this block so far
        const int qs = t % T::Q_SLOTS, qu = t / T::Q_SLOTS;               // its Q buffer, and which fill of it
        if constexpr (DYNAMIC) {
            mbar_wait(sm.q_full(qs), qu & 1);                             // the producer posted a work tile (and its Q)
            w = ld_shared(sm.work(qs));                                   // or said there is none left
        }
        if (w >= n_work) break;
        const Work wk = work_item<D, BC, DYNAMIC>(w, n_full, split, n_qblocks, heads, group, S, causal);
        const int n_tiles = wk.n_tiles;
        const int q0c = wk.q0 + 64 * c;                                   // this warpgroup's first query row
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
        m_i[0] = m_i[1] = -CUDART_INF_F;
        l_i[0] = l_i[1] = 0.f;

        // Prologue: S_0 and its softmax (acc is 0: its rescale by alpha_0 = 0 is harmless).
        if constexpr (!DYNAMIC) mbar_wait(sm.q_full(qs), qu & 1);           // Q has landed
        sQ = sm.q(qs) + c * 64 * 128;
        int ks = wait_k();                                                // K_0 has landed
        begin_turn();
        wgmma_fence();
        issue_s(ks);
        end_turn();
        wgmma_wait<0>();
        fence_regs(sc);
        release(sm.k_empty(), ks, nk);
        if (n_tiles == 1 && tid == 0) mbar_arrive(sm.q_empty(qs));          // Q no longer read
        mask_tile<BC>(sc, wk.k0 * BC, q0c, r_lo, c_lane, S, causal);
        online_softmax<BC>(sc, m_i, l_i, alpha, scale_log2);
        pack_p();

        for (int j = 1; j < n_tiles; ++j) {
            ks = wait_k();                                                // K_j has landed
            begin_turn();
            fence_regs(p);                                                // P_{j-1} is written (and S_{j-1} read)...
            wgmma_fence();                                                // ...before the tensor cores use them
            issue_s(ks);                                                  // group 1: S_j
            rescale_o();                                                  // while S_j runs: O by alpha_{j-1}...
            fence_regs(acc);
            const int vs = wait_v();                                      // V_{j-1} has landed
            wgmma_fence();                                                // ...before the tensor cores read O
            issue_pv(vs);                                                 // group 2: O += P_{j-1}·V_{j-1}
            end_turn();
            wgmma_wait<1>();                                              // S_j is done; P·V may still run
            fence_regs(sc);
            release(sm.k_empty(), ks, nk);                                  // K_j no longer read
            if (j == n_tiles - 1 && tid == 0) mbar_arrive(sm.q_empty(qs));  // nor Q, in this work tile
            mask_tile<BC>(sc, (wk.k0 + j) * BC, q0c, r_lo, c_lane, S, causal);
            online_softmax<BC>(sc, m_i, l_i, alpha, scale_log2);          // ...under the P·V
            wgmma_wait<0>();                                              // P_{j-1}·V_{j-1} is done
            fence_regs(acc);
            release(sm.v_empty(), vs, nv);                                  // V_{j-1} no longer read
            pack_p();
        }

        // Epilogue: the last P·V, then O = acc / l.
        rescale_o();
        fence_regs(acc);
        fence_regs(p);
        const int vs = wait_v();
        if constexpr (!DYNAMIC) last_turn = w + gridDim.x >= n_work;      // (dynamic: not known yet, see below)
        begin_turn();
        wgmma_fence();
        issue_pv(vs);
        end_turn();
        wgmma_wait<0>();
        fence_regs(acc);
        release(sm.v_empty(), vs, nv);

        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = l_i[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);                      // the row sum is spread over the quad
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            l_i[h] = l;
            inv[h] = 1.f / l;                                             // l > 0: every row sees key 0
        }
        bool store = true;
        if (wk.part >= 0) {                                               // one part of a split tile: see work_item
            constexpr int WORDS = D / 2 + 4;                              // per thread: O, then m and l per row
            auto slot = [&](int part) { return ws + (size_t)(part * N + c) * WORDS * 128 + tid; };
            float* mine = slot(wk.part);
#pragma unroll
            for (int i = 0; i < D / 2; ++i) mine[i * 128] = acc[i];       // thread-major: coalesced
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                mine[(D / 2 + h) * 128] = m_i[h];
                mine[(D / 2 + 2 + h) * 128] = l_i[h];
            }
            __threadfence();                                              // visible before the counter says so
            __syncwarp();
            const int tile = wk.part / split;                             // among the last round's tiles
            int* count = counts + (tile * N + c) * 4 + warp;              // a warp's 16 rows are its own
            int done = 0;
            if (lane == 0) done = atomicAdd(count, 1);
            done = __shfl_sync(0xffffffffu, done, 0);
            store = done == split - 1;                                    // the last part of these rows adds up
            if (store) {
                __threadfence();
                float mx[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.f, 0.f};
                for (int p = 0; p < split; ++p)
#pragma unroll
                    for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __ldcg(slot(tile * split + p) + (D / 2 + h) * 128));
#pragma unroll
                for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
                for (int p = 0; p < split; ++p) {
                    const float* part = slot(tile * split + p);
                    float wgt[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        wgt[h] = fast_exp2(__ldcg(part + (D / 2 + h) * 128) - mx[h]);   // its O and l: relative to its max
                        l[h] += wgt[h] * __ldcg(part + (D / 2 + 2 + h) * 128);
                    }
#pragma unroll
                    for (int i = 0; i < D / 2; ++i) acc[i] += wgt[(i / 2) % 2] * __ldcg(part + i * 128);   // (L2: other SMs wrote it)
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) inv[h] = 1.f / l[h];
                if (lane == 0) *count = 0;                                // every part has counted: ready for the next launch
            }
        }
#pragma unroll
        for (int h = 0; h < 2 && store; ++h) {
            const int row = q0c + r_lo + 8 * h;
            if (row >= S || (Roles<D>::END_ALIGN && row < 0)) continue;   // padding rows of the last (first) tile
            __half* out = O + (size_t)(wk.row0 + row) * D + c_lane;
#pragma unroll
            for (int n8 = 0; n8 < D / 8; ++n8) {                          // 2 columns per 8-column chunk
                const int i = 4 * n8 + 2 * h;
                *reinterpret_cast<u32*>(out + 8 * n8) = pack_half2(acc[i] * inv[h], acc[i + 1] * inv[h]);
            }
        }
        if constexpr (!DYNAMIC) w += gridDim.x;
    }
    // Static walk: warpgroup 1 skipped its very last arrival. Dynamic walk: nobody knew which turn was the
    // last, so warpgroup 1 arrived once up front and once after each of its turns, one arrival more than
    // warpgroup 0 had turns: warpgroup 0 takes it here, and both named barriers end balanced.
    if (DYNAMIC && c == 0) named_bar_sync(TURN_BAR + 0, 256);
}

template <int D, int BC>
__device__ __forceinline__ void init_barriers(const Smem<D, BC>& sm) {
    for (int i = 0; i < Tiles<D, BC>::Q_SLOTS; ++i) {
        mbar_init(sm.q_full(i), 1);                                         // the producer's arrive + TMA's bytes
        mbar_init(sm.q_empty(i), Roles<D>::CONSUMERS);                      // one arrival per consumer warpgroup
    }
    for (int s = 0; s < Tiles<D, BC>::STAGES; ++s) {
        mbar_init(sm.k_full() + 8 * s, 1);
        mbar_init(sm.k_empty() + 8 * s, Roles<D>::CONSUMERS);
        mbar_init(sm.v_full() + 8 * s, 1);
        mbar_init(sm.v_empty() + 8 * s, Roles<D>::CONSUMERS);
    }
}

// The block's work with one tile configuration: set up the barriers, split the roles.
template <int D, int BC, bool DYNAMIC>
__device__ __forceinline__ void run_block(u32 base, const CUtensorMap* tmQ,
                                          const CUtensorMap* tmK, const CUtensorMap* tmV, __half* __restrict__ O,
                                          int S, int n_qblocks, int n_work, int heads, int group, float scale_log2,
                                          int causal, int* sched, int split, float* ws, int* counts) {
    const Smem<D, BC> sm(base);
    if (threadIdx.x == 0) {
        tma_prefetch_map(tmQ); tma_prefetch_map(tmK); tma_prefetch_map(tmV);
        init_barriers<D, BC>(sm);
        fence_barrier_init();
    }
    __syncthreads();                                                      // the last block-wide barrier: roles split here

    // The static walk counts its tiles from S itself, after the role split (each role its own copy); the
    // dynamic walk reads the launcher's counts (its producer, at 24 registers, spilled a computed one).
    // Computed here, the D = 64 kernel ran 2-8% faster than with the parameters (H100 A/B, one process,
    // results/ch07-static-counts-ab-h100-2026-11-26.txt): the compiler schedules the softmax differently.
    // A split last round (static walk, split > 1): the walk's items are the full rounds' tiles, then the parts.
    auto items = [&](int tiles, int& n_full) {
        n_full = Roles<D>::SPLIT_TAIL && !DYNAMIC && split > 1 ? tiles - tiles % (int)gridDim.x : tiles;
        return n_full + (tiles - n_full) * split;
    };
    const int wg = threadIdx.x / 128;                                     // 0: producer, 1..CONSUMERS: consumers
    if (wg == 0) {
        setmaxnreg_dec<Roles<D>::PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            const int nq = DYNAMIC ? n_qblocks : (S + Roles<D>::Br - 1) / Roles<D>::Br;
            int n_full;
            const int n_items = items(DYNAMIC ? n_work : nq * heads, n_full);
            producer<D, BC, DYNAMIC>(sm, tmQ, tmK, tmV, nq, n_items, heads, group, S, causal, sched, n_full, split);
        }
    } else {
        setmaxnreg_inc<Roles<D>::CONSUMER_REGS>();
        const int nq = DYNAMIC ? n_qblocks : (S + Roles<D>::Br - 1) / Roles<D>::Br;
        int n_full;
        const int n_items = items(DYNAMIC ? n_work : nq * heads, n_full);
        consumer<D, BC, DYNAMIC>(sm, wg - 1, O, nq, n_items, DYNAMIC ? heads : 1,
                                 DYNAMIC ? group : 1, S, scale_log2, causal, n_full, split, ws, counts);
    }
}

template <int D>
__device__ __forceinline__ void attention_block(const CUtensorMap* tmQ,   // [B·H·S, D] fp16, box [Br, 64]
                                                const CUtensorMap* tmK,   // [B·H·S, D] fp16, box [Bc, 64]
                                                const CUtensorMap* tmV,   // [B·H·S, D] fp16, box [Bc, 64]
                                                __half* __restrict__ O,   // [B, H, S, D]
                                                int S, int heads, float scale_log2, int causal,
                                                int* sched,               // [2] zeros, or nullptr: a static walk
                                                int group,                // heads per group of the work order
                                                int n_qblocks,            // ceil(S / Br): query blocks per head
                                                int n_work,               // n_qblocks · heads: the work tiles
                                                int split,                // parts per tile of a split last round, or 0
                                                float* ws,                // ... their O, m and l
                                                int* counts) {            // ... zeros: parts done per tile, consumer, warp
    // (n_qblocks and n_work come from the launcher for the dynamic walk: a kernel parameter is read from the
    // constant bank where it is used, where a value computed here is held in a register, and that walk's
    // producer, at 24, spilled it; the static walk computes them, see run_block.)
    // Align the tiles to a swizzle atom (the launcher allocated SWIZZLE_ATOM bytes of slack for this).
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    // The key-tile width of this head dim and masking (one branch when both are the same).
    constexpr int BC = D == 64 ? BC_D64 : BC_D128;
    constexpr int BC_CAUSAL = D == 64 ? BC_D64_CAUSAL : BC_D128_CAUSAL;
    // The walk is compiled twice where the launcher may ask for the counter: a static one, whose tile numbers
    // the compiler knows are the same in every lane (they come from blockIdx.x), and the dynamic one. (With
    // both in it, the D = 64 kernel ran 3-6% slower on the H100, without using the dynamic one, so it has it
    // only when DYNAMIC_D64 says so.)
    constexpr bool DYNAMIC = D == 64 ? DYNAMIC_D64 : DYNAMIC_D128;
    if (DYNAMIC && sched) {
        run_block<D, BC_CAUSAL, DYNAMIC>(base, tmQ, tmK, tmV, O, S, n_qblocks, n_work, heads, group, scale_log2, causal, sched,
                                         split, ws, counts);
    } else if (BC == BC_CAUSAL || !causal) {
        run_block<D, BC, false>(base, tmQ, tmK, tmV, O, S, n_qblocks, n_work, heads, group, scale_log2, causal, sched,
                                         split, ws, counts);
    } else {
        run_block<D, BC_CAUSAL, false>(base, tmQ, tmK, tmV, O, S, n_qblocks, n_work, heads, group, scale_log2, causal, sched,
                                         split, ws, counts);
    }
}

// One entry point per head dim. __launch_bounds__(THREADS, 1) caps registers at entry (168), which
// setmaxnreg needs; the consumers then raise theirs to CONSUMER_REGS.
extern "C" __global__ void __launch_bounds__(Roles<64>::THREADS, 1) pingpong_d64(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, int heads, float scale_log2, int causal,
    int* sched, int group, int n_qblocks, int n_work, int split, float* ws, int* counts) {
    attention_block<64>(&tmQ, &tmK, &tmV, O, S, heads, scale_log2, causal, sched, group, n_qblocks, n_work, split, ws,
                        counts);
}
extern "C" __global__ void __launch_bounds__(Roles<128>::THREADS, 1) pingpong_d128(
    const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, __half* O, int S, int heads, float scale_log2, int causal,
    int* sched, int group, int n_qblocks, int n_work, int split, float* ws, int* counts) {
    attention_block<128>(&tmQ, &tmK, &tmV, O, S, heads, scale_log2, causal, sched, group, n_qblocks, n_work, split, ws,
                        counts);
}
