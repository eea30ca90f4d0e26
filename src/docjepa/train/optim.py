"""Optimizer settings of Document-JEPA training (RS-SNGD by default, AdamW selectable), built by
:func:`rsngd.create_optimizer` with the one parameter-group rule and scheduled by :func:`rsngd.warmup_cosine`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

import rsngd

TARGETS = (*rsngd.TARGETS, "lateral")
"""Projected matrices: the attention and MLP weights of Hiera, BERT, the fusion, the predictors and the decoders
(``rsngd.TARGETS``), plus the lateral convolutions of the image encoder's neck. Embeddings, layout tables and
output heads stay in AdamW."""


@dataclass
class OptimConfig:
    """Optimizer settings."""

    name: Literal["rsngd", "adamw"] = "rsngd"
    """``rsngd`` or ``adamw``."""
    lr: float = 2e-3
    """Peak learning rate of the projected matrices (RS-SNGD) or of everything (AdamW)."""
    adamw_lr: float = 0.0
    """Peak learning rate of RS-SNGD's AdamW part (embeddings, norms, heads); 0 = same as ``lr``."""
    recipe: str = "rsngd-subspace"
    """RS-SNGD's named recipe (``rsngd.recipes``) under the settings here: ``rsngd-subspace`` (the subspace step
    alone, AdamW for the rest) is what Document-JEPA's figures were measured with; ``rsngd`` adds the
    orthogonalised residual and the light AdamW state, not yet measured on this model."""
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
        return rsngd.create_optimizer(named, "adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, targets=TARGETS)
    if cfg.name != "rsngd":
        raise ValueError(f"unknown optimizer {cfg.name!r}; choose rsngd or adamw")
    return rsngd.create_optimizer(
        named,
        cfg.recipe,
        lr=cfg.lr,
        adamw_lr=cfg.adamw_lr or cfg.lr,
        weight_decay=cfg.weight_decay,
        targets=TARGETS,
        rank=cfg.rank,
        history=cfg.history,
        seed=seed,
    )


def build_schedule(opt: torch.optim.Optimizer, cfg: OptimConfig, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine to ``min_lr_ratio`` of the peak, as a multiplier on each group's lr."""
    return rsngd.warmup_cosine(opt, steps, cfg.warmup, cfg.min_lr_ratio)
