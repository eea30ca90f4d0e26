"""The residual step of RS-SNGD: the part of a gradient outside its subspace, orthogonalised (a Muon step without
a buffer by default, or with a quantised momentum), for stacked batches of whole matrices and for replicated (DDP)
and row-sharded (FSDP2) ones.

:class:`OrthoResidual` is the ``residual="ortho"`` strategy (``rsngd.strategies``): for a batch's residuals stacked
(B, *shape), the residual momentum's Nesterov direction if the group keeps one (:func:`quantised_momentum_stack`,
whole-size in 8 or 4 bits, stepped a few rows at a time), then their polar factors in one batched Newton–Schulz in
the batch's dtype. The rest are pure functions of tensors; the optimizer forms the residuals and writes the results.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from . import compact, kernels, orthogonal, strategies
from .budget import MOMENTUM_BYTES, budget, item_bytes
from .ortho_dist import ortho_replicated, ortho_sharded
from .sharding import Layout, group_key, local, state_like

__all__ = ["OrthoResidual", "ortho_directions", "quantised_momentum", "quantised_momentum_stack"]


class OrthoResidual:
    """``residual="ortho"``: the residual's (or its momentum's) polar factor, scaled as Muon scales its update."""

    def direction(self, opt: Any, batch: list[Any], residuals: Tensor, ok: Tensor) -> tuple[Tensor, float]:
        """The batch's directions (stacked like ``residuals``) and the weight they are added with:
        ``residual_scale`` × √max(1, rows/cols)."""
        group = batch[0].group
        if group["residual_momentum"] > 0:
            betas = [strategies.beta(group)(e.state, group) for e in batch]
            residuals = strategies.momentum(group)(opt, batch, residuals, betas, ok)
        ortho = orthogonal.orthogonalize_stack(residuals, inplace=True)
        return ortho, group["residual_scale"] * orthogonal.shape_factor(residuals[0])


strategies.register("residual", "ortho", OrthoResidual())


def _momentum_state(p: Tensor, state: dict[str, Any], shape: tuple[int, ...], bits: int, device) -> None:
    """A zero residual momentum buffer of ``shape`` (this rank's rows) in ``state``."""
    codes, scales = compact.quantize(torch.zeros(shape, dtype=torch.float32, device=device), bits)
    state["res_codes"], state["res_scales"] = state_like(p, codes), state_like(p, scales)


def quantised_momentum_stack(opt: Any, batch: list[Any], residuals: Tensor, betas: list[float], ok: Tensor) -> Tensor:
    """The residuals' Nesterov momentum directions ``(1 − β) R + β M`` with ``M ← β M + (1 − β) R`` (Muon's), each
    buffer whole-size and quantised (``residual_bits``) in its state, updated only where ``ok``; written in place of
    the residuals (a stack, which it returns). The batch's buffers are stepped as one stack of rows, a chunk of rows
    at a time (blocks never cross a row, so a chunk quantises as the whole), keeping the dequantised transients
    within the group's batch budget (``rsngd.budget``). Where the 8-bit momentum kernel runs (``rsngd.kernels``),
    each matrix is stepped by one kernel on its own codes instead."""
    group = batch[0].group
    bits = group["residual_bits"]
    count, rows, cols = residuals.shape[0], residuals.shape[1], math.prod(residuals.shape[2:])
    for e in batch:
        if "res_codes" not in e.state:
            _momentum_state(e.p, e.state, (rows, cols), bits, residuals.device)
    if bits == 8 and kernels.available("momentum", residuals):  # one kernel per matrix, no stacked copies
        held = [(local(e.state["res_codes"]), local(e.state["res_scales"])) for e in batch]
        done = [kernels.momentum_step(residuals[i], *held[i], betas[i], ok) for i in range(count)]
        if any(done):
            for i in [i for i, d in enumerate(done) if not d]:  # the kernel failed part-way: the rest eagerly
                residuals[i].copy_(quantised_momentum(batch[i].p, batch[i].state, residuals[i], betas[i], bits, ok))
            return residuals
    codes = torch.stack([local(e.state["res_codes"]) for e in batch]).view(count * rows, -1)
    scales = torch.stack([local(e.state["res_scales"]) for e in batch]).view(count * rows, -1)
    flat = residuals.reshape(count * rows, cols)
    beta: float | Tensor = betas[0]
    if len(set(betas)) > 1:
        beta = torch.tensor(betas, dtype=flat.dtype).to(flat.device).repeat_interleave(rows)[:, None]
    limit = budget(group, item_bytes(tuple(residuals.shape[1:]), residuals.dtype))
    per = max(1, limit // (MOMENTUM_BYTES * flat.element_size() * cols))
    for a in range(0, count * rows, per):
        b = min(count * rows, a + per)
        rows_beta = beta if isinstance(beta, float) else beta[a:b]
        buffer = compact.dequantize(codes[a:b], scales[a:b], bits, (b - a, cols), flat.dtype)
        buffer = torch.lerp(flat[a:b], buffer, rows_beta, out=buffer)
        flat[a:b].lerp_(buffer, rows_beta)  # the direction, in place of the residual
        new_codes, new_scales = compact.quantize(buffer, bits, inplace=True)
        torch.where(ok, new_codes, codes[a:b], out=codes[a:b])
        torch.where(ok, new_scales, scales[a:b], out=scales[a:b])
    torch._foreach_copy_([local(e.state["res_codes"]) for e in batch], list(codes.view(count, rows, -1).unbind(0)))
    torch._foreach_copy_([local(e.state["res_scales"]) for e in batch], list(scales.view(count, rows, -1).unbind(0)))
    return residuals


strategies.register("momentum", None, quantised_momentum_stack)
strategies.register("beta", "constant", lambda state, group: group["residual_momentum"])


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
    buffer whole-size and quantised to ``bits`` bits (``rsngd.compact``) in ``state``, updated only where ``ok``: one
    tensor (this rank's rows of a sharded one), as the distributed residual step takes them. Where the momentum
    kernel runs (``rsngd.kernels``) the direction is written in place of ``residual``."""
    if "res_codes" not in state:
        _momentum_state(p, state, tuple(residual.shape), bits, residual.device)
    old_codes, old_scales = local(state["res_codes"]), local(state["res_scales"])
    if bits == 8 and kernels.momentum_step(residual, old_codes, old_scales, beta, ok):  # in place, one kernel
        return residual
    buffer = compact.dequantize(old_codes, old_scales, bits, residual.shape, residual.dtype)
    buffer = torch.lerp(residual, buffer, beta)
    codes, scales = compact.quantize(buffer, bits)
    old_codes.copy_(torch.where(ok, codes, old_codes))
    old_scales.copy_(torch.where(ok, scales, old_scales))
    return torch.lerp(residual, buffer, beta)
