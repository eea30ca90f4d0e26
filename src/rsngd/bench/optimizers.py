"""A small factory for the optimizers compared in the benchmark.

An optimizer is named by a spec ``name`` or ``name:key=value,key=value`` (values parsed as
Python literals), for example ``rsngd:rank=32,fisher=tensor`` or ``galore:lr=0.005``.
Defaults are each method's published setting for LLaMA pre-training (GaLore, Fira and
APOLLO use rank = hidden/4 there, lr 0.01 and a subspace update every 200 steps;
APOLLO-Mini rank 1 with a tensor-wise scale of 128; Adam-mini lr 1e-3). AdamW uses 3e-3,
the best of {1e-3 (its published LLaMA default), 3e-3, 6e-3} on the cpu preset (Shakespeare,
seed 0). RS-SNGD uses lr 5e-3 on the projected matrices and 1e-2 on the AdamW part, the
best of its own sweep on the same run (see the README).
RS-SNGD projects both sides of each matrix, so its default rank is hidden/8 (64 at
hidden 512), which keeps its state of the projected matrices under 5 % of AdamW's.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import rsngd

# Matrices that low-rank methods project (LLaMA module names); all else stays in AdamW.
TARGETS = ("self_attn", "mlp")

DEFAULTS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 3e-3},
    "adam-mini": {"lr": 1e-3},
    "galore": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "scale": 0.25},
    "fira": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "alpha": 0.25},
    "apollo": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "scale": 1.0, "scale_type": "channel"},
    "apollo-mini": {"lr": 1e-2, "rank": 1, "update_proj_gap": 200, "scale": 128.0, "scale_type": "tensor"},
    "rsngd": {"lr": 5e-3, "adamw_lr": 1e-2, "rank": "hidden/8", "history": 10},
}


@dataclass
class OptimizerSpec:
    """A parsed optimizer spec: its name and the hyperparameters given on the command line."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @classmethod
    def parse(cls, text: str) -> OptimizerSpec:
        name, _, rest = text.partition(":")
        if name not in DEFAULTS:
            raise SystemExit(f"unknown optimizer {name!r}; choose from {', '.join(DEFAULTS)}")
        overrides: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq:
                raise SystemExit(f"bad optimizer option {item!r} in {text!r}: expected key=value")
            try:
                overrides[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                overrides[key] = value  # a bare word such as fisher=tensor
        return cls(name, overrides, text)

    def hyperparameters(self, hidden: int) -> dict[str, Any]:
        hp = {**DEFAULTS[self.name], **self.overrides}
        if hp.get("rank") in ("hidden/4", "hidden/8"):
            hp["rank"] = max(1, hidden // int(hp["rank"][-1]))
        return hp


def split_params(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(projected matrices, everything else), the same split for every low-rank method."""
    proj, rest = [], []
    for name, p in model.named_parameters():
        (proj if p.dim() >= 2 and any(t in name for t in TARGETS) else rest).append(p)
    return proj, rest


def build_optimizer(spec: OptimizerSpec, model: nn.Module, hidden: int, heads: int) -> torch.optim.Optimizer:
    """Instantiate the optimizer of ``spec`` for ``model``."""
    hp = spec.hyperparameters(hidden)
    lr = hp.pop("lr")
    wd = hp.pop("weight_decay", 0.0)
    proj, rest = split_params(model)
    if spec.name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd, **hp)
    if spec.name == "adam-mini":
        from adam_mini import Adam_mini

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Adam_mini(
                model.named_parameters(),
                lr=lr,
                weight_decay=wd,
                dim=hidden,
                n_heads=heads,
                n_kv_heads=heads,
                verbose=False,
                **hp,
            )
    # The non-projected tensors (embeddings, norms, LM head) use AdamW at ``adamw_lr``; the
    # published GaLore, Fira and APOLLO scripts use the method's own lr for them.
    adamw_lr = hp.pop("adamw_lr", lr)
    if spec.name == "rsngd":
        groups = [{"params": proj, "lr": lr, **hp}, {"params": rest, "rank": None, "lr": adamw_lr}]
        return rsngd.RSNGD(groups, lr=lr, weight_decay=wd)
    rest_group = {"params": rest, "lr": adamw_lr}
    if spec.name == "galore":
        from galore_torch import GaLoreAdamW

        group = {"params": proj, "lr": lr, "proj_type": "std", **hp}
        return GaLoreAdamW([group, rest_group], lr=lr, weight_decay=wd)
    if spec.name == "fira":
        from fira import FiraAdamW

        group = {"params": proj, "lr": lr, "proj_type": "std", **hp}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return FiraAdamW([group, rest_group], lr=lr, weight_decay=wd)
    if spec.name in ("apollo", "apollo-mini"):
        from apollo_torch import APOLLOAdamW

        group = {"params": proj, "lr": lr, "proj": "random", "proj_type": "std", **hp}
        return APOLLOAdamW([group, rest_group], lr=lr, weight_decay=wd)
    raise AssertionError(spec.name)
