"""RS-SNGD's ablation settings: alternatives to the defaults that measured worse in ``rsngd bench`` (see
docs/rsngd.md, "Ablations"). They stay for studies; the defaults never call into this module.

- ``normalize="global_rms"`` (one scale for every tensor of a Fisher system) and ``normalize="none"`` (the raw
  F⁻¹m), against the default ``"rms"`` (each tensor's preconditioned core scaled to unit RMS);
- ``residual="fira"`` (the gradient outside the subspace, scaled by ‖update‖/‖core‖ with Fira's norm-growth
  limiter) and ``residual="sign"`` (signSGD on it, as FRUGAL), against the default ``"none"`` (dropped);
- ``projection="svd"`` (leading singular vectors of the gradient, stored in the state:
  ``rsngd.projection.svd_factors``), against the default ``"random"`` (regenerated from a seed).

- ``core_beta2 > 0``: a diagonal second moment of the preconditioned core (Adam's denominator inside the
  subspace), against the default 0 (none).

Everything here is a pure function of tensors.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

FIRA_LIMIT = 1.01
"""Fira's norm-growth limit γ: the residual's norm grows by at most this factor per step."""


def normalize(
    updates: list[Tensor],
    mode: str,
    c_scale: Tensor,
    eps: float,
    reduce: bool = False,
    group: dist.ProcessGroup | None = None,
) -> list[Tensor]:
    """Preconditioned cores of one system, each up to the common factor ``c_scale``, scaled as ``mode`` says:
    ``"none"`` restores ``c_scale`` (the raw F⁻¹m), ``"global_rms"`` divides all by their joint RMS (summed over
    the ranks of ``group`` with ``reduce``, when the system is partitioned among them; every rank must call it)."""
    if mode == "none":
        return [u * c_scale.to(u.dtype) for u in updates]
    if mode == "global_rms":
        sums = torch.zeros(2, dtype=torch.float64, device=c_scale.device)
        for u in updates:
            sums[0] += u.pow(2).sum().to(torch.float64)
            sums[1] += u.numel()
        if reduce:
            dist.all_reduce(sums, group=group)
        rms = (sums[0] / sums[1].clamp_min(1)).sqrt()
        return [u / (rms.to(u.dtype) + eps) for u in updates]
    raise ValueError(f"normalize={mode!r} is not an ablation setting")


def sign_residual(residual: Tensor) -> Tensor:
    """signSGD on the gradient outside the subspace (FRUGAL)."""
    return residual.sign()


def fira_residual(residual: Tensor, update: Tensor, core: Tensor, prev_norm: Tensor) -> tuple[Tensor, Tensor]:
    """Fira: the residual scaled by ‖update‖/‖core‖ (the subspace update's gain), its norm limited to
    :data:`FIRA_LIMIT` × the previous step's (no limit on the first, ``prev_norm`` 0). Returns the scaled
    residual and its norm, the state for the next step."""
    phi = update.norm() / core.norm().clamp_min(1e-30)
    scaled = residual * phi
    norm = scaled.norm()
    limit = torch.where(prev_norm > 0, FIRA_LIMIT * prev_norm, norm)
    factor = torch.where(norm > limit, limit / norm.clamp_min(1e-30), torch.ones_like(norm))
    return scaled * factor, norm * factor


def core_second_moment(update: Tensor, v: Tensor, t: int, beta2: float, eps: float) -> tuple[Tensor, Tensor]:
    """Adam's denominator on a preconditioned core: ``v ← β₂ v + (1 − β₂) u²`` and ``u / (√(v / (1 − β₂ᵗ)) + ε)``,
    ``t`` the steps in the current subspace (≥ 1). Returns the new update and the new ``v``."""
    v = v * beta2 + (1 - beta2) * update * update
    return update / ((v / (1 - beta2 ** max(t, 1))).sqrt() + eps), v
