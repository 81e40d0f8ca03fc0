"""The chapter-4 kernel (helper.py, the solution copied at test time) launched into a given output buffer."""
import triton

from helper import CONFIGS, INTERPRETER_CONFIG, LOG2E, flash_attention_kernel, interpreting


def launch_into(q, k, v, o, causal):
    cfg = INTERPRETER_CONFIG if interpreting() else CONFIGS[q.shape[-1]]
    B, H, S, D = q.shape
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    flash_attention_kernel[grid](
        q, k, v, o, D ** -0.5 * LOG2E, H, S, q.stride(0), q.stride(1), q.stride(2),
        D=D, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=causal, num_warps=cfg.get("num_warps", 4),
        num_stages=cfg.get("num_stages", 3))
    return o
