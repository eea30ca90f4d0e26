"""A small factory for the optimizers compared in the benchmark.

An optimizer is named by a spec ``name`` or ``name:key=value,key=value`` (values parsed as
Python literals), for example ``rsngd:rank=32,fisher=tensor`` or ``galore:lr=0.005``.
A spec's hyperparameters are, by priority: the spec's own, the tuned settings (the file that
``rsngd bench tune`` writes; the chosen ones ship in ``rsngd/bench/settings/``), then :data:`DEFAULTS`.

:data:`DEFAULTS` are each method's published setting for LLaMA pre-training and the centre of its
tuning sweep: GaLore, Fira and APOLLO use rank = hidden/4, lr 0.01 and a subspace update every
200 steps; APOLLO-Mini rank 1 with a tensor-wise scale of 128; Muon lr 0.02 (``torch.optim.Muon``
with its shape adjustment, momentum 0.95, Nesterov); Adam-mini, being Adam with fewer second
moments, AdamW's centre. ``lr`` is the projected matrices' learning rate and ``adamw_lr`` that of
the tensors every method gives to AdamW (embeddings, norms, LM head).

``natural-galore`` is Natural GaLore written as an RS-SNGD setting (no implementation installs from
PyPI): SVD factors of the gradient renewed every 200 steps at GaLore's rank, a Fisher over the last
10 projected gradients per tensor, inverted through Woodbury.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

import rsngd
from rsngd.recipes import RECIPES

from .presets import PRESETS


def recipe_settings(name: str) -> dict[str, Any]:
    """An RS-SNGD recipe's settings as benchmark hyperparameters: a fractional rank 1/n as its width rule
    ``hidden/n`` (1/8 of the smallest side is hidden/8 for every attention and MLP matrix of a LLaMA); another
    fraction stays a fraction, which RS-SNGD takes as it is."""
    r = RECIPES[name]
    hp = {"lr": r.lr, "adamw_lr": r.adamw_lr, **r.projected, **r.rest}
    rank = hp.get("rank")
    if isinstance(rank, float) and float(round(1 / rank)) == 1 / rank:
        hp["rank"] = f"hidden/{round(1 / rank)}"
    return hp


RANK_RULE = re.compile(r"hidden/([1-9][0-9]*)")
"""A rank set by the model's width: ``hidden/n`` is ``max(1, hidden // n)``, for any positive integer n."""


def width_rank(rule: Any, hidden: int) -> Any:
    """The rank a width rule gives at ``hidden`` (``hidden/8`` → hidden // 8, at least 1); any other rank as it is.
    A string that is not a rule is a SystemExit naming it, where the spec is read."""
    if not isinstance(rule, str):
        return rule
    match = RANK_RULE.fullmatch(rule)
    if match is None:
        raise SystemExit(f"rank {rule!r} is neither a number nor a width rule 'hidden/n' (n a positive integer)")
    return max(1, hidden // int(match.group(1)))


DEFAULTS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 3e-3},
    "muon": {"lr": 2e-2, "adamw_lr": 3e-3},
    "adam-mini": {"lr": 3e-3},
    "galore": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "scale": 0.25},
    "fira": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "alpha": 0.25},
    "apollo": {"lr": 1e-2, "rank": "hidden/4", "update_proj_gap": 200, "scale": 1.0, "scale_type": "channel"},
    "apollo-mini": {"lr": 1e-2, "rank": 1, "update_proj_gap": 200, "scale": 128.0, "scale_type": "tensor"},
    # RS-SNGD's named recipes (rsngd.recipes), the rank written as the width rule it is at the LLaMA shapes.
    **{name: recipe_settings(name) for name in RECIPES},
    "natural-galore": {
        "lr": 5e-3,
        "adamw_lr": 1e-2,
        "rank": "hidden/4",
        "history": 10,
        "projection": "svd",
        "fisher": "tensor",
        "update_gap": 200,
    },
}
"""Published settings (the centre of each method's tuning sweep)."""

METHOD: dict[str, str] = {"natural-galore": "rsngd"}
"""Benchmark names that are a setting of another method of :func:`rsngd.create_optimizer`."""

NO_TUNING = "none"
"""``--tuned none``: the published settings, untuned."""


def packaged_settings(name: str = "tuned") -> Path:
    """Where the settings file ``name`` that ships with ``rsngd.bench`` lies (``tuned``: the tuning protocol's
    choice at 200 steps; ``tuned-long``, ``tuned-long-lr``: chosen again at 1000 steps; ``tuned-cpu-long``)."""
    return Path(str(resources.files("rsngd.bench") / "settings" / f"{name}.json"))


def settings_names() -> list[str]:
    return sorted(p.stem for p in packaged_settings().parent.glob("*.json"))


def settings_file(path: Path | str) -> Path:
    """A tuned-settings file: a file on disk, else a packaged one by name (``tuned-long-lr``), found from any
    working directory."""
    path = Path(path)
    if path.is_file():
        return path
    name = path.name.removesuffix(".json")
    if path.parent.as_posix() == "." and name in settings_names():
        return packaged_settings(name)
    raise SystemExit(
        f"no tuned settings at {path} (packaged: {', '.join(settings_names())}): run `rsngd bench tune` or pass "
        "--tuned none"
    )


