"""RS-SNGD's ablation settings: alternatives to the defaults that measured worse in ``rsngd bench`` (see
docs/rsngd.md, "Ablations"). They stay for studies, as settings of :class:`AblationRSNGD`, a subclass of
:class:`rsngd.RSNGD` that overrides the steps they change (``RSNGD`` refuses them and names this class); the
default step never runs this module's code.

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

from . import orthogonal
from .checks import Checker
from .optimizer import RSNGD, Entry
from .projection import Factors, mix_seed, svd_factors
from .residual import quantised_momentum
from .sharding import Layout
from .subspaces import Subspaces

__all__ = ["SETTINGS", "AblationRSNGD", "SVDSubspaces", "uses"]

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


class SVDSubspaces(Subspaces):
    """Factors of ``projection="svd"`` groups: the gradient's leading singular vectors at each renewal, kept in
    the state (``U0``, ``U1``, …); ``"random"`` groups as :class:`Subspaces`."""

    def seeded(self, group: dict[str, Any]) -> bool:
        return group["projection"] == "random"

    def new(self, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> Factors:
        if self.seeded(group):
            return super().new(p, group, grad, ranks, renewal)
        factors = svd_factors(grad, ranks)
        for i, u in enumerate(factors):
            if u is not None:
                self.opt.state[p][f"U{i}"] = u
        return factors

    def full(self, p: Tensor, group: dict[str, Any], state: dict[str, Any], device: torch.device) -> Factors:
        if self.seeded(group):
            return super().full(p, group, state, device)
        return [state.get(f"U{i}") for i in range(p.dim())]


class AblationRSNGD(RSNGD):
    """``RSNGD`` that also takes the settings of this module, as arguments or per group: for studies and the
    benchmark's ablation rows. Each overrides the one step it changes."""

    residuals = (*RSNGD.residuals, *RESIDUALS)
    shared = (*RSNGD.shared, "normalize")
    subspaces = SVDSubspaces

    def __init__(
        self,
        params: Any,
        projection: str = SETTINGS["projection"],
        normalize: str = SETTINGS["normalize"],
        core_beta2: float = SETTINGS["core_beta2"],
        residual_rank: int | None = SETTINGS["residual_rank"],
        residual_momentum_schedule: str = SETTINGS["residual_momentum_schedule"],
        **settings: Any,
    ) -> None:
        """``settings``: the arguments of :class:`rsngd.RSNGD`."""
        self._ablation = dict(
            projection=projection,
            normalize=normalize,
            core_beta2=core_beta2,
            residual_rank=residual_rank,
            residual_momentum_schedule=residual_momentum_schedule,
        )
        super().__init__(params, **settings)

    def _more_settings(self) -> dict[str, Any]:
        return dict(self._ablation)

    def _check_group(self, group: dict[str, Any]) -> Checker:
        c = super()._check_group(group)
        c.one_of("projection", ("random", "svd"))
        c.one_of("normalize", ("rms", "global_rms", "none"))
        c.within("core_beta2", 0, 1)
        r = group["residual_rank"]
        c.need(
            r is None or (isinstance(r, int) and not isinstance(r, bool) and r >= 1),
            f"residual_rank must be None or an integer >= 1, got {r!r}",
        )
        c.one_of("residual_momentum_schedule", ("constant", "lr"))
        return c

    # --------------------------------------------------------- projection="svd", residual="fira"
    def _check_layout(self, group: dict[str, Any], lay: Layout) -> None:
        if group["projection"] == "svd" and (lay.sharded or lay.groups):
            raise ValueError("projection='svd' needs whole gradients; use projection='random' with sharded parameters")
        if group["residual"] == "fira" and (lay.sharded or lay.groups):
            raise ValueError("residual='fira' needs the whole gradient; it is not supported with sharded parameters")
        super()._check_layout(group, lay)

    def _start(self, p: Tensor, group: dict[str, Any], grad: Tensor, lay: Layout) -> Factors:
        factors = super()._start(p, group, grad, lay)
        if group["residual"] == "fira":
            self.state[p]["residual_norm"] = torch.zeros((), dtype=grad.dtype, device=grad.device)
        return factors

    # ------------------------------------------------------------------ core_beta2
    def _renew(self, p: Tensor, group: dict[str, Any], grad: Tensor, lay: Layout) -> Factors:
        factors = super()._renew(p, group, grad, lay)
        if "core_v" in self.state[p]:  # a second moment does not carry into a new basis: start it again
            self.state[p]["core_v"].zero_()
        return factors

    def _precondition_all(self, entries: list[Entry], pending: dict[Tensor, Tensor], ok: Tensor, device) -> None:
        super()._precondition_all(entries, pending, ok, device)
        for e in entries:
            if e.group["core_beta2"] > 0:
                if "core_v" not in e.state:
                    e.state["core_v"] = torch.zeros_like(e.update)
                t = e.state["step"] - e.state["basis_step"]
                e.update, v = core_second_moment(e.update, e.state["core_v"], t, e.group["core_beta2"], e.group["eps"])
                e.state["core_v"].copy_(torch.where(ok, v, e.state["core_v"]))

    # ------------------------------------------------------------------- normalize
    def _normalize(self, updates: list[Tensor], group: dict[str, Any], c_scale: Tensor, reduce: bool) -> list[Tensor]:
        if group["normalize"] == "rms":
            return super()._normalize(updates, group, c_scale, reduce)
        return normalize(updates, group["normalize"], c_scale, group["eps"], reduce, self._process_group)

    # -------------------------------------------------------------------- residuals
    def _residual_update(self, e: Entry, ok: Tensor, ortho: Tensor | None) -> Tensor | None:
        if e.group["residual"] not in RESIDUALS:
            return super()._residual_update(e, ok, ortho)
        residual = self._residual(e)
        if e.group["residual"] == "sign":
            residual = sign_residual(residual)
        else:
            residual, norm = fira_residual(residual, e.update, e.core, e.state["residual_norm"])
            e.state["residual_norm"].copy_(torch.where(ok, norm, e.state["residual_norm"]))
        return e.group["residual_scale"] * residual

    def _residual_momentum(self, e: Entry, residual: Tensor, ok: Tensor) -> Tensor:
        state, group = e.state, e.group
        beta = group["residual_momentum"]
        if group["residual_momentum_schedule"] == "lr":
            state["res_lr_peak"] = max(state.get("res_lr_peak", 0.0), float(group["lr"]))
            beta *= 1.0 - float(group["lr"]) / state["res_lr_peak"] if state["res_lr_peak"] > 0 else 0.0
        if group["residual_rank"] is None:
            return quantised_momentum(e.p, state, residual, beta, group["residual_bits"], ok)
        if "res_basis" not in state:
            rows, cols = residual.shape[0], residual[0].numel()
            r = min(group["residual_rank"], rows, cols)
            gen = torch.Generator().manual_seed(mix_seed(group["seed"], self._space.seed_key(e.p), _RESIDUAL_SEED))
            state["res_basis"] = torch.zeros(rows, r, dtype=residual.dtype, device=residual.device)
            state["res_coef"] = torch.randn(cols, r, generator=gen).to(residual)
        direction, basis, coef = orthogonal.lowrank_momentum(residual, state["res_basis"], state["res_coef"], beta)
        state["res_basis"].copy_(torch.where(ok, basis, state["res_basis"]))
        state["res_coef"].copy_(torch.where(ok, coef, state["res_coef"]))
        return direction


RSNGD.refused.update(
    {key: "rsngd.ablations.AblationRSNGD" for key in SETTINGS}
    | {f"residual={r!r}": "rsngd.ablations.AblationRSNGD" for r in RESIDUALS}
)


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
