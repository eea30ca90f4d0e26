"""One parameter-group rule and one optimizer factory for every trainer in the repository.

The rule (:func:`split_parameters`): a trainable matrix (ndim ≥ 2) whose name contains one of ``targets`` is
*projected* (the low-rank methods' subspace update); every other matrix (embeddings, output heads) and every
1-D tensor (norms, biases) is updated with AdamW, matrices with weight decay and 1-D tensors without. The default
``targets`` name the attention and MLP matrices of common transformer implementations: LLaMA (``self_attn``,
``mlp``), BERT (``attention``, ``intermediate``, ``output.dense``), ``nn.TransformerEncoderLayer`` (``linear1``,
``linear2``) and modules named ``attn`` / ``mlp`` (Hiera, ViTs).

:func:`create_optimizer` builds RS-SNGD from one of its named recipes (``rsngd.recipes``: ``rsngd-momentum``, the
default, for runs of thousands of steps; ``rsngd``, for short ones; ``rsngd-lite``; ``rsngd-subspace``), AdamW or one
of the benchmark's low-rank baselines
(GaLore, Fira, APOLLO, APOLLO-Mini, Adam-mini; they install with the ``bench`` extra) or Muon
(``torch.optim.Muon`` on the projected matrices, AdamW on the rest: :class:`rsngd.muon.MuonWithAdamW`) from that
split, so every method sees the same projected matrices and the same AdamW part.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import ablations
from .ablations import AblationRSNGD
from .optimizer import RSNGD
from .recipes import DEFAULT, RECIPES

__all__ = [
    "BASELINES",
    "METHODS",
    "TARGETS",
    "Split",
    "baseline",
    "create_optimizer",
    "param_groups",
    "split_parameters",
]

TARGETS: tuple[str, ...] = ("attn", "attention", "mlp", "intermediate", "output.dense", "linear1", "linear2")
"""Name fragments of the matrices that are projected (attention and MLP weights)."""

Named = Iterable[tuple[str, nn.Parameter]]


def split_parameters(
    named_parameters: Named, targets: Sequence[str] = TARGETS
) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """(projected matrices, other matrices, 1-D tensors) of the trainable parameters, in their given order."""
    if not targets:
        raise ValueError("targets is empty: no matrix would be projected")
    proj, other, flat = [], [], []
    for name, p in named_parameters:
        if not p.requires_grad:
            continue
        if p.dim() >= 2 and any(t in name for t in targets):
            proj.append(p)
        elif p.dim() >= 2:
            other.append(p)
        else:
            flat.append(p)
    return proj, other, flat


def param_groups(
    model: nn.Module,
    rank: int | float | None = 1 / 8,
    target_modules: Sequence[str] = TARGETS,
    weight_decay: float = 0.0,
    **projected: Any,
) -> list[dict[str, Any]]:
    """RS-SNGD parameter groups of a model by :func:`split_parameters`: the projected matrices with ``rank`` (and
    any extra keyword, e.g. ``history=8``), the other matrices in AdamW with ``weight_decay``, the 1-D tensors in
    AdamW without. Empty groups are left out."""
    named = list(model.named_parameters())
    proj, other, flat = split_parameters(named, target_modules)
    groups = [
        {"params": proj, "rank": rank, "weight_decay": weight_decay, **projected},
        {"params": other, "rank": None, "weight_decay": weight_decay},
        {"params": flat, "rank": None, "weight_decay": 0.0},
    ]
    return [_named(g, named) for g in groups if g["params"]]


def _named(group: dict[str, Any], named: list[tuple[str, nn.Parameter]]) -> dict[str, Any]:
    """The group with ``param_names`` (torch's named parameter groups): RS-SNGD seeds subspaces by name."""
    names = {id(p): n for n, p in named}
    return {**group, "param_names": [names[id(p)] for p in group["params"]]}


def create_optimizer(
    named_parameters: Named,
    name: str = DEFAULT,
    lr: float | None = None,
    adamw_lr: float | None = None,
    weight_decay: float = 0.0,
    targets: Sequence[str] = TARGETS,
    **hp: Any,
) -> torch.optim.Optimizer:
    """An optimizer ``name`` over (name, parameter) pairs, grouped by :func:`split_parameters`.

    For RS-SNGD's recipes (``rsngd-momentum``, the default; ``rsngd``, for short runs; ``rsngd-lite``;
    ``rsngd-subspace``) every argument left out takes the recipe's value, so
    ``create_optimizer(model.named_parameters())`` is the recipe measured best for long runs. ``lr`` is the
    projected matrices' learning rate; ``adamw_lr`` that of the AdamW part (default: the recipe's, else ``lr``);
    ``weight_decay`` applies to matrices only. ``hp`` goes to the projected group: RS-SNGD's ``rank``,
    ``history``, ``seed``… (``adamw_state`` goes to the other matrices; a setting of ``rsngd.ablations`` builds
    ``AblationRSNGD``); GaLore's / Fira's / APOLLO's ``rank``, ``update_proj_gap``, ``scale``…; for ``adam-mini``,
    its ``dim`` and ``n_heads`` (and ``adamw_lr`` is set on its groups of the non-projected tensors); for ``muon``,
    ``torch.optim.Muon``'s ``momentum``, ``nesterov``, ``ns_steps``, ``adjust_lr_fn``. With ``adamw``, the
    projected matrices are simply the group at ``lr``. Baselines default to ``lr`` 1e-3.
    """
    if name not in RECIPES and name not in BASELINES:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join((*RECIPES, *BASELINES))}")
    named = list(named_parameters)
    if name in RECIPES:
        return _rsngd(named, name, lr, adamw_lr, weight_decay, targets, hp)
    lr = 1e-3 if lr is None else lr
    split = Split(named, *split_parameters(named, targets), lr, lr if adamw_lr is None else adamw_lr, weight_decay)
    return BASELINES[name](split, hp)


