"""RS-SNGD's named recipes: the settings ``rsngd.create_optimizer(named_parameters, NAME)`` gives with no keyword.

One registry, as timm's ``OptimInfo``. Every value here was chosen by ``rsngd bench``'s tuning protocol on the
``cpu`` preset (docs/benchmark.md: "RS-SNGD's screen", "Tuning"); the figures in each recipe's note are from the
committed runs named there. A keyword passed to ``create_optimizer`` overrides the recipe's value.

- ``rsngd``: the best for short runs (first at 200 steps on both corpora) and the smallest state with a residual.
  The subspace step (rank 1/8 of each matrix's smaller side, a history of 10) plus the orthogonalised residual at
  4 × lr, the embeddings and output head in a light AdamW (8-bit first moment, factored second moment).
- ``rsngd-lite``: the same at rank 1/16 with a history of 8: under 1 % of AdamW's state for the projected
  matrices.
- ``rsngd-momentum``: the default, for the runs users make (thousands of steps). The ``rsngd`` recipe plus a
  Nesterov momentum (β 0.95) of the residual, stored whole-size in 8 bits, with the residual at 1 × lr: 17.5 % of
  AdamW's state for the projected matrices. On GCIDE (held-out seeds 1–3) 0.045 below Muon at 1000 steps (lower on
  every seed) and level with it on ``cpu-long`` (0.002 below on the mean); at 200 steps below Muon but not below
  ``rsngd`` (docs/benchmark.md, "Residual momentum in 8 bits"); lowest of AdamW, Muon and ``rsngd`` at llama-60m on
  a GPU (docs/gpu.md).
- ``rsngd-subspace``: the subspace step alone, the paper's method (no residual).

Each value is written here only: ``rsngd.RSNGD``'s own defaults are the ``rsngd`` recipe's (:data:`BASE`, the
stateless step), ``create_optimizer``'s recipe is :data:`DEFAULT`. Settings that measured no better than these live
in :mod:`rsngd.ablations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BASE", "DEFAULT", "RECIPES", "Recipe"]


@dataclass(frozen=True)
class Recipe:
    """A named RS-SNGD setting."""

    name: str
    """What ``create_optimizer`` and ``rsngd bench`` call it."""
    lr: float
    """Learning rate of the projected matrices."""
    adamw_lr: float
    """Learning rate of the tensors in AdamW (embeddings, output head, norms, biases)."""
    projected: dict[str, Any] = field(default_factory=dict)
    """RSNGD settings of the projected group (``rank`` as a float is a fraction of each tensor's smallest side)."""
    rest: dict[str, Any] = field(default_factory=dict)
    """RSNGD settings of the other matrices (embeddings, output head), updated with AdamW."""


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "rsngd",
            lr=5e-3,
            adamw_lr=1e-2,
            projected={"rank": 1 / 8, "history": 10, "residual": "ortho", "residual_scale": 4.0},
            rest={"adamw_state": "light"},
        ),
        Recipe(
            "rsngd-lite",
            lr=5e-3,
            adamw_lr=1e-2,
            projected={"rank": 1 / 16, "history": 8, "residual": "ortho", "residual_scale": 4.0},
            rest={"adamw_state": "light"},
        ),
        Recipe(
            "rsngd-momentum",
            lr=5e-3,
            adamw_lr=1e-2,
            projected={
                "rank": 1 / 8,
                "history": 10,
                "residual": "ortho",
                "residual_scale": 1.0,
                "residual_momentum": 0.95,
                "residual_bits": 8,
            },
            rest={"adamw_state": "light"},
        ),
        Recipe(
            "rsngd-subspace",
            lr=5e-3,
            adamw_lr=1e-2,
            projected={"rank": 1 / 8, "history": 10, "residual": "none"},
        ),
    )
}
"""The named recipes, by name."""

DEFAULT = "rsngd-momentum"
"""The recipe ``create_optimizer`` gives when no name is passed: the long-run recipe (``rsngd`` for runs of a few
hundred steps)."""

BASE = "rsngd"
"""The recipe whose settings of the projected matrices are ``rsngd.RSNGD``'s own defaults: the stateless step."""
