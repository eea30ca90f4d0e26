"""The variation points of RS-SNGD's step, as small strategies chosen by settings, in one registry.

A step has four places where a variant can differ, each a *kind* of strategy, chosen per parameter group by the
value of one setting:

- ``normalize`` (setting ``normalize``, default ``"rms"``): how the preconditioned cores of one Fisher system are
  scaled, ``fn(updates, group, c_scale, reduce, process_group) -> (updates, divisors or None)``;
- ``residual`` (setting ``residual``: ``"none"``, ``"ortho"``): what is done with the part of each gradient outside
  its subspace, an object with ``direction(opt, entries, R, ok) -> (tensor, weight)`` for a stack of residuals
  ``R`` (batch, *shape); ``"none"`` is no strategy;
- ``factors`` (setting ``projection``, default ``"random"``): where a subspace's factors come from, an object with
  ``new``, ``full`` and ``stack`` (``rsngd.subspaces.Subspaces`` is the default, drawn from seeds);
- ``momentum`` (setting ``residual_rank``: None, the default, or a rank): how the residual's momentum is kept,
  ``fn(opt, entries, R, betas, ok) -> direction``, with each entry's β from the ``beta`` strategy (setting
  ``residual_momentum_schedule``, default ``"constant"``: ``fn(state, group) -> β``).

Besides these, hooks run at fixed points for the settings that ask for them (``on_start``, ``on_renew``,
``after_precondition``), and checks of extra settings and of layouts. Every strategy is registered with the name
of the optimizer class that takes it: :class:`rsngd.RSNGD` takes its own (registered in ``rsngd.residual`` and
here), ``rsngd.ablations`` registers those that measured no better, which only its ``AblationRSNGD`` takes; a
setting or value of another class is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["CORE", "Registry", "matmul_dtype", "register", "register_setting"]

CORE = "rsngd.RSNGD"
"""The owner of the default strategies: the class every other takes them from."""

SELECTORS: dict[str, tuple[str, Any]] = {
    "normalize": ("normalize", "rms"),
    "residual": ("residual", "none"),
    "factors": ("projection", "random"),
    "momentum": ("residual_rank", None),
    "beta": ("residual_momentum_schedule", "constant"),
}
"""For each kind, the setting that chooses its strategy and the value a group without that setting has."""


@dataclass
class Registry:
    """Strategies by kind and setting value, each with its owner; extra settings with their owners and checks."""

    strategies: dict[tuple[str, Any], tuple[Any, str]] = field(default_factory=dict)
    settings: dict[str, tuple[str, Callable[..., None] | None, bool]] = field(default_factory=dict)
    hooks: dict[str, list[Callable[..., None]]] = field(default_factory=dict)


REGISTRY = Registry()


def register(kind: str, value: Any, impl: Any, owner: str = CORE) -> None:
    """Make ``impl`` the strategy of ``kind`` for the setting value ``value`` (``None`` as an impl: no strategy),
    taken by the class named ``owner``."""
    if kind not in SELECTORS:
        raise ValueError(f"unknown strategy kind {kind!r}; choose one of {sorted(SELECTORS)}")
    REGISTRY.strategies[(kind, value)] = (impl, owner)


def register_setting(name: str, owner: str, check: Callable[..., None] | None = None, shared: bool = False) -> None:
    """An extra setting of the class ``owner``: ``check(checker, group)`` validates it; ``shared``: groups of the
    global Fisher system must agree on it."""
    REGISTRY.settings[name] = (owner, check, shared)


def register_hook(point: str, hook: Callable[..., None]) -> None:
    """``hook`` runs at ``point``: ``on_start(opt, p, group)``, ``on_renew(opt, p, group)``,
    ``after_precondition(opt, entries, ok)``, ``check_layout(group, layout)``."""
    REGISTRY.hooks.setdefault(point, []).append(hook)


# ------------------------------------------------------------------------------- lookups
def _choose(kind: str, group: dict[str, Any]) -> Any:
    setting, default = SELECTORS[kind]
    value = group.get(setting, default)
    if kind == "momentum":
        value = None if value is None else "lowrank"
    found = REGISTRY.strategies.get((kind, value))
    if found is None:
        raise ValueError(f"{setting}={value!r} is not a registered {kind} strategy")
    return found[0]


def normalizer(group: dict[str, Any]) -> Callable[..., list[Tensor]]:
    return _choose("normalize", group)


def residual(group: dict[str, Any]) -> Any:
    return _choose("residual", group)


def factors(group: dict[str, Any]) -> Any:
    return _choose("factors", group)


def momentum(group: dict[str, Any]) -> Callable[..., Tensor]:
    return _choose("momentum", group)


def beta(group: dict[str, Any]) -> Callable[..., float]:
    return _choose("beta", group)


def owners(extra: dict[str, Any]) -> set[str]:
    """The owners whose strategies a class with these extra settings takes: its own and the core's."""
    return {CORE} | {REGISTRY.settings[name][0] for name in extra if name in REGISTRY.settings}


