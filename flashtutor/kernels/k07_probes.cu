// Chapter 7 — three probe kernels that test, one at a time, what the attention kernels assume about
// the hardware (scripts/ch07_gpu.py runs them before the attention steps; flashtutor/kernels/k07_probes.py
// launches and checks them):
//   probe_tma_swizzle   one TMA box [64 rows, 64 fp16] with the 128-byte swizzle, shared memory copied
//                       out byte for byte: is chunk c of row r at chunk c ^ (r % 8)?
//   probe_wgmma_ss_d*   C = A·Bᵀ for A [64, D], B [64, D] loaded by TMA (K-major descriptors, D/16
//                       steps through the swizzled rows and boxes), C written out from the accumulator
//                       registers with the fragment layout of the header of k07a_wgmma_tma.cu.
//   probe_wgmma_rs_d*   C = P·V for P [64, 64] read from global memory straight into the register
//                       A-fragment layout, V [64, D] by TMA (MN-major descriptor, "transpose B").
// One block of one warpgroup each. The PTX wrappers come from flashtutor/cuda/hopper.cuh (through step a, included below).
#include "k07a_wgmma_tma.cu"

extern "C" __global__ void __launch_bounds__(128, 1) probe_tma_swizzle(
    const __grid_constant__ CUtensorMap tm,     // [rows ≥ 64, 64] 16-bit values, box [64, 64]
    unsigned short* out) {                      // [64 · 64]: the shared-memory image, as 16-bit words
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const u32 bar = base + 64 * 128;
    if (threadIdx.x == 0) { mbar_init(bar, 1); fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) { mbar_arrive_expect_tx(bar, 64 * 128); tma_load_2d(base, &tm, 0, 0, bar); }
    mbar_wait(bar, 0);
    const unsigned short* img = reinterpret_cast<const unsigned short*>(smem_raw + (base - smem_u32(smem_raw)));
    for (int i = threadIdx.x; i < 64 * 64; i += 128) out[i] = img[i];
}

// Write a [64, N] fp32 accumulator to row-major global memory with the documented layout.
template <int N>
__device__ __forceinline__ void store_acc(float* out, const float (&d)[N / 2]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
        const int col = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
        out[row * N + col] = d[i];
    }
}

template <int D>
__device__ __forceinline__ void probe_ss(const CUtensorMap* tmA, const CUtensorMap* tmB, float* out) {
    constexpr int TILE = 64 * D * 2;                                  // [D/64][64][64] fp16
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const u32 sA = base, sB = base + TILE, bar = base + 2 * TILE;
    if (threadIdx.x == 0) { mbar_init(bar, 1); fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, 2 * TILE);
        for (int b = 0; b < D / 64; ++b) {
            tma_load_2d(sA + b * 64 * 128, tmA, 64 * b, 0, bar);
            tma_load_2d(sB + b * 64 * 128, tmB, 64 * b, 0, bar);
        }
    }
    mbar_wait(bar, 0);
    float d[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u32 off = (kk / 4) * 64 * 128 + (kk % 4) * 32;
        wgmma_ss<64>(d, make_desc(sA + off, 16, SWIZZLE_ATOM), make_desc(sB + off, 16, SWIZZLE_ATOM), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    store_acc<64>(out, d);
}

template <int D>
__device__ __forceinline__ void probe_rs(const __half* P, const CUtensorMap* tmV, float* out) {
    constexpr int TILE = 64 * D * 2;                                  // V: [D/64][64 keys][64] fp16
    const u32 base = (smem_u32(smem_raw) + SWIZZLE_ATOM - 1) & ~u32(SWIZZLE_ATOM - 1);
    const u32 sV = base, bar = base + TILE;
    if (threadIdx.x == 0) { mbar_init(bar, 1); fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, TILE);
        for (int b = 0; b < D / 64; ++b) tma_load_2d(sV + b * 64 * 128, tmV, 64 * b, 0, bar);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = 16 * warp + lane / 4, c0 = 2 * (lane % 4);
    u32 a[4][4];                                                      // P [64, 64] as 4 A fragments (k16 each)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {                                 // a[r]: rows r0 (+8 if r odd), cols c0 (+8 if r ≥ 2)
            const int row = r0 + 8 * (r % 2), col = 16 * kk + c0 + 8 * (r / 2);
            a[kk][r] = *reinterpret_cast<const u32*>(P + row * 64 + col);
        }
    mbar_wait(bar, 0);
    float d[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) d[i] = 0.f;
    fence_regs(d);
    fence_regs(a);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs<D>(d, a[kk], make_desc(sV + kk * 16 * 128, 64 * 128, SWIZZLE_ATOM));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    store_acc<D>(out, d);
}

extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_ss_d64(
    const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, float* out) {
    probe_ss<64>(&tmA, &tmB, out);
}
extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_ss_d128(
    const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, float* out) {
    probe_ss<128>(&tmA, &tmB, out);
}
extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_rs_d64(
    const __half* P, const __grid_constant__ CUtensorMap tmV, float* out) {
    probe_rs<64>(P, &tmV, out);
}
extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_rs_d128(
    const __half* P, const __grid_constant__ CUtensorMap tmV, float* out) {
    probe_rs<128>(P, &tmV, out);
}
