// A CPU emulation of the slice of CUDA that chapter 2's kernels use, for tests without a GPU.
//
// Every CUDA thread of a block is a fiber (ucontext) on one OS thread; blocks run one after another.
// __syncthreads() and the warp shuffles are barriers at which a fiber yields until its block (or
// warp) has arrived, so the kernels' indexing, masking, barrier *order* and math run as written.
// What it cannot show: data races (every fiber sees every write at once — the GPU tier runs
// compute-sanitizer's racecheck for that), timing, and fp32 rounding differences of exp2f etc.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
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
inline float2 __half22float2(__half2 h) { return {(float)h.x, (float)h.y}; }
inline __half2 __floats2half2_rn(float a, float b) { return {(__half)a, (__half)b}; }
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return (__half)f; }

struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline dim3 threadIdx, blockIdx, blockDim, gridDim;   // set by the scheduler before each switch

namespace emu {
struct Fiber { ucontext_t ctx; std::vector<char> stack; bool done = false; unsigned tid = 0; };
struct Barrier { int count = 0; long gen = 0; };
inline ucontext_t sched_ctx;
inline std::vector<Fiber> fibers;
inline int cur = 0;
inline const std::function<void()>* body = nullptr;
inline Barrier block_bar;
inline std::vector<Barrier> warp_bar;
inline std::vector<float> slots;                       // one per thread: shuffle exchange
inline long switches = 0;

inline void yield() { ++switches; swapcontext(&fibers[cur].ctx, &sched_ctx); }
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
    swapcontext(&fibers[cur].ctx, &sched_ctx);
}
// Run `kernel` for every block of the grid with `threads` threads per block.
inline void run_grid(dim3 grid, unsigned threads, const std::function<void()>& kernel) {
    body = &kernel;
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            blockIdx = dim3{bx, by, 0};
            fibers.assign(threads, Fiber{});
            warp_bar.assign((threads + 31) / 32, Barrier{});
            slots.assign(threads, 0.f);
            block_bar = Barrier{};
            for (unsigned t = 0; t < threads; ++t) {
                Fiber& f = fibers[t];
                f.tid = t;
                f.stack.resize(256 * 1024);
                getcontext(&f.ctx);
                f.ctx.uc_stack.ss_sp = f.stack.data();
                f.ctx.uc_stack.ss_size = f.stack.size();
                f.ctx.uc_link = nullptr;
                makecontext(&f.ctx, entry, 0);
            }
            for (bool alive = true; alive;) {
                alive = false;
                for (unsigned t = 0; t < threads; ++t) {
                    if (fibers[t].done) continue;
                    alive = true;
                    cur = (int)t;
                    threadIdx = dim3{t, 0, 0};
                    swapcontext(&sched_ctx, &fibers[t].ctx);
                }
            }
        }
}
}  // namespace emu

inline void __syncthreads() { emu::wait(emu::block_bar, (int)blockDim.x); }
inline float __emu_shfl(float v, int src_lane) {
    const int t = emu::cur, w = t / 32;
    emu::slots[t] = v;
    emu::wait(emu::warp_bar[w], emu::live_in_warp(w));
    const float r = emu::slots[32 * w + (src_lane & 31)];
    emu::wait(emu::warp_bar[w], emu::live_in_warp(w));
    return r;
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) { return __emu_shfl(v, (emu::cur % 32) ^ lane_mask); }
inline float __shfl_sync(unsigned, float v, int src_lane) { return __emu_shfl(v, src_lane); }
