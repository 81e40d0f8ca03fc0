// A memory fault of an emulated kernel, told as such: a SIGSEGV/SIGBUS handler that writes one line to stderr,
//   flashtutor-emulate: fault at address 0x00007f12345678 (a write) in kernel NAME (block 1,0,0 thread 5,0,0)
// (on SIGABRT: "abort in kernel NAME (block … thread …)" during a launch, a failed assert; "abort after kernel
// NAME" between launches, the last kernel that ran: the C library found its heap corrupted, most often by it),
// then hands the signal on (the action that was there before, or the default: the process still dies of it).
// flashtutor.emulate installs it once per process, from the first library it loads (emu_fault_setup), and gives
// every library the same FaultContext, which run_grid fills while a kernel runs: the handler of the first library
// reads what the running one wrote. The grading judge reads the line from the worker's log
// (flashtutor.grading.spawn.fault_line). Included by the harness after the kernel's source, so that the system
// headers it needs never meet the learner's names.
#pragma once
#include <signal.h>

namespace emu_fault {
extern "C" long write(int, const void*, unsigned long);      // <unistd.h>'s, without its other names

inline struct sigaction previous[3];                         // SIGSEGV's, SIGBUS's and SIGABRT's before ours
inline int slot(int sig) { return sig == SIGBUS ? 1 : sig == SIGABRT ? 2 : 0; }
inline bool installed = false;

// Appenders for a preformatted line: no printf, no malloc (async-signal-safe).
struct Line {
    char buf[400];
    unsigned n = 0;
    void put(char c) { if (n < sizeof buf - 1) buf[n++] = c; }
    void str(const char* s, unsigned limit = 160) { for (unsigned i = 0; s && s[i] && i < limit; ++i) put(s[i]); }
    void hex(unsigned long v) {
        str("0x");
        for (int shift = 60; shift >= 0; shift -= 4) put("0123456789abcdef"[(v >> shift) & 15]);
    }
    void dec(unsigned long v) {
        char d[24];
        int k = 0;
        do { d[k++] = char('0' + v % 10); v /= 10; } while (v && k < 24);
        while (k) put(d[--k]);
    }
    void dims(const dim3* d) {
        if (!d) { str("?"); return; }
        dec(d->x); put(','); dec(d->y); put(','); dec(d->z);
    }
};

inline void say(Line& l) {
    for (unsigned done = 0; done < l.n;) {
        const long w = write(2, l.buf + done, l.n - done);
        if (w <= 0) break;
        done += (unsigned)w;
    }
}

inline void handler(int sig, siginfo_t* info, void* uc) {
    const emu::FaultContext* ctx = emu::fault_ctx;
    if (sig == SIGABRT && ctx && (ctx->kernel || ctx->last)) {   // a failed assert, or a heap found corrupted
        Line l;
        l.str(ctx->kernel ? "flashtutor-emulate: abort in kernel " : "flashtutor-emulate: abort after kernel ");
        l.str(ctx->kernel ? ctx->kernel : ctx->last, 120);
        if (ctx->kernel) {
            l.str(" (block ");
            l.dims(ctx->block);
            l.str(" thread ");
            l.dims(ctx->thread);
            l.put(')');
        }
        l.put('\n');
        say(l);
    } else if (sig != SIGABRT && ctx && ctx->kernel) {         // a kernel was running: say where
        Line l;
        l.str("flashtutor-emulate: fault at address ");
        l.hex((unsigned long)info->si_addr);
        const char* how = " (an access)";
#if defined(__x86_64__) && defined(REG_ERR)
        if (sig == SIGSEGV && uc)                             // the page fault's error code: bit 1 is a write
            how = (((ucontext_t*)uc)->uc_mcontext.gregs[REG_ERR] & 2) ? " (a write)" : " (a read)";
#else
        (void)uc;
#endif
        l.str(how);
        l.str(" in kernel ");
        l.str(ctx->kernel, 120);
        l.str(" (block ");
        l.dims(ctx->block);
        l.str(" thread ");
        l.dims(ctx->thread);
        l.str(")\n");
        say(l);
    }
    struct sigaction& old = previous[slot(sig)];
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) old.sa_handler = SIG_DFL;   // must not go on
    sigaction(sig, &old, nullptr);
    raise(sig);                 // pending until this handler returns; then the previous action (by default: death)
}

inline void install() {
    if (installed) return;
    installed = true;
    struct sigaction sa {};
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous[0]);
    sigaction(SIGBUS, &sa, &previous[1]);
    sigaction(SIGABRT, &sa, &previous[2]);
}
}  // namespace emu_fault
