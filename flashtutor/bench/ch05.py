"""Chapter 5's measurements: the CUTLASS configuration sweep, the pipeline against SDPA, the memory story.

    flashtutor bench 05 [--out FILE]          # on a Hopper GPU, with nvcc; ~5-8 minutes

1. builds every sweep configuration in one parallel nvcc run (and records ptxas's warnings per unit);
2. checks the reference pipeline (the chapter's solution) on the seed, small and odd shapes, causal
   and not, plus large logits, with :func:`flashtutor.check.check_output`;
3. times each GEMM configuration against cuBLAS (``torch.bmm``) on the same problem, per shape;
4. times the whole pipeline per configuration at the seed shape, against SDPA;
5. times the reference, chapter 4's Triton kernel and SDPA on the seed, small and D=128 shapes, and
   checks the seed report's three claims;
6. the crossover series over S = 512 … 16384 (B=1, H=16, D=64) with the score matrix's bytes against
   the L2 size.

Every part catches its own failure, prints it and goes on; results go to one results file (the crossover
plot beside it, ``crossover05-<gpu>-<date>.png``). The notebook calls the same functions with fewer shapes.
"""
from __future__ import annotations

import math

from ..chapters import get_chapter
from ..loaders.cutlass import GemmConfig
from ..problems import Problem, shape_set
from .tables import paired_times

CH = get_chapter("05")
SEED = shape_set("seed")[0]                  # B1 H16 S1024 D64
PARTS = {"peaks": "measure this GPU's copy bandwidth and matmul rate",
         "build": "build the sweep (one parallel nvcc run)",
         "reference": "reference GEMMs (found in the sweep's library)",
         "checks": "correctness of the reference (= the solution)",
         "gemms": "each GEMM against cuBLAS (torch.bmm)",
         "pipeline": "the pipeline per configuration at the seed shape",
         "versus": "reference vs SDPA, chapter 4 and FlashAttention",
         "extras": "seed shape: graph-replayed and warm-L2 times",
         "memory": "score-matrix bytes vs L2",
         "crossover": "crossover series over S"}

# QKᵀ candidates. The seed report's configuration first: 64×128×64 tiles, KernelTmaWarpSpecialized and
# the epilogue CUTLASS's "auto" picks for it (NoSmem: registers straight to global memory).
QK_SWEEP = [
    GemmConfig("qk", (64, 128, 64), (1, 1), "ws", "nosmem"),        # the seed's
    GemmConfig("qk", (64, 128, 64), (1, 1), "ws", "tma"),           # + a TMA epilogue
    GemmConfig("qk", (64, 128, 64), (1, 1), "pingpong", "tma"),     # two tiles in flight per block
    GemmConfig("qk", (128, 128, 64), (1, 1), "pingpong", "tma"),
    GemmConfig("qk", (128, 128, 64), (1, 1), "coop", "tma"),        # two warpgroups on one 128-row tile
    GemmConfig("qk", (128, 128, 64), (1, 1), "coop", "nosmem"),
    GemmConfig("qk", (128, 128, 64), (2, 1), "coop", "tma"),        # a cluster of 2 shares each K tile
    GemmConfig("qk", (128, 256, 64), (1, 1), "coop", "tma"),        # wider tiles: fewer, larger stores
]
# PV candidates: N = D, so the tile's N should match the head dim.
PV_SWEEP = [
    GemmConfig("pv", (128, 64, 64), (1, 1), "coop", "tma"),
    GemmConfig("pv", (64, 64, 64), (1, 1), "pingpong", "tma"),
    GemmConfig("pv", (128, 128, 64), (1, 1), "coop", "tma"),
    GemmConfig("pv", (64, 128, 64), (1, 1), "pingpong", "tma"),
]
# The seed's configuration compiled without -DNDEBUG: CUTLASS's device asserts stay, and ptxas serializes
# the wgmma pipeline (warning C7510). Timed beside the others to show what the warning costs.
C7510_DEMO = GemmConfig("qk", (64, 128, 64), (1, 1), "ws", "nosmem", ndebug=False)
GEMM_SHAPES = [(1, 16, 1024, 64), (1, 16, 1024, 128), (8, 16, 512, 64), (1, 16, 4096, 64)]
CROSSOVER_S = tuple(S for _, _, S, _ in CH.bench.shapes)     # the manifest's crossover series, B1 H16 D64


