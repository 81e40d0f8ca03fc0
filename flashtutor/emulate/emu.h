// A CPU emulation of the slice of CUDA that the course's kernels use (flashtutor.emulate builds a kernel
// file with g++ and force-includes this header with -include; the contract is in its docstring).
//
// Every CUDA thread of a block is a fiber on one OS thread; blocks run one after another.
// __syncthreads(), __syncwarp() and the warp shuffles and votes are barriers at which a fiber yields until
// its block (or the live lanes of its warp that the mask names) has arrived, so the kernels' indexing,
// masking, barrier *order* and math run as written. When every live fiber of a block waits at a barrier that
// can no longer complete (some threads returned before a __syncthreads the others reached), the launch stops
// with a description of the deadlock instead of spinning forever.
// Optional parts, pulled in by what a kernel uses:
//  * wmma.h (through <mma.h>): nvcuda::wmma with an accumulator layout unlike any GPU's;
//  * cp_async.h (flashtutor.emulate swaps a kernel's PTX cp.async helpers for it): copies land at the wait;
//  * poison_shared: shared memory NaN-filled before each block, so a read of an unwritten tile shows.
// What it cannot show: data races (every fiber sees every write at once — the GPU tier runs
// compute-sanitizer's racecheck for that), timing, and fp32 rounding differences of exp2f etc.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>
#include <cassert>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static      // one instance for the block that runs (flashtutor.emulate drops it from `extern __shared__`)
#define __constant__
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN
#define CUDART_PI_F 3.141592654f
constexpr int warpSize = 32;

using std::max;
using std::min;

