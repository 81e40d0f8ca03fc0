import flashtutor.no_such_module  # noqa: F401


def attention(q, k, v, *, causal=False):
    return q
