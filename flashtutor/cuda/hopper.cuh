// flashtutor/cuda/hopper.cuh — the Hopper instructions chapter 7 uses, each wrapped once in inline PTX:
// mbarriers, TMA bulk tensor copies, the wgmma shared-memory descriptor, wgmma itself and its fences,
// setmaxnreg, named barriers, an int stored and loaded by shared-memory address, and two small
// conversions. Every chapter-7 kernel (the steps in flashtutor/kernels, the solution, your exercise)
// includes it; flashtutor's loader puts this folder on
// NVRTC's include path. The header of flashtutor/kernels/k07a_wgmma_tma.cu explains TMA, the 128-byte
// swizzle, the descriptor's bits and the fragment layouts these wrappers assume.
#pragma once
#include <cuda_fp16.h>
#include <math_constants.h>   // CUDART_INF_F = +infinity as a float

// wgmma and setmaxnreg exist only in sm_90a code (the "a": features of this one chip, not carried to
// later GPUs). Compiled for anything else, say so instead of failing on the first unknown instruction.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "chapter 7's kernels need an sm_90a target (H100/H200): wgmma and setmaxnreg exist only there"
#endif

using u32 = unsigned int;            // NVRTC has no <cstdint>: 32- and 64-bit unsigned integers by hand
using u64 = unsigned long long;

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned, encoded on the host by
// cuTensorMapEncodeTiled (flashtutor/loaders/tma.py). cuda.h declares it the same way but does not
// compile under NVRTC (it includes stdlib.h), hence this copy.
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };


__device__ __forceinline__ u32 smem_u32(const void* p) {   // generic → shared-window address
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// An int in shared memory by its shared-window address (one register, where a generic pointer takes two).
__device__ __forceinline__ void st_shared(u32 addr, int x) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(x) : "memory");
}
__device__ __forceinline__ int ld_shared(u32 addr) {
    int x;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(x) : "r"(addr) : "memory");
    return x;
}

// mbarrier: init with the number of arrivals that complete a phase (here 1: the thread that posts
// expect_tx; TMA's bytes complete the rest).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
// Make the initialised barriers visible to the async proxy (the TMA unit) before it signals them.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrive once and announce `bytes` more bytes to come (TMA's complete_tx counts them down).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// True once the phase with this parity has completed. A barrier's phases alternate 0, 1, 0, ...; a
// waiter that knows how many times the barrier has completed before (u) waits for parity u & 1.
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
    u32 done;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    while (!mbar_try_wait(bar, parity)) {}   // try_wait itself sleeps a little before it says no
}
// Arrive once, with no bytes: a consumer warpgroup's "done reading this slot".
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
// Wait like mbar_wait, but give up (return false) once *abort is set: the producer's wait for a slot,
// which nobody would ever release if the consumers' loop is still the exercise's stub.
__device__ __forceinline__ bool mbar_wait_or_abort(u32 bar, u32 parity, const volatile u32* abort) {
    while (!mbar_try_wait(bar, parity))
        if (*abort) return false;
    return true;
}
// Change this warpgroup's registers per thread at run time (every warp of the warpgroup executes it).
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R)); }
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R)); }
// Named barriers (16 per block; 0 is __syncthreads'): bar.sync waits until `threads` threads have
// arrived (itself included), bar.arrive arrives without waiting. Counts are multiples of a warp.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// TMA: copy the box at (col, row) of the 2-D tensor described by `map` to shared memory at `dst`,
// and count its bytes off barrier `bar`. Rows or columns outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_2d(u32 dst, const CUtensorMap* map, int col, int row, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(col), "r"(row), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {   // descriptor into cache
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<u64>(map)) : "memory");
}

// The 64-bit shared-memory matrix descriptor (see the header), 128-byte swizzle.
__device__ __forceinline__ u64 make_desc(u32 addr, u32 lbo_bytes, u32 sbo_bytes) {
    return (u64)((addr & 0x3FFFF) >> 4)          // bits  0-13: start address >> 4
         | (u64)(lbo_bytes >> 4) << 16           // bits 16-29: leading byte offset >> 4
         | (u64)(sbo_bytes >> 4) << 32           // bits 32-45: stride byte offset >> 4
         | (u64)1 << 62;                         // bits 62-63: 1 = 128-byte swizzle
}

// wgmma bookkeeping. fence: order this thread's register writes (P, a rescaled O) before the
// asynchronous tensor-core reads; commit: close a group of issued wgmma; wait<N>: block until at most
// N groups are still running (their results are then in the registers).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// The compiler must not move reads or writes of accumulator registers across the asynchronous region
// (it does not know that wgmma writes them later than the asm statement): pin each one here.
// (CUTLASS calls this warpgroup_fence_operand.) Used before wgmma_fence for the registers wgmma reads,
// and after wgmma_wait for the ones it wrote.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(u32 (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r]) :: "memory");
}

#define FT_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                 "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d[64, N] (+)= A[64, 16] · B[16, N], A and B in shared memory (K-major), fp16 in, fp32 accumulate.
// scale_d = 0 overwrites d (the first k-step of S = Q·Kᵀ), 1 accumulates.
template <int N> __device__ void wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d);
template <>
__device__ __forceinline__ void wgmma_ss<64>(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 " %32, %33, p, 1, 1, 0, 0;\n}"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], u64 desc_a, u64 desc_b, int scale_d) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 " %64, %65, p, 1, 1, 0, 0;\n}"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24), FT_D8(32), FT_D8(40), FT_D8(48), FT_D8(56)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
// d[64, N] += A[64, 16] · B[16, N], A from registers (4 × 32 bits = 8 fp16 per thread, the layout of
// the header), B in shared memory MN-major (the trailing 1 = "transpose B").
template <int N> __device__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b);
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const u32 (&a)[4], u64 desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 " {%32, %33, %34, %35}, %36, 1, 1, 1, 1;"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const u32 (&a)[4], u64 desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
                 " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "  %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "  %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 " {%64, %65, %66, %67}, %68, 1, 1, 1, 1;"
                 : FT_D8(0), FT_D8(8), FT_D8(16), FT_D8(24), FT_D8(32), FT_D8(40), FT_D8(48), FT_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
#undef FT_D8

// 2^x in one instruction (SASS MUFU.EX2); .ftz flushes results below 2^-126 to 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {   // lo → bits 0-15
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<u32*>(&h);
}