@dataclass(frozen=True)
class Split:
    """What a baseline's builder gets: the parameters, split by :func:`split_parameters`, and the common settings."""

    named: list[tuple[str, nn.Parameter]]
    projected: list[nn.Parameter]
    other: list[nn.Parameter]
    flat: list[nn.Parameter]
    lr: float
    """Learning rate of the projected matrices."""
    adamw_lr: float
    """Learning rate of the rest (embeddings, output head, 1-D tensors)."""
    weight_decay: float
    """Decoupled weight decay of the matrices (1-D tensors take none)."""

    def rest(self) -> list[dict[str, Any]]:
        """The AdamW groups of the non-projected tensors (empty ones left out)."""
        groups = [
            {"params": self.other, "lr": self.adamw_lr, "weight_decay": self.weight_decay},
            {"params": self.flat, "lr": self.adamw_lr, "weight_decay": 0.0},
        ]
        return [g for g in groups if g["params"]]


Builder = Callable[[Split, dict[str, Any]], torch.optim.Optimizer]

BASELINES: dict[str, Builder] = {}
"""The baselines :func:`create_optimizer` builds, by name (registered with :func:`baseline`)."""


def baseline(name: str) -> Callable[[Builder], Builder]:
    """Register a builder of the baseline ``name``: ``builder(split, hp)`` returns the optimizer."""

    def register(builder: Builder) -> Builder:
        BASELINES[name] = builder
        return builder

    return register


@baseline("adamw")
def _adamw(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    groups = [{"params": split.projected, "lr": split.lr, "weight_decay": split.weight_decay}, *split.rest()]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=split.lr, **hp)


@baseline("muon")
def _muon(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    from .muon import MuonWithAdamW

    muon = [{"params": split.projected, "lr": split.lr, "weight_decay": split.weight_decay}]
    return MuonWithAdamW(
        muon, split.rest(), lr=split.lr, adamw_lr=split.adamw_lr, weight_decay=split.weight_decay, **hp
    )


@baseline("galore")
def _galore(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    from galore_torch import GaLoreAdamW

    group = {"params": split.projected, "lr": split.lr, "proj_type": "std", **hp}
    return GaLoreAdamW([group, *split.rest()], lr=split.lr, weight_decay=split.weight_decay)


@baseline("fira")
def _fira(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    from fira import FiraAdamW

    group = {"params": split.projected, "lr": split.lr, "proj_type": "std", **hp}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FiraAdamW([group, *split.rest()], lr=split.lr, weight_decay=split.weight_decay)


@baseline("apollo-mini")  # APOLLO with its rank-1 tensor-wise settings (the benchmark's defaults)
@baseline("apollo")
def _apollo(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    from apollo_torch import APOLLOAdamW

    group = {"params": split.projected, "lr": split.lr, "proj": "random", "proj_type": "std", **hp}
    return APOLLOAdamW([group, *split.rest()], lr=split.lr, weight_decay=split.weight_decay)


@baseline("adam-mini")
def _adam_mini(split: Split, hp: dict[str, Any]) -> torch.optim.Optimizer:
    from adam_mini import Adam_mini

    hp = dict(hp)
    dim, heads = hp.pop("dim"), hp.pop("n_heads")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = Adam_mini(
            split.named,
            lr=split.lr,
            weight_decay=split.weight_decay,
            dim=dim,
            n_heads=heads,
            n_kv_heads=heads,
            verbose=False,
            **hp,
        )
    # Adam-mini makes one group per tensor: the non-projected ones get adamw_lr
    projected = {id(p) for p in split.projected}
    for group in opt.param_groups:
        if not any(id(p) in projected for p in group["params"]):
            group["lr"] = split.adamw_lr
    return opt


METHODS = (*RECIPES, *BASELINES)
"""Names :func:`create_optimizer` knows when the package is imported: RS-SNGD's recipes, then the baselines."""


_CONSTRUCTOR = ("seed", "per_layer", "partitioned", "data_parallel", "process_group")
"""RSNGD arguments that are not per group."""


def _rsngd(
    named: list[tuple[str, nn.Parameter]],
    name: str,
    lr: float | None,
    adamw_lr: float | None,
    weight_decay: float,
    targets: Sequence[str],
    hp: dict[str, Any],
) -> RSNGD:
    """RS-SNGD with recipe ``name``'s settings under the given ones."""
    recipe = RECIPES[name]
    lr = recipe.lr if lr is None else lr
    adamw_lr = recipe.adamw_lr if adamw_lr is None else adamw_lr
    ctor = {k: hp.pop(k) for k in _CONSTRUCTOR if k in hp}
    rest_state = {**recipe.rest, **({"adamw_state": hp.pop("adamw_state")} if "adamw_state" in hp else {})}
    projected = {**recipe.projected, **hp}
    proj, other, flat = split_parameters(named, targets)
    groups = [
        {"params": proj, "lr": lr, "weight_decay": weight_decay, **projected},
        {"params": other, "lr": adamw_lr, "weight_decay": weight_decay, "rank": None, **rest_state},
        {"params": flat, "lr": adamw_lr, "weight_decay": 0.0, "rank": None},
    ]
    cls = AblationRSNGD if ablations.uses(projected) else RSNGD
    return cls([_named(g, named) for g in groups if g["params"]], lr=lr, **ctor)
