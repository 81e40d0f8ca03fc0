// A CPU emulation of the slice of CUDA that the course's kernels use, for tests without a GPU
// (chapters 2, 3 and 5; driven by emu.py, which force-includes this header with g++ -include).
//
// Every CUDA thread of a block is a fiber on one OS thread; blocks run one after another.
// __syncthreads(), __syncwarp() and the warp shuffles are barriers at which a fiber yields until its
// block (or the live lanes of its warp) has arrived, so the kernels' indexing, masking, barrier
// *order* and math run as written.
// Optional parts, pulled in by what a kernel uses:
//  * wmma.h (through <mma.h>): nvcuda::wmma with an accumulator layout unlike any GPU's;
//  * cp_async.h (emu.py swaps a kernel's PTX cp.async helpers for it): copies land at the wait;
//  * poison_shared (emu.py's poison_shared=True): shared memory NaN-filled before each block, so a
//    read of an unwritten tile shows.
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
#include <vector>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define CUDART_INF_F INFINITY

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

struct dim3 { unsigned x = 1, y = 1, z = 1; };
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
inline std::vector<float> slots;                       // one per thread: shuffle exchange
inline long switches = 0;
inline long errors = 0;                                // rule breaks that the optional headers count
inline unsigned char* shared_base = nullptr;           // the harness's dynamic shared memory
inline size_t shared_size = 0;
inline bool poison_shared = false;                     // NaN bytes in shared memory before each block
inline std::vector<void (*)(unsigned threads)> block_hooks;   // per-block state of the optional headers

inline int add_block_hook(void (*hook)(unsigned)) { block_hooks.push_back(hook); return 0; }
inline void error(const char* what, const void* p, const char* name, long value) {
    if (errors++ < 5) std::fprintf(stderr, "%s: pointer %p, %s %ld\n", what, p, name, value);
}
inline void yield() { ++switches; switch_to(fibers[cur].ctx, sched_ctx); }
inline int live_in_warp(int w) {
    int n = 0;
    for (int t = 32 * w; t < std::min<int>(32 * (w + 1), (int)fibers.size()); ++t) n += !fibers[t].done;
    return n;
}
inline void wait(Barrier& b, int n) {
    const long g = b.gen;
    if (++b.count == n) { b.count = 0; ++b.gen; return; }
    while (b.gen == g) yield();
}
inline void entry() {
    (*body)();
    fibers[cur].done = true;
    switch_to(fibers[cur].ctx, sched_ctx);
}
// Run `kernel` for every block of the grid with `threads` threads per block.
inline void run_grid(dim3 grid, unsigned threads, const std::function<void()>& kernel) {
    body = &kernel;
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    while (stacks.size() < threads) stacks.push_back(new char[STACK_BYTES]);
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                blockIdx = dim3{bx, by, bz};
                if (poison_shared && shared_size) std::memset(shared_base, 0xff, shared_size);   // NaN: fp16, fp32
                fibers.assign(threads, Fiber{});
                warp_bar.assign((threads + 31) / 32, Barrier{});
                slots.assign(threads, 0.f);
                block_bar = Barrier{};
                for (auto hook : block_hooks) hook(threads);
                for (unsigned t = 0; t < threads; ++t) make_context(fibers[t].ctx, stacks[t], entry);
                for (bool alive = true; alive;) {
                    alive = false;
                    for (unsigned t = 0; t < threads; ++t) {
                        if (fibers[t].done) continue;
                        alive = true;
                        cur = (int)t;
                        threadIdx = dim3{t, 0, 0};
                        switch_to(sched_ctx, fibers[t].ctx);
                    }
                }
            }
}
inline int lane() { return cur % 32; }
}  // namespace emu

inline void __syncthreads() { emu::wait(emu::block_bar, (int)blockDim.x); }
inline void __syncwarp(unsigned = 0xffffffffu) {
    const int w = emu::cur / 32;
    emu::wait(emu::warp_bar[w], emu::live_in_warp(w));
}
inline float __emu_shfl(float v, int src_lane) {
    const int t = emu::cur, w = t / 32;
    emu::slots[t] = v;
    emu::wait(emu::warp_bar[w], emu::live_in_warp(w));
    const float r = emu::slots[32 * w + (src_lane & 31)];
    emu::wait(emu::warp_bar[w], emu::live_in_warp(w));
    return r;
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) { return __emu_shfl(v, emu::lane() ^ lane_mask); }
inline float __shfl_sync(unsigned, float v, int src_lane) { return __emu_shfl(v, src_lane); }
