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
resumed run continues bit-identically. AdamW moments of a DTensor parameter are DTensors
sharded like it, and its history is a DTensor split by columns among the ranks
(``rsngd.history``), so ``torch.distributed.checkpoint`` saves and reshards both.

A step makes no host synchronisation: a gradient that is not finite (on any rank) is a
device flag, and the step's state changes and updates are committed through it, so such a
step changes nothing but the ``nonfinite_steps`` count (and the step counters).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from . import ablations, compact, history, orthogonal
from .ortho_dist import ortho_replicated, ortho_sharded
from .projection import (
    Factors,
    change_basis,
    clamp_ranks,
    core_shape,
    mix_seed,
    project_back_local,
    project_local,
    random_factors,
    random_factors_many,
    slice_factors,
    svd_factors,
)
from .sharding import Layout, Reducer, group_key, is_dtensor, layout, local
from .woodbury import compute_dtype, damped_cholesky_solve

__all__ = ["RSNGD", "AblationRSNGD", "name_key", "tag_parameter_names"]

_FISHERS = ("global", "tensor")
_DAMPING_MODES = ("relative", "absolute")
_RESIDUAL_SEED = 0x5E5  # mixed into the seed of the residual momentum's starting columns


@dataclass
class _Entry:
    """A projected tensor taking part in this step."""

    p: Tensor
    group: dict[str, Any]
    state: dict[str, Any]
    grad: Tensor  # this rank's gradient (all of it unless sharded), float32 (float64 for float64 parameters)
    core: Tensor  # projected gradient, flattened (k,); a shard's share until the step's all-reduce
    factors: Factors  # this rank's rows of the factors
    layout: Layout
    update: Tensor | None = None  # preconditioned core (k,)


