"""The learning-rate schedule of every trainer here: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math

import torch

__all__ = ["lr_factor", "warmup_cosine"]


def lr_factor(step: int, steps: int, warmup: float = 0.1, min_ratio: float = 0.1) -> float:
    """Multiplier of the peak learning rate at ``step`` (0-based) of ``steps``: linear warm-up over the first
    ``warmup`` fraction of the steps (at least one step), then half a cosine from 1 down to ``min_ratio``."""
    warm = max(1, int(warmup * steps))
    if step < warm:
        return (step + 1) / warm
    t = min(1.0, (step - warm) / max(1, steps - warm))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def warmup_cosine(
    optimizer: torch.optim.Optimizer, steps: int, warmup: float = 0.1, min_ratio: float = 0.1
) -> torch.optim.lr_scheduler.LambdaLR:
    """:func:`lr_factor` as a scheduler multiplying each group's own learning rate (call ``step()`` once per
    optimizer step)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, steps, warmup, min_ratio))
