// A CPU emulation of the slice of CUDA that chapter 3's wmma kernels use, for tests without a GPU.
//
// Every CUDA thread of a block is a fiber (ucontext) on one OS thread; blocks run one after another.
// __syncthreads(), __syncwarp() and __shfl_xor_sync() are barriers at which a fiber yields until its
// block (or warp) has arrived, so indexing, masks, the order of barriers and the math run as written.
// Made deliberately unforgiving where a GPU may be lenient:
//  * shared memory is filled with NaN bytes before each block, so a read of an unwritten tile shows;
//  * an accumulator fragment's elements sit in a scrambled order unlike any GPU's (acc_index), so a
//    kernel that assumes a layout instead of asking for it computes garbage;
//  * cp.async copies land only when a cp.async.wait_group that covers their group returns, so a wrong
//    wait count reads the previous tile;
//  * load/store_matrix_sync count pointers that are not 32-byte aligned and strides that are not a
//    multiple of 16 bytes (wmma's rules) as errors (emu_errors()).
// What it cannot show: data races between warps that a barrier orders differently on a GPU (the GPU
// tier runs compute-sanitizer for that), timing, and the rounding of ex2.approx.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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
#define __align__(n) __attribute__((aligned(n)))
#define CUDART_INF_F INFINITY

using std::max;
using std::min;

typedef _Float16 __half;
struct alignas(4) __half2 { __half x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline __half2 __floats2half2_rn(float a, float b) { return {(__half)a, (__half)b}; }

struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
struct Fiber { ucontext_t ctx; std::vector<char> stack; bool done = false; };
struct Barrier { int count = 0; long gen = 0; };
struct Copy { void* dst; const void* src; int bytes; long group; };
inline ucontext_t sched_ctx;
inline std::vector<Fiber> fibers;
inline int cur = 0;
inline const std::function<void()>* body = nullptr;
inline Barrier block_bar;
inline std::vector<Barrier> warp_bar;
inline std::vector<float> slots;                        // one per thread: the shuffle exchange
inline std::vector<std::vector<Copy>> pending;          // per thread: cp.async copies not landed yet
inline std::vector<long> committed;                     // per thread: groups committed so far
inline long errors = 0;
inline unsigned char* shared_base = nullptr;
inline size_t shared_size = 0;

inline void yield() { swapcontext(&fibers[cur].ctx, &sched_ctx); }
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
inline void run_grid(dim3 grid, unsigned threads, const std::function<void()>& kernel) {
    body = &kernel;
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            blockIdx = dim3{bx, by, 0};
            std::memset(shared_base, 0xff, shared_size);      // NaN in every fp16 and fp32 slot
            fibers.assign(threads, Fiber{});
            warp_bar.assign((threads + 31) / 32, Barrier{});
            slots.assign(threads, 0.f);
            pending.assign(threads, {});
            committed.assign(threads, 0);
            block_bar = Barrier{};
            for (unsigned t = 0; t < threads; ++t) {
                Fiber& f = fibers[t];
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
inline int lane() { return cur % 32; }
}  // namespace emu

inline void __syncthreads() { emu::wait(emu::block_bar, (int)blockDim.x); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(emu::warp_bar[emu::cur / 32], 32); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    const int t = emu::cur, w = t / 32;
    emu::slots[t] = v;
    emu::wait(emu::warp_bar[w], 32);
    const float r = emu::slots[32 * w + ((t % 32) ^ lane_mask)];
    emu::wait(emu::warp_bar[w], 32);
    return r;
}

// cp.async: queued per thread, landed by the wait that covers its group.
inline void emu_cp_async(void* dst, const void* src, bool valid) {
    emu::pending[emu::cur].push_back({dst, src, valid ? 16 : 0, emu::committed[emu::cur]});
}
inline void emu_cp_commit() { ++emu::committed[emu::cur]; }
inline void emu_cp_wait(int n) {                       // at most n of my committed groups may stay in flight
    auto& q = emu::pending[emu::cur];
    const long landed_below = emu::committed[emu::cur] - n;
    std::vector<emu::Copy> keep;
    for (auto& c : q) {
        if (c.group < landed_below) {
            std::memset(c.dst, 0, 16);
            std::memcpy(c.dst, c.src, c.bytes);
        } else {
            keep.push_back(c);
        }
    }
    q.swap(keep);
}

// nvcuda::wmma for 16x16x16 fp16 products with fp32 accumulators.
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline int acc_index(int lane, int e) { return ((lane * 8 + e) * 37 + 11) % 256; }   // a bijection on 0..255
inline void check(const void* p, unsigned ldm, int elem_bytes) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * elem_bytes) % 16 != 0) {
        if (emu::errors++ < 5) std::fprintf(stderr, "wmma rule broken: pointer %p, ldm %u\n", p, ldm);
    }
}
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <class T, class L> struct fragment<matrix_a, 16, 16, 16, T, L> { float v[256]; };   // the whole tile
template <class T, class L> struct fragment<matrix_b, 16, 16, 16, T, L> { float v[256]; };   // in every lane
template <class T> struct fragment<accumulator, 16, 16, 16, T, void> {
    enum { num_elements = 8 };
    T x[8];
};

inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __half, row_major>& f, const __half* p, unsigned ldm) {
    check(p, ldm, 2);
    for (int i = 0; i < 16; ++i) for (int k = 0; k < 16; ++k) f.v[i * 16 + k] = (float)p[i * ldm + k];
}
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __half, col_major>& f, const __half* p, unsigned ldm) {
    check(p, ldm, 2);
    for (int k = 0; k < 16; ++k) for (int j = 0; j < 16; ++j) f.v[k * 16 + j] = (float)p[j * ldm + k];
}
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __half, row_major>& f, const __half* p, unsigned ldm) {
    check(p, ldm, 2);
    for (int k = 0; k < 16; ++k) for (int j = 0; j < 16; ++j) f.v[k * 16 + j] = (float)p[k * ldm + j];
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
    check(p, ldm, 4);
    for (int e = 0; e < 8; ++e) {
        const int idx = acc_index(emu::lane(), e), r = idx / 16, c = idx % 16;
        f.x[e] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
    check(p, ldm, 4);
    for (int e = 0; e < 8; ++e) {
        const int idx = acc_index(emu::lane(), e), r = idx / 16, c = idx % 16;
        (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
    }
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
    for (int e = 0; e < 8; ++e) f.x[e] = v;
}
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __half, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, __half, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    for (int e = 0; e < 8; ++e) {
        const int idx = acc_index(emu::lane(), e), r = idx / 16, col = idx % 16;
        float s = c.x[e];
        for (int k = 0; k < 16; ++k) s += a.v[r * 16 + k] * b.v[k * 16 + col];
        d.x[e] = s;
    }
}
}}  // namespace nvcuda::wmma
