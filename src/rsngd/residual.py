"""The residual step of RS-SNGD: the part of a gradient outside its subspace, orthogonalised (a Muon step without
a buffer by default, or with a quantised momentum), for whole, replicated (DDP) and row-sharded (FSDP2) matrices.

Pure functions of tensors; the optimizer forms the residuals and writes the results.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from . import compact, orthogonal
from .ortho_dist import ortho_replicated, ortho_sharded
from .sharding import Layout, group_key, local, state_like

__all__ = ["BATCH_ELEMENTS", "batches", "ortho_directions", "outside", "quantised_momentum"]

BATCH_ELEMENTS = 1 << 20
"""Residual entries stacked into one batched Newton–Schulz at most (4 MiB in float32); a larger matrix goes alone."""


def outside(core: Tensor, lay: Layout) -> bool:
    """Whether part of a tensor lies outside its subspace (its core smaller than the tensor)."""
    return core.numel() < math.prod(lay.full_shape)


def batches(items: list[Any], grads: list[Tensor]) -> list[list[Any]]:
    """``items`` grouped by the shape and dtype of their gradient (``grads``, in the same order), each group cut
    into batches of at most :data:`BATCH_ELEMENTS` entries."""
    same: dict[tuple, list[tuple[Any, Tensor]]] = {}
    for item, g in zip(items, grads):
        same.setdefault((tuple(g.shape), g.dtype), []).append((item, g))
    out = []
    for group in same.values():
        per = max(1, BATCH_ELEMENTS // max(1, group[0][1].numel()))
        out += [[item for item, _ in group[i : i + per]] for i in range(0, len(group), per)]
    return out


def ortho_directions(
    directions: list[Tensor],
    layouts: list[Layout],
    data_parallel: bool,
    process_group: dist.ProcessGroup | None,
) -> list[Tensor]:
    """The scaled polar factor of each direction, this rank's rows: whole matrices here (split among the ranks of
    ``process_group`` with ``data_parallel``, the results broadcast); sharded ones through their owner ranks."""
    out: list[Tensor | None] = [None] * len(directions)
    whole = [i for i, lay in enumerate(layouts) if not lay.groups]
    if whole:
        parts = [directions[i] for i in whole]
        if data_parallel and dist.is_available() and dist.is_initialized():
            done = ortho_replicated(parts, process_group)
        else:
            done = orthogonal.ortho_residuals(parts)
        for i, o in zip(whole, done):
            out[i] = o
    by_group: dict[tuple[int, ...], list[int]] = {}
    for i, lay in enumerate(layouts):
        if lay.groups:
            by_group.setdefault(group_key(lay.groups[0]), []).append(i)
    for items in by_group.values():
        group = layouts[items[0]].groups[0]
        done = ortho_sharded([directions[i] for i in items], [layouts[i].full_shape for i in items], group)
        for i, o in zip(items, done):
            out[i] = o
    return out  # type: ignore[return-value]


def quantised_momentum(
    p: Tensor, state: dict[str, Any], residual: Tensor, beta: float, bits: int, ok: Tensor
) -> Tensor:
    """The residual's Nesterov momentum direction ``(1 − β) R + β M`` with ``M ← β M + (1 − β) R`` (Muon's), its
    buffer whole-size and quantised to ``bits`` bits (``rsngd.compact``) in ``state``, updated only where ``ok``."""
    if "res_codes" not in state:
        codes, scales = compact.quantize(torch.zeros_like(residual), bits)
        state["res_codes"], state["res_scales"] = state_like(p, codes), state_like(p, scales)
    old_codes, old_scales = local(state["res_codes"]), local(state["res_scales"])
    buffer = compact.dequantize(old_codes, old_scales, bits, residual.shape, residual.dtype)
    buffer = torch.lerp(residual, buffer, beta)
    codes, scales = compact.quantize(buffer, bits)
    old_codes.copy_(torch.where(ok, codes, old_codes))
    old_scales.copy_(torch.where(ok, scales, old_scales))
    return torch.lerp(residual, buffer, beta)
