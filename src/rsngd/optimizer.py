"""RS-SNGD: random-subspace stochastic natural gradient descent, as a torch optimizer.

Per step, for every tensor with ndim ≥ 2 in a group whose ``rank`` is set:

1. project the gradient onto a Tucker subspace (``projection.project``) → core, k = Π rᵢ;
2. push the flattened core into a history of the last ``history`` = s cores, the rows
   of ``hist`` (s × k), so ``G = histᵀ``; the newest row is last;
3. precondition with ``F = λI + GGᵀ`` through the s × s system ``λI + GᵀG`` (Cholesky);
4. normalise, project back, optionally add a residual, and apply.

Momentum costs no state: the momentum vector is the exponentially weighted sum of the
window, ``m = G w`` with ``w_j ∝ β^(s-1-j)``. Because ``m`` lies in the span of G, the
Woodbury form ``F⁻¹m = (m − Gz)/λ`` with ``(λI + GᵀG) z = Gᵀm`` equals the push-through
form ``F⁻¹m = G c`` with ``(λI + GᵀG) c = w``, which is what is computed: it needs only
GᵀG and has no cancellation for small λ. With ``momentum=0``, ``w = e_s`` and this is
exactly ``natural_gradient(G, g, λ)`` for the current gradient g.

``fisher="global"`` solves one s × s system for all projected tensors of the optimizer
(GᵀG = Σ_p G_pᵀ G_p); ``fisher="tensor"`` solves one per tensor. Tensors with ndim < 2,
and every tensor of a group whose ``rank`` is None, are updated with AdamW.

The state holds tensors and Python numbers only: ``hist`` (s × k, float32), integer
counters, the seed of the random subspace, and for ``projection="svd"`` the factor
matrices ``U0``, ``U1``, … So ``torch.load(..., weights_only=True)`` reads it back and a
resumed run continues bit-identically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from . import ablations
from .projection import (
    Factors,
    change_basis,
    clamp_ranks,
    core_shape,
    mix_seed,
    project,
    project_back,
    random_factors,
    svd_factors,
)
from .woodbury import compute_dtype, damped_cholesky_solve

__all__ = ["RSNGD"]

_PROJECTIONS = ("random", "svd")
_FISHERS = ("global", "tensor")
_RESIDUALS = ("none", "fira", "sign")
_NORMALIZE = ("rms", "global_rms", "none")
_DAMPING_MODES = ("relative", "absolute")


@dataclass
class _Entry:
    """A projected tensor taking part in this step."""

    p: Tensor
    group: dict[str, Any]
    state: dict[str, Any]
    grad: Tensor  # full gradient, float32 (float64 for float64 parameters)
    core: Tensor  # projected gradient, flattened (k,)
    factors: Factors
    update: Tensor | None = None  # preconditioned core (k,)


class RSNGD(Optimizer):
    """Random-subspace stochastic natural gradient descent.

    Args:
        params: parameters or parameter groups; every argument below can be set per group.
        lr: learning rate.
        rank: Tucker rank per mode (an int for all modes, or one per mode); ``None``
            makes the group plain AdamW. Ranks are clamped to the tensor's sizes.
        history: s, the number of past projected gradients kept for the Fisher.
        damping: λ, absolute or relative to the mean eigenvalue of GᵀG (``damping_mode``).
        damping_mode: ``"relative"`` (λ = damping · trace(GᵀG) / filled columns; scale
            free) or ``"absolute"`` (λ = damping).
        update_gap: steps between renewals of the subspace; the history is carried into
            the new basis.
        projection: ``"random"`` (seeded orthonormal Gaussian factors; only the seed is
            stored) or, as an ablation, ``"svd"`` (leading singular vectors of the gradient;
            HOSVD for d > 2).
        fisher: ``"global"`` (one s × s system for every projected tensor) or ``"tensor"``.
        momentum: β of the momentum taken over the history window (no extra state).
        normalize: ``"rms"`` (each tensor's preconditioned core scaled to unit RMS); the
            ablations ``"global_rms"`` (one scale for all tensors of a system, keeping their
            relative sizes) and ``"none"`` (raw F⁻¹m) are in ``rsngd.ablations``.
        scale: multiplies the projected update (GaLore's α).
        residual: what to do with the part of the gradient outside the subspace:
            ``"none"`` (drop); the ablations ``"fira"`` (scaled by ‖update‖/‖core‖ with Fira's
            norm-growth limiter) and ``"sign"`` (signSGD, as FRUGAL) are in ``rsngd.ablations``.
        residual_scale: multiplies the residual update.
        weight_decay: decoupled weight decay (as AdamW), for every tensor of the group.
        betas: AdamW betas for the AdamW-updated tensors.
        eps: AdamW epsilon (also guards the RMS normalisation).
        seed: base seed of the random subspaces.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        rank: int | tuple[int, ...] | None = None,
        history: int = 10,
        damping: float = 0.01,
        damping_mode: str = "relative",
        update_gap: int = 200,
        projection: str = "random",
        fisher: str = "global",
        momentum: float = 0.9,
        normalize: str = "rms",
        scale: float = 1.0,
        residual: str = "none",
        residual_scale: float = 1.0,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        seed: int = 0,
    ) -> None:
        defaults = dict(
            lr=lr,
            rank=rank,
            history=history,
            damping=damping,
            damping_mode=damping_mode,
            update_gap=update_gap,
            projection=projection,
            fisher=fisher,
            momentum=momentum,
            normalize=normalize,
            scale=scale,
            residual=residual,
            residual_scale=residual_scale,
            weight_decay=weight_decay,
            betas=betas,
            eps=eps,
            seed=seed,
            nonfinite_steps=0,
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            self._check_group(group)
        global_groups = [g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global"]
        for key in ("history", "damping", "damping_mode", "momentum", "normalize"):
            if len({g[key] for g in global_groups}) > 1:
                raise ValueError(f"groups with fisher='global' share one s × s system and need the same {key}")
        # A stable integer id per parameter, used to derive its random subspace seeds.
        self._pid = {p: i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    @staticmethod
    def _check_group(group: dict[str, Any]) -> None:
        """ValueError naming the argument for any setting that would give NaN parameters or a confusing failure."""

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        def integer(key: str, minimum: int) -> None:
            v = group[key]
            need(isinstance(v, int) and not isinstance(v, bool), f"{key} must be an integer, got {v!r}")
            need(v >= minimum, f"{key} must be >= {minimum}, got {v}")

        def number(key: str, value: Any = None) -> float:
            v = group[key] if value is None else value
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            need(ok, f"{key} must be a finite number, got {v!r}")
            return float(v)

        need(number("lr") >= 0, f"lr must be >= 0, got {group['lr']}")
        integer("history", 1)
        integer("update_gap", 1)
        integer("seed", 0)
        need(number("damping") > 0, f"damping must be > 0, got {group['damping']}")
        need(0 <= number("momentum") < 1, f"momentum must be in [0, 1), got {group['momentum']}")
        need(number("weight_decay") >= 0, f"weight_decay must be >= 0, got {group['weight_decay']}")
        need(number("scale") > 0, f"scale must be > 0, got {group['scale']}")
        need(number("residual_scale") >= 0, f"residual_scale must be >= 0, got {group['residual_scale']}")
        need(number("eps") > 0, f"eps must be > 0 (it keeps AdamW's denominator away from zero), got {group['eps']}")
        betas = group["betas"]
        need(isinstance(betas, (tuple, list)) and len(betas) == 2, f"betas must be a pair, got {betas!r}")
        for i, beta in enumerate(betas):
            need(0 <= number(f"betas[{i}]", beta) < 1, f"betas[{i}] must be in [0, 1), got {beta}")
        for key, allowed in (
            ("projection", _PROJECTIONS),
            ("fisher", _FISHERS),
            ("residual", _RESIDUALS),
            ("normalize", _NORMALIZE),
            ("damping_mode", _DAMPING_MODES),
        ):
            need(group[key] in allowed, f"{key} must be one of {allowed}, got {group[key]!r}")
        rank = group["rank"]
        if rank is not None:
            ranks = list(rank) if isinstance(rank, (tuple, list)) else [rank]
            ok = ranks and all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks)
            need(bool(ok), f"rank must be a positive integer (or a tuple of them, one per mode), got {rank!r}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "_pid"):
            self._check_group(self.param_groups[-1])
            for p in self.param_groups[-1]["params"]:
                self._pid.setdefault(p, len(self._pid))

    @property
    def nonfinite_steps(self) -> int:
        """Number of (group) steps skipped because a gradient was not finite."""
        return max(int(g["nonfinite_steps"]) for g in self.param_groups)

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        grads = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for _, p in grads:
            if p.grad.is_sparse:
                raise RuntimeError("RSNGD does not support sparse gradients; use dense gradients")
        if not grads:
            return loss
        finite = torch.stack([torch.isfinite(p.grad).all() for _, p in grads]).tolist()
        is_finite = {p: ok for (_, p), ok in zip(grads, finite)}
        any_global = any(g["rank"] is not None and g["fisher"] == "global" for g in self.param_groups)
        if any_global and not all(finite):
            # One system couples every projected tensor: skip the whole step.
            for group in self.param_groups:
                group["nonfinite_steps"] += 1
            return loss
        for group in self.param_groups:
            if any(not is_finite[p] for p in group["params"] if p in is_finite):
                group["nonfinite_steps"] += 1

        systems: dict[str, list[_Entry]] = {"global": []}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    if group["rank"] is not None and group["fisher"] == "global" and "hist" in self.state[p]:
                        self._push(self.state[p], None)  # keep the window aligned across tensors
                    continue
                if not is_finite[p]:
                    continue
                if group["rank"] is None or p.dim() < 2:
                    self._adamw(p, group)
                    continue
                entry = self._prepare(p, group)
                key = "global" if group["fisher"] == "global" else f"tensor{id(p)}"
                systems.setdefault(key, []).append(entry)

        for entries in systems.values():
            if entries:
                self._precondition(entries)
                self._apply(entries)
        return loss

    # ------------------------------------------------------------ projected
    def _prepare(self, p: Tensor, group: dict[str, Any]) -> _Entry:
        """Initialise or renew the subspace, project the gradient and push it to the history."""
        state = self.state[p]
        grad = p.grad.to(compute_dtype(p.dtype))  # float32, or float64 for float64 parameters
        ranks = clamp_ranks(p.shape, group["rank"])
        s = group["history"]
        if "hist" not in state:
            state["step"] = 0
            state["basis_step"] = 0
            state["renewals"] = 0
            factors = self._new_factors(p, group, grad, ranks, renewal=0)
            k = math.prod(core_shape(p.shape, factors))
            state["hist"] = torch.zeros(s, k, dtype=grad.dtype, device=p.device)
            if group["residual"] == "fira":
                state["residual_norm"] = torch.zeros((), dtype=grad.dtype, device=p.device)
        elif state["step"] - state["basis_step"] >= group["update_gap"]:
            old = self._factors(p, group, state)
            state["renewals"] += 1
            factors = self._new_factors(p, group, grad, ranks, renewal=state["renewals"])
            cshape = core_shape(p.shape, factors)
            hist = state["hist"].view(s, *cshape)
            state["hist"] = change_basis(hist, old, factors, batch_dims=1).reshape(s, -1).contiguous()
            state["basis_step"] = state["step"]
        else:
            factors = self._factors(p, group, state)
        state["step"] += 1
        core = project(grad, factors).reshape(-1)
        self._push(state, core)
        return _Entry(p=p, group=group, state=state, grad=grad, core=core, factors=factors)

    def _new_factors(self, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> Factors:
        state = self.state[p]
        if group["projection"] == "random":
            state["seed"] = mix_seed(group["seed"], self._pid[p], renewal)
            return random_factors(p.shape, ranks, state["seed"], device=p.device, dtype=grad.dtype)
        factors = svd_factors(grad, ranks)
        for i, u in enumerate(factors):
            if u is not None:
                state[f"U{i}"] = u
        return factors

    def _factors(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> Factors:
        """The current factors: regenerated from the seed, or read from the state (svd)."""
        ranks = clamp_ranks(p.shape, group["rank"])
        if group["projection"] == "random":
            return random_factors(p.shape, ranks, state["seed"], device=p.device, dtype=compute_dtype(p.dtype))
        return [state.get(f"U{i}") for i in range(p.dim())]

    @staticmethod
    def _push(state: dict[str, Any], core: Tensor | None) -> None:
        """Drop the oldest row of the history and append ``core`` (zeros for None)."""
        hist = state["hist"]
        hist[:-1] = hist[1:].clone()
        if core is None:
            hist[-1].zero_()
        else:
            hist[-1] = core

    def _precondition(self, entries: list[_Entry]) -> None:
        """Solve (λI + GᵀG) c = w once for the system and set each update to G_p c."""
        group = entries[0].group
        s = group["history"]
        gram = fisher_gram([e.state["hist"] for e in entries])  # (s, s) float64
        filled = max(min(e.state["step"], s) for e in entries)
        beta = group["momentum"]
        device = gram.device
        # Momentum weights over the window, newest last; only filled rows count.
        ages = torch.arange(s - 1, -1, -1, dtype=torch.float64, device=device)
        w = torch.where(ages < filled, beta**ages, torch.zeros((), dtype=torch.float64, device=device))
        w = w / w.sum()
        lam = torch.tensor(group["damping"], dtype=torch.float64, device=device)
        if group["damping_mode"] == "relative":
            mean_eig = torch.diagonal(gram).sum() / filled
            lam = torch.where(mean_eig > 0, lam * mean_eig, lam)  # all-zero history: any λ gives 0
        c, _ = damped_cholesky_solve(gram, w, lam)
        # c can exceed the float32 range when λ is tiny; apply its direction, then its size.
        c_scale = c.abs().max().clamp_min(1e-300)
        for e in entries:
            hist = e.state["hist"]
            e.update = (c / c_scale).to(hist.dtype) @ hist  # F⁻¹ m = G c, shape (k,), up to c_scale
        eps = group["eps"]
        if group["normalize"] == "rms":
            for e in entries:
                e.update = e.update / (e.update.pow(2).mean().sqrt() + eps)
        else:  # an ablation setting
            updates = ablations.normalize([e.update for e in entries], group["normalize"], c_scale, eps)
            for e, u in zip(entries, updates):
                e.update = u

    def _apply(self, entries: list[_Entry]) -> None:
        for e in entries:
            group, p = e.group, e.p
            cshape = core_shape(p.shape, e.factors)
            update = project_back(e.update.view(cshape) * group["scale"], e.factors)
            if group["residual"] != "none":  # an ablation setting
                residual = e.grad - project_back(e.core.view(cshape), e.factors)
                if group["residual"] == "sign":
                    residual = ablations.sign_residual(residual)
                else:
                    residual, e.state["residual_norm"] = ablations.fira_residual(
                        residual, e.update, e.core, e.state["residual_norm"]
                    )
                update = update + group["residual_scale"] * residual
            if group["weight_decay"] != 0:
                p.mul_(1 - group["lr"] * group["weight_decay"])
            p.add_(update.to(p.dtype), alpha=-group["lr"])

    # ----------------------------------------------------------------- AdamW
    def _adamw(self, p: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        grad = p.grad.to(compute_dtype(p.dtype))
        if "exp_avg" not in state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(grad)
            state["exp_avg_sq"] = torch.zeros_like(grad)
        beta1, beta2 = group["betas"]
        state["step"] += 1
        step = state["step"]
        state["exp_avg"].lerp_(grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (state["exp_avg_sq"] / (1 - beta2**step)).sqrt_().add_(group["eps"])
        update = state["exp_avg"] / (1 - beta1**step) / denom
        if group["weight_decay"] != 0:
            p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update.to(p.dtype), alpha=-group["lr"])

    # ----------------------------------------------------------------- state
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict exactly: the float32 state is not cast to the parameters' dtype."""
        super().load_state_dict(state_dict)
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params):
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if torch.is_tensor(value):
                    self.state[p][key] = value.to(device=p.device, copy=True)


def fisher_gram(hists: list[Tensor]) -> Tensor:
    """GᵀG = Σ_p G_pᵀ G_p for histories stored as rows (s × k_p); returns (s, s) in float64.

    This is the one reduction the global Fisher needs (Gᵀm = GᵀG w follows from it):
    with sharded parameters, an all-reduce of this s × s matrix goes here.
    """
    gram = None
    for h in hists:
        part = (h @ h.T).to(torch.float64)
        gram = part if gram is None else gram + part
    assert gram is not None
    return gram
