"""The AdamW part of RS-SNGD: the update of the tensors a group leaves unprojected (``rank=None``, and every
tensor with ndim < 2), as pure functions of a parameter, its state and its group's settings.

- :func:`adamw_step`: AdamW with float32 moments (``adamw_state="full"``);
- :func:`light_adamw_step`: a matrix's AdamW with an 8-bit first moment and a factored second moment, as
  Adafactor's (``adamw_state="light"``, about 1/8 of AdamW's state; the ``rsngd`` recipe's embeddings and head);
- :func:`write`: decoupled weight decay and ``param -= lr · update``, the one write of every RS-SNGD update.

Every change is committed through ``ok``, a device flag (no host synchronisation): a step with a non-finite
gradient changes neither the parameter nor its moments.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from . import compact
from .budget import budget
from .sharding import is_dtensor, layout, local, row_sharded, state_like
from .woodbury import compute_dtype

__all__ = ["LIGHT_BYTES", "adamw_step", "adamw_steps", "light_adamw_step", "write"]

LIGHT_BYTES = 32
"""Bytes of transients per entry of a matrix stepped by ``adamw_state="light"`` (its gradient in float32, the
dequantised moment, the quantisation's and the update's work): a matrix is stepped in chunks of whole rows of at
most ``budget / LIGHT_BYTES`` entries (``rsngd.budget``: the group's ``batch_memory``, by default that of the
step's projected batches), so the transients stay within it in few passes (few kernel launches on a GPU)."""

FLAT_ENTRIES = 1 << 22
"""Tensors in full AdamW of at most this many entries are stepped together, concatenated into one flat buffer per
group, dtype, device and step count (a dozen operations for all the norms and biases of a model); larger ones
alone."""


def write(param: Tensor, update: Tensor, group: dict[str, Any], ok: Tensor, decay: bool = True) -> None:
    """Decoupled weight decay (unless ``decay`` is False) and ``param -= lr · update``, both only where ``ok``
    (a device flag)."""
    lr = group["lr"]
    if decay and group["weight_decay"] != 0:
        param.mul_(torch.where(ok, 1 - lr * group["weight_decay"], 1.0).to(param.dtype))
    param.add_(torch.where(ok, update, 0.0).to(param.dtype), alpha=-lr)


def adamw_steps(items: list[tuple[dict[str, Any], Tensor]], states: Any, ok: Tensor, largest: int = 0) -> None:
    """AdamW for every (group, parameter) of ``items`` (their states in ``states``): the light state per matrix (in
    chunks within the group's budget, ``largest`` the item bytes of the step's largest projected tensor), the small
    full-state tensors together in flat buffers (:data:`FLAT_ENTRIES`), the others one by one."""
    flat: dict[tuple, list[Tensor]] = {}
    for group, p in items:
        state = states[p]
        if group["adamw_state"] == "light" and p.dim() >= 2:
            light_adamw_step(p, state, group, ok, largest)
        elif p.numel() <= FLAT_ENTRIES and not is_dtensor(p):
            if "exp_avg" not in state:
                _full_state(p, state)
            flat.setdefault((id(group), p.dtype, p.device, state["step"]), []).append(p)
        else:
            adamw_step(p, state, group, ok)
    groups = {id(g): g for g, _ in items}
    for (gid, *_), ps in flat.items():
        _flat_adamw(ps, [states[p] for p in ps], groups[gid], ok)


def _full_state(p: Tensor, state: dict[str, Any]) -> None:
    dtype = compute_dtype(p.dtype)
    state["step"] = 0
    # zeros_like keeps a DTensor's placements: the moments are sharded as the parameter is.
    state["exp_avg"] = torch.zeros_like(p, dtype=dtype)
    state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)


def _flat_adamw(ps: list[Tensor], states: list[dict[str, Any]], group: dict[str, Any], ok: Tensor) -> None:
    """One AdamW step of tensors with the same step count, their gradients and moments concatenated."""
    dtype = compute_dtype(ps[0].dtype)
    sizes = [p.numel() for p in ps]
    grad = torch.cat([p.grad.reshape(-1) for p in ps]).to(dtype)
    grad = torch.where(ok, grad, 0.0)
    exp_avg = torch.cat([s["exp_avg"].reshape(-1) for s in states])
    exp_avg_sq = torch.cat([s["exp_avg_sq"].reshape(-1) for s in states])
    okf = ok.to(dtype)
    beta1, beta2 = group["betas"]
    for s in states:
        s["step"] += 1
    step = states[0]["step"]
    exp_avg.lerp_(grad, okf * (1 - beta1))
    exp_avg_sq.mul_(1 - okf * (1 - beta2)).addcmul_(grad, grad, value=1 - beta2)
    torch._foreach_copy_([s["exp_avg"] for s in states], [t.view_as(p) for t, p in zip(exp_avg.split(sizes), ps)])
    torch._foreach_copy_([s["exp_avg_sq"] for s in states], [t.view_as(p) for t, p in zip(exp_avg_sq.split(sizes), ps)])
    denom = exp_avg_sq.div_(1 - beta2**step).sqrt_().add_(group["eps"])
    update = exp_avg.div_(1 - beta1**step).div_(denom).masked_fill_(ok.logical_not(), 0.0).to(ps[0].dtype)
    if group["weight_decay"] != 0:
        torch._foreach_mul_(ps, torch.where(ok, 1 - group["lr"] * group["weight_decay"], 1.0).to(ps[0].dtype))
    torch._foreach_add_(ps, [t.view_as(p) for t, p in zip(update.split(sizes), ps)], alpha=-group["lr"])


