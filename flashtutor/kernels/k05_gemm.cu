// Chapter 5 — one CUTLASS 3.x GEMM for Hopper (sm_90a), its configuration given by -D macros.
//
// The idea: attention as three kernels — S = scale·Q·Kᵀ (this file, FT_OP 1), P = softmax(S)
// (solutions/05_cutlass_three_kernel/softmax.cu), O = P·V (this file, FT_OP 2) — with both matrix
// products left to CUTLASS, NVIDIA's template library of tuned GEMM building blocks. CUTLASS's
// CollectiveBuilder assembles a Hopper GEMM from a handful of choices: the tile each thread block
// computes, the cluster of thread blocks that share TMA loads, the kernel schedule (which warps load,
// which compute, whether a block is persistent) and the epilogue (how the accumulators leave).
// What changed since chapter 4: no hand-written matrix loop at all, and the scores leave the chip —
// the S×S matrix goes to memory between the kernels, which chapter 4's fused kernel never does.
// Limitation: those S×S scores (4·S² bytes per head in fp32) are written once and read once by
// the softmax, and P (2·S² bytes) is written and read again: the O(S²) traffic the fused kernels of
// chapters 4 and 6 avoid. The causal mask saves no work here: the GEMMs compute every tile.
//
// What the CollectiveBuilder replaces, written as the plain loop (one thread block, one output tile):
//
//     for (k0 = 0; k0 < K; k0 += TILE_K) {               // mainloop
//         As[TILE_M][TILE_K] = A[m0 : m0+TILE_M, k0 : k0+TILE_K];   // gmem → smem (TMA here)
//         Bs[TILE_N][TILE_K] = B[n0 : n0+TILE_N, k0 : k0+TILE_K];
//         acc[TILE_M][TILE_N] += As · Bsᵀ;                // tensor cores (wgmma here), fp32
//     }
//     D[m0 : m0+TILE_M, n0 : n0+TILE_N] = alpha · acc;    // epilogue
//
// CUTLASS runs that loop with a producer warp issuing TMA copies into a ring of shared-memory
// stages, one or two consumer warpgroups issuing wgmma on the stages as they land, mbarriers between
// them, and an epilogue that writes the tile (through shared memory and a TMA store, or straight from
// registers).
//
// Configuration macros (flashtutor/loaders/cutlass.py sets them; each configuration is one
// translation unit so that ninja compiles them in parallel):
//   FT_NAME                        prefix of the exported C symbols, e.g. ft05_qk_128x128x64_c1x1_coop_tma
//   FT_OP                          1: S[l] = alpha · A[l]·B[l]ᵀ, A = Q [M=S, K=D], B = K [N=S, K=D], S fp32
//                                  2: O[l] = A[l]·B[l],         A = P [M=S, K=S], B = V [K=S, N=D], O fp16
//   FT_TILE_M, FT_TILE_N, FT_TILE_K   the thread block's tile (TILE_M × TILE_N outputs, TILE_K deep per stage)
//   FT_CLUSTER_M, FT_CLUSTER_N        thread blocks per cluster (they share A or B tiles by TMA multicast)
//   FT_SCHEDULE                    0: KernelTmaWarpSpecialized            (one consumer warpgroup, one tile per block)
//                                  1: KernelTmaWarpSpecializedCooperative (two consumer warpgroups split one tile; persistent)
//                                  2: KernelTmaWarpSpecializedPingpong    (two consumer warpgroups, alternate tiles; persistent)
//   FT_EPILOGUE                    1: TMA epilogue (accumulators → smem → TMA store), 0: NoSmem (registers → gmem stores)
//   NDEBUG                         define it (the loader does): CUTLASS's device asserts are calls, and a call
//                                  inside the wgmma pipeline makes ptxas serialize it (warning C7510)
//
// Exported per configuration (plain C, loaded with ctypes; no torch headers, so each unit compiles faster):
//   int    FT_NAME_run(A, B, D, M, N, K, L, lda, batch_a, ldb, batch_b, ldd, batch_d, alpha, workspace, stream)
//   size_t FT_NAME_workspace(M, N, K, L)
//   const char* FT_NAME_error()        the message of the last failed run
#if !defined(FT_NAME) || !defined(FT_OP) || !defined(FT_TILE_M) || !defined(FT_TILE_N) || !defined(FT_TILE_K) || \
    !defined(FT_CLUSTER_M) || !defined(FT_CLUSTER_N) || !defined(FT_SCHEDULE) || !defined(FT_EPILOGUE)
