// Optional part of the CPU emulation (emu.h): nvcuda::wmma for 16x16x16 fp16 products with fp32
// accumulators, for chapter 3 (a kernel's #include <mma.h> brings it in, see include/mma.h).
// Made unforgiving where a GPU may be lenient:
//  * an accumulator fragment's elements sit in a scrambled order unlike any GPU's (acc_index), so a
//    kernel that assumes a layout instead of asking for it computes garbage;
//  * load/store_matrix_sync count pointers that are not 32-byte aligned and strides that are not a
//    multiple of 16 bytes (wmma's rules) as errors (emu_errors()).
#pragma once
#include "emu.h"

namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline int acc_index(int lane, int e) { return ((lane * 8 + e) * 37 + 11) % 256; }   // a bijection on 0..255
inline void check(const void* p, unsigned ldm, int elem_bytes) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * elem_bytes) % 16 != 0)
        emu::error("wmma rule broken", p, "ldm", ldm);
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
