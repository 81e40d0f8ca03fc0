"""Chapter 7: probes of the hardware facts the Hopper kernels rely on (see ``k07_probes.cu``).

    from flashtutor.kernels import k07_probes
    k07_probes.run_all()     # {"tma_swizzle": "ok", "wgmma_ss_d64": "ok", ...} or a description of the mismatch

Each probe is one block on tiny inputs; a failure says which assumption broke (the swizzle, the
K-major descriptor, the MN-major descriptor, the accumulator or A-fragment layout). GPU only.
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.loaders import load_cuda, tma

SOURCE = Path(__file__).with_suffix(".cu")
SMEM = 2 * 64 * 128 * 2 + 64 + 1024     # the largest probe: two [64, 128] fp16 tiles + a barrier + alignment
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE, arch="sm_90a")
    return _mod


def tma_swizzle() -> str:
    import torch
    src = torch.arange(64 * 64, dtype=torch.int16, device="cuda").view(64, 64)   # element (r, c) = 64r + c
    out = torch.full((64 * 64,), -1, dtype=torch.int16, device="cuda")
    m = tma.tensor_map(src.view(torch.float16), box_rows=64, box_cols=64)        # the bits travel unchanged
    tma.launch(_module().kernel("probe_tma_swizzle"), grid=(1,), block=(128,), args=(m, out), shared_mem=SMEM)
    torch.cuda.synchronize()
    img = out.cpu().tolist()
    bad = []
    for r in range(64):
        for c in range(64):
            pos = tma.swizzled_offset(r * 128 + 2 * c, 128) // 2
            if img[pos] != 64 * r + c:
                bad.append((r, c, pos, img[pos]))
    if not bad:
        return "ok"
    r, c, pos, got = bad[0]
    return (f"{len(bad)} of 4096 elements misplaced; element (row {r}, col {c}) expected at 16-bit word {pos}, "
            f"found {got} there (its own index would be {64 * r + c})")


def _compare(name: str, got, want) -> str:
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    if err <= 1e-3 * max(scale, 1.0):
        return "ok"
    bad = ((got - want).abs() > 1e-3 * max(scale, 1.0)).nonzero()
    r, c = bad[0].tolist()
    return (f"{name}: max error {err:.3g} (|C| up to {scale:.3g}); {len(bad)} wrong elements, first at "
            f"({r}, {c}): expected {want[r, c].item():.4g}, got {got[r, c].item():.4g}")


def wgmma_ss(D: int) -> str:
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(64, D, generator=g).half().cuda()
    b = torch.randn(64, D, generator=g).half().cuda()
    out = torch.full((64, 64), float("nan"), device="cuda")
    ta, tb = tma.tensor_map(a, box_rows=64), tma.tensor_map(b, box_rows=64)
    tma.launch(_module().kernel(f"probe_wgmma_ss_d{D}"), grid=(1,), block=(128,), args=(ta, tb, out), shared_mem=SMEM)
    torch.cuda.synchronize()
    return _compare(f"A·Bᵀ, D={D}", out, a.float() @ b.float().T)


def wgmma_rs(D: int) -> str:
    import torch
    g = torch.Generator(device="cpu").manual_seed(1)
    p = torch.rand(64, 64, generator=g).half().cuda()
    v = torch.randn(64, D, generator=g).half().cuda()
    out = torch.full((64, D), float("nan"), device="cuda")
    tv = tma.tensor_map(v, box_rows=64)
    tma.launch(_module().kernel(f"probe_wgmma_rs_d{D}"), grid=(1,), block=(128,), args=(p, tv, out), shared_mem=SMEM)
    torch.cuda.synchronize()
    return _compare(f"P·V, D={D}", out, p.float() @ v.float())


PROBES = {
    "tma_swizzle": tma_swizzle,
    "wgmma_ss_d64": lambda: wgmma_ss(64), "wgmma_ss_d128": lambda: wgmma_ss(128),
    "wgmma_rs_d64": lambda: wgmma_rs(64), "wgmma_rs_d128": lambda: wgmma_rs(128),
}


def run_all() -> dict[str, str]:
    out = {}
    for name, fn in PROBES.items():
        try:
            out[name] = fn()
        except Exception as e:     # a launch error poisons the context; the caller runs this in a subprocess
            out[name] = f"error: {type(e).__name__}: {str(e)[:300]}"
    return out