#error "k05_gemm.cu needs FT_NAME, FT_OP, FT_TILE_M/N/K, FT_CLUSTER_M/N, FT_SCHEDULE and FT_EPILOGUE (see its header)"
#endif

#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"

#define FT_CAT_(a, b) a##_##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#define FT_FN(suffix) FT_CAT(FT_NAME, suffix)

namespace {

using namespace cute;

// ---- the operands ------------------------------------------------------------------------------
using ElementA = cutlass::half_t;                 // Q or P, fp16
using ElementB = cutlass::half_t;                 // K or V, fp16
using ElementAccumulator = float;                 // wgmma accumulates in fp32
using ElementCompute = float;                     // alpha · acc in fp32
using LayoutA = cutlass::layout::RowMajor;        // A[M, K], K contiguous ("K-major") for both products
#if FT_OP == 1
// S = alpha·Q·Kᵀ. B = K is stored [N=S, K=D] row by row: K contiguous, which CUTLASS calls a
// column-major B (B is K×N). Both operands K-major: the layout wgmma reads most directly ("TN").
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = float;                           // fp32 scores: fp16 would round s by up to 2^-11·|s|
#else
// O = P·V. B = V is stored [K=S, N=D] row by row: N contiguous ("MN-major" B); wgmma reads
// fp16 B transposed from shared memory, so no copy of V is needed.
using LayoutB = cutlass::layout::RowMajor;
using ElementD = cutlass::half_t;                 // the output O, fp16 like q
#endif
using LayoutD = cutlass::layout::RowMajor;        // D[M, N], N contiguous
using ElementC = void;                            // no source matrix: D = alpha·acc (beta = 0, C never read)

// TMA needs 16-byte aligned rows: 8 halves or 4 floats per contiguous run.
constexpr int AlignmentA = 16 / sizeof(ElementA);   // 8
constexpr int AlignmentB = 16 / sizeof(ElementB);   // 8
constexpr int AlignmentD = 16 / sizeof(ElementD);   // 4 (fp32) or 8 (fp16)
constexpr int AlignmentC = AlignmentD;              // unused (ElementC is void)

using TileShape = Shape<Int<FT_TILE_M>, Int<FT_TILE_N>, Int<FT_TILE_K>>;   // (TILE_M, TILE_N, TILE_K)
using ClusterShape = Shape<Int<FT_CLUSTER_M>, Int<FT_CLUSTER_N>, _1>;       // thread blocks per cluster

// ---- the schedules -----------------------------------------------------------------------------
#if FT_SCHEDULE == 0
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
using TmaEpilogue = cutlass::epilogue::TmaWarpSpecialized;
#elif FT_SCHEDULE == 1
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;   // needs TILE_M >= 128
using TmaEpilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
#elif FT_SCHEDULE == 2
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using TmaEpilogue = cutlass::epilogue::TmaWarpSpecialized;
#else
#error "FT_SCHEDULE must be 0 (warp-specialized), 1 (cooperative) or 2 (ping-pong)"
#endif
#if FT_EPILOGUE
using EpilogueSchedule = TmaEpilogue;
#else
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#endif

// ---- the builders ------------------------------------------------------------------------------
// The epilogue first: the mainloop builder needs its shared-memory size to pick how many
// pipeline stages fit in the rest of the 227 KB ("StageCountAutoCarveout").
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute,
    ElementC, LayoutD, AlignmentC,
    ElementD, LayoutD, AlignmentD,
    EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, AlignmentA,
    ElementB, LayoutB, AlignmentB,
    ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

// The tile scheduler (which output tile a block computes next): void selects CUTLASS's default,
// PersistentScheduler. A build with asserts (no NDEBUG, the C7510 demonstration) names that same
// scheduler explicitly: identical code, but a different C++ type, so its kernel gets a different name
// and both builds of one configuration can live in one library without the linker merging them.
#ifdef NDEBUG
using SchedulerTag = void;
#else
using SchedulerTag = cutlass::gemm::PersistentScheduler;
#endif

// Problem shape (M, N, K, L): L is the batch, here B·H (one GEMM per head).
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                        CollectiveEpilogue, SchedulerTag>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename Gemm::GemmKernel::StrideA;   // (M, K, L) strides: (lda, 1, batch_a)
using StrideB = typename Gemm::GemmKernel::StrideB;   // (N, K, L): (ldb, 1, batch_b) or (1, ldb, batch_b)
using StrideD = typename Gemm::GemmKernel::StrideD;   // (M, N, L): (ldd, 1, batch_d)

char g_error[512] = "";

int sm_count() {   // asked once: persistent schedules launch one block per SM
    static int n = 0;
    if (n == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        n = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
    }
    return n;
}

typename Gemm::Arguments make_args(const void* A, const void* B, void* D, int M, int N, int K, int L,
                                   int64_t lda, int64_t batch_a, int64_t ldb, int64_t batch_b,
                                   int64_t ldd, int64_t batch_d, float alpha) {
    StrideA stride_a = make_stride(lda, _1{}, batch_a);
#if FT_OP == 1
    StrideB stride_b = make_stride(ldb, _1{}, batch_b);   // K-major B: (N stride, 1, L stride)
#else
    StrideB stride_b = make_stride(_1{}, ldb, batch_b);   // N-major B: (1, K stride, L stride)
#endif
    StrideD stride_d = make_stride(ldd, _1{}, batch_d);
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = sm_count();
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kBatched,   // L = B·H independent GEMMs, one per head
        {M, N, K, L},
        {static_cast<const ElementA*>(A), stride_a, static_cast<const ElementB*>(B), stride_b},
        {{}, nullptr, stride_d, static_cast<ElementD*>(D), stride_d},
        hw};
    args.epilogue.thread.alpha = alpha;   // the 1/sqrt(D) of the scores rides in the epilogue for free
    args.epilogue.thread.beta = 0.f;      // no source term
    return args;
}

}  // namespace

