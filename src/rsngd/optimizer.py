"""RS-SNGD: random-subspace stochastic natural gradient descent, as a torch optimizer.

Per step, for every tensor with ndim ≥ 2 in a group whose ``rank`` is set:

1. project the gradient onto a Tucker subspace (``rsngd.subspaces``, ``rsngd.projection``) → core, k = Π rᵢ;
2. push the flattened core into a history of the last ``history`` = s cores, the rows of ``hist`` (s × k), so
   ``G = histᵀ``; the newest row is last;
3. precondition with ``F = λI + GGᵀ`` through the s × s system ``λI + GᵀG`` (Cholesky), with a momentum over the
   window that costs no state (``rsngd.woodbury.momentum_weights_solve``);
4. normalise, project back, add the residual step (``rsngd.residual``), and apply.

The step runs in two passes over batches of same-shape tensors (``rsngd.batches``): pass 1 reads each gradient as
it is and keeps only its core; after the one s × s solve, pass 2 reads each batch's gradients again, forms their
residuals, orthogonalises them together and writes the updates, freeing the batch's temporaries before the next.
A step's temporaries are bounded by one batch (``batch_memory``), never by the model; on an accelerator its matmuls
run in bfloat16 (``precision``); the subspaces' factors are drawn from device-side counter keys and orthonormalised
by matmuls, so a step that renews nothing makes no QR and no host→device copy.

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
from dataclasses import asdict
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from . import adamw, history, strategies
from .batches import Entry, apply_chunk, apply_together, plan, project_batch
from .budget import item_bytes
from .checks import Checker, check_group
from .per_layer import LayerHooks
from .projection import change_basis, clamp_ranks
from .settings import NAMES, Settings
from .sharding import Layout, Reducer, is_dtensor, layout, local, row_sharded
from .subspaces import Subspaces

__all__ = ["RSNGD", "Entry"]


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

    The step's variation points (the normalisation of the preconditioned cores, the residual step, the subspaces'
    factors) are strategies chosen by settings (``rsngd.strategies``). Those that measured no better (other
    normalisations, Fira and sign residuals, a low-rank residual momentum, Adam's denominator on the core, SVD
    factors) are registered by ``rsngd.ablations`` and taken by its ``AblationRSNGD``; this class refuses them,
    naming it.
    """

    extra_settings: ClassVar[dict[str, Any]] = {}
    """Settings this class takes beyond :class:`Settings`, with their defaults (``AblationRSNGD``'s)."""

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
        known = NAMES | set(self.extra_settings)
        unknown = sorted(set(settings) - known)
        if unknown:
            owner = strategies.owner_of_setting(unknown[0])
            hint = f" ({unknown[0]} is a setting of {owner})" if owner else ""
            raise TypeError(f"{type(self).__name__} got an unexpected keyword argument {unknown[0]!r}{hint}")
        settings = {**asdict(Settings()), **self.extra_settings, **settings}
        super().__init__(params, {**settings, "nonfinite_steps": 0})
        for group in self.param_groups:
            self._check_group(group)
        global_groups = [g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global"]
        for key in strategies.shared_settings(self.extra_settings):
            if len({g[key] for g in global_groups}) > 1:
                raise ValueError(f"groups with fisher='global' share one s × s system and need the same {key}")
        if partitioned and data_parallel:
            raise ValueError("partitioned (ZeRO: each rank steps its own tensors) and data_parallel exclude each other")
        self._partitioned = bool(partitioned)
        self._data_parallel = bool(data_parallel)
        self._process_group = process_group
        self._dist: bool | None = None  # decided at the first step
        self._largest = 0  # the item bytes of the largest projected tensor of the last step (``rsngd.budget``)
        self._space = Subspaces(self)  # asks each group's ``factors`` strategy where its factors come from
        self._groups: dict[Tensor, dict[str, Any]] = {p: g for g in self.param_groups for p in g["params"]}
        self._layers = LayerHooks(self) if per_layer else None  # per_layer: the hooks and the cores they gathered

    def _check_group(self, group: dict[str, Any]) -> Checker:
        """ValueError naming the argument for any setting that would give NaN parameters or a confusing failure;
        a setting or strategy of another class is refused, naming it."""
        for key in group:
            owner = strategies.owner_of_setting(key)
            if owner and key not in self.defaults:
                raise ValueError(
                    f"{key}={group[key]!r} measured no better than the default: it is a setting of {owner}"
                )
        c = check_group(group, strategies.residuals(self.extra_settings), strategies.residual_hint)
        strategies.check_extra(c, group, self.extra_settings)
        return c

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

    def factor_cache_bytes(self, params: Iterable[Tensor] | None = None) -> int:
        """Bytes of the cached factors (``cache_factors=True``; of ``params`` only, if given): memory held between
        steps, as the state is, and counted in ``rsngd.optimizer_state_bytes``."""
        return self._space.cache_bytes(params)

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
        adamw.adamw_steps(adam, self.state, ok, self._largest)
        return loss

    def _project(
        self,
        work: list[tuple[dict[str, Any], Tensor]],
        pending: dict[Tensor, Tensor],
        pending_bad: Tensor | None,
        device: torch.device,
    ) -> tuple[list[Entry], list[tuple[dict[str, Any], Tensor]], Tensor]:
        """Pass 1: every gradient's core (a shard's share for a sharded one), batch by batch, summed over the ranks
        with the non-finite flag. Returns the projected entries, the tensors for AdamW, and ``ok``: every gradient
        finite."""
        bad = torch.zeros(1, dtype=torch.float64, device=device)
        if work:
            by_dtype: dict[torch.dtype, list[Tensor]] = {}
            for n in torch._foreach_norm([local(p.grad) for _, p in work]):  # not finite: NaN, inf or overflow
                by_dtype.setdefault(n.dtype, []).append(n)
            for norms in by_dtype.values():
                bad += torch.stack(norms).isfinite().logical_not().sum()
        if pending_bad is not None:
            bad += pending_bad
        reducer = Reducer()
        early = None if self._distributed() else bad[0] == 0  # known now: each core goes to its history at once
        if early is None:
            reducer.add(bad, [self._process_group])
        adam = [(g, p) for g, p in work if g["rank"] is None or p.dim() < 2]
        projected = [(g, p) for g, p in work if g["rank"] is not None and p.dim() >= 2]
        entries: list[Entry] = []
        chunks = plan(projected, self._layout_of, self._mdtype)
        self._largest = max(
            (item_bytes(self._layout_of(p).local_shape, self._mdtype(p)) for _, p in projected), default=0
        )
        for chunk in chunks:
            entries += self._project_chunk(chunk, early)
        for e in entries:
            if e.layout.groups:
                reducer.add(e.core, e.layout.groups)
        entries += [self._pending_entry(p, core) for p, core in pending.items()]
        reducer.run()
        ok = bad[0] == 0
        for e in entries:
            e.state["step"] += 1
            if e.layout.average:
                e.core /= math.prod(dist.get_world_size(g) for g in e.layout.groups)
        self._count_nonfinite(ok)
        return entries, adam, ok

    def _project_chunk(
        self, chunk: list[list[tuple[dict[str, Any], Tensor]]], ok: Tensor | None, keep: list | None = None
    ) -> list[Entry]:
        """The entries of one chunk (batches of tensors of one group, shape and layout): subspaces started or
        renewed where due, then their factors drawn together and the gradients projected batch by batch; with
        ``ok`` known (one process), each core pushed to its history at once, so no core is held across the pass.
        ``keep``: a list that receives the chunk's factors (the per-layer hook uses them again)."""
        batch = [item for b in chunk for item in b]
        group = batch[0][0]
        lay = self._layout_of(batch[0][1])
        for _, p in batch:
            self._check_layout(group, lay)
            state = self.state[p]
            if "hist" not in state:
                self._start(p, group, lay)
            elif self._space.renews(p, group, state["step"]):
                self._renew(p, group)
        ps = [p for _, p in batch]
        dtype = self._mdtype(ps[0])
        factors = self._space.stack(ps, group, lay, local(ps[0].grad).device, dtype)
        grads = [[local(p.grad) for _, p in b] for b in chunk]
        cores = project_batch(grads, factors, lay, dtype, history.dtype_of(ps[0]))
        if keep is not None:
            keep.append(factors)
        entries = [Entry(p, group, self.state[p], lay, core) for p, core in zip(ps, cores)]
        if ok is not None:
            for e in entries:
                self._push(e, ok)
        return entries

    def _push(self, e: Entry, ok: Tensor) -> None:
        """The entry's core into its history (this rank's columns of a split one), committed only if ok; a whole
        history's newest row then stands for the core."""
        lo, hi = history.columns(e.state["hist"])
        history.push(local(e.state["hist"]), e.core[lo:hi], ok)
        if not is_dtensor(e.state["hist"]):
            e.core = e.state["hist"][-1]  # the core, or (when not ok, nothing applied) the row before it
        e.pushed = True

    def _precondition_all(self, entries: list[Entry], pending: dict[Tensor, Tensor], ok: Tensor, device) -> None:
        """Push the cores to the histories (committed only if ok), then solve one Fisher system per tensor or for
        all (a zero row for the global system's tensors without a gradient this step)."""
        systems: dict[str, list[Entry]] = {"global": []}
        for e in entries:
            if not e.pushed:
                self._push(e, ok)
            key = "global" if e.group["fisher"] == "global" else f"tensor{id(e.p)}"
            systems.setdefault(key, []).append(e)
        for group in self.param_groups:
            if group["rank"] is not None and group["fisher"] == "global":
                for p in group["params"]:
                    if p.grad is None and p not in pending and "hist" in self.state[p]:
                        history.push(local(self.state[p]["hist"]), None, ok)
        if self._partitioned and any(g["rank"] is not None and g["fisher"] == "global" for g in self.param_groups):
            self._precondition(systems["global"], device, reduce=True)  # every rank joins the sums
        elif systems["global"]:
            self._precondition(systems["global"], device, reduce=False)
        for key, es in systems.items():
            if key != "global":
                self._precondition(es, device, reduce=False)
        strategies.after_precondition(self, entries, ok)

    def _apply_all(self, entries: list[Entry], ok: Tensor) -> None:
        """Pass 2: apply every projected update with its residual step, batch by batch; each rank writes its own
        rows; nothing changes unless ok. Entries whose residuals need collectives (sharded parameters, or
        ``data_parallel``) are taken together first."""
        spread = self._data_parallel and dist.is_available() and dist.is_initialized()
        together = [
            e
            for e in entries
            if e.taken_here and e.group["residual"] == "ortho" and e.outside and (spread or e.layout.groups)
        ]
        if together:
            apply_together(self, together, ok, spread)
        done = {id(e) for e in together}
        rest = [e for e in entries if id(e) not in done]
        for chunk in plan(rest, self._layout_of, self._mdtype, key=lambda e: (e.group, e.p)):
            apply_chunk(self, chunk, ok)

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
    def _mdtype(self, p: Tensor) -> torch.dtype:
        """The dtype of the step's matmuls for ``p`` (its group's ``precision``)."""
        return strategies.matmul_dtype(self._groups[p]["precision"], p.dtype, local(p).device)

    def _layout_of(self, p: Tensor) -> Layout:
        return layout(p, p.grad)

    def _check_layout(self, group: dict[str, Any], lay: Layout) -> None:
        """ValueError for a layout the group's residual step cannot take."""
        if group["residual"] != "none" and lay.groups and not row_sharded(lay):
            raise ValueError(
                f"residual={group['residual']!r} needs each gradient whole or sharded by rows on one mesh dimension "
                "(FSDP2's Shard(0)); use residual='none' for this layout"
            )
        strategies.check_layout(group, lay)

    def _start(self, p: Tensor, group: dict[str, Any], lay: Layout) -> None:
        """A tensor's first subspace and empty history (split by columns under FSDP2)."""
        state = self.state[p]
        state["step"] = 0
        state["basis_step"] = 0
        state["renewals"] = 0
        ranks = clamp_ranks(p.shape, group["rank"])
        self._space.new(p, group, local(p.grad), ranks, renewal=0)
        k = math.prod(ranks)
        grad = local(p.grad)
        state["hist"] = history.new(p, lay, group["history"], k, history.dtype_of(p), grad.device)
        strategies.on_start(self, p, group)

    def _renew(self, p: Tensor, group: dict[str, Any]) -> None:
        """A new subspace, the history carried into its basis."""
        state, s = self.state[p], group["history"]
        device = local(p.grad).device
        old = self._space.full(p, group, state, device)
        state["renewals"] += 1
        ranks = clamp_ranks(p.shape, group["rank"])
        self._space.new(p, group, local(p.grad), ranks, renewal=state["renewals"])
        new = self._space.full(p, group, state, device)
        hist = history.whole(state["hist"]).view(s, *ranks)  # a split history is gathered for the change of basis
        changed = change_basis(hist, old, new, batch_dims=1).reshape(s, -1).contiguous()
        state["hist"] = history.like(state["hist"], changed)
        state["basis_step"] = state["step"]
        strategies.on_renew(self, p, group)

    def _pending_entry(self, p: Tensor, core: Tensor) -> Entry:
        """The entry of a tensor whose gradient was projected (and freed) by the per-layer hook."""
        return Entry(p, self._groups[p], self.state[p], layout(p), core, taken_here=False)

    def _precondition(self, entries: list[Entry], device: torch.device, reduce: bool) -> None:
        """Set each entry's update to its part of F⁻¹m for one Fisher system (``history.natural_direction``; with
        ``reduce``, the system of every rank's partition), normalised by the group's normaliser."""
        group = entries[0].group if entries else self._global_group()
        hists = [e.state["hist"] for e in entries]
        filled = max((min(e.state["step"], group["history"]) for e in entries), default=0)
        c, c_scale = history.solve(hists, filled, group, device, reduce, self._process_group)
        if strategies.lazy(group) and not any(is_dtensor(h) for h in hists):
            cast = {dtype: c.to(dtype) for dtype in {h.dtype for h in hists}}
            for e in entries:  # pass 2 forms G_p c and its RMS batch by batch
                e.coef = cast[e.state["hist"].dtype]
            return
        updates = history.directions(hists, c)
        updates, divisors = strategies.normalizer(group)(updates, group, c_scale, reduce, self._process_group)
        for i, e in enumerate(entries):
            e.update, e.divisor = updates[i], None if divisors is None else divisors[i]

    def _global_group(self) -> dict[str, Any]:
        return next(g for g in self.param_groups if g["rank"] is not None and g["fisher"] == "global")

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