typedef _Float16 __half;
struct alignas(4) __half2 { __half x, y; };
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 __half22float2(__half2 h) { return {(float)h.x, (float)h.y}; }
inline __half2 __floats2half2_rn(float a, float b) { return {(__half)a, (__half)b}; }
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return (__half)f; }
inline __half __float2half_rn(float f) { return (__half)f; }
inline __half2 __float2half2_rn(float f) { return {(__half)f, (__half)f}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline float __low2float(__half2 h) { return (float)h.x; }
inline float __high2float(__half2 h) { return (float)h.y; }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hfma(__half a, __half b, __half c) { return (__half)((float)a * (float)b + (float)c); }
inline __half __hmax(__half a, __half b) { return a > b ? a : b; }
inline __half __hmin(__half a, __half b) { return a < b ? a : b; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {a.x + b.x, a.y + b.y}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {a.x * b.x, a.y * b.y}; }
// Single-precision intrinsics: the GPU's fast approximations computed exactly here.
inline float __expf(float x) { return std::exp(x); }
inline float __exp2f(float x) { return std::exp2(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }
inline int __float2int_rz(float f) { return (int)f; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> inline T __ldg(const T* p) { return *p; }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __nanosleep(unsigned) {}

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct uint3 { unsigned x, y, z; };
inline dim3 threadIdx, blockIdx, blockDim, gridDim;   // set by the scheduler before each switch

namespace emu {
// ---- fibers: a context switch that saves what the x86-64 SysV ABI says a callee keeps (rbx, rbp,
// r12-r15, the SSE and x87 control words) and nothing else: no signal mask, so no system call, unlike
// swapcontext (which made the switches most of the emulation's time). Elsewhere, or with
// -DEMU_UCONTEXT: ucontext.
constexpr size_t STACK_BYTES = 256 * 1024;
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
extern "C" void emu_switch_stack(void** save_sp, void* load_sp);
extern "C" void emu_fiber_start();
asm(R"(
    .text
    .globl emu_switch_stack
    .hidden emu_switch_stack
    .type emu_switch_stack, @function
emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch_stack, .-emu_switch_stack

    .globl emu_fiber_start
    .hidden emu_fiber_start
    .type emu_fiber_start, @function
emu_fiber_start:
    call *%rbx
    ud2
    .size emu_fiber_start, .-emu_fiber_start
)");
struct Context { void* sp = nullptr; };
inline void switch_to(Context& save, Context& load) { emu_switch_stack(&save.sp, load.sp); }
inline void make_context(Context& c, char* stack, void (*fn)()) {
    // The frame emu_switch_stack pops: control words, r15, r14, r13, r12, rbx (= fn), rbp, return address.
    auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack + STACK_BYTES) & ~uintptr_t(15));
    uint64_t* sp = top - 8;
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    sp[0] = uint64_t(mxcsr) | (uint64_t(fpucw) << 32);
    for (int i = 1; i <= 4; ++i) sp[i] = 0;
    sp[5] = reinterpret_cast<uint64_t>(fn);
    sp[6] = 0;
    sp[7] = reinterpret_cast<uint64_t>(&emu_fiber_start);
    c.sp = sp;
}
#else
struct Context { ucontext_t ctx; };
inline void switch_to(Context& save, Context& load) { swapcontext(&save.ctx, &load.ctx); }
inline void make_context(Context& c, char* stack, void (*fn)()) {
    getcontext(&c.ctx);
    c.ctx.uc_stack.ss_sp = stack;
    c.ctx.uc_stack.ss_size = STACK_BYTES;
    c.ctx.uc_link = nullptr;
    makecontext(&c.ctx, fn, 0);
}
#endif

struct Fiber { Context ctx; bool done = false; };
struct Barrier { int count = 0; long gen = 0; };
inline Context sched_ctx;
inline std::vector<Fiber> fibers;
inline std::vector<char*> stacks;                      // kept from block to block, never freed
inline int cur = 0;
inline const std::function<void()>* body = nullptr;
inline Barrier block_bar;
inline std::vector<Barrier> warp_bar;
inline std::vector<uint64_t> slots;                    // one per thread: shuffle and vote exchange
inline long switches = 0;
inline long progress = 0;                              // arrivals at barriers and finished fibers: a deadlock has none
inline char failure[768] = "";                         // why the last launch stopped early ("" when it did not)
inline long errors = 0;                                // rule breaks that the optional headers count
struct Region { unsigned char* base; size_t size; };
inline std::vector<Region> shared_regions;             // the harness's dynamic shared arrays (poisoned per block)
inline int add_shared(void* base, size_t size) { shared_regions.push_back({(unsigned char*)base, size}); return 0; }
inline bool poison_shared = false;                     // NaN bytes in shared memory before each block
inline std::vector<void (*)(unsigned threads)> block_hooks;   // per-block state of the optional headers
// What the fault handler (fault.h) says: the running kernel and its current block and thread, and the last kernel
// that ran (an abort after a launch: the heap it corrupted). One struct per process, handed to every library by
// flashtutor.emulate (emu_fault_setup); null until then.
struct FaultContext { const char* kernel; const dim3* block; const dim3* thread; const char* last; };
inline FaultContext* fault_ctx = nullptr;
struct Running {              // fills fault_ctx for the length of a launch
    explicit Running(const char* name) {
        if (fault_ctx) *fault_ctx = FaultContext{name, &blockIdx, &threadIdx, name};
    }
    ~Running() {
        if (fault_ctx) *fault_ctx = FaultContext{nullptr, nullptr, nullptr, fault_ctx->last};
    }
};

inline int add_block_hook(void (*hook)(unsigned)) { block_hooks.push_back(hook); return 0; }
inline void error(const char* what, const void* p, const char* name, long value) {
    if (errors++ < 5) std::fprintf(stderr, "%s: pointer %p, %s %ld\n", what, p, name, value);
}
inline void yield() { ++switches; switch_to(fibers[cur].ctx, sched_ctx); }
// The lanes of warp w that have not returned, as a mask.
inline unsigned live_mask(int w) {
    unsigned m = 0;
    for (int t = 32 * w; t < std::min<int>(32 * (w + 1), (int)fibers.size()); ++t)
        if (!fibers[t].done) m |= 1u << (t - 32 * w);
    return m;
}
inline int live_in_warp(int w) { return __builtin_popcount(live_mask(w)); }
// The lanes a warp-level operation waits for: those of `mask` that are still running (a lane that returned
// cannot arrive), at least the calling lane itself.
inline int warp_party(unsigned mask) {
    const int w = cur / 32;
    return std::max(1, __builtin_popcount(mask & live_mask(w)));
}
inline void wait(Barrier& b, int n) {
    const long g = b.gen;
    ++progress;
    if (++b.count >= n) { b.count = 0; ++b.gen; return; }
    while (b.gen == g) yield();
}
inline int live = 0;                                   // threads of the block that have not returned
// A thread that returns no longer holds up a barrier (as PTX's exit says): the block's barrier, and its warp's,
// complete when every thread still running has arrived.
inline void release(Barrier& b, int n) {
    if (b.count > 0 && b.count >= n) { b.count = 0; ++b.gen; }
}
inline void entry() {
    (*body)();
    fibers[cur].done = true;
    --live;
    ++progress;
    release(block_bar, live);
    release(warp_bar[cur / 32], live_in_warp(cur / 32));
    switch_to(fibers[cur].ctx, sched_ctx);
}
inline void describe_deadlock(unsigned threads) {
    int exited = 0;
    for (unsigned t = 0; t < threads; ++t) exited += fibers[t].done;
    const int at_block = block_bar.count;
    std::snprintf(failure, sizeof failure,
                  "deadlock in block (%u, %u, %u): %d of its %u threads wait at __syncthreads(), %d at a warp-level "
                  "operation (__syncwarp, a shuffle or a vote) and %d have returned, so no barrier can complete. On a "
                  "GPU this hangs: every running thread of a block must reach each __syncthreads(), and every lane a "
                  "mask names each warp-level operation, the same number of times",
                  blockIdx.x, blockIdx.y, blockIdx.z, at_block, threads, (int)threads - exited - at_block, exited);
}
// Run `kernel` (called `name`) for every block of the grid with `block` threads per block. Returns false (and fills
// `failure`) when a block deadlocked at a barrier; the blocks after it do not run.
inline bool run_grid(dim3 grid, dim3 block, const std::function<void()>& kernel, const char* name = "a kernel") {
    const Running running(name);
    body = &kernel;
    gridDim = grid;
    blockDim = block;
    failure[0] = 0;
    const unsigned threads = block.x * block.y * block.z;
    while (stacks.size() < threads) stacks.push_back(new char[STACK_BYTES]);
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                blockIdx = dim3{bx, by, bz};
                if (poison_shared)
                    for (auto& r : shared_regions) std::memset(r.base, 0xff, r.size);   // NaN in fp16 and fp32
                fibers.assign(threads, Fiber{});
                warp_bar.assign((threads + 31) / 32, Barrier{});
                slots.assign(threads, 0);
                block_bar = Barrier{};
                live = (int)threads;
                for (auto hook : block_hooks) hook(threads);
                for (unsigned t = 0; t < threads; ++t) make_context(fibers[t].ctx, stacks[t], entry);
                for (bool alive = true; alive;) {
                    alive = false;
                    const long before = progress;
                    for (unsigned t = 0; t < threads; ++t) {
                        if (fibers[t].done) continue;
                        alive = true;
                        cur = (int)t;
                        threadIdx = dim3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
                        switch_to(sched_ctx, fibers[t].ctx);
                    }
                    if (alive && progress == before) {       // every live fiber waits, and none arrived anywhere
                        describe_deadlock(threads);
                        return false;
                    }
                }
            }
    return true;
}
inline int lane() { return cur % 32; }
}  // namespace emu