class RSNGD(Optimizer):
    """Random-subspace stochastic natural gradient descent.

    Args:
        params: parameters or parameter groups; every argument below can be set per group.
        lr: learning rate of the projected tensors (the ``rsngd`` recipe's).
        rank: Tucker rank per mode: an int for all modes, one per mode, or a float in (0, 1], a fraction of the
            tensor's smallest side (the default 1/8: rank 32 for a 256-wide layer). ``None`` makes the group
            plain AdamW. Ranks are clamped to the tensor's sizes.
        history: s, the number of past projected gradients kept for the Fisher.
        damping: λ, absolute or relative to the mean eigenvalue of GᵀG (``damping_mode``).
        damping_mode: ``"relative"`` (λ = damping · trace(GᵀG) / filled columns; scale
            free) or ``"absolute"`` (λ = damping).
        update_gap: steps between renewals of the subspace; the history is carried into
            the new basis.
        stagger_renewals: spread the tensors' renewals over the ``update_gap`` steps (a
            phase per tensor) instead of renewing every subspace on the same step.
        fisher: ``"global"`` (one s × s system for every projected tensor) or ``"tensor"``.
        momentum: β of the momentum taken over the history window (no extra state).
        scale: multiplies the projected update (GaLore's α).
        residual: what to do with the part of the gradient outside the subspace: ``"ortho"`` (the default: its
            polar factor by Newton–Schulz, a Muon step without a buffer, ``rsngd.orthogonal``) or ``"none"`` (drop
            it: the subspace step alone). Sharded parameters send each matrix's residual to one owner rank
            (``rsngd.ortho_dist``); with ``data_parallel`` the ranks split the matrices; with ``per_layer`` it is
            taken in the gradient hook.
        residual_scale: multiplies the residual update (its lr is ``lr × residual_scale``; 4 in the recipe).
        residual_momentum: β of a Nesterov momentum of the residual kept whole-size but quantised to
            ``residual_bits`` bits (``rsngd.compact``); 0 (the default) keeps the residual stateless.
        residual_bits: 8 or 4, the precision of the residual's momentum buffer.
        adamw_state: for the tensors updated with AdamW: ``"full"`` (float32 moments) or ``"light"`` (matrices
            only: an 8-bit first moment and a factored second moment, as Adafactor's; about 1/8 of AdamW's state).
        weight_decay: decoupled weight decay (as AdamW), for every tensor of the group.
        betas: AdamW betas for the AdamW-updated tensors.
        eps: AdamW epsilon (also guards the RMS normalisation).
        seed: base seed of the random subspaces. A tensor's subspaces depend on it, on the
            tensor's name (from named parameter groups, e.g. ``create_optimizer`` or
            ``Optimizer(model.named_parameters())``, or from :func:`tag_parameter_names`) or
            else its position among the optimizer's parameters, and on the renewal count;
            not on the device, the world size or how the tensor is sharded.
        per_layer: project each matrix's gradient as soon as backward has produced it and free
            the gradient (GaLore's "layerwise" memory saving: projected matrices never hold all
            their gradients at once); the residual step (decay included) is taken there too, and
            ``step`` then solves and applies the subspace step, with the global Fisher exact (the cores,
            not the gradients, are what it needs). One process only. Without a residual, micro-batches
            accumulate in the cores; with one, one backward per step.
        cache_factors: keep this rank's rows of the factors between renewals (faster steps;
            the memory is reported by :meth:`factor_cache_bytes`) instead of regenerating
            them from the seed on every step (the default: no factor memory).
        partitioned: the optimizer holds one rank's partition of the model (as inside
            ``ZeroRedundancyOptimizer``): the global Fisher's sums (GᵀG, filled rows) and the non-finite check are
            summed over ``process_group``, so every rank solves the same system as one process would.
            Every rank must call ``step`` together.
        data_parallel: the parameters and gradients are the same on every rank of ``process_group`` (DDP): the
            residual's Newton–Schulz work is split among the ranks and the results broadcast.
        process_group: the group of the ranks for ``partitioned``, ``data_parallel`` and for the non-finite
            check with sharded parameters (default: the whole world).

    Settings that measured no better (other normalisations, Fira and sign residuals, a low-rank residual
    momentum, Adam's denominator on the core, SVD factors) are arguments of ``rsngd.ablations.AblationRSNGD``.

    Sharded parameters (DTensor, e.g. FSDP2's ``fully_shard``) are stepped natively: each
    rank projects its own rows, the cores of all tensors are summed in one all-reduce, each
    rank keeps its share of the history's columns (``rsngd.history``: the s × s Gram matrix
    and the update's core are summed over the ranks), and each rank writes its own rows
    (``rsngd.sharding``); only the residual's owner rank holds a whole matrix, during the step.
    """

    _ablations = False  # AblationRSNGD: accept the settings of ``rsngd.ablations``

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 5e-3,
        rank: int | float | tuple[int, ...] | None = 1 / 8,
        history: int = 10,
        damping: float = 0.01,
        damping_mode: str = "relative",
        update_gap: int = 200,
        fisher: str = "global",
        momentum: float = 0.9,
        scale: float = 1.0,
        residual: str = "ortho",
        residual_scale: float = 4.0,
        residual_momentum: float = 0.0,
        residual_bits: int = 8,
        adamw_state: str = "full",
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        seed: int = 0,
        cache_factors: bool = False,
        stagger_renewals: bool = True,
        per_layer: bool = False,
        partitioned: bool = False,
        data_parallel: bool = False,
        process_group: dist.ProcessGroup | None = None,
        **moved: Any,
    ) -> None:
        ablation = {k: moved.pop(k) for k in list(moved) if k in ablations.SETTINGS}
        if moved:
            raise TypeError(f"RSNGD got unexpected keyword arguments: {', '.join(sorted(moved))}")
        if ablation and not self._ablations:
            raise TypeError(
                f"{', '.join(sorted(ablation))}: measured no better than the default, these settings moved to "
                "rsngd.ablations.AblationRSNGD (docs/benchmark.md, 'RS-SNGD's screen')"
            )
        defaults = dict(
            lr=lr,
            rank=rank,
            history=history,
            damping=damping,
            damping_mode=damping_mode,
            update_gap=update_gap,
            fisher=fisher,
            momentum=momentum,
            scale=scale,
            residual=residual,
            residual_scale=residual_scale,
            residual_momentum=residual_momentum,
            residual_bits=residual_bits,
            adamw_state=adamw_state,
            weight_decay=weight_decay,
            betas=betas,
            eps=eps,
            seed=seed,
            cache_factors=cache_factors,
            stagger_renewals=stagger_renewals,
            nonfinite_steps=0,
            **{**ablations.SETTINGS, **ablation},
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            self._check_group(group)
        global_groups = [g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global"]
        for key in ("history", "damping", "damping_mode", "momentum", "normalize"):
            if len({g[key] for g in global_groups}) > 1:
                raise ValueError(f"groups with fisher='global' share one s × s system and need the same {key}")
        if partitioned and data_parallel:
            raise ValueError("partitioned (ZeRO: each rank steps its own tensors) and data_parallel exclude each other")
        self._partitioned = bool(partitioned)
        self._data_parallel = bool(data_parallel)
        self._process_group = process_group
        self._dist: bool | None = None  # decided at the first step
        self._keys: dict[Tensor, int] | None = None  # seed key per parameter, built at the first step
        self._cache: dict[Tensor, tuple[int, Factors]] = {}  # cache_factors: (seed, this rank's factor rows)
        self._drawn: dict[tuple[Tensor, int], Factors] = {}  # factors drawn ahead for the current step
        self._pending: dict[Tensor, Tensor] = {}  # per_layer: cores projected since the last step
        self._pending_bad: Tensor | None = None
        self._groups: dict[Tensor, dict[str, Any]] = {p: g for g in self.param_groups for p in g["params"]}
        self._hooks = []
        if per_layer:
            for group in self.param_groups:
                if group["rank"] is None:
                    continue
                if group["residual"] not in ("none", "ortho"):
                    raise ValueError(f"per_layer=True takes residual='none' or 'ortho', got {group['residual']!r}")
                for p in group["params"]:
                    if p.dim() >= 2:
                        self._hooks.append(p.register_post_accumulate_grad_hook(self._absorb))

    def _check_group(self, group: dict[str, Any]) -> None:
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

        for key in ("cache_factors", "stagger_renewals"):
            need(isinstance(group[key], bool), f"{key} must be True or False, got {group[key]!r}")
        need(number("lr") >= 0, f"lr must be >= 0, got {group['lr']}")
        integer("history", 1)
        integer("update_gap", 1)
        integer("seed", 0)
        need(number("damping") > 0, f"damping must be > 0, got {group['damping']}")
        need(0 <= number("momentum") < 1, f"momentum must be in [0, 1), got {group['momentum']}")
        need(
            0 <= number("residual_momentum") < 1,
            f"residual_momentum must be in [0, 1), got {group['residual_momentum']}",
        )
        need(
            group["residual_momentum"] == 0 or group["residual"] == "ortho",
            f"residual_momentum needs residual='ortho', got residual={group['residual']!r}",
        )
        need(group["residual_bits"] in (8, 4), f"residual_bits must be 8 or 4, got {group['residual_bits']!r}")
        need(
            group["adamw_state"] in ("full", "light"),
            f"adamw_state must be 'full' or 'light', got {group['adamw_state']!r}",
        )
        if not self._ablations:
            for key, default in ablations.SETTINGS.items():
                need(
                    group[key] == default,
                    f"{key}={group[key]!r} measured no better than the default: it is a setting of "
                    "rsngd.ablations.AblationRSNGD",
                )
            need(
                group["residual"] in ("none", "ortho"),
                f"residual must be 'ortho' or 'none' (residual={group['residual']!r} is a setting of "
                "rsngd.ablations.AblationRSNGD)",
            )
        ablations.check_group(group, need, number)
        need(number("weight_decay") >= 0, f"weight_decay must be >= 0, got {group['weight_decay']}")
        need(number("scale") > 0, f"scale must be > 0, got {group['scale']}")
        need(number("residual_scale") >= 0, f"residual_scale must be >= 0, got {group['residual_scale']}")
        need(number("eps") > 0, f"eps must be > 0 (it keeps AdamW's denominator away from zero), got {group['eps']}")
        betas = group["betas"]
        need(isinstance(betas, (tuple, list)) and len(betas) == 2, f"betas must be a pair, got {betas!r}")
        for i, beta in enumerate(betas):
            need(0 <= number(f"betas[{i}]", beta) < 1, f"betas[{i}] must be in [0, 1), got {beta}")
        for key, allowed in (
            ("fisher", _FISHERS),
            ("damping_mode", _DAMPING_MODES),
        ):
            need(group[key] in allowed, f"{key} must be one of {allowed}, got {group[key]!r}")
        rank = group["rank"]
        if rank is not None:
            if isinstance(rank, float):
                need(0 < rank <= 1, f"rank must be an integer or a fraction in (0, 1], got {rank!r}")
            else:
                ranks = list(rank) if isinstance(rank, (tuple, list)) else [rank]
                ok = ranks and all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks)
                need(
                    bool(ok),
                    f"rank must be a positive integer, a tuple of them (one per mode) or a fraction in (0, 1], "
                    f"got {rank!r}",
                )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "_keys"):
            self._check_group(self.param_groups[-1])
            self._keys = None
            self._dist = None
            self._groups = {p: g for g in self.param_groups for p in g["params"]}

    @property
    def nonfinite_steps(self) -> int:
        """Number of (group) steps skipped because a gradient was not finite."""
        return max(int(g["nonfinite_steps"]) for g in self.param_groups)  # a device tensor: reading it syncs

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; ``closure`` re-evaluates the model and returns the loss.

        The step makes no host synchronisation: whether every gradient is finite is a device flag (summed over
        the ranks when distributed), and every state change and update is committed through it, so a step with
        a non-finite gradient anywhere changes no parameter and no moment or history (its counters advance).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for _, p in work:
            if p.grad.is_sparse:
                raise RuntimeError("RSNGD does not support sparse gradients; use dense gradients")
        pending, self._pending = self._pending, {}  # per_layer: cores projected as the gradients arrived
        distributed = self._distributed()
        if not work and not pending and not distributed:
            return loss
        if work:
            device = local(work[0][1].grad).device
        else:
            device = next(iter(pending.values())).device if pending else self._any_device()
        bad = torch.zeros(1, dtype=torch.float64, device=device)
        if work:
            bad += torch.stack([local(p.grad).isfinite().all().logical_not() for _, p in work]).sum()
        if self._pending_bad is not None:
            bad += self._pending_bad
            self._pending_bad = None

        # 1. project every gradient (a shard's share of the core for a sharded one) and sum over the ranks
        reducer = Reducer()
        if distributed:
            reducer.add(bad, [self._process_group])
        entries: list[_Entry] = []
        adam: list[tuple[dict[str, Any], Tensor]] = []
        self._draw_ahead(work)
        for group, p in work:
            if group["rank"] is None or p.dim() < 2:
                adam.append((group, p))
                continue
            e = self._prepare(p, group)
            if e.layout.groups:
                reducer.add(e.core, e.layout.groups)
            entries.append(e)
        for p, core in pending.items():
            entries.append(self._pending_entry(p, core))
        self._drawn.clear()
        reducer.run()
        ok = bad[0] == 0
        for e in entries:
            e.state["step"] += 1
            if e.layout.average:
                e.core /= math.prod(dist.get_world_size(g) for g in e.layout.groups)
        self._count_nonfinite(ok)

        # 2. push to the histories (committed only if ok), one Fisher system per tensor or for all
        systems: dict[str, list[_Entry]] = {"global": []}
        for e in entries:
            lo, hi = history.columns(e.state["hist"])
            hist = local(e.state["hist"])  # this rank's columns of a split history
            hist.copy_(torch.where(ok, _pushed(hist, e.core[lo:hi]), hist))
            key = "global" if e.group["fisher"] == "global" else f"tensor{id(e.p)}"
            systems.setdefault(key, []).append(e)
        for group in self.param_groups:  # tensors of the global system without a gradient: a zero row
            if group["rank"] is not None and group["fisher"] == "global":
                for p in group["params"]:
                    if p.grad is None and p not in pending and "hist" in self.state[p]:
                        hist = local(self.state[p]["hist"])
                        hist.copy_(torch.where(ok, _pushed(hist, None), hist))
        if self._partitioned and any(g["rank"] is not None and g["fisher"] == "global" for g in self.param_groups):
            self._precondition(systems["global"], device, reduce=True)  # every rank joins the sums
        elif systems["global"]:
            self._precondition(systems["global"], device, reduce=False)
        for key, es in systems.items():
            if key != "global":
                self._precondition(es, device, reduce=False)

        # 3. apply: each rank writes its own rows; nothing changes unless ok
        for e in entries:
            if e.group["core_beta2"] > 0:  # an ablation setting
                if "core_v" not in e.state:
                    e.state["core_v"] = torch.zeros_like(e.update)
                t = e.state["step"] - e.state["basis_step"]
                e.update, v = ablations.core_second_moment(
                    e.update, e.state["core_v"], t, e.group["core_beta2"], e.group["eps"]
                )
                e.state["core_v"].copy_(torch.where(ok, v, e.state["core_v"]))
        stepped = [e for e in entries if e.grad is not None and e.group["residual"] == "ortho" and _outside(e)]
        spread = self._data_parallel and dist.is_available() and dist.is_initialized()
        together = [e for e in stepped if spread or e.layout.groups]  # their collectives need every matrix at once
        ortho = self._ortho_directions(together, ok) if together else {}
        # The rest go in batches of one shape, each applied before the next is formed: a step holds at most
        # one batch of residuals besides the gradients.
        alone = {id(e) for e in stepped} - {id(e) for e in together}
        for batch in _batches([e for e in stepped if id(e) in alone]):
            ortho.update(self._ortho_directions(batch, ok))
            for e in batch:
                self._apply(e, ok, ortho.pop(id(e)))
        for e in entries:
            if id(e) not in alone:
                self._apply(e, ok, ortho.get(id(e)))
        for group, p in adam:
            self._adamw(p, group, ok)
        return loss

    def _distributed(self) -> bool:
        """Whether this step needs collectives: sharded parameters, or a partition of the model (ZeRO)."""
        if self._dist is None:
            initialised = dist.is_available() and dist.is_initialized()
            sharded = any(is_dtensor(p) for g in self.param_groups for p in g["params"])
            if self._partitioned and not initialised:
                raise RuntimeError("RSNGD(partitioned=True) needs torch.distributed to be initialised")
            self._dist = initialised and (sharded or self._partitioned)
        return self._dist

    def _any_device(self) -> torch.device:
        for g in self.param_groups:
            for p in g["params"]:
                return local(p).device
        return torch.device("cpu")

    def _count_nonfinite(self, ok: Tensor) -> None:
        for group in self.param_groups:
            count = group["nonfinite_steps"]
            if not torch.is_tensor(count):
                count = torch.full((), int(count), dtype=torch.int64, device=ok.device)
            group["nonfinite_steps"] = count + (~ok).to(torch.int64)

    # ------------------------------------------------------------ projected
    def _prepare(self, p: Tensor, group: dict[str, Any]) -> _Entry:
        """Initialise or renew the subspace and project this rank's part of the gradient."""
        state = self.state[p]
        lay = layout(p, p.grad)
        grad = local(p.grad).to(compute_dtype(p.dtype))  # float32, or float64 for float64 parameters
        ranks = clamp_ranks(p.shape, group["rank"])
        s = group["history"]
        if group["projection"] == "svd" and (lay.sharded or lay.groups):
            raise ValueError("projection='svd' needs whole gradients; use projection='random' with sharded parameters")
        if group["residual"] == "fira" and (lay.sharded or lay.groups):
            raise ValueError("residual='fira' needs the whole gradient; it is not supported with sharded parameters")
        if group["residual"] in ("ortho", "sign") and lay.groups and not _row_sharded(lay):
            raise ValueError(
                f"residual={group['residual']!r} needs each gradient whole or sharded by rows on one mesh dimension "
                "(FSDP2's Shard(0)); use residual='none' for this layout"
            )
        if "hist" not in state:
            state["step"] = 0
            state["basis_step"] = 0
            state["renewals"] = 0
            full = self._new_factors(p, group, grad, ranks, renewal=0)
            k = math.prod(core_shape(p.shape, full))
            state["hist"] = history.new(p, lay, s, k, grad.dtype, grad.device)  # split by columns under FSDP2
            if group["residual"] == "fira":
                state["residual_norm"] = torch.zeros((), dtype=grad.dtype, device=grad.device)
            factors = self._keep(p, group, full, lay)
        elif self._renews(p, group, state["step"]):
            old = self._full_factors(p, group, state, grad.device)
            state["renewals"] += 1
            full = self._new_factors(p, group, grad, ranks, renewal=state["renewals"])
            cshape = core_shape(p.shape, full)
            hist = history.whole(state["hist"]).view(s, *cshape)  # a split history is gathered for the change of basis
            changed = change_basis(hist, old, full, batch_dims=1).reshape(s, -1).contiguous()
            state["hist"] = history.like(state["hist"], changed)
            state["basis_step"] = state["step"]
            if "core_v" in state:  # a second moment does not carry into a new basis: start it again
                state["core_v"].zero_()
            factors = self._keep(p, group, full, lay)
        else:
            factors = self._local_factors(p, group, state, lay, grad.device)
        core = project_local(grad, factors, lay.offsets, lay.full_shape).reshape(-1).contiguous()
        return _Entry(p=p, group=group, state=state, grad=grad, core=core, factors=factors, layout=lay)

    def _pending_entry(self, p: Tensor, core: Tensor) -> _Entry:
        """The entry of a tensor whose gradient was projected (and freed) by the per-layer hook."""
        group, state = self._groups[p], self.state[p]
        lay = layout(p)
        factors = self._local_factors(p, group, state, lay, core.device)
        return _Entry(p=p, group=group, state=state, grad=None, core=core, factors=factors, layout=lay)

    @torch.no_grad()
    def _absorb(self, p: Tensor) -> None:
        """Per-layer hook, run as soon as ``p``'s gradient is accumulated: project it into the core that the next
        ``step`` will use, take the residual step (with its weight decay) now, and free the gradient.

        Without a residual, micro-batches add up in the core (projection is linear). The residual step is final
        here: it is skipped if this gradient is not finite, but not if another tensor's is."""
        if p.grad is None:
            return
        if self._distributed():
            raise RuntimeError("per_layer=True runs in one process; under torch.distributed use the normal step")
        group = self._groups[p]
        e = self._prepare(p, group)
        bad = p.grad.isfinite().all().logical_not().to(torch.float64)
        self._pending_bad = bad if self._pending_bad is None else self._pending_bad + bad
        previous = self._pending.get(p)
        if group["residual"] == "ortho" and _outside(e):
            if previous is not None:
                raise RuntimeError(
                    "per_layer=True with residual='ortho' takes one backward per step (the residual step is taken as "
                    "each gradient arrives): sum the micro-batches' losses before backward, or use residual='none'"
                )
            ok = bad == 0
            ortho = self._ortho_directions([e], ok)[id(e)]
            _write(local(p), group["residual_scale"] * ortho, group, ok)
        self._pending[p] = e.core if previous is None else previous + e.core
        p.grad = None

    def _renews(self, p: Tensor, group: dict[str, Any], step: int) -> bool:
        """Whether ``p`` gets a new subspace before its step number ``step`` (every ``update_gap`` steps).

        With ``stagger_renewals`` each tensor's renewals are shifted by a phase in [0, update_gap) taken from its
        seed key (consecutive tensors get consecutive phases when keyed by position), so a step renews about
        1/update_gap of the tensors instead of all of them at once.
        """
        gap = group["update_gap"]
        phase = self._seed_key(p) % gap if group["stagger_renewals"] else 0
        return step > 0 and (step + phase) % gap == 0 and self.state[p]["basis_step"] != step

    def _seed_key(self, p: Tensor) -> int:
        """A stable number for ``p``: from its name when the optimizer knows it, else its place in the groups."""
        if self._keys is None:
            self._keys = {}
            index = 0
            for g in self.param_groups:
                names = g.get("param_names")
                for i, q in enumerate(g["params"]):
                    name = names[i] if names is not None else getattr(q, "_rsngd_name", None)
                    self._keys[q] = name_key(name) if name is not None else index
                    index += 1
        return self._keys[p]

    def _new_factors(self, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> Factors:
        """Whole factors of a new subspace (the seed goes to the state; svd factors too)."""
        state = self.state[p]
        if group["projection"] == "random":
            state["seed"] = mix_seed(group["seed"], self._seed_key(p), renewal)
            return self._random(p, ranks, state["seed"], grad.device, grad.dtype)
        factors = svd_factors(grad, ranks)
        for i, u in enumerate(factors):
            if u is not None:
                state[f"U{i}"] = u
        return factors

    def _full_factors(self, p: Tensor, group: dict[str, Any], state: dict[str, Any], device: torch.device) -> Factors:
        """The current whole factors: regenerated from the seed, or read from the state (svd)."""
        if group["projection"] == "random":
            ranks = clamp_ranks(p.shape, group["rank"])
            return self._random(p, ranks, state["seed"], device, compute_dtype(p.dtype))
        return [state.get(f"U{i}") for i in range(p.dim())]

    def _random(self, p: Tensor, ranks: list[int], seed: int, device: torch.device, dtype: torch.dtype) -> Factors:
        """Random factors of ``p`` for ``seed``: drawn in advance for the step (:meth:`_draw_ahead`) or now."""
        ready = self._drawn.pop((p, seed), None)
        if ready is not None:
            return ready
        return random_factors(p.shape, ranks, seed, device=device, dtype=dtype)

    def _draw_ahead(self, work: list[tuple[dict[str, Any], Tensor]]) -> None:
        """Every random factor this step will build (current subspaces not cached, renewals, first steps),
        drawn together: one counter draw and one batched QR per shape (``random_factors_many``)."""
        wanted: dict[tuple[torch.device, torch.dtype], list[tuple[Tensor, list[int], int]]] = {}
        for group, p in work:
            if group["rank"] is None or p.dim() < 2 or group["projection"] != "random":
                continue
            state, ranks = self.state[p], clamp_ranks(p.shape, group["rank"])
            seeds = []
            if "hist" not in state:
                seeds.append(mix_seed(group["seed"], self._seed_key(p), 0))
            elif self._renews(p, group, state["step"]):
                seeds += [state["seed"], mix_seed(group["seed"], self._seed_key(p), state["renewals"] + 1)]
            elif not (p in self._cache and self._cache[p][0] == state["seed"]):
                seeds.append(state["seed"])
            where = (local(p.grad).device, compute_dtype(p.dtype))
            wanted.setdefault(where, []).extend((p, ranks, seed) for seed in seeds)
        for (device, dtype), items in wanted.items():
            drawn = random_factors_many([(q.shape, r, seed) for q, r, seed in items], device, dtype)
            for (q, _, seed), factors in zip(items, drawn):
                self._drawn[(q, seed)] = factors

    def _keep(self, p: Tensor, group: dict[str, Any], full: Factors, lay: Layout) -> Factors:
        """This rank's rows of the factors, cached until the next renewal if the group asks for it."""
        factors = slice_factors(full, lay.offsets, lay.local_shape)
        if group["cache_factors"] and group["projection"] == "random":
            # Clone the slices: a view would keep the whole factor alive.
            kept = [None if u is None else u.clone() for u in factors]
            self._cache[p] = (self.state[p]["seed"], kept)
            return kept
        self._cache.pop(p, None)
        return factors

    def _local_factors(
        self, p: Tensor, group: dict[str, Any], state: dict[str, Any], lay: Layout, device: torch.device
    ) -> Factors:
        cached = self._cache.get(p)
        if cached is not None and cached[0] == state.get("seed"):
            return cached[1]
        return self._keep(p, group, self._full_factors(p, group, state, device), lay)

    def factor_cache_bytes(self) -> int:
        """Bytes of the cached factors (``cache_factors=True``): memory held between steps, as the state is."""
        return sum(u.numel() * u.element_size() for _, fs in self._cache.values() for u in fs if u is not None)

    def _precondition(self, entries: list[_Entry], device: torch.device, reduce: bool) -> None:
        """Solve (λI + GᵀG) c = w once for the system and set each update to G_p c.

        With ``reduce`` (a partition of the global system, ZeRO), GᵀG and the number of filled rows are summed
        over the ranks, so every rank solves the system of all tensors.
        """
        group = entries[0].group if entries else self._global_group()
        s = group["history"]
        hists = [e.state["hist"] for e in entries]
        gram = history.gram(hists, s, device)  # (s, s) float64; split histories summed over ranks
        filled_local = max((min(e.state["step"], s) for e in entries), default=0)
        ages = torch.arange(s - 1, -1, -1, dtype=torch.float64, device=device)
        if reduce:
            # Filled rows: the largest over the ranks, as a one-hot summed (> 0 where some rank has it).
            onehot = (torch.arange(s + 1, device=device) == filled_local).to(torch.float64)
            packed = torch.cat([gram.reshape(-1), onehot])
            dist.all_reduce(packed, group=self._process_group)
            gram = packed[: s * s].view(s, s)
            present = packed[s * s :] > 0
            filled = (torch.arange(s + 1, device=device) * present).max().to(torch.float64)
        else:
            filled = torch.full((), filled_local, dtype=torch.float64, device=device)
        beta = group["momentum"]
        # Momentum weights over the window, newest last; only filled rows count.
        w = torch.where(ages < filled, beta**ages, torch.zeros((), dtype=torch.float64, device=device))
        w = w / w.sum().clamp_min(1e-300)
        mean_eig = torch.diagonal(gram).sum() / filled.clamp_min(1)
        if group["damping_mode"] == "relative":
            # All-zero history: any λ gives 0; keep λ itself.
            lam = torch.where(mean_eig > 0, group["damping"] * mean_eig, torch.full_like(mean_eig, group["damping"]))
        else:
            lam = torch.full_like(mean_eig, group["damping"])
        c, _ = damped_cholesky_solve(gram, w, lam)
        # c can exceed the float32 range when λ is tiny; apply its direction, then its size.
        c_scale = c.abs().max().clamp_min(1e-300)
        # F⁻¹ m = G c, shape (k,), up to c_scale; a split history gives its columns, gathered whole
        pieces = [(c / c_scale).to(h.dtype) @ local(h) for h in hists]
        for e, update in zip(entries, history.gather(hists, pieces)):
            e.update = update
        eps = group["eps"]
        if group["normalize"] == "rms":
            for e in entries:
                e.update = e.update / (e.update.pow(2).mean().sqrt() + eps)
        else:  # an ablation setting
            updates = ablations.normalize(
                [e.update for e in entries], group["normalize"], c_scale, eps, reduce, self._process_group
            )
            for e, u in zip(entries, updates):
                e.update = u

    def _global_group(self) -> dict[str, Any]:
        return next(g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global")

    def _residual(self, e: _Entry) -> Tensor:
        """The part of this rank's gradient outside the subspace."""
        cshape = core_shape(e.p.shape, e.factors)
        back = project_back_local(e.core.view(cshape), e.factors, e.layout.offsets, e.layout.local_shape)
        return e.grad - back

    def _ortho_directions(self, entries: list[_Entry], ok: Tensor) -> dict[int, Tensor]:
        """The scaled polar factor of each ortho entry's residual (of its momentum's Nesterov direction with
        ``residual_momentum``), this rank's rows: whole matrices here; sharded ones through their owner ranks;
        with ``data_parallel``, each matrix computed by one rank."""
        whole, sharded = [], []
        for e in entries:
            direction = self._residual(e)
            if e.group["residual_momentum"] > 0:
                direction = self._residual_momentum(e, direction, ok)
            (sharded if e.layout.groups else whole).append((e, direction))
        out: dict[int, Tensor] = {}
        if whole:
            parts = [d for _, d in whole]
            if self._data_parallel and dist.is_available() and dist.is_initialized():
                done = ortho_replicated(parts, self._process_group)
            else:
                done = orthogonal.ortho_residuals(parts)
            out.update({id(e): o for (e, _), o in zip(whole, done)})
        by_group: dict[tuple[int, ...], list[tuple[_Entry, Tensor]]] = {}
        for e, d in sharded:
            by_group.setdefault(group_key(e.layout.groups[0]), []).append((e, d))
        for items in by_group.values():
            group = items[0][0].layout.groups[0]
            done = ortho_sharded([d for _, d in items], [e.layout.full_shape for e, _ in items], group)
            out.update({id(e): o for (e, _), o in zip(items, done)})
        return out

    def _apply(self, e: _Entry, ok: Tensor, ortho: Tensor | None = None) -> None:
        group, p, lay = e.group, e.p, e.layout
        update = project_back_local(
            e.update.view(core_shape(p.shape, e.factors)) * group["scale"],
            e.factors,
            lay.offsets,
            lay.local_shape,
        )
        decay = True
        if e.grad is None:  # per_layer: the residual step and the decay were taken in the hook
            decay = group["residual"] == "none"
        elif group["residual"] == "ortho":
            if ortho is not None:  # None: the subspace is the whole tensor, nothing lies outside it
                update = update + group["residual_scale"] * ortho
        elif group["residual"] != "none":  # "sign" or "fira": ablation settings
            residual = self._residual(e)
            if group["residual"] == "sign":
                residual = ablations.sign_residual(residual)
            else:
                residual, norm = ablations.fira_residual(residual, e.update, e.core, e.state["residual_norm"])
                e.state["residual_norm"].copy_(torch.where(ok, norm, e.state["residual_norm"]))
            update = update + group["residual_scale"] * residual
        _write(local(p), update, group, ok, decay=decay)

    def _residual_momentum(self, e: _Entry, residual: Tensor, ok: Tensor) -> Tensor:
        """The residual's Nesterov momentum direction ``(1 − β) R + β M`` with ``M ← β M + (1 − β) R`` (Muon's), its
        buffer whole-size and quantised (``rsngd.compact``; rank-r with the ``residual_rank`` ablation), updated
        only where ``ok``."""
        state, group = e.state, e.group
        beta = group["residual_momentum"]
        if group["residual_momentum_schedule"] == "lr":  # an ablation setting
            state["res_lr_peak"] = max(state.get("res_lr_peak", 0.0), float(group["lr"]))
            beta *= 1.0 - float(group["lr"]) / state["res_lr_peak"] if state["res_lr_peak"] > 0 else 0.0
        if group["residual_rank"] is not None:  # an ablation setting
            if "res_basis" not in state:
                rows, cols = residual.shape[0], residual[0].numel()
                r = min(group["residual_rank"], rows, cols)
                gen = torch.Generator().manual_seed(mix_seed(group["seed"], self._seed_key(e.p), _RESIDUAL_SEED))
                state["res_basis"] = torch.zeros(rows, r, dtype=residual.dtype, device=residual.device)
                state["res_coef"] = torch.randn(cols, r, generator=gen).to(residual)
            direction, basis, coef = orthogonal.lowrank_momentum(residual, state["res_basis"], state["res_coef"], beta)
            state["res_basis"].copy_(torch.where(ok, basis, state["res_basis"]))
            state["res_coef"].copy_(torch.where(ok, coef, state["res_coef"]))
            return direction
        bits = group["residual_bits"]
        if "res_codes" not in state:
            codes, scales = compact.quantize(torch.zeros_like(residual), bits)
            state["res_codes"], state["res_scales"] = _like(e.p, codes), _like(e.p, scales)
        old_codes, old_scales = local(state["res_codes"]), local(state["res_scales"])
        buffer = compact.dequantize(old_codes, old_scales, bits, residual.shape, residual.dtype)
        buffer = torch.lerp(residual, buffer, beta)
        codes, scales = compact.quantize(buffer, bits)
        old_codes.copy_(torch.where(ok, codes, old_codes))
        old_scales.copy_(torch.where(ok, scales, old_scales))
        return torch.lerp(residual, buffer, beta)

    # ----------------------------------------------------------------- AdamW
    def _adamw(self, p: Tensor, group: dict[str, Any], ok: Tensor) -> None:
        if group["adamw_state"] == "light" and p.dim() >= 2:
            self._adamw_light(p, group, ok)
            return
        state = self.state[p]
        dtype = compute_dtype(p.dtype)
        if "exp_avg" not in state:
            state["step"] = 0
            # zeros_like keeps a DTensor's placements: the moments are sharded as the parameter is.
            state["exp_avg"] = torch.zeros_like(p, dtype=dtype)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)
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
        _write(local(p), update, group, ok)

    def _adamw_light(self, p: Tensor, group: dict[str, Any], ok: Tensor) -> None:
        """AdamW with an 8-bit first moment and a factored second moment (``adamw_state="light"``, a matrix).

        The tensor is unfolded to rows (first mode × the rest). Sharded by rows (FSDP2), each rank keeps its rows'
        codes and row means; the column means and the mean of the row means are summed over the shard group."""
        state, lay = self.state[p], layout(p, p.grad)
        if lay.groups and not _row_sharded(lay):
            raise ValueError("adamw_state='light' needs each matrix whole or sharded by rows (FSDP2's Shard(0))")
        dtype = compute_dtype(p.dtype)
        grad = local(p.grad)
        rows, cols = grad.shape[0], math.prod(grad.shape[1:])
        grad, param = grad.reshape(rows, cols), local(p).view(rows, cols)
        if "exp_avg_codes" not in state:
            state["step"] = 0
            codes, scales = compact.quantize(grad.new_zeros(1, cols, dtype=dtype), 8)  # a zero row, repeated
            codes, scales = codes.expand(rows, -1).contiguous(), scales.expand(rows, -1).contiguous()
            state["exp_avg_codes"], state["exp_avg_scales"] = _like(p, codes), _like(p, scales)
            state["v_row"] = _like(p, grad.new_zeros(rows, dtype=dtype))
            state["v_col"] = grad.new_zeros(cols, dtype=dtype)
        beta1, beta2 = group["betas"]
        okf = ok.to(dtype)
        state["step"] += 1
        step = state["step"]
        codes, scales, v_row = local(state["exp_avg_codes"]), local(state["exp_avg_scales"]), local(state["v_row"])
        # Chunks of rows, so that the transients (the gradient in float32, the dequantised moment, the update) stay
        # small beside a large embedding or head; blocks never cross a row, so chunks quantise as the whole.
        per = max(1, max(LIGHT_CHUNK, -(-rows * cols // LIGHT_PIECES)) // max(1, cols))
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
            _write(param[a:b], exp_avg.div_(denom).div_(1 - beta1**step), group, ok)

    # ----------------------------------------------------------------- state
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict exactly: the float32 state is not cast to the parameters' dtype."""
        super().load_state_dict(state_dict)
        self._cache.clear()
        self._keys = None
        self._groups = {p: g for g in self.param_groups for p in g["params"]}  # the loaded groups are new dicts
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params):
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if torch.is_tensor(value):
                    self.state[p][key] = value.to(device=p.device, copy=True)
            if "hist" in self.state[p]:  # a history saved whole and loaded sharded, or the other way round
                self.state[p]["hist"] = history.fit(self.state[p]["hist"], p, layout(p))


class AblationRSNGD(RSNGD):
    """``RSNGD`` that also takes the settings of ``rsngd.ablations`` (``projection="svd"``, ``normalize``,
    ``core_beta2``, ``residual_rank``, ``residual_momentum_schedule``, ``residual="fira"`` / ``"sign"``), as
    arguments or per group: for studies and the benchmark's ablation rows. Also ``rsngd.ablations.AblationRSNGD``."""

    _ablations = True


BATCH_ELEMENTS = 1 << 20
"""Residual entries stacked into one batched Newton–Schulz at most (4 MiB in float32); a larger matrix goes alone."""

LIGHT_CHUNK = 1 << 18
"""Entries of a matrix stepped at once by ``adamw_state="light"`` (whole rows; 1 MiB in float32), or a
:data:`LIGHT_PIECES`-th of a larger matrix: transients stay a small share of the matrix, in a bounded number of
passes (few kernel launches on a GPU)."""

LIGHT_PIECES = 16


def _batches(entries: list[_Entry]) -> list[list[_Entry]]:
    """Entries grouped by shape and dtype, each group cut into batches of at most :data:`BATCH_ELEMENTS`."""
    same: dict[tuple, list[_Entry]] = {}
    for e in entries:
        same.setdefault((tuple(e.grad.shape), e.grad.dtype), []).append(e)
    out = []
    for group in same.values():
        per = max(1, BATCH_ELEMENTS // max(1, group[0].grad.numel()))
        out += [group[i : i + per] for i in range(0, len(group), per)]
    return out


def _outside(e: _Entry) -> bool:
    """Whether part of the tensor lies outside its subspace (a rank below some mode's size)."""
    return e.core.numel() < math.prod(e.layout.full_shape)


def _like(p: Tensor, t: Tensor) -> Tensor:
    """A state tensor of this rank's rows of ``p``: sharded as ``p`` when ``p`` is a DTensor (so distributed
    checkpoints save and reshard it), else ``t`` itself."""
    if not is_dtensor(p):
        return t
    from torch.distributed.tensor import DTensor

    shape = (p.shape[0], *t.shape[1:])
    stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=shape, stride=stride)


def _row_sharded(lay: Layout) -> bool:
    """Whether a layout is whole but for its rows, sharded over one process group (FSDP2's ``Shard(0)``)."""
    return len(lay.groups) == 1 and not lay.average and lay.local_shape[1:] == lay.full_shape[1:]


def _pushed(hist: Tensor, core: Tensor | None) -> Tensor:
    """The history with its oldest row dropped and ``core`` (zeros for None) appended as the newest."""
    new = core.to(hist.dtype)[None] if core is not None else hist.new_zeros(1, hist.shape[1])
    return torch.cat([hist[1:], new])


def _write(param: Tensor, update: Tensor, group: dict[str, Any], ok: Tensor, decay: bool = True) -> None:
    """Decoupled weight decay (unless ``decay`` is False) and ``param -= lr · update``, both only where ``ok``
    (a device flag)."""
    lr = group["lr"]
    if decay and group["weight_decay"] != 0:
        param.mul_(torch.where(ok, 1 - lr * group["weight_decay"], 1.0).to(param.dtype))
    param.add_(torch.where(ok, update, 0.0).to(param.dtype), alpha=-lr)


_WRAPPERS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def name_key(name: str) -> int:
    """A parameter's seed key from its fully-qualified name, ignoring wrappers (DDP's leading ``module.``,
    ``torch.compile``'s ``_orig_mod.``, FSDP1 and activation-checkpoint wrappers), so the same parameter gets
    the same random subspaces however the model is wrapped or partitioned."""
    for w in _WRAPPERS:
        name = name.replace(w, "")
    if name.startswith("module."):
        name = name[len("module.") :]
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") >> 1


def tag_parameter_names(module: torch.nn.Module) -> None:
    """Record each parameter's name on it, for optimizers built from bare parameters.

    ``torch.distributed.optim.ZeroRedundancyOptimizer`` hands each rank's RSNGD only its partition of the
    parameters, without names; tagged parameters still get subspace seeds from their names, so the factors do
    not depend on the world size or the partition. Optimizers given ``named_parameters()`` do not need it.
    """
    for name, p in module.named_parameters():
        p._rsngd_name = name  # type: ignore[attr-defined]
