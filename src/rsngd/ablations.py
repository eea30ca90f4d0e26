"""RS-SNGD's ablation settings: alternatives to the defaults that measured worse in ``rsngd bench`` (see
docs/rsngd.md, "Ablations"). They stay for studies, as arguments of :class:`AblationRSNGD` (``RSNGD`` refuses them
and names this class); the defaults never call into this module's functions.

- ``normalize="global_rms"`` (one scale for every tensor of a Fisher system) and ``normalize="none"`` (the raw
  F⁻¹m), against the default ``"rms"`` (each tensor's preconditioned core scaled to unit RMS);
- ``residual="fira"`` (the gradient outside the subspace, scaled by ‖update‖/‖core‖ with Fira's norm-growth
  limiter) and ``residual="sign"`` (signSGD on it, as FRUGAL), against the default ``"none"`` (dropped);
- ``projection="svd"`` (leading singular vectors of the gradient, stored in the state:
  ``rsngd.projection.svd_factors``), against the default ``"random"`` (regenerated from a seed).

- ``residual_rank``: the residual's momentum (``residual_momentum``) kept as a rank-r factorisation
  (``rsngd.orthogonal.lowrank_momentum``) instead of the default whole-size quantised buffer, and
  ``residual_momentum_schedule="lr"`` (β · (1 − lr / peak lr)) against ``"constant"``;
- ``core_beta2 > 0``: a diagonal second moment of the preconditioned core (Adam's denominator inside the
  subspace), against the default 0 (none).

Everything here is a pure function of tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

SETTINGS: dict[str, Any] = {
    "projection": "random",
    "normalize": "rms",
    "core_beta2": 0.0,
    "residual_rank": None,
    "residual_momentum_schedule": "constant",
}
"""The ablation settings and their defaults (what ``RSNGD`` uses); :class:`AblationRSNGD` takes other values."""

RESIDUALS = ("none", "ortho", "fira", "sign")


def uses(settings: dict[str, Any]) -> bool:
    """Whether a group's settings include one of this module's (an ablation setting or residual)."""
    return any(k in SETTINGS for k in settings) or settings.get("residual") in ("fira", "sign")


def check_group(group: dict[str, Any], need: Callable[[bool, str], None], number: Callable[..., float]) -> None:
    """ValueError naming the argument for an ablation setting out of its range."""
    allowed = {"projection": ("random", "svd"), "normalize": ("rms", "global_rms", "none")}
    for key, values in allowed.items():
        need(group[key] in values, f"{key} must be one of {values}, got {group[key]!r}")
    need(group["residual"] in RESIDUALS, f"residual must be one of {RESIDUALS}, got {group['residual']!r}")
    need(0 <= number("core_beta2") < 1, f"core_beta2 must be in [0, 1), got {group['core_beta2']}")
    r = group["residual_rank"]
    need(
        r is None or (isinstance(r, int) and not isinstance(r, bool) and r >= 1),
        f"residual_rank must be None or an integer >= 1, got {r!r}",
    )
    need(
        group["residual_momentum_schedule"] in ("constant", "lr"),
        f"residual_momentum_schedule must be 'constant' or 'lr', got {group['residual_momentum_schedule']!r}",
    )


def __getattr__(name: str) -> Any:
    if name == "AblationRSNGD":  # defined beside RSNGD, which imports this module
        from .optimizer import AblationRSNGD

        return AblationRSNGD
    raise AttributeError(name)


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
