// Optional part of the CPU emulation (emu.h): cp.async, for chapter 3's pipelined kernels.
// flashtutor.emulate swaps a kernel's PTX helpers cp_async_16 / cp_async_commit / cp_async_wait<N> for calls to
// these (see REPLACE there). Made unforgiving: a copy is queued per thread and lands only when a
// cp.async.wait_group that covers its group returns, so a wrong wait count reads the previous tile.
#pragma once
#include "emu.h"

namespace emu {
struct Copy { void* dst; const void* src; int bytes; long group; };
inline std::vector<std::vector<Copy>> pending;          // per thread: cp.async copies not landed yet
inline std::vector<long> committed;                     // per thread: groups committed so far
inline void cp_async_reset(unsigned threads) {
    pending.assign(threads, {});
    committed.assign(threads, 0);
}
inline const int cp_async_hooked = add_block_hook(cp_async_reset);
}  // namespace emu

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
