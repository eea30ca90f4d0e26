"""Optimizer and learning-rate schedule for Document-JEPA training (RS-SNGD by default, AdamW selectable)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

import rsngd

# Matrices whose names contain one of these are projected by RS-SNGD: attention and MLP weights of Hiera,
# BERT, the fusion, the predictors and the neck. Embeddings, layout tables and output heads stay in AdamW.
PROJECTED = ("attn", "attention", "mlp", "intermediate", "output.dense", "linear1", "linear2", "lateral")


@dataclass
class OptimConfig:
    """Optimizer settings."""

    name: str = "rsngd"
    """``rsngd`` or ``adamw``."""
    lr: float = 2e-3
    """Peak learning rate of the projected matrices (RS-SNGD) or of everything (AdamW)."""
    adamw_lr: float = 0.0
    """Peak learning rate of RS-SNGD's AdamW part (embeddings, norms, heads); 0 = same as ``lr``."""
    rank: int = 32
    """RS-SNGD projection rank."""
    history: int = 10
    """RS-SNGD history length."""
    weight_decay: float = 0.01
    """Decoupled weight decay of matrices."""
    warmup: float = 0.1
    """Warm-up as a fraction of the steps."""
    min_lr_ratio: float = 0.1
    """Cosine decay ends at this fraction of the peak."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 = off)."""


def build_optimizer(named: list[tuple[str, nn.Parameter]], cfg: OptimConfig, seed: int = 0) -> torch.optim.Optimizer:
    """RS-SNGD with attention/MLP matrices projected, or AdamW, over the given (name, parameter) pairs."""
    if cfg.name == "adamw":
        decay = [p for _, p in named if p.dim() >= 2]
        flat = [p for _, p in named if p.dim() < 2]
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": flat, "weight_decay": 0.0}], lr=cfg.lr
        )
    if cfg.name != "rsngd":
        raise ValueError(f"unknown optimizer {cfg.name!r}; choose rsngd or adamw")
    groups = rsngd.param_groups(
        _Named(named), rank=cfg.rank, target_modules=PROJECTED, weight_decay=cfg.weight_decay, history=cfg.history
    )
    adamw_lr = cfg.adamw_lr or cfg.lr
    for g in groups:
        if g["rank"] is None:
            g["lr"] = adamw_lr
    return rsngd.RSNGD(groups, lr=cfg.lr, seed=seed)


class _Named(nn.Module):
    """Presents a list of (name, parameter) pairs to ``rsngd.param_groups``."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]) -> None:
        super().__init__()
        self._named = named

    def named_parameters(self, *args, **kwargs):  # type: ignore[override]
        yield from self._named


def build_schedule(opt: torch.optim.Optimizer, cfg: OptimConfig, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine to ``min_lr_ratio`` of the peak, as a multiplier on each group's lr."""
    warm = max(1, int(cfg.warmup * steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        t = min(1.0, (step - warm) / max(1, steps - warm))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)