def adamw_step(p: Tensor, state: dict[str, Any], group: dict[str, Any], ok: Tensor) -> None:
    """One AdamW step of ``p`` (its ``grad``) with the group's ``betas``, ``eps``, ``lr`` and ``weight_decay``;
    the light variant for a matrix of a group with ``adamw_state="light"``."""
    if group["adamw_state"] == "light" and p.dim() >= 2:
        light_adamw_step(p, state, group, ok)
        return
    dtype = compute_dtype(p.dtype)
    if "exp_avg" not in state:
        _full_state(p, state)
    grad = torch.where(ok, local(p.grad).to(dtype), 0.0)
    okf = ok.to(dtype)
    beta1, beta2 = group["betas"]
    state["step"] += 1
    step = state["step"]
    exp_avg, exp_avg_sq = local(state["exp_avg"]), local(state["exp_avg_sq"])
    exp_avg.lerp_(grad, okf * (1 - beta1))
    exp_avg_sq.mul_(1 - okf * (1 - beta2)).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
    update = exp_avg / (1 - beta1**step) / denom
    write(local(p), update, group, ok)


def _light_state(p: Tensor, state: dict[str, Any], grad: Tensor, dtype: torch.dtype) -> None:
    """The light state of a (rows, cols) gradient at its first step: zero codes, row and column means."""
    rows, cols = grad.shape
    state["step"] = 0
    codes, scales = compact.quantize(grad.new_zeros(1, cols, dtype=dtype), 8)  # a zero row, repeated
    codes, scales = codes.expand(rows, -1).contiguous(), scales.expand(rows, -1).contiguous()
    state["exp_avg_codes"], state["exp_avg_scales"] = state_like(p, codes), state_like(p, scales)
    state["v_row"] = state_like(p, grad.new_zeros(rows, dtype=dtype))
    state["v_col"] = grad.new_zeros(cols, dtype=dtype)


def light_adamw_step(p: Tensor, state: dict[str, Any], group: dict[str, Any], ok: Tensor, largest: int = 0) -> None:
    """AdamW with an 8-bit first moment and a factored second moment (``adamw_state="light"``, a matrix).

    The tensor is unfolded to rows (first mode × the rest). Sharded by rows (FSDP2), each rank keeps its rows'
    codes and row means; the column means and the mean of the row means are summed over the shard group."""
    lay = layout(p, p.grad)
    if lay.groups and not row_sharded(lay):
        raise ValueError("adamw_state='light' needs each matrix whole or sharded by rows (FSDP2's Shard(0))")
    dtype = compute_dtype(p.dtype)
    grad = local(p.grad)
    rows, cols = grad.shape[0], math.prod(grad.shape[1:])
    grad, param = grad.reshape(rows, cols), local(p).view(rows, cols)
    if "exp_avg_codes" not in state:
        _light_state(p, state, grad, dtype)
    beta1, beta2 = group["betas"]
    okf = ok.to(dtype)
    state["step"] += 1
    step = state["step"]
    codes, scales, v_row = local(state["exp_avg_codes"]), local(state["exp_avg_scales"]), local(state["v_row"])
    # Chunks of rows, so that the transients (the gradient in float32, the dequantised moment, the update) stay
    # small beside a large embedding or head; blocks never cross a row, so chunks quantise as the whole.
    per = max(1, budget(group, largest) // (LIGHT_BYTES * max(1, cols)))
    chunks = [(a, min(rows, a + per)) for a in range(0, rows, per)]
    col_sum = grad.new_zeros(cols, dtype=dtype)
    for a, b in chunks:  # 1. the second moment's row means, and the column sums of the squares
        g = torch.where(ok, grad[a:b].to(dtype), 0.0)
        square = g * g + 1e-30
        col_sum += square.sum(dim=0)
        v_row[a:b].lerp_(square.mean(dim=1), okf * (1 - beta2))
    row_sum = v_row.sum().reshape(1)
    if lay.groups:
        packed = torch.cat([col_sum, row_sum])
        dist.all_reduce(packed, group=lay.groups[0])
        col_sum, row_sum = packed[:-1], packed[-1:]
    rows_all = lay.full_shape[0]
    state["v_col"].lerp_(col_sum / rows_all, okf * (1 - beta2))
    for a, b in chunks:  # 2. the first moment (8-bit codes) and the update
        g = torch.where(ok, grad[a:b].to(dtype), 0.0)
        exp_avg = compact.dequantize(codes[a:b], scales[a:b], 8, (b - a, cols), dtype).lerp_(g, okf * (1 - beta1))
        new_codes, new_scales = compact.quantize(exp_avg, 8)
        codes[a:b].copy_(torch.where(ok, new_codes, codes[a:b]))
        scales[a:b].copy_(torch.where(ok, new_scales, scales[a:b]))
        denom = compact.factored_denominator(
            v_row[a:b], state["v_col"], row_sum[0] / rows_all, 1 - beta2**step, group["eps"]
        )
        write(param[a:b], exp_avg.div_(denom).div_(1 - beta1**step), group, ok)
