"""Chapter 8's proof: train a small character-level transformer twice, once on SDPA and once on the chapter's kernels.

    PYTHONPATH=$PWD python scripts/ch08_train.py --out results/ch08-train          # on a GPU: ~1-2 min on an H100
    PYTHONPATH=$PWD python scripts/ch08_train.py --device cpu --steps 3 --tiny --out /tmp/t   # CPU, interpreter

The text is the course's own: every .md and .ipynb (cell sources) under book/ and chapters/, no downloads. The model:
token + position embeddings, ``--layers`` pre-norm blocks (causal self-attention with heads of D = 64, an MLP of 4×
width), a final norm and a linear head. Both runs start from the same seed (same weights, same batches); the only
difference is the attention call: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` or the solution's
differentiable ``attention(q, k, v, causal=True)`` (flashtutor/kernels/k08a_backward.py, or --step 8b for the tuned
one). q, k, v go to both as contiguous fp16 [B, H, S, 64]; the rest of the model runs in bf16 autocast on a GPU
(fp32 on the CPU), with fp32 weights and a loss scaler for the fp16 attention gradients.

After the two runs, the step time is measured again with the two attentions alternating step by step on fresh
models (``--timing-steps`` pairs, after ``--warm`` untimed steps each; CUDA events and wall time per step): the runs
themselves are sequential, so their step times also hold whatever changed on the machine between them.

Writes ``<out>/ch08-train.json`` (both loss curves, each step's time, the configuration, the GPU, versions and date,
the final-loss gap, the median step times and the interleaved timing) and ``<out>/ch08-train.png`` (both curves on one chart).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def corpus() -> str:
    """The book's own text: .md files and the cell sources of .ipynb files under book/ and chapters/, sorted."""
    parts = []
    for folder in ("book", "chapters"):
        for p in sorted((ROOT / folder).rglob("*")):
            if p.suffix == ".md":
                parts.append(p.read_text(encoding="utf-8", errors="replace"))
            elif p.suffix == ".ipynb":
                try:
                    nb = json.loads(p.read_text(encoding="utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                parts += ["".join(c.get("source", "")) for c in nb.get("cells", [])]
    return "\n\n".join(parts)


def build(args, attention_fn, vocab_size):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):                                              # x: [B, S, d]
            B, S, d = x.shape
            qkv = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, d // self.heads)   # [B, S, 3, H, 64]
            q, k, v = (qkv[:, :, i].transpose(1, 2).half().contiguous() for i in range(3))   # [B, H, S, 64] fp16
            a = attention_fn(q, k, v)                                      # [B, H, S, 64] fp16
            x = x + self.proj(a.to(x.dtype).transpose(1, 2).reshape(B, S, d))
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.tok, self.pos = nn.Embedding(vocab_size, d), nn.Embedding(args.seq, d)
            self.blocks = nn.ModuleList(Block(d, d // 64) for _ in range(args.layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab_size)

        def forward(self, idx):                                            # idx: [B, S] int64
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))                                   # [B, S, vocab]

    return Model()


def stepper(args, attention_fn, data, vocab_size):
    """A fresh model (seeded), its optimizer and batch stream; returns ``step()`` → (loss, wall ms, event ms):
    one training step, its wall time between two synchronizations and, on a GPU, the CUDA-event time between its
    first and last launch (the GPU's timeline, host gaps included, without the synchronizations' cost)."""
    import torch
    import torch.nn.functional as F

    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    model = build(args, attention_fn, vocab_size).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    cuda = dev.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=cuda)           # the attention's gradients are fp16
    g = torch.Generator().manual_seed(args.seed + 1)               # the same batches in both runs
    count = [0]

    def step():
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=g)
        x = torch.stack([data[s:s + args.seq] for s in starts]).to(dev)            # [batch, seq]
        y = torch.stack([data[s + 1:s + args.seq + 1] for s in starts]).to(dev)    # [batch, seq] next characters
        lr = args.lr * min(1.0, (count[0] + 1) / max(1, args.warmup))              # linear warm-up
        count[0] += 1
        for group in opt.param_groups:
            group["lr"] = lr
        if cuda:
            torch.cuda.synchronize()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            ev[0].record()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab_size), y.view(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if cuda:
            ev[1].record()
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        return loss.item(), wall, ev[0].elapsed_time(ev[1]) if cuda else wall

    return step


def train(args, name, attention_fn, data, vocab_size):
    step = stepper(args, attention_fn, data, vocab_size)
    losses, times = [], []
    for i in range(args.steps):
        loss, wall, _ = step()
        times.append(wall)
        losses.append(loss)
        if i % max(1, args.steps // 10) == 0 or i == args.steps - 1:
            print(f"  {name:8s} step {i:5d} loss {losses[-1]:.4f}  {times[-1]:8.1f} ms")
    return {"loss": losses, "step_ms": times}


def interleaved(args, fns, data, vocab_size):
    """Step time, the two attentions alternating step by step (ABAB…, the order swapped every pair) on fresh models,
    after ``--warm`` steps each: each step's wall and CUDA-event ms, the per-pair ratio, medians and p10–p90."""
    steps = {n: stepper(args, f, data, vocab_size) for n, f in fns.items()}
    names = list(steps)
    for n in names:
        for _ in range(args.warm):
            steps[n]()
    rec = {n: {"wall_ms": [], "event_ms": []} for n in names}
    for i in range(args.timing_steps):
        for n in (names if i % 2 == 0 else names[::-1]):
            _, wall, event = steps[n]()
            rec[n]["wall_ms"].append(wall)
            rec[n]["event_ms"].append(event)

    def q(xs, f):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(f * len(xs)))]
    a, b = names
    out = {"pairs": args.timing_steps, "warm": args.warm, "runs": rec}
    for kind in ("wall_ms", "event_ms"):
        ratios = [y / x for x, y in zip(rec[a][kind], rec[b][kind])]
        out[kind] = {n: {"median": q(rec[n][kind], 0.5), "p10": q(rec[n][kind], 0.1), "p90": q(rec[n][kind], 0.9)}
                     for n in names}
        out[kind]["pair_ratio"] = {"median": q(ratios, 0.5), "p10": q(ratios, 0.1), "p90": q(ratios, 0.9)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when there is one) or cpu")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--tiny", action="store_true", help="a tiny model and batch (for a CPU and the interpreter)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=512, help="a multiple of 64 (heads of D = 64)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", default="8a", choices=["8a", "8b"], help="which chapter-8 step to train with")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--timing-steps", type=int, default=100, help="pairs of interleaved steps timed after training")
    ap.add_argument("--warm", type=int, default=10, help="untimed steps of each model before the interleaved pairs")
    args = ap.parse_args(argv)
    if args.tiny:
        args.layers, args.d_model, args.seq, args.batch, args.warmup = 2, 64, 32, 2, 1
        args.timing_steps, args.warm = min(args.timing_steps, 2), min(args.warm, 1)
    if args.d_model % 64:
        ap.error("--d-model must be a multiple of 64")

    import torch
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"       # before the kernels' @triton.jit runs: CPU tensors, interpreted
    import triton
    import torch.nn.functional as F
    if args.step == "8a":
        from flashtutor.kernels.k08a_backward import attention as ours
    else:
        from flashtutor.kernels.k08b_backward_tuned import attention as ours

    text = corpus()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    env = {"device": torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({platform.machine()})",
           "torch": torch.__version__, "triton": triton.__version__,
           "interpreted": os.environ.get("TRITON_INTERPRET") == "1",
           "date": datetime.datetime.now().isoformat(timespec="seconds")}
    print(" · ".join(f"{k} {v}" for k, v in env.items()))
    print(f"text: {len(text):,} characters, {len(chars)} distinct; model: {args.layers} layers, d_model "
          f"{args.d_model} ({args.d_model // 64} head(s) of 64), seq {args.seq}, batch {args.batch}, "
          f"{args.steps} steps")

    fns = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           args.step: lambda q, k, v: ours(q, k, v, causal=True)}
    runs = {n: train(args, n, f, data, len(chars)) for n, f in fns.items()}
    timing = interleaved(args, fns, data, len(chars)) if args.timing_steps else None
    if timing:
        for kind in ("event_ms", "wall_ms"):
            t = timing[kind]
            print(f"interleaved, {timing['pairs']} pairs, {kind[:-3]} time per step: "
                  + ", ".join(f"{n} {t[n]['median']:.2f} ms (p10–p90 {t[n]['p10']:.2f}–{t[n]['p90']:.2f})"
                              for n in fns)
                  + f"; {args.step} / SDPA per pair {t['pair_ratio']['median']:.3f} "
                    f"(p10–p90 {t['pair_ratio']['p10']:.3f}–{t['pair_ratio']['p90']:.3f})")
    skip = min(args.steps - 1, max(0, args.steps // 10))          # leave compilation and autotuning out of the median
    med = {n: sorted(r["step_ms"][skip:])[len(r["step_ms"][skip:]) // 2] for n, r in runs.items()}
    tail = max(1, args.steps // 10)
    final = {n: sum(r["loss"][-tail:]) / tail for n, r in runs.items()}
    summary = {"final_loss_mean_of_last_10pct": final, "gap": final[args.step] - final["sdpa"],
               "median_step_ms": med, "step_time_ratio": med[args.step] / med["sdpa"],
               "max_abs_loss_diff": max(abs(a - b) for a, b in zip(runs["sdpa"]["loss"], runs[args.step]["loss"]))}
    print(f"final loss (mean of the last {tail} steps): SDPA {final['sdpa']:.4f}, {args.step} {final[args.step]:.4f} "
          f"(gap {summary['gap']:+.4f}); median step: SDPA {med['sdpa']:.1f} ms, {args.step} {med[args.step]:.1f} ms "
          f"(× {summary['step_time_ratio']:.2f}); largest per-step loss difference {summary['max_abs_loss_diff']:.4f}")

    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    out_json = args.out / "ch08-train.json"
    out_json.write_text(json.dumps({"env": env, "config": config, "corpus_chars": len(text), "vocab": len(chars),
                                    "runs": runs, "summary": summary, "interleaved": timing}, indent=1) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for n, r in runs.items():
        label = "SDPA" if n == "sdpa" else f"step {n} (the chapter's kernels)"
        ax.plot(range(1, len(r["loss"]) + 1), r["loss"], label=f"{label}: median step {med[n]:.1f} ms", lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, nats/char)")
    ax.set_title(f"{args.layers} layers, d_model {args.d_model}, seq {args.seq}: same seed, two attentions",
                 fontsize=10)
    ax.legend()
    fig.text(0.01, 0.01, f"{env['device']} · torch {env['torch']} · triton {env['triton']} · {env['date'][:10]}",
             fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(args.out / "ch08-train.png", dpi=120)
    print(f"wrote {out_json} and {args.out / 'ch08-train.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
