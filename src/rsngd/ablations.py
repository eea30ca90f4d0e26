"""RS-SNGD's ablation settings: alternatives to the defaults that measured worse in ``rsngd bench`` (see
docs/rsngd.md, "Ablations"). They stay for studies, as strategies registered here (``rsngd.strategies``: each
chosen by its setting) that only :class:`AblationRSNGD` takes: ``RSNGD`` with these settings added, and nothing
overridden. ``RSNGD`` refuses them and names that class; the default step never runs this module's code.

- ``normalize="global_rms"`` (one scale for every tensor of a Fisher system) and ``normalize="none"`` (the raw
  F⁻¹m), against the default ``"rms"`` (each tensor's preconditioned core scaled to unit RMS);
- ``residual="fira"`` (the gradient outside the subspace, scaled by ‖update‖/‖core‖ with Fira's norm-growth
  limiter) and ``residual="sign"`` (signSGD on it, as FRUGAL), against the default ``"ortho"`` (its polar factor);
- ``projection="svd"`` (leading singular vectors of the gradient, stored in the state:
  ``rsngd.projection.svd_factors``), against the default ``"random"`` (regenerated from a seed);
- ``residual_rank``: the residual's momentum (``residual_momentum``) kept as a rank-r factorisation
  (``rsngd.orthogonal.lowrank_momentum``) instead of the default whole-size quantised buffer, and
  ``residual_momentum_schedule="lr"`` (β · (1 − lr / peak lr)) against ``"constant"``;
- ``core_beta2 > 0``: a diagonal second moment of the preconditioned core (Adam's denominator inside the
  subspace), against the default 0 (none).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from . import orthogonal, strategies
from .checks import Checker
from .optimizer import RSNGD
from .projection import Factors, mix_seed, svd_factors
from .sharding import Layout

__all__ = ["SETTINGS", "AblationRSNGD", "uses"]

OWNER = "rsngd.ablations.AblationRSNGD"

SETTINGS: dict[str, Any] = {
    "projection": "random",
    "normalize": "rms",
    "core_beta2": 0.0,
    "residual_rank": None,
    "residual_momentum_schedule": "constant",
}
"""The ablation settings and their defaults (what ``RSNGD`` does); :class:`AblationRSNGD` takes other values."""

RESIDUALS = ("fira", "sign")
"""The residual steps only :class:`AblationRSNGD` takes."""

FIRA_LIMIT = 1.01
"""Fira's norm-growth limit γ: the residual's norm grows by at most this factor per step."""

_RESIDUAL_SEED = 0x5E5  # mixed into the seed of the low-rank residual momentum's starting columns


def uses(settings: dict[str, Any]) -> bool:
    """Whether a group's settings include one of this module's (an ablation setting or residual)."""
    return any(k in SETTINGS for k in settings) or settings.get("residual") in RESIDUALS


class AblationRSNGD(RSNGD):
    """``RSNGD`` that also takes the settings of this module, as arguments or per group: for studies and the
    benchmark's ablation rows. It overrides nothing: the settings choose the strategies registered here."""

    extra_settings = SETTINGS


# ------------------------------------------------------------------------------ settings
def _check_rank(c: Checker, group: dict[str, Any]) -> None:
    r = group["residual_rank"]
    c.need(
        r is None or (isinstance(r, int) and not isinstance(r, bool) and r >= 1),
        f"residual_rank must be None or an integer >= 1, got {r!r}",
    )


strategies.register_setting("projection", OWNER, lambda c, g: c.one_of("projection", ("random", "svd")))
strategies.register_setting(
    "normalize", OWNER, lambda c, g: c.one_of("normalize", ("rms", "global_rms", "none")), shared=True
)
strategies.register_setting("core_beta2", OWNER, lambda c, g: c.within("core_beta2", 0, 1))
strategies.register_setting("residual_rank", OWNER, _check_rank)
strategies.register_setting(
    "residual_momentum_schedule", OWNER, lambda c, g: c.one_of("residual_momentum_schedule", ("constant", "lr"))
)


def _check_layout(group: dict[str, Any], lay: Layout) -> None:
    if group.get("projection") == "svd" and (lay.sharded or lay.groups):
        raise ValueError("projection='svd' needs whole gradients; use projection='random' with sharded parameters")
    if group["residual"] == "fira" and (lay.sharded or lay.groups):
        raise ValueError("residual='fira' needs the whole gradient; it is not supported with sharded parameters")


strategies.register_hook("check_layout", _check_layout)