@functools.cache  # the packaged files, read once per process (every run of a report asks)
def protocol_settings() -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
    """(preset, steps) → the settings the tuning protocol chose at that length: the packaged file chosen there, or
    where one was chosen again from another at the same length (``tuned-long-lr`` from ``tuned-long``), the last."""
    files = {name: json.loads(packaged_settings(name).read_text()) for name in settings_names()}
    horizon = {name: (f["preset"], int(f["steps"])) for name, f in files.items()}
    superseded = {f.get("base") for name, f in files.items() if horizon.get(f.get("base")) == horizon[name]}
    return {horizon[name]: f["settings"] for name, f in files.items() if name not in superseded}


BATCH_VARIANT = re.compile(r"(?P<preset>.+)-b(?P<batch>[0-9]+)")
"""The name ``rsngd bench --batch N`` gives a preset at another batch: ``NAME-bN``."""


def protocol_for(preset: dict[str, Any], steps: int) -> dict[str, dict[str, Any]]:
    """The settings the tuning protocol chose for a run of ``preset`` (the run's recorded preset) at ``steps``
    (method → hyperparameters; {} where none was chosen). A batch variant ``NAME-bN`` that no settings file chose
    for takes those chosen for ``NAME`` at the same number of tokens: every method's lrs kept as the batch grows."""
    chosen = protocol_settings()
    if (preset["name"], steps) in chosen:
        return chosen[(preset["name"], steps)]
    variant = BATCH_VARIANT.fullmatch(preset["name"])
    if variant is None:
        return {}
    base = PRESETS.get(variant["preset"])
    tokens = steps * int(variant["batch"])
    if base is None or tokens % base.batch:
        return {}
    return chosen.get((base.name, tokens // base.batch), {})


def load_tuned(path: Path | str | None) -> dict[str, dict[str, Any]]:
    """The ``settings`` of a tuned-settings file or packaged name (method → hyperparameters); {} for None or
    ``"none"``."""
    if path is None or str(path) == NO_TUNING:
        return {}
    path = settings_file(path)
    data = json.loads(path.read_text())
    settings = data.get("settings")
    if not isinstance(settings, dict):
        raise SystemExit(f"{path} is not a tuned-settings file (no 'settings' object)")
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise SystemExit(f"{path} names unknown optimizers: {', '.join(unknown)}")
    return settings


@dataclass
class OptimizerSpec:
    """A parsed optimizer spec: its name and the hyperparameters given on the command line."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    tuned: dict[str, Any] = field(default_factory=dict)
    """This method's tuned settings (from :func:`load_tuned`), under the spec's own overrides."""

    @classmethod
    def parse(cls, text: str, tuned: dict[str, dict[str, Any]] | None = None) -> OptimizerSpec:
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
        spec = cls(name, overrides, text, dict((tuned or {}).get(name, {})))
        spec.hyperparameters(hidden=1)  # a rank that is no rule fails here, where the spec is read
        return spec

    @property
    def method(self) -> str:
        """The :func:`rsngd.create_optimizer` method this spec builds."""
        return METHOD.get(self.name, self.name)

    def hyperparameters(self, hidden: int) -> dict[str, Any]:
        hp = {**DEFAULTS[self.name], **self.tuned, **self.overrides}
        if "rank" in hp:
            hp["rank"] = width_rank(hp["rank"], hidden)
        return hp


def rank_as_rule(name: str, hp: dict[str, Any], hidden: int | None) -> dict[str, Any]:
    """A run's recorded ``hp`` with a rank that :data:`DEFAULTS`' width rule gave written back as the rule
    (``hidden/8``), so that one setting run on two presets of different widths reads as one setting."""
    rule = DEFAULTS.get(name, {}).get("rank")
    if hidden and isinstance(rule, str) and hp.get("rank") == width_rank(rule, hidden):
        return {**hp, "rank": rule}
    return hp


def build_optimizer(
    spec: OptimizerSpec, model: nn.Module, hidden: int, heads: int, **extra: Any
) -> torch.optim.Optimizer:
    """Instantiate the optimizer of ``spec`` for ``model`` through :func:`rsngd.create_optimizer`: the same
    projected matrices (attention and MLP) and the same AdamW part for every method. The non-projected tensors
    (embeddings, norms, LM head) use ``adamw_lr`` where a method's defaults set one; the published GaLore, Fira
    and APOLLO scripts use the method's own lr for them. ``extra`` goes to ``create_optimizer`` (RS-SNGD's
    ``data_parallel`` under DDP)."""
    hp = spec.hyperparameters(hidden)
    if spec.name == "adam-mini":
        hp.update(dim=hidden, n_heads=heads)
    return rsngd.create_optimizer(model.named_parameters(), spec.method, **hp, **extra)
