import time


def attention(q, k, v, *, causal=False):
    while True:          # never returns
        time.sleep(0.05)
