"""The random subspaces of RS-SNGD's projected tensors: their seeds, renewals, drawing and caching.

A tensor's subspace is a set of random orthonormal factors (``rsngd.projection``), regenerated from a seed on
each step (no factor memory) or cached between renewals (``cache_factors``). The seed mixes the group's ``seed``,
a key of the tensor (from its name when the optimizer knows it, so the subspaces do not depend on wrappers, the
world size or how the tensor is sharded; else its position) and the renewal count.

:class:`Subspaces` is the strategy object :class:`rsngd.RSNGD` holds for this; ``rsngd.ablations`` overrides it
for factors that are not drawn from a seed (``projection="svd"``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .projection import Factors, clamp_ranks, mix_seed, random_factors, random_factors_many, slice_factors
from .sharding import Layout, local
from .woodbury import compute_dtype

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

__all__ = ["Subspaces", "name_key", "tag_parameter_names"]


class Subspaces:
    """Factors of the projected tensors of one optimizer (its ``state`` and ``param_groups``)."""

    def __init__(self, opt: Optimizer) -> None:
        self.opt = opt
        self.keys: dict[Tensor, int] | None = None  # seed key per parameter, built at the first step
        self.cache: dict[Tensor, tuple[int, Factors]] = {}  # cache_factors: (seed, this rank's factor rows)
        self.drawn: dict[tuple[Tensor, int], Factors] = {}  # factors drawn ahead for the current step

    def reset(self) -> None:
        """Forget the keys and the cache (new parameter groups, or a loaded state)."""
        self.keys = None
        self.cache.clear()

    def seed_key(self, p: Tensor) -> int:
        """A stable number for ``p``: from its name when the optimizer knows it, else its place in the groups."""
        if self.keys is None:
            self.keys = {}
            index = 0
            for g in self.opt.param_groups:
                names = g.get("param_names")
                for i, q in enumerate(g["params"]):
                    name = names[i] if names is not None else getattr(q, "_rsngd_name", None)
                    self.keys[q] = name_key(name) if name is not None else index
                    index += 1
        return self.keys[p]

    def renews(self, p: Tensor, group: dict[str, Any], step: int) -> bool:
        """Whether ``p`` gets a new subspace before its step number ``step`` (every ``update_gap`` steps).

        With ``stagger_renewals`` each tensor's renewals are shifted by a phase in [0, update_gap) taken from its
        seed key (consecutive tensors get consecutive phases when keyed by position), so a step renews about
        1/update_gap of the tensors instead of all of them at once.
        """
        gap = group["update_gap"]
        phase = self.seed_key(p) % gap if group["stagger_renewals"] else 0
        return step > 0 and (step + phase) % gap == 0 and self.opt.state[p]["basis_step"] != step

    def seeded(self, group: dict[str, Any]) -> bool:
        """Whether the group's factors are drawn from a seed (so they can be drawn ahead, cached, regenerated)."""
        return True

    def new(self, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> Factors:
        """Whole factors of a new subspace; its seed goes to the state."""
        state = self.opt.state[p]
        state["seed"] = mix_seed(group["seed"], self.seed_key(p), renewal)
        return self._random(p, ranks, state["seed"], grad.device, grad.dtype)

    def full(self, p: Tensor, group: dict[str, Any], state: dict[str, Any], device: torch.device) -> Factors:
        """The current whole factors, regenerated from the seed."""
        ranks = clamp_ranks(p.shape, group["rank"])
        return self._random(p, ranks, state["seed"], device, compute_dtype(p.dtype))

    def _random(self, p: Tensor, ranks: list[int], seed: int, device: torch.device, dtype: torch.dtype) -> Factors:
        """Random factors of ``p`` for ``seed``: drawn in advance for the step (:meth:`draw_ahead`) or now."""
        ready = self.drawn.pop((p, seed), None)
        if ready is not None:
            return ready
        return random_factors(p.shape, ranks, seed, device=device, dtype=dtype)

    def draw_ahead(self, work: list[tuple[dict[str, Any], Tensor]]) -> None:
        """Every random factor this step will build (current subspaces not cached, renewals, first steps),
        drawn together: one counter draw and one batched QR per shape (``random_factors_many``)."""
        wanted: dict[tuple[torch.device, torch.dtype], list[tuple[Tensor, list[int], int]]] = {}
        for group, p in work:
            if group["rank"] is None or p.dim() < 2 or not self.seeded(group):
                continue
            state, ranks = self.opt.state[p], clamp_ranks(p.shape, group["rank"])
            seeds = []
            if "hist" not in state:
                seeds.append(mix_seed(group["seed"], self.seed_key(p), 0))
            elif self.renews(p, group, state["step"]):
                seeds += [state["seed"], mix_seed(group["seed"], self.seed_key(p), state["renewals"] + 1)]
            elif not (p in self.cache and self.cache[p][0] == state["seed"]):
                seeds.append(state["seed"])
            where = (local(p.grad).device, compute_dtype(p.dtype))
            wanted.setdefault(where, []).extend((p, ranks, seed) for seed in seeds)
        for (device, dtype), items in wanted.items():
            drawn = random_factors_many([(q.shape, r, seed) for q, r, seed in items], device, dtype)
            for (q, _, seed), factors in zip(items, drawn):
                self.drawn[(q, seed)] = factors

    def keep(self, p: Tensor, group: dict[str, Any], full: Factors, lay: Layout) -> Factors:
        """This rank's rows of the factors, cached until the next renewal if the group asks for it."""
        factors = slice_factors(full, lay.offsets, lay.local_shape)
        if group["cache_factors"] and self.seeded(group):
            # Clone the slices: a view would keep the whole factor alive.
            kept = [None if u is None else u.clone() for u in factors]
            self.cache[p] = (self.opt.state[p]["seed"], kept)
            return kept
        self.cache.pop(p, None)
        return factors

    def current(self, p: Tensor, group: dict[str, Any], lay: Layout, device: torch.device) -> Factors:
        """This rank's rows of the current factors: cached, or regenerated."""
        state = self.opt.state[p]
        cached = self.cache.get(p)
        if cached is not None and cached[0] == state.get("seed"):
            return cached[1]
        return self.keep(p, group, self.full(p, group, state, device), lay)

    def cache_bytes(self) -> int:
        """Bytes of the cached factors (``cache_factors=True``)."""
        return sum(u.numel() * u.element_size() for _, fs in self.cache.values() for u in fs if u is not None)


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