def residuals(extra: dict[str, Any]) -> tuple[str, ...]:
    """The residual names a class with these extra settings takes."""
    mine = owners(extra)
    return tuple(v for (k, v), (_, o) in REGISTRY.strategies.items() if k == "residual" and o in mine)


def residual_hint(value: Any) -> str:
    """What to add to the message refusing ``residual=value``: the class that takes it, if any."""
    found = REGISTRY.strategies.get(("residual", value))
    return f" (residual={value!r} is a setting of {found[1]})" if found and found[1] != CORE else ""


def owner_of_setting(name: str) -> str | None:
    found = REGISTRY.settings.get(name)
    return found[0] if found else None


def shared_settings(extra: dict[str, Any]) -> tuple[str, ...]:
    """The settings every group of the global Fisher system must agree on."""
    mine = tuple(n for n in extra if n in REGISTRY.settings and REGISTRY.settings[n][2])
    return ("history", "damping", "damping_mode", "momentum", *mine)


def check_extra(checker: Any, group: dict[str, Any], extra: dict[str, Any]) -> None:
    for name in extra:
        check = REGISTRY.settings.get(name, (None, None, False))[1]
        if check is not None:
            check(checker, group)


def _run(point: str, *args: Any) -> None:
    for hook in REGISTRY.hooks.get(point, ()):
        hook(*args)


def on_start(opt: Any, p: Tensor, group: dict[str, Any]) -> None:
    _run("on_start", opt, p, group)


def on_renew(opt: Any, p: Tensor, group: dict[str, Any]) -> None:
    _run("on_renew", opt, p, group)


def after_precondition(opt: Any, entries: list[Any], ok: Tensor) -> None:
    _run("after_precondition", opt, entries, ok)


def check_layout(group: dict[str, Any], lay: Any) -> None:
    _run("check_layout", group, lay)


# ------------------------------------------------------------------------------- precision
def matmul_dtype(precision: str, param_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype of a step's matmuls: ``"auto"`` is bfloat16 on an accelerator (any device but the CPU) for
    parameters that are not float64, and float32 (float64 for float64 parameters) on the CPU; ``"float32"`` is
    float32 or wider always; ``"bfloat16"`` is bfloat16 always."""
    wide = torch.promote_types(param_dtype, torch.float32)
    if precision == "bfloat16" or (precision == "auto" and device.type != "cpu" and wide != torch.float64):
        return torch.bfloat16
    return wide


# ------------------------------------------------------------------------------- the defaults
def rms(
    updates: list[Tensor], group: dict[str, Any], c_scale: Tensor, reduce: bool, process_group: Any
) -> tuple[list[Tensor], list[Tensor] | None]:
    """Each preconditioned core (known up to ``c_scale``) to be scaled to unit RMS: the cores as they are and each
    one's divisor RMS + eps (0-dim), in three multi-tensor ops; the division is made batch by batch in pass 2."""
    if not updates:
        return updates, None
    norms = torch._foreach_norm(updates)
    torch._foreach_mul_(norms, [u.numel() ** -0.5 for u in updates])
    torch._foreach_add_(norms, group["eps"])
    return updates, list(norms)


rms.lazy = True  # type: ignore[attr-defined]
"""Pass 2 can form the RMS-normalised updates of a batch itself from the histories and the solve's weights."""


def lazy(group: dict[str, Any]) -> bool:
    """Whether the group's normaliser lets pass 2 form the updates batch by batch (none held across the step)."""
    return getattr(normalizer(group), "lazy", False)


register("normalize", "rms", rms)
register("residual", "none", None)
register("factors", "random", None)  # drawn from seeds by rsngd.subspaces.Subspaces itself
