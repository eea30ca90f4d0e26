"""A small factory for the optimizers compared in the benchmark.

An optimizer is named by a spec ``name`` or ``name:key=value,key=value`` (values parsed as
Python literals), for example ``rsngd:rank=32,fisher=tensor`` or ``galore:lr=0.005``.
Defaults are each method's published setting for LLaMA pre-training (GaLore, Fira and
APOLLO use rank = hidden/4 there, lr 0.01 and a subspace update every 200 steps;
APOLLO-Mini rank 1 with a tensor-wise scale of 128; Adam-mini lr 1e-3). AdamW uses 3e-3,
the best of {1e-3 (its published LLaMA default), 3e-3, 6e-3} on the cpu preset (Shakespeare,
seed 0). RS-SNGD uses lr 5e-3 on the projected matrices and 1e-2 on the AdamW part, the
best of its own sweep on the same run (docs/benchmark.md, "Tuning").
RS-SNGD projects both sides of each matrix, so its default rank is hidden/8 (64 at
hidden 512), which keeps its state of the projected matrices under 5 % of AdamW's.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import rsngd

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


def build_optimizer(spec: OptimizerSpec, model: nn.Module, hidden: int, heads: int) -> torch.optim.Optimizer:
    """Instantiate the optimizer of ``spec`` for ``model`` through :func:`rsngd.create_optimizer`: the same
    projected matrices (attention and MLP) and the same AdamW part for every method. The non-projected tensors
    (embeddings, norms, LM head) use ``adamw_lr`` where a method's defaults set one; the published GaLore, Fira
    and APOLLO scripts use the method's own lr for them."""
    hp = spec.hyperparameters(hidden)
    if spec.name == "adam-mini":
        hp.update(dim=hidden, n_heads=heads)
    return rsngd.create_optimizer(model.named_parameters(), spec.name, **hp)