inline void __syncthreads() { emu::wait(emu::block_bar, emu::live); }
inline int __syncthreads_count(int p) {
    emu::slots[emu::cur] = p != 0;
    __syncthreads();
    int n = 0;
    for (size_t t = 0; t < emu::fibers.size(); ++t) n += emu::fibers[t].done ? 0 : (int)emu::slots[t];
    __syncthreads();
    return n;
}
inline int __syncthreads_or(int p) { return __syncthreads_count(p) > 0; }
inline int __syncthreads_and(int p) {
    const int n = emu::live;
    return __syncthreads_count(p) == n;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu::wait(emu::warp_bar[emu::cur / 32], emu::warp_party(mask));
}
inline unsigned __activemask() { return emu::live_mask(emu::cur / 32); }
// A shuffle: every lane of the mask publishes its value, then reads lane `src` of the warp (its own value when
// `src` is < 0, outside the warp, or outside its segment of `width` lanes).
template <class T>
inline T __emu_shfl(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    const int t = emu::cur, w = t / 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    emu::slots[t] = bits;
    emu::wait(emu::warp_bar[w], emu::warp_party(mask));
    T r = v;
    if (src >= 0 && src < 32) std::memcpy(&r, &emu::slots[32 * w + src], sizeof(T));
    emu::wait(emu::warp_bar[w], emu::warp_party(mask));
    return r;
}
inline int __emu_segment(int lane, int width) { return lane - lane % (width > 0 ? width : 32); }
template <class T> inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    const int seg = __emu_segment(emu::lane(), width);
    return __emu_shfl(mask, v, seg + (src_lane % width + width) % width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    const int lane = emu::lane(), src = lane ^ lane_mask;
    return __emu_shfl(mask, v, src < __emu_segment(lane, width) + width ? src : -1);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = emu::lane(), src = lane + (int)delta;
    return __emu_shfl(mask, v, src < __emu_segment(lane, width) + width ? src : -1);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = emu::lane(), src = lane - (int)delta;
    return __emu_shfl(mask, v, src >= __emu_segment(lane, width) ? src : -1);
}
// Votes: the predicates of the mask's lanes, as a bit mask.
inline unsigned __ballot_sync(unsigned mask, int p) {
    const int t = emu::cur, w = t / 32;
    emu::slots[t] = p != 0;
    emu::wait(emu::warp_bar[w], emu::warp_party(mask));
    unsigned r = 0;
    for (int l = 0; l < 32 && 32 * w + l < (int)emu::slots.size(); ++l)
        if ((mask >> l & 1u) && !emu::fibers[32 * w + l].done && emu::slots[32 * w + l]) r |= 1u << l;
    emu::wait(emu::warp_bar[w], emu::warp_party(mask));
    return r;
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == (mask & __activemask()); }
// Atomics: fibers never run at the same time, so a read-modify-write is atomic as it stands. The value's type
// follows the pointer's (atomicAdd(float*, 1) adds 1.0f, as CUDA's overloads do).
template <class T> using emu_same = std::type_identity_t<T>;
template <class T> inline T atomicAdd(T* p, emu_same<T> v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicSub(T* p, emu_same<T> v) { T old = *p; *p = old - v; return old; }
template <class T> inline T atomicMax(T* p, emu_same<T> v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> inline T atomicMin(T* p, emu_same<T> v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T> inline T atomicExch(T* p, emu_same<T> v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, emu_same<T> cmp, emu_same<T> v) { T old = *p; if (old == cmp) *p = v; return old; }
template <class T> inline T atomicOr(T* p, emu_same<T> v) { T old = *p; *p = old | v; return old; }
template <class T> inline T atomicAnd(T* p, emu_same<T> v) { T old = *p; *p = old & v; return old; }