def log(msg: str = ""):
    print(msg, flush=True)


def sweep_configs(reference=True) -> list[GemmConfig]:
    """Everything one build needs: the sweep, the C7510 demonstration and the reference's pair per D."""
    out = QK_SWEEP + PV_SWEEP + [C7510_DEMO]
    if reference:
        from ..kernels import k05_three_kernel as ref
        out += [c for D in (64, 128) for c in ref.gemm_configs(D)]
    return list(dict.fromkeys(out))


def build(configs=None, *, verbose=True):
    """Build (or load from the cache) one library holding ``configs`` (default: :func:`sweep_configs`)."""
    from ..loaders.cutlass import build_gemms
    return build_gemms(configs or sweep_configs(), verbose=verbose)


# ------------------------------------------------------------------------------ GEMM problems ---
def _padded(S):
    return -(-S // 8) * 8


class GemmProblem:
    """The tensors of one product at one attention shape, laid out as the pipeline lays them out."""

    def __init__(self, op: str, B: int, H: int, S: int, D: int, seed: int = 0):
        import torch
        self.op, self.shape = op, (B, H, S, D)
        L, ld = B * H, _padded(S)
        self.L, self.S, self.D, self.ld = L, S, D, ld
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.scores = torch.empty((L, S, ld), dtype=torch.float32, device="cuda")      # [L, S, ld]
        if op == "qk":
            self.q = torch.randn((L, S, D), generator=g, device="cuda", dtype=torch.float16)   # [L, S, D]
            self.k = torch.randn((L, ld, D), generator=g, device="cuda", dtype=torch.float16)  # [L, ld, D]
        else:
            p = torch.rand((L, S, ld), generator=g, device="cuda") / ld                  # probabilities-ish
            self.p16 = self.scores.view(torch.float16)                                    # [L, S, 2·ld]
            self.p16[:, :, :ld] = p.half()
            self.v = torch.randn((L, ld, D), generator=g, device="cuda", dtype=torch.float16)  # [L, ld, D]
            self.o = torch.empty((L, S, D), dtype=torch.float16, device="cuda")               # [L, S, D]

    @property
    def name(self) -> str:
        B, H, S, D = self.shape
        return f"{self.op} B{B} H{H} S{S} D{D}"

    @property
    def flops(self) -> float:
        return 2.0 * self.L * self.S * self.ld * self.D

    @property
    def bytes(self) -> int:
        """Compulsory traffic: the operands read once and the result written once."""
        L, S, D, ld = self.L, self.S, self.D, self.ld
        if self.op == "qk":
            return 2 * L * S * D + 2 * L * ld * D + 4 * L * S * ld
        return 2 * L * S * ld + 2 * L * ld * D + 2 * L * S * D

    def runner(self, gemm):
        """A zero-argument callable running ``gemm`` (a loaders.cutlass.Gemm) on these tensors."""
        L, S, D, ld = self.L, self.S, self.D, self.ld
        if self.op == "qk":
            return lambda: gemm(self.q, self.k, self.scores, M=S, N=ld, K=D, L=L, lda=D, batch_a=S * D, ldb=D,
                                batch_b=ld * D, ldd=ld, batch_d=S * ld, alpha=D ** -0.5)
        return lambda: gemm(self.p16, self.v, self.o, M=S, N=D, K=ld, L=L, lda=2 * ld, batch_a=2 * S * ld, ldb=D,
                            batch_b=ld * D, ldd=D, batch_d=S * D)

    def cublas(self):
        """(label, callable): the same product through torch.bmm (cuBLAS), same layouts, same output dtype."""
        import torch
        if self.op == "qk":
            kt = self.k.transpose(1, 2)                                                  # [L, D, ld] view
            try:
                torch.bmm(self.q, kt, out_dtype=torch.float32)
                return "cuBLAS (torch.bmm, fp32 out)", lambda: torch.bmm(self.q, kt, out_dtype=torch.float32)
            except Exception:   # older torch: only fp16 out, half the bytes written — flagged in the label
                return "cuBLAS (torch.bmm, fp16 out!)", lambda: torch.bmm(self.q, kt)
        p = self.p16[:, :, :self.ld]                                                      # [L, S, ld], row stride 2·ld
        return "cuBLAS (torch.bmm)", lambda: torch.bmm(p, self.v)

    def check(self, gemm) -> str | None:
        """None if ``gemm`` computes this product correctly, else what is wrong."""
        import torch
        self.runner(gemm)()
        torch.cuda.synchronize()
        if self.op == "qk":
            want = torch.bmm(self.q.float(), self.k.float().transpose(1, 2)) * self.D ** -0.5   # [L, S, ld]
            got = self.scores
            tol = 1e-3 * want.abs().max().item() + 1e-3
        else:
            want = torch.bmm(self.p16[:, :, :self.ld].float(), self.v.float())                 # [L, S, D]
            got = self.o.float()
            tol = 2e-3 * want.abs().max().item() + 1e-3
        if not torch.isfinite(got).all():
            return "non-finite output"
        err = (got - want).abs().max().item()
        return None if err <= tol else f"max error {err:.3g} > {tol:.3g}"


def time_gemms(lib, shapes=GEMM_SHAPES, *, qk=None, pv=None, reps=30, flush_l2=True) -> list[dict]:
    """Each configuration of each product against cuBLAS, per shape (L2 flushed, alternating)."""
    import torch

    from ..timing import compare
    qk = [c for c in (qk or [c for c in lib.configs if c.op == "qk"]) if c in lib]
    pv = [c for c in (pv or [c for c in lib.configs if c.op == "pv"]) if c in lib]
    rows = []
    for shape in shapes:
        for op, configs in (("qk", qk), ("pv", pv)):
            if not configs:
                continue
            try:
                gp = GemmProblem(op, *shape)
                fns, errors = {}, {}
                for c in configs:
                    why = None
                    try:
                        why = gp.check(lib[c])
                    except Exception as e:
                        why = f"{type(e).__name__}: {str(e)[:160]}"
                    if why:
                        errors[c.short()] = why
                    else:
                        fns[c.short()] = gp.runner(lib[c])
                label, blas = gp.cublas()
                fns[label] = blas
                stats = compare(fns, reps=reps, max_seconds=4.0, flush_l2=flush_l2)
                t_blas = stats[label].median_us
                for c in configs:
                    row = {"product": op, "shape": list(shape), "problem": gp.name, "config": c.name,
                           "label": c.short(), "schedule": c.schedule, "epilogue": c.epilogue, "tile": list(c.tile),
                           "cluster": list(c.cluster), "ndebug": c.ndebug}
                    if c.short() in stats:
                        s = stats[c.short()]
                        row.update(us=s.median_us, spread=s.spread, tflops=gp.flops / s.median_us / 1e6,
                                   tbs=gp.bytes / s.median_us / 1e6, cublas_us=t_blas,
                                   vs_cublas=s.median_us / t_blas)     # our time ÷ cuBLAS's: below 1 is faster
                    else:
                        row["error"] = errors.get(c.short(), "not timed")
                    rows.append(row)
                rows.append({"product": op, "shape": list(shape), "problem": gp.name, "config": "cublas",
                             "label": label, "us": t_blas, "spread": stats[label].spread,
                             "tflops": gp.flops / t_blas / 1e6, "tbs": gp.bytes / t_blas / 1e6})
                del gp
                torch.cuda.empty_cache()
            except Exception as e:
                log(f"  GEMM timing failed at {op} {shape}: {type(e).__name__}: {e}")
                rows.append({"product": op, "shape": list(shape), "error": f"{type(e).__name__}: {str(e)[:200]}"})
    return rows


# The chapter's target for the chosen pair, as the course writes every ratio (a time over a time): at most
# 1.25× cuBLAS's time on the same product, i.e. at least 80% of its speed (1 / 0.8 = 1.25).
CUBLAS_TARGET = 1.25


def vs_cublas(row: dict) -> float | None:
    """A GEMM row's time over cuBLAS's on the same product (below 1: the CUTLASS kernel is faster); None for
    cuBLAS's own row and rows not timed. Rows of older results files hold ``pct_of_cublas`` instead (cuBLAS's
    time over ours, in percent): their ratio is 100 / pct."""
    if row.get("vs_cublas") is not None:
        return float(row["vs_cublas"])
    if row.get("us") and row.get("cublas_us"):
        return row["us"] / row["cublas_us"]
    if row.get("pct_of_cublas"):
        return 100.0 / row["pct_of_cublas"]
    return None


def gemm_table(rows) -> str:
    """Markdown table of :func:`time_gemms`'s rows; ``time ÷ cuBLAS`` is each configuration's time over
    cuBLAS's on the same product (the course's direction: lower is better, 1.00× is cuBLAS's time)."""
    lines = ["| product · shape | configuration | µs | TFLOP/s | TB/s | time ÷ cuBLAS |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "us" not in r:
            lines.append(f"| {r.get('problem', r.get('shape'))} | {r.get('label', '')} | {r.get('error', '—')} | | | |")
            continue
        ratio = vs_cublas(r)
        rel = f"{ratio:.2f}×" if ratio is not None else "(reference)"
        lines.append(f"| {r['problem']} | {r['label']} | {r['us']:.1f} | {r['tflops']:.0f} | {r['tbs']:.2f} | {rel} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- pipeline ---
def pipeline_steps(lib, *, D=64) -> dict:
    """{label: attention callable}: each QK configuration with the reference's PV, and each PV
    configuration (whose tile N suits D) with the reference's QK."""
    from ..kernels import k05_three_kernel as ref
    qk_ref, pv_ref = ref.gemm_configs(D)
    steps = {}
    for c in [c for c in lib.configs if c.op == "qk"]:
        steps[f"QK {c.short()}"] = _pipe(c, pv_ref, lib)
    for c in [c for c in lib.configs if c.op == "pv" and c != pv_ref]:
        steps[f"PV {c.short()}"] = _pipe(qk_ref, c, lib)
    return steps


def _pipe(qk, pv, lib):
    from ..kernels import k05_three_kernel as ref

    def attention(q, k, v, *, causal=False):
        return ref.three_kernel(q, k, v, causal=causal, qk=qk, pv=pv, lib=lib)
    return attention


def sdpa_flash(q, k, v, *, causal=False):
    """SDPA pinned to its FlashAttention-2 backend (the pin's host cost is inside the timing)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def fa3_step():
    """FlashAttention-3 (``flash_attn_interface``) if it is installed, else None."""
    try:
        import flash_attn_interface as fa3   # noqa: F401
    except Exception:
        return None

    def attention(q, k, v, *, causal=False):
        out = fa3.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2).contiguous()
    return attention


# The seed report's claims about the pipeline, restated as the course writes every ratio: a time over a time.
# It said "98% of SDPA" (a speed: SDPA's time over the pipeline's), i.e. 1 / 0.98 = 1.02× SDPA's time, and
# "1.51× faster than FlashAttention-3", i.e. 1 / 1.51 = 0.66× FlashAttention-3's time. Each holds within 5%.
CLAIM_SDPA = f"{1 / 0.98:.2f}× SDPA's time"
CLAIM_FA3 = f"{1 / 1.51:.2f}× FlashAttention-3's time"


def seed_claims(rows: list[dict], hot: dict | None = None) -> list[dict]:
    """The seed report's three claims against the measured seed-shape rows (non-causal), on each row's
    graph-replayed times where the table has them (``paired_times``); the event-timed medians and warm-cache
    times (``hot``) follow as context. ``value``: the measured time ratio (the pipeline's time over SDPA's,
    over FlashAttention's) or µs per head."""
    by = {r["step"]: r for r in rows if r["problem"] == SEED.name and "median_us" in r}
    out = []
    ref, sdpa = by.get("3-kernel (reference)"), by.get("SDPA")
    if ref and sdpa:
        (t_ref, t_sdpa), basis = paired_times(ref, sdpa)
        ratio = t_ref / t_sdpa                # the course's direction: the pipeline's time / SDPA's
        out.append({"claim": CLAIM_SDPA, "measured": f"{ratio:.2f}× SDPA's time (SDPA {t_sdpa:.1f} µs, "
                    f"3-kernel {t_ref:.1f} µs, {basis})",
                    "holds": ratio <= 1 / 0.95, "value": ratio, "basis": basis})
        per_head = t_ref / (SEED.B * SEED.H)
        out.append({"claim": "1.65 µs/head", "measured": f"{per_head:.2f} µs per head ({t_ref:.1f} µs / "
                    f"{SEED.B * SEED.H} heads, {basis})", "holds": per_head <= 1.65 * 1.05, "value": per_head,
                    "basis": basis})
        fa = by.get("FlashAttention-3") or by.get("SDPA FlashAttention-2 backend")
        if fa:
            (t_fa, t_r, _), fa_basis = paired_times(fa, ref, sdpa)     # the basis the two claims above used, or events
            x = t_r / t_fa                     # the pipeline's time / FlashAttention's
            which = "FlashAttention-3" if "FlashAttention-3" in by else "FlashAttention-2 (SDPA backend; FA3 is not installed)"
            out.append({"claim": CLAIM_FA3,
                        "measured": f"{x:.2f}× the time of {which} ({t_r:.1f} µs against {t_fa:.1f}, {fa_basis})",
                        "holds": x <= 1 / (1.51 * 0.95), "value": x, "against": which, "basis": fa_basis})
        if basis == "graph-replayed":
            out.append({"claim": "(context) event-timed, one call at a time",
                        "measured": f"3-kernel {ref['median_us']:.1f} µs, SDPA {sdpa['median_us']:.1f} µs, L2 flushed: "
                                    "the host's launch work included where it outlasts the flush",
                        "holds": None})
    if hot:
        out.append({"claim": "(context) L2 not flushed",
                    "measured": ", ".join(f"{k} {v:.1f} µs" for k, v in hot.items()) + " replayed from a CUDA graph with warm caches (no L2 flush)",
                    "holds": None})
    return out


# ------------------------------------------------------------------------------ memory story ---
def memory_rows(S_list=CROSSOVER_S, B=1, H=16, D=64, l2_bytes=None) -> list[dict]:
    """Bytes of the fp32 score matrix per S against the L2 (no GPU needed if l2_bytes is given)."""
    from ..kernels import k05_three_kernel as ref
    if l2_bytes is None:
        import torch
        l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for S in S_list:
        p = Problem(B, H, S, D)
        sb = ref.score_bytes(p)
        rows.append({"S": S, "score_bytes": sb, "p_bytes": sb // 2, "l2_bytes": l2_bytes, "fits_l2": sb <= l2_bytes,
                     "qkv_o_bytes": p.min_bytes, "pipeline_bytes": ref.bytes_moved(p),
                     "s2_share": 1.0 - p.min_bytes / ref.bytes_moved(p)})
    return rows


def crossover(S_list=CROSSOVER_S, B=1, H=16, D=64, *, check_up_to=4096, reps=15) -> list[dict]:
    """3-kernel vs SDPA vs chapter 4's Triton kernel over S; one row per (S, kernel).

    Each kernel is replayed from a CUDA graph (5 calls per graph, L2 flushed before each, the flushes'
    time subtracted), so a short call reads as its GPU time rather than as the host's cost of launching
    it (event-timed, chapter 4's autotuned launcher read 39 µs at S = 512 on the H100's slow host). A
    kernel whose capture fails is event-timed instead and its row says so (``basis``)."""
    import torch

    from ..check import check_output
    from ..timing import compare, graph_times, pinned_sdpa
    from ..kernels import k04_triton_fa2_hopper as ch4
    from ..kernels import k05_three_kernel as ref
    rows = []
    for S in S_list:
        p = Problem(B, H, S, D)
        try:
            q, k, v = p.inputs(0, "cuda")
            _, sdpa = pinned_sdpa(q, k, v, causal=False)
            fns = {"3-kernel (reference)": lambda: ref.attention(q, k, v),
                   "ch4 Triton (Hopper)": lambda: ch4.attention(q, k, v), "SDPA": sdpa}
            checked = {}
            if S <= check_up_to:
                for name in ("3-kernel (reference)", "ch4 Triton (Hopper)"):
                    res = check_output(p, q, k, v, fns[name](), seed=0)
                    checked[name] = res.ok
            stats, basis = {}, {}
            for name, fn in fns.items():           # graph-replayed: the GPU's time, not the host's
                try:
                    stats[name], basis[name] = graph_times(fn, calls=5, reps=reps), "graph"
                except Exception as e:             # noqa: BLE001 (capture can run out of memory at large S)
                    log(f"  S={S}: {name} not graph-replayable ({type(e).__name__}), event-timed instead")
                    torch.cuda.synchronize()
                    stats[name], basis[name] = compare({name: fn}, reps=reps, max_seconds=6.0)[name], "events"
            for name, st in stats.items():
                rows.append({"S": S, "kernel": name, "us": st.median_us, "spread": st.spread, "basis": basis[name],
                             "ns_per_score": 1e3 * st.median_us / (B * H * S * S), "ok": checked.get(name)})
            log(f"  S={S:>5}: " + ", ".join(f"{n.split(' (')[0]} {st.median_us:.1f} µs"      # short names: one line
                                           + ("" if basis[n] == "graph" else " (events)") for n, st in stats.items()))
            fns = sdpa = None                      # let the large buffers go before the next S
            torch.cuda.empty_cache()
        except Exception as e:
            log(f"  crossover S={S} failed: {type(e).__name__}: {e}")
            rows.append({"S": S, "error": f"{type(e).__name__}: {str(e)[:200]}"})
    return rows


def crossings(rows: list[dict], a="3-kernel (reference)", b="SDPA") -> list[float]:
    """Sequence lengths where kernel ``a`` and ``b`` swap order (log-interpolated between measured S)."""
    t = {}
    for r in rows:
        if "us" in r:
            t.setdefault(r["S"], {})[r["kernel"]] = r["us"]
    pts = sorted((S, v[a] / v[b]) for S, v in t.items() if a in v and b in v)
    out = []
    for (s0, r0), (s1, r1) in zip(pts, pts[1:]):
        if (r0 - 1) * (r1 - 1) < 0:
            f = math.log(r0) / (math.log(r0) - math.log(r1))
            out.append(float(2 ** (math.log2(s0) + f * (math.log2(s1) - math.log2(s0)))))
    return out


CROSSOVER_TITLE = "Chapter 5's three kernels against fused attention as S grows"


def plot_crossover(rows, memory=None, ax=None, env="", *, title=None):
    """Time over S (log-log) for each kernel; the S where the score matrix outgrows L2 and any crossing
    marked. A short title (:data:`CROSSOVER_TITLE`) over the plot, `env` (the environment line) in the
    caption under it, at flashtutor.plots' sizes; the legend below the axes, clear of the lines (right of
    them when drawn into the caller's `ax`). `title` is the older name of `env` (the line went above the
    plot then); it is still taken, as the caption."""
    env = env or title or ""
    from .. import plots
    own = ax is None
    if own:
        fig, ax = plots.figure(height=4.2)
    else:
        plots.style_axes(ax)
    kernels = list(dict.fromkeys(r["kernel"] for r in rows if "us" in r))
    for name in kernels:
        pts = sorted((r["S"], r["us"]) for r in rows if r.get("kernel") == name and "us" in r)
        ax.plot([s for s, _ in pts], [u for _, u in pts], marker="o", label=name)
    if memory:
        fit = [m["S"] for m in memory if m["fits_l2"]]
        over = [m["S"] for m in memory if not m["fits_l2"]]
        if fit and over:
            ax.axvspan(max(fit), min(over), color="orange", alpha=0.15,
                       label=f"fp32 scores outgrow L2 ({memory[0]['l2_bytes'] / 2**20:.0f} MiB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    xs = [r["S"] for r in rows if "us" in r]
    for i, x in enumerate(crossings(rows)):
        ax.axvline(x, color="red", ls="--", lw=1, label="crossover (3-kernel = SDPA)" if i == 0 else None)
        right = xs and x > (min(xs) * max(xs)) ** 0.5           # label on the side with room
        ax.annotate(f"S≈{x:.0f}", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(-3 if right else 3, -3),
                    textcoords="offset points", fontsize=plots.SMALL, color="red",
                    ha="right" if right else "left", va="top")
    ax.set_xlabel("sequence length S (B=1, H=16, D=64)", fontsize=plots.NORMAL)
    bases = {r.get("basis", "events") for r in rows if "us" in r}
    how = ("GPU µs per call, graph-replayed, L2 flushed" if bases == {"graph"}
           else "µs per call, L2 flushed, graph-replayed or event-timed (per row)")
    ax.set_ylabel("GPU µs per call" if bases == {"graph"} else "µs per call", fontsize=plots.NORMAL)
    ax.grid(True, which="both", alpha=0.3)
    if own:
        plots.legend(ax, where="below", ncol=2)
        plots.title(fig, CROSSOVER_TITLE)
    else:
        plots.legend(ax, where="right")
        plots.title(ax, CROSSOVER_TITLE)
    plots.caption(ax.figure, " · ".join(x for x in (how, env) if x))
    return ax


# --------------------------------------------------------------------------------------- main ---
def check_reference(sets=CH.bench.check_sets, *, large_logits=True) -> list[dict]:
    """check_output of the reference (the chapter's solution) per shape, causal and not."""
    import torch

    from ..check import check_output
    from ..problems import shape_set
    from ..kernels import k05_three_kernel as ref
    probs = [p.replace(causal=c) for s in sets for p in shape_set(s) for c in (False, True)]
    if large_logits:
        probs += [SEED.replace(qk_std=6.0), SEED.replace(qk_std=6.0, causal=True), Problem(2, 3, 113, 128, qk_std=6.0)]
    rows = []
    for p in probs:
        try:
            q, k, v = p.inputs(1, "cuda")
            out = ref.attention(q, k, v, causal=p.causal)
            torch.cuda.synchronize()
            r = check_output(p, q, k, v, out, seed=1)
            rows.append({"problem": p.name, "ok": r.ok, "err_over_bound": r.err / r.bound if r.bound else None,
                         "message": r.message})
        except Exception as e:
            rows.append({"problem": p.name, "ok": False, "message": f"{type(e).__name__}: {str(e)[:200]}"})
        log(f"  {'ok  ' if rows[-1]['ok'] else 'FAIL'} {p.name}" + ("" if rows[-1]["ok"] else f": {rows[-1]['message']}"))
    return rows


def run(r) -> int:
    """``flashtutor bench 05``: the parts into ``r`` (a :class:`flashtutor.bench.runner.Run`)."""
    import torch

    from ..env import describe_line
    from ..kernels import k05_three_kernel as ref
    from ..roofline import basis_peaks, measure_peaks, reached_line
    from . import tables as bench
    results = r.doc
    props = torch.cuda.get_device_properties(0)
    results["device"] = {"name": props.name, "sm_count": props.multi_processor_count,
                         "l2_bytes": props.L2_cache_size, "memory_bytes": props.total_memory}
    r.log(f"{props.name}: {props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB")
    reached = r.part("peaks", measure_peaks)          # what a GEMM and a copy reach: recorded, not the basis
    if reached is not None:
        results["reached"] = {"hbm_tbs": reached.hbm_tbs, "tensor_tflops": reached.tensor_tflops}
        r.log(reached_line(reached, props.name))
    peaks = basis_peaks(props.name)                   # floors on the course's one basis: the datasheet
    if peaks is not None:
        results["peaks"] = {"hbm_tbs": peaks.hbm_tbs, "tensor_tflops": peaks.tensor_tflops, "source": peaks.source}

    lib = r.part("build", lambda: build())
    if lib is not None:
        results["build"] = {"seconds": lib.report.seconds, "cached": lib.report.cached, "path": lib.path,
                            "configs": [c.name for c in lib.configs], "warnings": lib.report.warnings,
                            "c7510": lib.report.c7510()}
        for name, ws in lib.report.warnings.items():
            r.log(f"  {name}: " + ("; ".join(ws) if ws else "no warnings"))

    r.part("reference", lambda: ref.build(verbose=True))
    results["reference_configs"] = {D: [c.name for c in ref.gemm_configs(D)] for D in (64, 128)}
    r.part("checks", check_reference, store="checks")

    if lib is not None:
        def gemms():
            rows = time_gemms(lib)
            log(gemm_table(rows))
            return rows
        r.part("gemms", gemms, store="gemms")

        def pipeline():
            steps = pipeline_steps(lib, D=64)
            rows = bench.steps_table(steps, [SEED, SEED.replace(causal=True)], reps=30, progress=False, peaks=peaks)
            log(bench.markdown(rows, columns=("median", "spread", "vs SDPA")))
            timed = [x for x in rows if "median_us" in x and x["problem"] == SEED.name and x["step"] != "SDPA"]
            for kind in ("QK", "PV"):
                mine = [x for x in timed if x["step"].startswith(kind)]
                if mine:
                    b = min(mine, key=lambda x: x["median_us"])
                    log(f"  fastest {kind} at the seed shape: {b['step']} ({b['median_us']:.1f} µs)")
            log("  the solution's gemm_configs(64): " + ", ".join(c.short() for c in ref.gemm_configs(64)))
            return rows
        r.part("pipeline", pipeline, store="pipeline")

    def versus():
        steps = {CH.step("5").label: CH.step("5").module,
                 "ch4 Triton (Hopper)": get_chapter("04").step("4b").module,
                 "SDPA FlashAttention-2 backend": sdpa_flash}
        fa3 = fa3_step()
        if fa3:
            steps["FlashAttention-3"] = fa3
        probs = [SEED, SEED.replace(causal=True), Problem(1, 16, 1024, 128)] + bench.problems("small")

        def skip(name, p):   # chapter 4's autotuner compiles per shape bucket: keep it to the seed shapes
            return "seed shapes only" if name == "ch4 Triton (Hopper)" and p.S != 1024 else None
        rows = bench.steps_table(steps, probs, reps=30, progress=False, skip=skip, peaks=peaks, graph=True)
        log(bench.markdown(rows, columns=("median", "spread", "graph", "graph vs SDPA", "% floor", "TB/s")))
        return rows
    r.part("versus", versus, store="versus")

    def extras():
        from ..timing import graph_times, pinned_sdpa
        q, k, v = SEED.inputs(0, "cuda")
        _, sdpa = pinned_sdpa(q, k, v)
        fns = {"3-kernel": lambda: ref.attention(q, k, v), "SDPA": sdpa}
        return {"hot": {n: graph_times(f, flush_l2=False).median_us for n, f in fns.items()}}
    ex = r.part("extras", extras) or {}
    results["seed_extras"] = ex
    if results.get("versus"):
        claims = seed_claims(results["versus"], ex.get("hot"))
        results["seed_claims"] = claims
        log("\nThe seed report's claims at B=1 H=16 S=1024 D=64:")
        for c in claims:
            verdict = "" if c["holds"] is None else ("HOLDS" if c["holds"] else "does NOT hold")
            log(f"  {c['claim']}: {c['measured']} {verdict}")

    for m in r.part("memory", lambda: memory_rows(), store="memory") or []:
        log(f"  S={m['S']:>5}: fp32 scores {m['score_bytes'] / 2**20:8.0f} MiB  "
            f"{'fits in' if m['fits_l2'] else 'exceeds'} L2; S² traffic {100 * m['s2_share']:.0f}% of the pipeline's bytes")
    if r.part("crossover", lambda: crossover(), store="crossover"):
        results["crossings"] = {b: crossings(results["crossover"], b=b) for b in ("SDPA", "ch4 Triton (Hopper)")}
        log(f"  crossings (S where the 3-kernel and the other swap order): {results['crossings']}")
        try:
            import matplotlib
            matplotlib.use("Agg")
            ax = plot_crossover(results["crossover"], results.get("memory"), env=describe_line())
            ax.figure.savefig(r.side("crossover05", ".png"), bbox_inches="tight")
        except Exception as e:
            log(f"  (plot failed: {e})")
    return 0
