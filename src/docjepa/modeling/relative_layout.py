"""A learnt attention bias from where two page words stand relative to each other (spatial-aware attention).

A key and its value are found by where they stand *relative to each other*: the value right of its key on the same
line, or below it, wherever on the page the pair is printed. Absolute layout embeddings (``LayoutEmbedding``) give
each word its place, from which attention has to learn every such relation again at every place; LayoutLMv2's
spatial-aware self-attention adds, to the score of each pair of tokens, a learnt bias of their relative position,
one number per head and per bucket of the distance, the same at every place on the page.

:class:`RelativeLayoutBias` does that for the joint reader's page words, with three distances between word i (the
one attending) and word j (the one read), in the page's 0…1000 frame: the horizontal offset of their left edges,
the gap from i's right edge to j's left edge (a value starts after its key ends, whatever the key's length), and
the vertical offset of their centres. Each distance falls into one of ``buckets`` signed buckets, exact for small
distances and logarithmic beyond (as T5's relative positions); each bucket has a learnt bias per head, starting at
zero, so that a reader given this bias reads at step 0 exactly what it read without it. The bias is its table times
``gain``: AdamW moves each entry by about its learning rate a step, whatever the gradient's size, so at the rate
the rest of the model fine-tunes with a table starting at zero stays far below the attention scores' scale for
hundreds of steps; the gain lets it reach that scale within a fine-tuning run.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

DISTANCES = ("left", "gap", "middle")
"""The distances the bias reads, each with a table of its own: left edges' horizontal offset, i's right edge to j's
left edge, vertical offset of the centres."""
GAIN = 10.0
"""The bias's default ``gain`` (its tables' multiplier), as measured in docs/docjepa-extract.md ("Where two words
stand")."""


def relative_bucket(distance: Tensor, buckets: int = 32, max_distance: int = 500) -> Tensor:
    """Signed log buckets (long, same shape) for integer ``distance`` in the 0…1000 frame: half the buckets for
    negative distances and zero, half for positive ones; within each half, distances below a quarter of
    ``buckets`` get a bucket each, larger ones share logarithmically wider buckets up to ``max_distance``."""
    if buckets < 8 or buckets % 2:
        raise ValueError(f"buckets must be an even number ≥ 8, got {buckets}")
    half = buckets // 2
    exact = half // 2
    n = distance.abs().long()
    far = (
        exact + (torch.log(n.clamp(min=exact).float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    )
    far = far.clamp(max=half - 1)
    return torch.where(n < exact, n, far) + (distance > 0).long() * half


def pair_distances(box: Tensor) -> Tensor:
    """(…, W, 4) boxes x0 y0 x1 y1 → (…, W, W, len(DISTANCES)) long: for each pair (i, j) the distances of
    :data:`DISTANCES`, from word i to word j."""
    box = box.long()
    x0, y0, x1, y1 = box.unbind(-1)
    middle = (y0 + y1) // 2
    left = x0.unsqueeze(-2) - x0.unsqueeze(-1)
    gap = x0.unsqueeze(-2) - x1.unsqueeze(-1)
    vertical = middle.unsqueeze(-2) - middle.unsqueeze(-1)
    return torch.stack([left, gap, vertical], dim=-1)


class RelativeLayoutBias(nn.Module):
    """(B, W, 4) word boxes → (B, heads, W, W) attention bias: ``gain`` × the sum over :data:`DISTANCES` of a learnt
    bias per head for each pair's bucket of that distance. Starts at zero."""

    def __init__(self, heads: int, buckets: int = 32, max_distance: int = 500, gain: float = GAIN) -> None:
        super().__init__()
        if heads < 1:
            raise ValueError(f"heads must be ≥ 1, got {heads}")
        if not gain > 0:
            raise ValueError(f"gain must be > 0, got {gain}")
        self.buckets = buckets
        self.max_distance = max_distance
        self.gain = float(gain)
        self.tables = nn.Parameter(torch.zeros(len(DISTANCES), buckets, heads))
        """One (buckets, heads) table per distance."""

    def reset(self) -> None:
        nn.init.zeros_(self.tables)

    def forward(self, box: Tensor) -> Tensor:
        index = relative_bucket(pair_distances(box), self.buckets, self.max_distance)  # (B, W, W, 3)
        bias = sum(self.tables[k][index[..., k]] for k in range(len(DISTANCES)))  # (B, W, W, heads)
        return (self.gain * bias).permute(0, 3, 1, 2)
