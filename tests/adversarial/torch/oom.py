import torch


def attention(q, k, v, *, causal=False):
    B, H, S, D = q.shape
    scores = torch.empty((B * H * S, S, 1 << 24), dtype=torch.float32, device=q.device)  # petabytes
    return scores[..., 0]
