"""I-JEPA on the image encoder: a narrow predictor and the loss against the EMA target encoder.

The context encoder (the online Hiera) sees only the context units. For each target block the predictor
receives the context tokens at their positions plus one learned mask token per target unit at that unit's
position, and regresses the target encoder's layer-normed feature of every target unit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import SelfBlock, gather_tokens, sincos_2d


class IJepaPredictor(nn.Module):
    """Narrow transformer predicting target-unit features from context tokens."""

    def __init__(self, in_dim: int, dim: int, layers: int, heads: int, grid: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.normal_(self.mask_token, std=0.02)
        # Persistent: transformers 5 builds models on the meta device in from_pretrained and would leave a
        # non-persistent buffer uninitialised.
        self.register_buffer("pos", sincos_2d(grid, grid, dim))  # (U, dim)
        self.blocks = nn.ModuleList(SelfBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, in_dim)

    def forward(self, context: Tensor, context_idx: Tensor, target_idx: Tensor) -> Tensor:
        """context (B, K, C) at units context_idx (B, K); target_idx (B, T, Kt) → predictions (B, T, Kt, C)."""
        b, t, kt = target_idx.shape
        ctx = self.embed(context) + self.pos[context_idx]  # (B, K, D)
        ctx = ctx.repeat_interleave(t, dim=0)  # (B·T, K, D)
        queries = self.mask_token + self.pos[target_idx.reshape(b * t, kt)]  # (B·T, Kt, D)
        x = torch.cat([ctx, queries], dim=1)
        for block in self.blocks:
            x = block(x)
        out = self.head(self.norm(x[:, -kt:]))  # (B·T, Kt, C)
        return out.view(b, t, kt, -1)


def ijepa_loss(pred: Tensor, targets: Tensor, target_idx: Tensor) -> Tensor:
    """Smooth-L1 between predictions (B, T, Kt, C) and target features (B, U, C) at target_idx (B, T, Kt)."""
    b, t, kt = target_idx.shape
    tgt = gather_tokens(targets, target_idx.reshape(b, t * kt)).view(b, t, kt, -1)
    return F.smooth_l1_loss(pred.float(), tgt.float())


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, momentum: float) -> None:
    """target ← momentum · target + (1 − momentum) · online, parameter by parameter."""
    for pt, po in zip(target.parameters(), online.parameters()):
        pt.lerp_(po.detach().to(pt.dtype), 1.0 - momentum)


def ema_momentum(step: int, total: int, start: float = 0.996, end: float = 1.0) -> float:
    """Momentum rising linearly from ``start`` to ``end`` over ``total`` steps (I-JEPA's schedule)."""
    return start + (end - start) * min(1.0, step / max(1, total))