extern "C" {

const char* FT_FN(error)() { return g_error; }

size_t FT_FN(workspace)(int M, int N, int K, int L) {
    auto args = make_args(nullptr, nullptr, nullptr, M, N, K, L, K, 0, K, 0, N, 0, 1.f);
    return Gemm::get_workspace_size(args);
}

// Returns 0 on success; otherwise a non-zero code and FT_NAME_error() says why.
int FT_FN(run)(const void* A, const void* B, void* D, int M, int N, int K, int L,
               int64_t lda, int64_t batch_a, int64_t ldb, int64_t batch_b, int64_t ldd, int64_t batch_d,
               float alpha, void* workspace, void* stream) {
    auto args = make_args(A, B, D, M, N, K, L, lda, batch_a, ldb, batch_b, ldd, batch_d, alpha);
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    if (st != cutlass::Status::kSuccess) {
        snprintf(g_error, sizeof g_error,
                 "CUTLASS cannot run this problem (M=%d N=%d K=%d L=%d): %s — the contiguous extent of "
                 "every operand must be a multiple of 16 bytes",
                 M, N, K, L, cutlass::cutlassGetStatusString(st));
        return 1;
    }
    st = gemm.initialize(args, workspace, static_cast<cudaStream_t>(stream));
    if (st != cutlass::Status::kSuccess) {
        snprintf(g_error, sizeof g_error, "CUTLASS initialize failed: %s", cutlass::cutlassGetStatusString(st));
        return 2;
    }
    st = gemm.run(static_cast<cudaStream_t>(stream));
    if (st != cutlass::Status::kSuccess) {
        cudaError_t e = cudaGetLastError();
        snprintf(g_error, sizeof g_error, "CUTLASS launch failed: %s (%s)", cutlass::cutlassGetStatusString(st),
                 cudaGetErrorString(e));
        return 3;
    }
    return 0;
}

}  // extern "C"
