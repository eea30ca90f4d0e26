"""The random subspaces of RS-SNGD's projected tensors: their seeds, renewals, drawing and caching.

A tensor's subspace is a set of random orthonormal factors (``rsngd.projection``), regenerated from a seed on
each step (no factor memory) or cached between renewals (``cache_factors``). The seed mixes the group's ``seed``,
a key of the tensor (from its name when the optimizer knows it, so the subspaces do not depend on wrappers, the
world size or how the tensor is sharded; else its position) and the renewal count.

:class:`Subspaces` is the strategy object :class:`rsngd.RSNGD` holds for this. Factors that are not drawn from a
seed come from the ``factors`` strategy of the group's ``projection`` (``rsngd.strategies``; ``rsngd.ablations``
registers ``"svd"``), which this class then asks for them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from . import strategies
from .projection import (
    Factors,
    clamp_ranks,
    factor_key,
    keyed_normal,
    mix_seed,
    orthonormalize,
    orthonormalize_narrow,
    random_factors,
)
from .sharding import Layout
from .woodbury import compute_dtype

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

__all__ = ["Subspaces", "name_key", "tag_parameter_names"]

NARROW = True
"""Factors kept in a narrower dtype than their work dtype (bfloat16 on a GPU) are orthonormalised with that dtype's
matmuls (``rsngd.projection.orthonormalize_narrow``); False: by float32 Cholesky QR, then rounded."""


class Subspaces:
    """Factors of the projected tensors of one optimizer (its ``state`` and ``param_groups``)."""

    def __init__(self, opt: Optimizer) -> None:
        self.opt = opt
        self.keys: dict[Tensor, int] | None = None  # seed key per parameter, built at the first step
        self.cache: dict[Tensor, tuple[int, Factors]] = {}  # cache_factors: (seed, this rank's factor rows)
        self.device_keys: dict[Tensor, tuple[int, Tensor]] = {}  # (seed, each mode's counter key on the device)

    def reset(self) -> None:
        """Forget the keys and the cache (new parameter groups, or a loaded state)."""
        self.keys = None
        self.cache.clear()
        self.device_keys.clear()

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
        """Whether the group's factors are drawn from a seed (so they can be cached and regenerated): the
        ``factors`` strategy of its ``projection`` is this class's own."""
        return strategies.factors(group) is None

    @torch.compiler.disable  # host integer arithmetic on 64-bit seeds: run eagerly under torch.compile
    def new(self, p: Tensor, group: dict[str, Any], grad: Tensor, ranks: list[int], renewal: int) -> None:
        """A new subspace for ``p``: its seed in the state (another ``factors`` strategy makes its own)."""
        source = strategies.factors(group)
        if source is not None:
            source.new(self.opt, p, group, grad, ranks, renewal)
            return
        self.opt.state[p]["seed"] = mix_seed(group["seed"], self.seed_key(p), renewal)

    @torch.compiler.disable  # host integer arithmetic on 64-bit seeds: run eagerly under torch.compile
    def full(self, p: Tensor, group: dict[str, Any], state: dict[str, Any], device: torch.device) -> Factors:
        """The current whole factors in ``p``'s compute dtype, regenerated from the seed."""
        source = strategies.factors(group)
        if source is not None:
            return source.full(self.opt, p, group, state, device)
        ranks = clamp_ranks(p.shape, group["rank"])
        return random_factors(p.shape, ranks, state["seed"], device=device, dtype=compute_dtype(p.dtype))

    def stack(self, ps: list[Tensor], group: dict[str, Any], lay: Layout, device: torch.device, dtype) -> Factors:
        """This rank's rows of the current factors of ``ps`` (tensors of one shape and layout), each mode's stacked
        (B, rows, rank) in ``dtype``, or None for a mode kept whole: from the cache, or drawn for all at once from
        counter keys kept on the device (no QR, no host→device copy unless a seed changed)."""
        source = strategies.factors(group)
        if source is not None:
            return source.stack(self.opt, ps, group, lay, device, dtype)
        ranks = clamp_ranks(ps[0].shape, group["rank"])
        keep = group["cache_factors"]
        missing = [p for p in ps if not (keep and self._cached(p))]
        if missing:
            drawn = self._draw(missing, ranks, lay, device, dtype)
            if not keep:
                return drawn
            for i, p in enumerate(missing):
                self.cache[p] = (self.opt.state[p]["seed"], [None if f is None else f[i].clone() for f in drawn])
        parts = [self.cache[p][1] for p in ps]
        return [None if parts[0][m] is None else torch.stack([f[m] for f in parts]) for m in range(len(ranks))]

    def _cached(self, p: Tensor) -> bool:
        hit = self.cache.get(p)
        return hit is not None and hit[0] == self.opt.state[p]["seed"]

    def _draw(self, ps: list[Tensor], ranks: list[int], lay: Layout, device: torch.device, dtype) -> Factors:
        """Every mode's factors of ``ps`` drawn as one batch, orthonormalised by matmuls (twice, or once for factors
        rounded to a narrower dtype after), sliced to this rank."""
        modes = [m for m, (n, r) in enumerate(zip(ps[0].shape, ranks)) if r < n]
        out: Factors = [None] * len(ranks)
        if not modes:
            return out
        keys = torch.stack([self._device_key(p, device) for p in ps])[:, modes]
        work = compute_dtype(ps[0].dtype)
        passes = 1 if torch.finfo(dtype).eps > torch.finfo(work).eps else 2
        normals = keyed_normal([(ps[0].shape[m], ranks[m]) for m in modes], keys, work)
        for mode, z in zip(modes, normals):
            q = orthonormalize_narrow(z, dtype) if passes == 1 and NARROW else orthonormalize(z, passes)
            out[mode] = q.narrow(1, lay.offsets[mode], lay.local_shape[mode]).to(dtype)
        return out

    @torch.compiler.disable  # host integer arithmetic on 64-bit seeds: run eagerly under torch.compile
    def _device_key(self, p: Tensor, device: torch.device) -> Tensor:
        """Each mode's counter key of ``p``'s current seed, on the device (made by fills when the seed changes)."""
        seed = self.opt.state[p]["seed"]
        known = self.device_keys.get(p)
        if known is None or known[0] != seed or known[1].device != device:
            keys = [torch.full((), factor_key(seed, m), dtype=torch.int64, device=device) for m in range(p.dim())]
            known = (seed, torch.stack(keys))
            self.device_keys[p] = known
        return known[1]

    def local(self, p: Tensor, group: dict[str, Any], lay: Layout, device: torch.device, dtype) -> Factors:
        """This rank's rows of ``p``'s current factors (cached, or drawn), in ``dtype``."""
        return [None if f is None else f[0] for f in self.stack([p], group, lay, device, dtype)]

    def cache_bytes(self, params: Any = None) -> int:
        """Bytes of the cached factors (``cache_factors=True``), of ``params`` only if given."""
        wanted = None if params is None else {id(p) for p in params}
        return sum(
            u.numel() * u.element_size()
            for p, (_, fs) in self.cache.items()
            if wanted is None or id(p) in wanted
            for u in fs
            if u is not None
        )


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
