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

Writes ``<out>/ch08-train.json`` (both loss curves, each step's time, the configuration, the GPU, versions and date,
the final-loss gap and the median step times) and ``<out>/ch08-train.png`` (both curves on one chart).
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


def train(args, name, attention_fn, data, vocab_size):
    import torch
    import torch.nn.functional as F

    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    model = build(args, attention_fn, vocab_size).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    cuda = dev.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=cuda)           # the attention's gradients are fp16
    g = torch.Generator().manual_seed(args.seed + 1)               # the same batches in both runs
    losses, times = [], []
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=g)
        x = torch.stack([data[s:s + args.seq] for s in starts]).to(dev)            # [batch, seq]
        y = torch.stack([data[s + 1:s + args.seq + 1] for s in starts]).to(dev)    # [batch, seq] next characters
        lr = args.lr * min(1.0, (step + 1) / max(1, args.warmup))                  # linear warm-up
        for group in opt.param_groups:
            group["lr"] = lr
        if cuda:
            torch.cuda.synchronize()
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
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            print(f"  {name:8s} step {step:5d} loss {losses[-1]:.4f}  {times[-1]:8.1f} ms")
    return {"loss": losses, "step_ms": times}


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
    args = ap.parse_args(argv)
    if args.tiny:
        args.layers, args.d_model, args.seq, args.batch, args.warmup = 2, 64, 32, 2, 1
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

    runs = {"sdpa": train(args, "sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                          data, len(chars)),
            args.step: train(args, args.step, lambda q, k, v: ours(q, k, v, causal=True), data, len(chars))}
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
                                    "runs": runs, "summary": summary}, indent=1) + "\n")
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
