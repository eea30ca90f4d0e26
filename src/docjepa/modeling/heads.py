"""MLM and MIM heads over the fused representation, and their losses."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .common import patchify


class MLMHead(nn.Module):
    """Fused text (B, L, D) → vocabulary logits (B, L, V)."""

    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.transform = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.decoder = nn.Linear(dim, vocab_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.transform(x))


def mlm_loss(head: MLMHead, fused_text: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy on the positions with a label (others are −100); only those positions are decoded.

    Without any label the loss is 0 but the head still runs (on one position): every process of a sharded or
    data-parallel run must give every parameter a gradient, whatever its batch holds."""
    chosen = labels != -100
    if not bool(chosen.any()):
        return head(fused_text[:, :1]).float().sum() * 0.0
    return F.cross_entropy(head(fused_text[chosen]).float(), labels[chosen])


class MIMHead(nn.Module):
    """Fused image map (B, D, G, G) → pixels of each 16×16 patch (B, G², 16·16·3)."""

    def __init__(self, dim: int, patch: int = 16) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(dim, patch * patch * 3)

    def forward(self, fused_image: Tensor) -> Tensor:
        return self.proj(fused_image.flatten(2).transpose(1, 2))


def mim_loss(head: MIMHead, fused_image: Tensor, pixels: Tensor, hidden: Tensor) -> Tensor:
    """MSE on per-patch normalised pixels (as MAE) over the hidden patches; hidden (B, G²) bool."""
    target = patchify(pixels, head.patch)  # (B, G², p·p·3)
    mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
    target = (target - mean) / (var + 1e-6).sqrt()
    pred = head(fused_image)
    err = (pred.float() - target).pow(2).mean(-1)  # (B, G²)
    return (err * hidden).sum() / hidden.sum().clamp(min=1)
