"""RS-SNGD's settings: the values every parameter group of an ``RSNGD`` takes unless it sets its own, one typed
field each. The defaults are the ``rsngd`` recipe's (``rsngd.recipes.BASE``: the stateless step), written there
only; ``create_optimizer``'s default recipe, ``rsngd-momentum``, adds the residual's momentum to them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .recipes import BASE, RECIPES

__all__ = ["NAMES", "Settings"]

_BEST = RECIPES[BASE].projected


@dataclass(frozen=True)
class Settings:
    """What ``RSNGD(params, **settings)`` and a parameter group may set."""

    lr: float = RECIPES[BASE].lr
    """Learning rate of the projected tensors (the ``rsngd`` recipe's)."""

    rank: int | float | tuple[int, ...] | None = _BEST["rank"]
    """Tucker rank per mode: an int for all modes, one per mode, or a float in (0, 1], a fraction of the tensor's
    smallest side (the default 1/8: rank 32 for a 256-wide layer). ``None`` makes the group plain AdamW. Ranks are
    clamped to the tensor's sizes."""

    history: int = _BEST["history"]
    """s, the number of past projected gradients kept for the Fisher."""

    damping: float = 0.01
    """λ, absolute or relative to the mean eigenvalue of GᵀG (``damping_mode``)."""

    damping_mode: str = "relative"
    """``"relative"`` (λ = damping · trace(GᵀG) / filled columns; scale free) or ``"absolute"`` (λ = damping)."""

    update_gap: int = 200
    """Steps between renewals of the subspace; the history is carried into the new basis."""

    fisher: str = "global"
    """``"global"`` (one s × s system for every projected tensor) or ``"tensor"``."""

    momentum: float = 0.9
    """Β of the momentum taken over the history window (no extra state)."""

    scale: float = 1.0
    """Multiplies the projected update (GaLore's α)."""

    residual: str = _BEST["residual"]
    """What to do with the part of the gradient outside the subspace: ``"ortho"`` (the default: its polar factor by
    Newton–Schulz, a Muon step without a buffer, ``rsngd.orthogonal``) or ``"none"`` (drop it: the subspace step
    alone). Sharded parameters send each matrix's residual to one owner rank (``rsngd.ortho_dist``); with
    ``data_parallel`` the ranks split the matrices; with ``per_layer`` it is taken in the gradient hook."""

    residual_scale: float = _BEST["residual_scale"]
    """Multiplies the residual update (its lr is ``lr × residual_scale``; 4 in the recipe)."""

    residual_momentum: float = 0.0
    """Β of a Nesterov momentum of the residual kept whole-size but quantised to ``residual_bits`` bits
    (``rsngd.compact``); 0 (the default) keeps the residual stateless."""

    residual_bits: int = 8
    """8 or 4, the precision of the residual's momentum buffer."""

    adamw_state: str = "full"
    """For the tensors updated with AdamW: ``"full"`` (float32 moments) or ``"light"`` (matrices only: an 8-bit
    first moment and a factored second moment, as Adafactor's; about 1/8 of AdamW's state)."""

    weight_decay: float = 0.0
    """Decoupled weight decay (as AdamW), for every tensor of the group."""

    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas for the AdamW-updated tensors."""

    eps: float = 1e-8
    """AdamW epsilon (also guards the RMS normalisation)."""

    seed: int = 0
    """Base seed of the random subspaces. A tensor's subspaces depend on it, on the tensor's name (from named
    parameter groups, e.g. ``create_optimizer`` or ``Optimizer(model.named_parameters())``, or from
    :func:`tag_parameter_names`) or else its position among the optimizer's parameters, and on the renewal count;
    not on the device, the world size or how the tensor is sharded."""

    cache_factors: bool = False
    """Keep this rank's rows of the factors between renewals, in the matmul dtype (no drawing on a step that renews
    nothing; the memory is reported by :meth:`factor_cache_bytes`) instead of drawing them again from the seed on
    every step (the default: no factor memory)."""

    precision: str = "auto"
    """The dtype of the step's matmuls (projections, back-projections, Newton–Schulz): ``"auto"`` is bfloat16 on an
    accelerator (as ``torch.optim.Muon``'s Newton–Schulz) and float32 on the CPU; ``"float32"`` is float32 everywhere;
    ``"bfloat16"`` is bfloat16 everywhere. Float64 parameters keep float64 unless ``"bfloat16"`` is asked for. The
    history, the s × s solve and the AdamW part are float32 (float64) whatever this is."""

    batch_memory: int | None = None
    """Bytes of temporaries one batch of the step may hold (tensors of one shape stacked: their residuals, the
    Newton–Schulz work, their factors; the rows of the light AdamW state stepped at once): batches are cut to fit,
    a tensor over it goes alone. ``None`` (the default): three times what the group's largest tensor needs, at
    least 256 MiB (``rsngd.budget``), so the step's temporaries grow with the largest matrix, not the model."""

    stagger_renewals: bool = True
    """Spread the tensors' renewals over the ``update_gap`` steps (a phase per tensor) instead of renewing every
    subspace on the same step."""


NAMES = frozenset(f.name for f in fields(Settings))
"""The settings' names."""
