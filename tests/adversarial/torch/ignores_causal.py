from _common import attention_fp32


def attention(q, k, v, *, causal=False):
    return attention_fp32(q, k, v, causal=False)   # ignores causal
