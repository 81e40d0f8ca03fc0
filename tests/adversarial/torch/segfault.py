import ctypes


def attention(q, k, v, *, causal=False):
    return ctypes.string_at(0)   # reads address 0: the process dies with SIGSEGV
