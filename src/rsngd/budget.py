"""How much a step may hold at once: the temporaries of one batch of same-shape tensors, and the budget batches are
cut to (the ``batch_memory`` setting, or by default a few of the group's largest tensors' worth)."""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["AUTO_TENSORS", "DEFAULT_BYTES", "MOMENTUM_BYTES", "budget", "factor_bytes", "item_bytes", "momentum"]

AUTO_TENSORS = 3
"""With ``batch_memory=None`` a group's batches may hold the temporaries of this many of its largest projected
tensors: a step holds about what three of Muon's matrix steps hold, and launches about a third of the kernels."""

DEFAULT_BYTES = 256 * 2**20
"""The budget of a group without projected tensors (the light AdamW state's chunks) and the least of any."""


MOMENTUM_BYTES = 3
"""Transients of the quantised residual momentum per entry, in units of the residual's element size: the buffer
(dequantised, stepped and quantised in place), the quantisation's magnitudes and the codes."""


def item_bytes(shape: tuple[int, ...], dtype: torch.dtype, momentum: bool = False) -> int:
    """The temporaries one tensor of ``shape`` (this rank's rows) adds to a batch of pass 2 at its fullest: its
    gradient stacked, which becomes its residual, its direction and its update in place, with the second buffer of
    the Newton–Schulz iterations and their three small Grams; or, with ``momentum``, while the momentum is stepped,
    the residual and the momentum's transients, if that is more."""
    size = torch.empty((), dtype=dtype).element_size()
    entries, small = math.prod(shape), min(shape[0], math.prod(shape[1:]))
    stepping = (1 + MOMENTUM_BYTES) * entries if momentum else 0
    return size * max(2 * entries + 3 * small * small, stepping)


def factor_bytes(shape: tuple[int, ...], ranks: list[int], dtype: torch.dtype, drawn: bool) -> int:
    """The bytes one tensor's factors hold (this rank's rows, in ``dtype``) and, when they are ``drawn``, the
    transients of drawing them: counters, normals and their orthonormalisation, about 12 bytes an entry."""
    entries = sum(n * r for n, r in zip(shape, ranks) if r < n)
    return entries * (torch.empty((), dtype=dtype).element_size() + (12 if drawn else 0))


def momentum(group: dict[str, Any]) -> bool:
    """Whether the group's residual step keeps a (quantised) momentum."""
    return group.get("residual") == "ortho" and group.get("residual_momentum", 0) > 0


def budget(group: dict[str, Any], largest: int = 0) -> int:
    """The bytes a batch of ``group`` may hold: its ``batch_memory``, or :data:`AUTO_TENSORS` × ``largest`` (the
    item bytes of its largest tensor, without a momentum's), at least :data:`DEFAULT_BYTES`."""
    if group["batch_memory"] is not None:
        return int(group["batch_memory"])
    return max(DEFAULT_BYTES, AUTO_TENSORS * largest)