# --------------------------------------------------------------------- projection="svd"
class SVDFactors:
    """``projection="svd"``: the gradient's leading singular vectors at each renewal, kept in the state (``U0``,
    ``U1``, …)."""

    def new(self, opt: Any, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> None:
        factors = svd_factors(grad, ranks)
        for i, u in enumerate(factors):
            if u is not None:
                opt.state[p][f"U{i}"] = u

    def full(self, opt: Any, p: Tensor, group: dict[str, Any], state: dict[str, Any], device) -> Factors:
        return [state.get(f"U{i}") for i in range(p.dim())]

    def stack(self, opt: Any, ps: list[Tensor], group: dict[str, Any], lay: Layout, device, dtype) -> Factors:
        wholes = [self.full(opt, p, group, opt.state[p], device) for p in ps]
        return [None if f is None else torch.stack([w[m] for w in wholes]).to(dtype) for m, f in enumerate(wholes[0])]


strategies.register("factors", "svd", SVDFactors(), OWNER)


# ------------------------------------------------------------------------------ normalize
def _normalizer(mode: str):
    def run(updates, group, c_scale, reduce, process_group):
        return normalize(updates, mode, c_scale, group["eps"], reduce, process_group), None

    return run


strategies.register("normalize", "global_rms", _normalizer("global_rms"), OWNER)
strategies.register("normalize", "none", _normalizer("none"), OWNER)


# ------------------------------------------------------------------------------ core_beta2
def _core_moment(opt: Any, entries: list[Any], ok: Tensor) -> None:
    """Adam's denominator on each preconditioned core of a group with ``core_beta2`` (:func:`core_second_moment`),
    its moment committed only where the step is finite (the commit comes with the step's ``ok``)."""
    for e in entries:
        if e.group.get("core_beta2", 0.0) > 0:
            u = e.normalized()
            if "core_v" not in e.state:
                e.state["core_v"] = torch.zeros_like(u)
            t = e.state["step"] - e.state["basis_step"]
            e.update, v = core_second_moment(u, e.state["core_v"], t, e.group["core_beta2"], e.group["eps"])
            e.divisor, e.coef = None, None
            e.state["core_v"].copy_(torch.where(ok, v, e.state["core_v"]))


def _restart_core_moment(opt: Any, p: Tensor, group: dict[str, Any]) -> None:
    if "core_v" in opt.state[p]:  # a second moment does not carry into a new basis: start it again
        opt.state[p]["core_v"].zero_()


strategies.register_hook("after_precondition", _core_moment)
strategies.register_hook("on_renew", _restart_core_moment)


# ------------------------------------------------------------------------------ residuals
class SignResidual:
    """``residual="sign"``: signSGD on the gradient outside the subspace (FRUGAL)."""

    def direction(self, opt: Any, batch: list[Any], residuals: Tensor, ok: Tensor) -> tuple[Tensor, float]:
        return sign_residual(residuals), batch[0].group["residual_scale"]


class FiraResidual:
    """``residual="fira"``: the residual scaled by the subspace update's gain, its norm growth limited."""

    def direction(self, opt: Any, batch: list[Any], residuals: Tensor, ok: Tensor) -> tuple[Tensor, float]:
        out = []
        for e, r in zip(batch, residuals):
            scaled, norm = fira_residual(r, e.normalized(), e.core, e.state["residual_norm"])
            e.state["residual_norm"].copy_(
                torch.where(ok, norm.to(e.state["residual_norm"].dtype), e.state["residual_norm"])
            )
            out.append(scaled)
        return torch.stack(out), batch[0].group["residual_scale"]


def _fira_state(opt: Any, p: Tensor, group: dict[str, Any]) -> None:
    if group["residual"] == "fira":
        opt.state[p]["residual_norm"] = torch.zeros(
            (), dtype=torch.promote_types(p.dtype, torch.float32), device=p.device
        )


strategies.register("residual", "sign", SignResidual(), OWNER)
strategies.register("residual", "fira", FiraResidual(), OWNER)
strategies.register_hook("on_start", _fira_state)


# ------------------------------------------------------------------- the residual's momentum
def _lowrank(opt: Any, batch: list[Any], residuals: Tensor, betas: list[float], ok: Tensor) -> Tensor:
    """``residual_rank``: each residual's momentum kept as a rank-r factorisation (``lowrank_momentum``)."""
    out = []
    for e, r, beta in zip(batch, residuals, betas):
        state, group = e.state, e.group
        if "res_basis" not in state:
            rows, cols = r.shape[0], r[0].numel()
            rank = min(group["residual_rank"], rows, cols)
            gen = torch.Generator().manual_seed(mix_seed(group["seed"], opt._space.seed_key(e.p), _RESIDUAL_SEED))
            state["res_basis"] = torch.zeros(rows, rank, dtype=r.dtype, device=r.device)
            state["res_coef"] = torch.randn(cols, rank, generator=gen).to(r)
        direction, basis, coef = orthogonal.lowrank_momentum(r, state["res_basis"], state["res_coef"], beta)
        state["res_basis"].copy_(torch.where(ok, basis, state["res_basis"]))
        state["res_coef"].copy_(torch.where(ok, coef, state["res_coef"]))
        out.append(direction)
    return torch.stack(out)


def _lr_beta(state: dict[str, Any], group: dict[str, Any]) -> float:
    """``residual_momentum_schedule="lr"``: β · (1 − lr / the largest lr so far)."""
    state["res_lr_peak"] = max(state.get("res_lr_peak", 0.0), float(group["lr"]))
    peak = state["res_lr_peak"]
    return group["residual_momentum"] * (1.0 - float(group["lr"]) / peak) if peak > 0 else 0.0


strategies.register("momentum", "lowrank", _lowrank, OWNER)
strategies.register("beta", "lr", _lr_beta, OWNER)


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
