"""Parameter groups for transformer language models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

__all__ = ["param_groups"]


def param_groups(
    model: nn.Module,
    rank: int | None = 64,
    target_modules: Sequence[str] = ("attn", "mlp"),
    weight_decay: float = 0.0,
    **projected: Any,
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into RS-SNGD groups.

    Matrices (ndim ≥ 2) whose name contains one of ``target_modules`` go to a projected
    group with ``rank`` (plus any extra keyword, e.g. ``history=8``); all other
    matrices (embeddings, the LM head) go to an AdamW group with ``weight_decay``; 1-D
    tensors (norms, biases) go to an AdamW group without weight decay. Empty groups
    are left out.
    """
    if not target_modules:
        raise ValueError("target_modules is empty: no matrix would be projected")
    proj, other, flat = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.dim() >= 2 and any(t in name for t in target_modules):
            proj.append(p)
        elif p.dim() >= 2:
            other.append(p)
        else:
            flat.append(p)
    groups = [
        {"params": proj, "rank": rank, "weight_decay": weight_decay, **projected},
        {"params": other, "rank": None, "weight_decay": weight_decay},
        {"params": flat, "rank": None, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]
