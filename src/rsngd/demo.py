"""``rsngd demo``: RS-SNGD against AdamW on a small character-level transformer.

Pure torch (no other dependency). Trains the same model from the same initial weights
on the same batches with both optimizers and prints validation loss, optimizer state
and step time. Text: Shakespeare from ``../shared/data`` when present (last 10 % held
out), else any file given with ``--data``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .factory import create_optimizer
from .memory import optimizer_state_bytes
from .schedule import lr_factor

DEFAULT_TEXT = Path("../shared/data/tinyshakespeare/input.txt")


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.GELU(), nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class CharLM(nn.Module):
    """A small causal transformer over bytes: (B, T) ids → (B, T, 256) logits."""

    def __init__(self, dim: int = 128, layers: int = 4, heads: int = 4, ctx: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.pos = nn.Parameter(torch.randn(ctx, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 256, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        mask = torch.full((T, T), float("-inf"), device=ids.device).triu(1)
        x = self.embed(ids) + self.pos[:T]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def load_text(path: Path | None) -> bytes:
    path = path or DEFAULT_TEXT
    if not path.is_file():
        raise SystemExit(f"no text at {path}: pass --data FILE (any text file)")
    return path.read_bytes()


def train(
    name: str,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    data: torch.Tensor,
    val: torch.Tensor,
    steps: int,
    batch: int,
    ctx: int,
) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)  # identical batches for every optimizer
    base = [g["lr"] for g in opt.param_groups]
    opt_time = fwd_time = 0.0
    for step in range(steps):
        for g, lr in zip(opt.param_groups, base):
            g["lr"] = lr * lr_factor(step, steps)  # warm-up over 10 % of the steps, then cosine to 10 %
        ix = torch.randint(len(data) - ctx - 1, (batch,), generator=gen)
        x = torch.stack([data[i : i + ctx + 1] for i in ix])
        t0 = time.perf_counter()
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt_time += time.perf_counter() - t1
        fwd_time += t1 - t0
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            print(f"  {name:7s} step {step + 1:4d}/{steps}  train loss {loss.item():.3f}", flush=True)
    model.eval()
    vgen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        losses = []
        for _ in range(20):
            ix = torch.randint(len(val) - ctx - 1, (batch,), generator=vgen)
            x = torch.stack([val[i : i + ctx + 1] for i in ix])
            losses.append(F.cross_entropy(model(x[:, :-1]).reshape(-1, 256), x[:, 1:].reshape(-1)).item())
    return {
        "val_loss": sum(losses) / len(losses),
        "state_mb": optimizer_state_bytes(opt) / 2**20,
        "opt_ms": 1000 * opt_time / steps,
        "fwd_bwd_ms": 1000 * fwd_time / steps,
    }


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``rsngd demo``: RS-SNGD against AdamW on a small character-level transformer."""
    ap = sub.add_parser(
        "demo",
        help="RS-SNGD against AdamW on a small character-level transformer",
        description=__doc__.split("\n\n")[0],
    )
    ap.add_argument("--data", type=Path, default=None, help=f"a text file (default: {DEFAULT_TEXT})")
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    ap.add_argument("--rank", type=int, default=None, help="RS-SNGD rank (default: the recipe's, 1/8 of each matrix)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.set_defaults(func=run, parser=ap)
    return ap


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    raw = torch.frombuffer(bytearray(load_text(args.data)), dtype=torch.uint8).long()
    split = int(0.9 * len(raw))
    data, val = raw[:split], raw[split:]
    ctx, batch = 128, 16
    print(f"text: {len(raw):,} bytes (train on the first 90 %, validate on the last 10 %)")
    torch.manual_seed(0)
    init = CharLM(ctx=ctx).state_dict()
    results = {}
    for name in ("adamw", "rsngd"):
        model = CharLM(ctx=ctx)
        model.load_state_dict(init)
        if name == "rsngd":  # the default recipe, as a user's first call
            hp = {} if args.rank is None else {"rank": args.rank}
            opt = create_optimizer(model.named_parameters(), **hp)
        else:
            opt = create_optimizer(model.named_parameters(), name, lr=3e-3)
        print(f"{name}: training {sum(p.numel() for p in model.parameters()):,} parameters")
        results[name] = train(name, model, opt, data, val, args.steps, batch, ctx)
    print(f"\n{'optimizer':10s} {'val loss':>9s} {'state MiB':>10s} {'opt ms/step':>12s} {'fwd+bwd ms':>11s}")
    for name, r in results.items():
        print(f"{name:10s} {r['val_loss']:9.3f} {r['state_mb']:10.2f} {r['opt_ms']:12.1f} {r['fwd_bwd_ms']:11.1f}")
