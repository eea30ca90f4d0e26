"""The two passes of RS-SNGD's step, batch by batch: projecting the gradients (pass 1) and applying the updates with
their residual steps (pass 2).

A *batch* is a run of projected tensors of one group, shape, dtype, device and layout, cut so that the temporaries
of one batch (its gradients stacked in the matmul dtype, their residuals, the Newton–Schulz work, the factors, the
residual momentum's dequantised rows) stay within the group's ``batch_memory``; a single tensor over it goes alone.
Both passes walk the same batches, so a step's temporaries are bounded by one batch, never by the model:

- pass 1 (:func:`project_batch`) reads each gradient as it is (bf16 on a GPU) and keeps only its core (k floats);
- pass 2 (:func:`apply_batch`) re-reads the batch's gradients, forms their residuals ``G − U₁CU₂ᵀ`` in place, hands
  them to the group's residual strategy (the batch's polar factors in one batched Newton–Schulz), adds the
  back-projected subspace update in one fused batched matmul and writes all of the batch's parameters with two
  multi-tensor ops, committed through the step's ``ok`` flag.

Entries whose residuals need collectives (sharded parameters, or ``data_parallel``) go through
:func:`apply_together`, which holds their residuals at once as the collectives need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import strategies
from .budget import budget, factor_bytes, item_bytes, momentum
from .projection import Factors, back_stack, clamp_ranks, project_back_local, project_local, project_stack
from .residual import ortho_directions, quantised_momentum
from .sharding import Layout, group_key, local

__all__ = ["Entry", "apply_batch", "apply_chunk", "apply_residual", "apply_together", "plan", "project_batch"]


@dataclass(eq=False)
class Entry:
    """A projected tensor taking part in this step."""

    p: Tensor
    group: dict[str, Any]
    state: dict[str, Any]
    layout: Layout
    core: Tensor  # projected gradient, flattened (k,), the history's dtype; a shard's share until the all-reduce
    taken_here: bool = True  # False: per_layer (the gradient projected and its residual step taken in the hook)
    update: Tensor | None = None  # preconditioned core (k,), to be divided by ``divisor``
    divisor: Tensor | None = None  # 0-dim, or None: ``update`` is final
    coef: Tensor | None = None  # the solve's weights c (s,): the update is G c at unit RMS, formed in pass 2
    pushed: bool = False  # the core is in the history already

    @property
    def outside(self) -> bool:
        """Whether part of the tensor lies outside its subspace (its core smaller than the tensor)."""
        return self.core.numel() < math.prod(self.layout.full_shape)

    def normalized(self) -> Tensor:
        """The preconditioned core at its final scale (formed here from the history if pass 2 was to)."""
        if self.coef is not None:
            u = self.coef @ local(self.state["hist"])
            return u / (u.norm() * u.numel() ** -0.5 + self.group["eps"])
        return self.update if self.divisor is None else self.update / self.divisor


def _cut(items: list[Any], per: int) -> list[list[Any]]:
    return [items[i : i + per] for i in range(0, len(items), per)]


def plan(
    items: list[Any],
    layout_of: Callable[[Tensor], Layout],
    dtype_of: Callable[[Tensor], torch.dtype],
    key: Callable[[Any], tuple[dict[str, Any], Tensor]] = lambda item: item,
) -> list[list[list[Any]]]:
    """``items`` ((group, parameter) pairs, or what ``key`` turns into one) in *chunks* of *batches*, in their given
    order. A chunk holds tensors of one group, shape, dtype, device, layout and matmul dtype whose factors are drawn
    (or stacked from the cache) at once, as many as the group's budget allows; its batches are the runs
    whose residuals are orthogonalised together, each within that budget too (``rsngd.budget``). One tensor always
    goes."""
    same: dict[tuple, list[Any]] = {}
    for item in items:
        group, p = key(item)
        lay = layout_of(p)
        grouping = tuple(group_key(g) for g in lay.groups)
        k = (id(group), tuple(p.shape), p.dtype, local(p).device, lay.offsets, lay.local_shape, grouping, lay.average)
        same.setdefault((*k, dtype_of(p)), []).append(item)
    largest: dict[int, int] = {}
    for k, members in same.items():
        group, p = key(members[0])
        largest[id(group)] = max(largest.get(id(group), 0), item_bytes(layout_of(p).local_shape, k[-1]))
    out = []
    for k, members in same.items():
        group, p = key(members[0])
        shape, limit = layout_of(p).local_shape, budget(group, largest[id(group)])
        ranks = clamp_ranks(p.shape, group["rank"])
        chunk = limit // max(1, factor_bytes(shape, ranks, k[-1], drawn=True))  # cached ones are stacked: a copy
        batch = limit // max(1, item_bytes(shape, k[-1], momentum(group)))
        out += [_cut(c, max(1, batch)) for c in _cut(members, max(1, chunk))]
    return out


def _matrix_path(lay: Layout, factors: Factors) -> bool:
    """Whether the stacked batched-matmul path applies: a matrix whose whole modes are not sharded."""
    return len(lay.full_shape) == 2 and all(
        f is not None or lay.local_shape[m] == lay.full_shape[m] for m, f in enumerate(factors)
    )


def _one(factors: Factors, i: int) -> Factors:
    return [None if f is None else f[i] for f in factors]


def project_batch(
    batches: list[list[Tensor]], factors: Factors, lay: Layout, dtype: torch.dtype, out_dtype: torch.dtype
) -> list[Tensor]:
    """Pass 1: each gradient's core (flattened, ``out_dtype``), its matmuls in ``dtype`` with the chunk's stacked
    ``factors``: matrices a batch at a time (stacked, two batched matmuls), other tensors one by one; a shard's share
    of the core for a sharded gradient."""
    cores: list[Tensor] = []
    for grads in batches:
        part = [None if f is None else f[len(cores) : len(cores) + len(grads)] for f in factors]
        if _matrix_path(lay, factors):
            stacked = torch.stack(grads) if len(grads) > 1 else grads[0][None]
            c = project_stack(stacked.to(dtype), part).reshape(len(grads), -1).to(out_dtype)
            cores += list(c.unbind(0))
            continue
        for i, g in enumerate(grads):
            c = project_local(g.to(dtype), _one(part, i), lay.offsets, lay.full_shape)
            cores.append(c.reshape(-1).to(out_dtype))
    return cores


def _stacked_updates(batch: list[Entry], cshape: list[int], dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """The batch's normalised update cores, stacked (B, *cshape) in ``dtype``, and, when they were formed here from
    the stacked histories (``coef``), the newest rows of those (the cores), else None."""
    count = len(batch)
    if all(e.coef is not None for e in batch):
        hists = torch.stack([e.state["hist"] for e in batch])  # (B, s, k)
        coefs = batch[0].coef if all(e.coef is batch[0].coef for e in batch) else torch.stack([e.coef for e in batch])
        u = torch.matmul(coefs[..., None, :], hists).view(count, -1)  # G_p c for each
        rms = torch.linalg.vector_norm(u, dim=1, keepdim=True).mul_(u.shape[1] ** -0.5).add_(batch[0].group["eps"])
        return u.div_(rms).view(count, *cshape).to(dtype), hists[:, -1]
    if all(e.update is not None and e.divisor is not None for e in batch):
        u = torch.stack([e.update for e in batch])
        u = u.div_(torch.stack([e.divisor for e in batch]).view(-1, *([1] * (u.dim() - 1))))
    else:
        u = torch.stack([e.normalized() for e in batch])
    return u.view(count, *cshape).to(dtype), None


def _core_shape(e: Entry, factors: Factors) -> list[int]:
    return [n if f is None else f.shape[-1] for n, f in zip(e.layout.full_shape, factors)]


def _residuals(batch: list[Entry], factors: Factors, dtype: torch.dtype, cores: Tensor | None = None) -> Tensor:
    """The stacked residuals ``G − back(C)`` (B, *local shape) in ``dtype``, formed in place in the stacked
    gradients (``cores``: the batch's cores stacked, if at hand)."""
    cshape = _core_shape(batch[0], factors)
    lay = batch[0].layout
    grads = torch.stack([local(e.p.grad) for e in batch])
    grads = grads if grads.dtype == dtype else grads.to(dtype)
    cores = torch.stack([e.core for e in batch]) if cores is None else cores
    cores = cores.view(len(batch), *cshape).to(dtype)
    if _matrix_path(lay, factors):
        return back_stack(cores, factors, out=grads, alpha=-1.0)
    for i in range(len(batch)):
        grads[i] -= project_back_local(cores[i], _one(factors, i), lay.offsets, lay.local_shape)
    return grads


def _back(u: Tensor, factors: Factors, lay: Layout, scale: float, out: Tensor | None, weight: float) -> Tensor:
    """``weight · out + scale · back(u)`` for the stacked cores ``u``; ``out`` None: ``scale · back(u)``."""
    if _matrix_path(lay, factors):
        return back_stack(u, factors, out=out, alpha=scale, beta=weight)
    back = torch.stack(
        [project_back_local(u[i], _one(factors, i), lay.offsets, lay.local_shape) for i in range(len(u))]
    )
    return back.mul_(scale) if out is None else out.mul_(weight).add_(back, alpha=scale)


def write(batch: list[Entry], total: Tensor, ok: Tensor, decay: bool) -> None:
    """Decoupled weight decay (unless ``decay`` is False) and ``param -= lr · update`` for every tensor of the batch
    (``total``: their stacked updates), in multi-tensor ops, only where ``ok``."""
    group = batch[0].group
    lr = group["lr"]
    params = [local(e.p) for e in batch]
    total = total.masked_fill_(ok.logical_not(), 0.0)
    if total.dtype != params[0].dtype:
        total = total.to(params[0].dtype)
    if decay and group["weight_decay"] != 0:
        torch._foreach_mul_(params, torch.where(ok, 1 - lr * group["weight_decay"], 1.0).to(params[0].dtype))
    torch._foreach_add_(params, list(total.unbind(0)), alpha=-lr)


def apply_chunk(opt: Any, chunk: list[list[Entry]], ok: Tensor) -> None:
    """Pass 2 for one chunk: its factors drawn once, then each batch applied with its slice of them."""
    e0 = chunk[0][0]
    dtype = opt._mdtype(e0.p)
    ps = [e.p for batch in chunk for e in batch]
    factors = opt._space.stack(ps, e0.group, e0.layout, local(e0.p).device, dtype)
    start = 0
    for batch in chunk:
        part = [None if f is None else f[start : start + len(batch)] for f in factors]
        apply_batch(opt, batch, ok, part, dtype)
        start += len(batch)


def apply_batch(opt: Any, batch: list[Entry], ok: Tensor, factors: Factors, dtype: torch.dtype) -> None:
    """Pass 2 for one batch (``factors``: theirs, stacked): the subspace update back-projected and, for entries whose
    gradient is here, the group's residual step added; all written at once."""
    e0 = batch[0]
    group, lay = e0.group, e0.layout
    u, cores = _stacked_updates(batch, _core_shape(e0, factors), dtype)
    residual = strategies.residual(group) if e0.taken_here and e0.outside else None
    if residual is None:
        total = _back(u, factors, lay, group["scale"], None, 1.0)
    else:
        direction, weight = residual.direction(opt, batch, _residuals(batch, factors, dtype, cores), ok)
        total = _back(u, factors, lay, group["scale"], direction, weight)
    write(batch, total, ok, decay=e0.taken_here or group["residual"] == "none")


def apply_residual(opt: Any, batch: list[Entry], ok: Tensor, factors: Factors) -> None:
    """The residual step alone (with the weight decay) with the batch's ``factors``, for ``per_layer``'s hook: the
    subspace step follows in ``step``."""
    e0 = batch[0]
    dtype = opt._mdtype(e0.p)
    direction, weight = strategies.residual(e0.group).direction(opt, batch, _residuals(batch, factors, dtype), ok)
    write(batch, direction.mul_(weight), ok, decay=True)


def apply_together(opt: Any, entries: list[Entry], ok: Tensor, spread: bool) -> None:
    """Pass 2 for entries whose residuals need collectives: every residual (its momentum's direction) formed first,
    then all orthogonalised through their owner ranks (``rsngd.residual.ortho_directions``), then written."""
    directions, kept = [], []
    for chunk in plan(entries, opt._layout_of, opt._mdtype, key=lambda e: (e.group, e.p)):
        batch = [e for b in chunk for e in b]
        e0 = batch[0]
        dtype = opt._mdtype(e0.p)
        factors = opt._space.stack([e.p for e in batch], e0.group, e0.layout, local(e0.p).device, dtype)
        residuals = _residuals(batch, factors, dtype)
        for i, e in enumerate(batch):
            r = residuals[i]
            if e.group["residual_momentum"] > 0:
                beta, bits = e.group["residual_momentum"], e.group["residual_bits"]
                r = quantised_momentum(e.p, e.state, r, beta, bits, ok)
            directions.append(r)
            kept.append((e, _one(factors, i)))
    done = ortho_directions(directions, [e.layout for e, _ in kept], spread, opt._process_group)
    for (e, f), o in zip(kept, done):
        lay, group = e.layout, e.group
        cshape = [n if u is None else u.shape[-1] for n, u in zip(lay.full_shape, f)]
        u = e.normalized().view(cshape).to(o.dtype) * group["scale"]
        update = project_back_local(u, f, lay.offsets, lay.local_shape) + group["residual_scale"] * o
        write([e], update[None], ok, decay=True)
