"""RS-SNGD: random-subspace stochastic natural gradient descent, as a torch optimizer.

Per step, for every tensor with ndim ≥ 2 in a group whose ``rank`` is set:

1. project the gradient onto a Tucker subspace (``rsngd.subspaces``, ``rsngd.projection``) → core, k = Π rᵢ;
2. push the flattened core into a history of the last ``history`` = s cores, the rows of ``hist`` (s × k), so
   ``G = histᵀ``; the newest row is last;
3. precondition with ``F = λI + GGᵀ`` through the s × s system ``λI + GᵀG`` (Cholesky), with a momentum over the
   window that costs no state (``rsngd.woodbury.momentum_weights_solve``);
4. normalise, project back, add the residual step (``rsngd.residual``), and apply.

``fisher="global"`` solves one s × s system for all projected tensors of the optimizer (GᵀG = Σ_p G_pᵀ G_p);
``fisher="tensor"`` solves one per tensor. Tensors with ndim < 2, and every tensor of a group whose ``rank`` is
None, are updated with AdamW (``rsngd.adamw``).

The state holds tensors and Python numbers only: ``hist`` (s × k, float32), integer counters, the seed of the
random subspace. So ``torch.load(..., weights_only=True)`` reads it back and a resumed run continues
bit-identically.

Sharded parameters (DTensor, e.g. FSDP2's ``fully_shard``) are stepped natively: each rank projects its own rows,
the cores of all tensors are summed in one all-reduce, each rank keeps its share of the history's columns
(``rsngd.history``: the s × s Gram matrix and the update's core are summed over the ranks), and each rank writes
its own rows (``rsngd.sharding``); only the residual's owner rank holds a whole matrix, during the step. AdamW
moments of a DTensor parameter are DTensors sharded like it, and so is the split history, so
``torch.distributed.checkpoint`` saves and reshards both.

A step makes no host synchronisation: a gradient that is not finite (on any rank) is a device flag, and the step's
state changes and updates are committed through it, so such a step changes nothing but the ``nonfinite_steps``
count (and the step counters).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from . import adamw, history
from .checks import Checker, check_group
from .per_layer import LayerHooks
from .projection import Factors, change_basis, clamp_ranks, core_shape, project_back_local, project_local
from .residual import batches, ortho_directions, outside, quantised_momentum
from .settings import NAMES, Settings
from .sharding import Layout, Reducer, is_dtensor, layout, local, row_sharded
from .subspaces import Subspaces
from .woodbury import compute_dtype

__all__ = ["RSNGD", "Entry"]


@dataclass
class Entry:
    """A projected tensor taking part in this step."""

    p: Tensor
    group: dict[str, Any]
    state: dict[str, Any]
    grad: Tensor | None  # this rank's gradient, float32 (float64 for float64 parameters); None: taken per layer
    core: Tensor  # projected gradient, flattened (k,); a shard's share until the step's all-reduce
    factors: Factors  # this rank's rows of the factors
    layout: Layout
    update: Tensor | None = None  # preconditioned core (k,)


class RSNGD(Optimizer):
    """Random-subspace stochastic natural gradient descent.

    Args:
        params: parameters or parameter groups; a group may set any of the settings (``**settings``) for itself.
        per_layer: project each matrix's gradient as soon as backward has produced it and free the gradient
            (GaLore's "layerwise" memory saving: projected matrices never hold all their gradients at once); the
            residual step (decay included) is taken there too, and ``step`` then solves and applies the subspace
            step, with the global Fisher exact (the cores, not the gradients, are what it needs). One process only.
            Without a residual, micro-batches accumulate in the cores; with one, one backward per step.
        partitioned: the optimizer holds one rank's partition of the model (as inside ``ZeroRedundancyOptimizer``):
            the global Fisher's sums (GᵀG, filled rows) and the non-finite check are summed over ``process_group``,
            so every rank solves the same system as one process would. Every rank must call ``step`` together.
        data_parallel: the parameters and gradients are the same on every rank of ``process_group`` (DDP): the
            residual's Newton–Schulz work is split among the ranks and the results broadcast.
        process_group: the group of the ranks for ``partitioned``, ``data_parallel`` and for the non-finite check
            with sharded parameters (default: the whole world).
        **settings: any field of :class:`rsngd.settings.Settings` (learning rate, rank, history, damping, the
            residual, the AdamW part…; each documented there), for every group that does not set its own. An unknown
            name is a TypeError.

    Settings that measured no better (other normalisations, Fira and sign residuals, a low-rank residual
    momentum, Adam's denominator on the core, SVD factors) are taken by ``rsngd.ablations.AblationRSNGD``, a
    subclass that overrides the steps they change; this class refuses them, naming it.
    """

    residuals: ClassVar[tuple[str, ...]] = ("none", "ortho")
    """The residual steps this class takes."""
    shared: ClassVar[tuple[str, ...]] = ("history", "damping", "damping_mode", "momentum")
    """Settings every group of the global Fisher system must agree on (it is one s × s system)."""
    refused: ClassVar[dict[str, str]] = {}
    """Settings (``name``, or ``name=value``) another class takes → that class; filled by ``rsngd.ablations``."""
    subspaces: ClassVar[type[Subspaces]] = Subspaces
    """The strategy that draws, renews and caches the projected tensors' factors."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        *,
        per_layer: bool = False,
        partitioned: bool = False,
        data_parallel: bool = False,
        process_group: dist.ProcessGroup | None = None,
        **settings: Any,
    ) -> None:
        unknown = sorted(set(settings) - NAMES)
        if unknown:
            hint = f" ({unknown[0]} is a setting of {self.refused[unknown[0]]})" if unknown[0] in self.refused else ""
            raise TypeError(f"{type(self).__name__} got an unexpected keyword argument {unknown[0]!r}{hint}")
        settings = {**asdict(Settings()), **settings}
        super().__init__(params, {**settings, "nonfinite_steps": 0, **self._more_settings()})
        for group in self.param_groups:
            self._check_group(group)
        global_groups = [g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global"]
        for key in self.shared:
            if len({g[key] for g in global_groups}) > 1:
                raise ValueError(f"groups with fisher='global' share one s × s system and need the same {key}")
        if partitioned and data_parallel:
            raise ValueError("partitioned (ZeRO: each rank steps its own tensors) and data_parallel exclude each other")
        self._partitioned = bool(partitioned)
        self._data_parallel = bool(data_parallel)
        self._process_group = process_group
        self._dist: bool | None = None  # decided at the first step
        self._space = self.subspaces(self)
        self._groups: dict[Tensor, dict[str, Any]] = {p: g for g in self.param_groups for p in g["params"]}
        self._layers = LayerHooks(self) if per_layer else None  # per_layer: the hooks and the cores they gathered

    def _more_settings(self) -> dict[str, Any]:
        """Per-group settings a subclass adds, with their defaults."""
        return {}

    def _check_group(self, group: dict[str, Any]) -> Checker:
        """ValueError naming the argument for any setting that would give NaN parameters or a confusing failure;
        a setting of another class is refused, naming it."""
        for key in group:
            if key in self.refused and key not in self.defaults:
                raise ValueError(
                    f"{key}={group[key]!r} measured no better than the default: it is a setting of {self.refused[key]}"
                )

        def hint(value: Any) -> str:
            home = self.refused.get(f"residual={value!r}")
            return f" (residual={value!r} is a setting of {home})" if home else ""

        return check_group(group, self.residuals, hint)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "_space"):
            self._check_group(self.param_groups[-1])
            self._space.reset()
            self._dist = None
            self._groups = {p: g for g in self.param_groups for p in g["params"]}

    @property
    def nonfinite_steps(self) -> int:
        """Number of (group) steps skipped because a gradient was not finite."""
        return max(int(g["nonfinite_steps"]) for g in self.param_groups)  # a device tensor: reading it syncs

    def factor_cache_bytes(self) -> int:
        """Bytes of the cached factors (``cache_factors=True``): memory held between steps, as the state is."""
        return self._space.cache_bytes()

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
        pending, pending_bad = self._layers.take() if self._layers else ({}, None)  # cores taken as gradients came
        if not work and not pending and not self._distributed():
            return loss
        device = self._device(work, pending)
        entries, adam, ok = self._project(work, pending, pending_bad, device)
        self._precondition_all(entries, pending, ok, device)
        self._apply_all(entries, ok)
        for group, p in adam:
            adamw.adamw_step(p, self.state[p], group, ok)
        return loss

    def _project(
        self,
        work: list[tuple[dict[str, Any], Tensor]],
        pending: dict[Tensor, Tensor],
        pending_bad: Tensor | None,
        device: torch.device,
    ) -> tuple[list[Entry], list[tuple[dict[str, Any], Tensor]], Tensor]:
        """Project every gradient (a shard's share of the core for a sharded one) and sum over the ranks, with the
        non-finite flag. Returns the projected entries, the tensors for AdamW, and ``ok``: every gradient finite."""
        bad = torch.zeros(1, dtype=torch.float64, device=device)
        if work:
            bad += torch.stack([local(p.grad).isfinite().all().logical_not() for _, p in work]).sum()
        if pending_bad is not None:
            bad += pending_bad
        reducer = Reducer()
        if self._distributed():
            reducer.add(bad, [self._process_group])
        entries: list[Entry] = []
        adam: list[tuple[dict[str, Any], Tensor]] = []
        self._space.draw_ahead(work)
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
        self._space.drawn.clear()
        reducer.run()
        ok = bad[0] == 0
        for e in entries:
            e.state["step"] += 1
            if e.layout.average:
                e.core /= math.prod(dist.get_world_size(g) for g in e.layout.groups)
        self._count_nonfinite(ok)
        return entries, adam, ok

    def _precondition_all(self, entries: list[Entry], pending: dict[Tensor, Tensor], ok: Tensor, device) -> None:
        """Push the cores to the histories (committed only if ok), then solve one Fisher system per tensor or for
        all (a zero row for the global system's tensors without a gradient this step)."""
        systems: dict[str, list[Entry]] = {"global": []}
        for e in entries:
            lo, hi = history.columns(e.state["hist"])
            hist = local(e.state["hist"])  # this rank's columns of a split history
            hist.copy_(torch.where(ok, history.pushed(hist, e.core[lo:hi]), hist))
            key = "global" if e.group["fisher"] == "global" else f"tensor{id(e.p)}"
            systems.setdefault(key, []).append(e)
        for group in self.param_groups:
            if group["rank"] is not None and group["fisher"] == "global":
                for p in group["params"]:
                    if p.grad is None and p not in pending and "hist" in self.state[p]:
                        hist = local(self.state[p]["hist"])
                        hist.copy_(torch.where(ok, history.pushed(hist, None), hist))
        if self._partitioned and any(g["rank"] is not None and g["fisher"] == "global" for g in self.param_groups):
            self._precondition(systems["global"], device, reduce=True)  # every rank joins the sums
        elif systems["global"]:
            self._precondition(systems["global"], device, reduce=False)
        for key, es in systems.items():
            if key != "global":
                self._precondition(es, device, reduce=False)

    def _apply_all(self, entries: list[Entry], ok: Tensor) -> None:
        """Apply every projected update with its residual step; each rank writes its own rows; nothing changes
        unless ok."""
        stepped = [
            e for e in entries if e.grad is not None and e.group["residual"] == "ortho" and outside(e.core, e.layout)
        ]
        spread = self._data_parallel and dist.is_available() and dist.is_initialized()
        together = [e for e in stepped if spread or e.layout.groups]  # their collectives need every matrix at once
        ortho = self._ortho_directions(together, ok) if together else {}
        # The rest go in batches of one shape, each applied before the next is formed: a step holds at most
        # one batch of residuals besides the gradients.
        alone = {id(e) for e in stepped} - {id(e) for e in together}
        rest = [e for e in stepped if id(e) in alone]
        for batch in batches(rest, [e.grad for e in rest]):
            ortho.update(self._ortho_directions(batch, ok))
            for e in batch:
                self._apply(e, ok, ortho.pop(id(e)))
        for e in entries:
            if id(e) not in alone:
                self._apply(e, ok, ortho.get(id(e)))

    def _distributed(self) -> bool:
        """Whether this step needs collectives: sharded parameters, or a partition of the model (ZeRO)."""
        if self._dist is None:
            initialised = dist.is_available() and dist.is_initialized()
            sharded = any(is_dtensor(p) for g in self.param_groups for p in g["params"])
            if self._partitioned and not initialised:
                raise RuntimeError("RSNGD(partitioned=True) needs torch.distributed to be initialised")
            self._dist = initialised and (sharded or self._partitioned)
        return self._dist

    def _device(self, work: list[tuple[dict[str, Any], Tensor]], pending: dict[Tensor, Tensor]) -> torch.device:
        """Where the step's flags live: the first gradient's device, a gathered core's, or the first parameter's."""
        if work:
            return local(work[0][1].grad).device
        if pending:
            return next(iter(pending.values())).device
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
    def _check_layout(self, group: dict[str, Any], lay: Layout) -> None:
        """ValueError for a layout the group's residual step cannot take."""
        if group["residual"] != "none" and lay.groups and not row_sharded(lay):
            raise ValueError(
                f"residual={group['residual']!r} needs each gradient whole or sharded by rows on one mesh dimension "
                "(FSDP2's Shard(0)); use residual='none' for this layout"
            )

    def _prepare(self, p: Tensor, group: dict[str, Any]) -> Entry:
        """Initialise or renew the subspace and project this rank's part of the gradient."""
        state = self.state[p]
        lay = layout(p, p.grad)
        grad = local(p.grad).to(compute_dtype(p.dtype))  # float32, or float64 for float64 parameters
        self._check_layout(group, lay)
        if "hist" not in state:
            factors = self._start(p, group, grad, lay)
        elif self._space.renews(p, group, state["step"]):
            factors = self._renew(p, group, grad, lay)
        else:
            factors = self._space.current(p, group, lay, grad.device)
        core = project_local(grad, factors, lay.offsets, lay.full_shape).reshape(-1).contiguous()
        return Entry(p=p, group=group, state=state, grad=grad, core=core, factors=factors, layout=lay)

    def _start(self, p: Tensor, group: dict[str, Any], grad: Tensor, lay: Layout) -> Factors:
        """A tensor's first subspace and empty history; this rank's rows of its factors."""
        state = self.state[p]
        state["step"] = 0
        state["basis_step"] = 0
        state["renewals"] = 0
        full = self._space.new(p, group, grad, clamp_ranks(p.shape, group["rank"]), renewal=0)
        k = math.prod(core_shape(p.shape, full))
        state["hist"] = history.new(p, lay, group["history"], k, grad.dtype, grad.device)  # split by columns (FSDP2)
        return self._space.keep(p, group, full, lay)

    def _renew(self, p: Tensor, group: dict[str, Any], grad: Tensor, lay: Layout) -> Factors:
        """A new subspace, the history carried into its basis; this rank's rows of its factors."""
        state, s = self.state[p], group["history"]
        old = self._space.full(p, group, state, grad.device)
        state["renewals"] += 1
        full = self._space.new(p, group, grad, clamp_ranks(p.shape, group["rank"]), renewal=state["renewals"])
        cshape = core_shape(p.shape, full)
        hist = history.whole(state["hist"]).view(s, *cshape)  # a split history is gathered for the change of basis
        changed = change_basis(hist, old, full, batch_dims=1).reshape(s, -1).contiguous()
        state["hist"] = history.like(state["hist"], changed)
        state["basis_step"] = state["step"]
        return self._space.keep(p, group, full, lay)

    def _pending_entry(self, p: Tensor, core: Tensor) -> Entry:
        """The entry of a tensor whose gradient was projected (and freed) by the per-layer hook."""
        group, state = self._groups[p], self.state[p]
        lay = layout(p)
        factors = self._space.current(p, group, lay, core.device)
        return Entry(p=p, group=group, state=state, grad=None, core=core, factors=factors, layout=lay)

    def _precondition(self, entries: list[Entry], device: torch.device, reduce: bool) -> None:
        """Set each entry's update to its part of F⁻¹m for one Fisher system (``history.natural_direction``; with
        ``reduce``, the system of every rank's partition), normalised."""
        group = entries[0].group if entries else self._global_group()
        hists = [e.state["hist"] for e in entries]
        filled = max((min(e.state["step"], group["history"]) for e in entries), default=0)
        updates, c_scale = history.natural_direction(hists, filled, group, device, reduce, self._process_group)
        for e, update in zip(entries, self._normalize(updates, group, c_scale, reduce)):
            e.update = update

    def _normalize(self, updates: list[Tensor], group: dict[str, Any], c_scale: Tensor, reduce: bool) -> list[Tensor]:
        """Each preconditioned core (known up to ``c_scale``) scaled to unit RMS."""
        return [u / (u.pow(2).mean().sqrt() + group["eps"]) for u in updates]

    def _global_group(self) -> dict[str, Any]:
        return next(g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global")

    def _residual(self, e: Entry) -> Tensor:
        """The part of this rank's gradient outside the subspace."""
        cshape = core_shape(e.p.shape, e.factors)
        back = project_back_local(e.core.view(cshape), e.factors, e.layout.offsets, e.layout.local_shape)
        return e.grad - back

    def _ortho_directions(self, entries: list[Entry], ok: Tensor) -> dict[int, Tensor]:
        """The scaled polar factor of each entry's residual (of its momentum's Nesterov direction with
        ``residual_momentum``), this rank's rows, by ``id`` of the entry."""
        directions = []
        for e in entries:
            direction = self._residual(e)
            if e.group["residual_momentum"] > 0:
                direction = self._residual_momentum(e, direction, ok)
            directions.append(direction)
        done = ortho_directions(directions, [e.layout for e in entries], self._data_parallel, self._process_group)
        return {id(e): o for e, o in zip(entries, done)}

    def _residual_momentum(self, e: Entry, residual: Tensor, ok: Tensor) -> Tensor:
        """The residual's Nesterov momentum direction, its buffer whole-size and quantised (``residual_bits``)."""
        group = e.group
        return quantised_momentum(e.p, e.state, residual, group["residual_momentum"], group["residual_bits"], ok)

    def _residual_update(self, e: Entry, ok: Tensor, ortho: Tensor | None) -> Tensor | None:
        """What the residual adds to the projected update (None: nothing)."""
        if e.group["residual"] == "ortho" and ortho is not None:  # None: the subspace is the whole tensor
            return e.group["residual_scale"] * ortho
        return None

    def _apply(self, e: Entry, ok: Tensor, ortho: Tensor | None = None) -> None:
        group, lay = e.group, e.layout
        update = project_back_local(
            e.update.view(core_shape(e.p.shape, e.factors)) * group["scale"], e.factors, lay.offsets, lay.local_shape
        )
        decay = True
        if e.grad is None:  # per_layer: the residual step and the decay were taken in the hook
            decay = group["residual"] == "none"
        else:
            extra = self._residual_update(e, ok, ortho)
            if extra is not None:
                update = update + extra
        adamw.write(local(e.p), update, group, ok, decay=decay)

    # ----------------------------------------------------------------- state
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict exactly: the float32 state is not cast to the parameters' dtype."""
        super().load_state_dict(state_dict)
        self._space.reset()
        self._groups = {p: g for g in self.param_groups for p in g["params"]}  # the loaded groups are new dicts
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params):
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if torch.is_tensor(value):
                    self.state[p][key] = value.to(device=p.device, copy=True)
            if "hist" in self.state[p]:  # a history saved whole and loaded sharded, or the other way round
                self.state[p]["hist"] = history.fit(self.state[p]["hist"], p, layout(p))
