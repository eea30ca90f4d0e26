"""The checks of an RS-SNGD parameter group: a ValueError naming the argument for any setting that would give NaN
parameters or a confusing failure later."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["Checker", "check_group"]

FISHERS = ("global", "tensor")
DAMPING_MODES = ("relative", "absolute")
ADAMW_STATES = ("full", "light")
BITS = (8, 4)
PRECISIONS = ("auto", "float32", "bfloat16")


class Checker:
    """``need`` and typed readers of one group's settings, each raising a ValueError that names the setting."""

    def __init__(self, group: dict[str, Any]) -> None:
        self.group = group

    def need(self, cond: bool, msg: str) -> None:
        if not cond:
            raise ValueError(msg)

    def integer(self, key: str, minimum: int) -> None:
        v = self.group[key]
        self.need(isinstance(v, int) and not isinstance(v, bool), f"{key} must be an integer, got {v!r}")
        self.need(v >= minimum, f"{key} must be >= {minimum}, got {v}")

    def number(self, key: str, value: Any = None) -> float:
        v = self.group[key] if value is None else value
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        self.need(ok, f"{key} must be a finite number, got {v!r}")
        return float(v)

    def within(self, key: str, low: float, high: float) -> None:
        """``low <= group[key] < high``."""
        self.need(low <= self.number(key) < high, f"{key} must be in [{low:g}, {high:g}), got {self.group[key]}")

    def one_of(self, key: str, allowed: tuple, hint: Callable[[Any], str] = lambda v: "") -> None:
        v = self.group[key]
        self.need(v in allowed, f"{key} must be one of {allowed}, got {v!r}{hint(v)}")


def check_group(group: dict[str, Any], residuals: tuple[str, ...], hint: Callable[[Any], str]) -> Checker:
    """Check the settings of RS-SNGD itself (``residuals``: the residual steps the optimizer class takes; ``hint``:
    what to add to the message for another). Returns the checker, for a subclass's own settings."""
    c = Checker(group)
    for key in ("cache_factors", "stagger_renewals"):
        c.need(isinstance(group[key], bool), f"{key} must be True or False, got {group[key]!r}")
    c.need(c.number("lr") >= 0, f"lr must be >= 0, got {group['lr']}")
    c.integer("history", 1)
    c.integer("update_gap", 1)
    c.integer("seed", 0)
    c.need(c.number("damping") > 0, f"damping must be > 0, got {group['damping']}")
    c.within("momentum", 0, 1)
    c.within("residual_momentum", 0, 1)
    c.one_of("residual", residuals, hint)
    c.need(
        group["residual_momentum"] == 0 or group["residual"] == "ortho",
        f"residual_momentum needs residual='ortho', got residual={group['residual']!r}",
    )
    c.one_of("residual_bits", BITS)
    c.one_of("adamw_state", ADAMW_STATES)
    c.need(c.number("weight_decay") >= 0, f"weight_decay must be >= 0, got {group['weight_decay']}")
    c.need(c.number("scale") > 0, f"scale must be > 0, got {group['scale']}")
    c.need(c.number("residual_scale") >= 0, f"residual_scale must be >= 0, got {group['residual_scale']}")
    c.need(c.number("eps") > 0, f"eps must be > 0 (it keeps AdamW's denominator away from zero), got {group['eps']}")
    betas = group["betas"]
    c.need(isinstance(betas, (tuple, list)) and len(betas) == 2, f"betas must be a pair, got {betas!r}")
    for i, beta in enumerate(betas):
        c.need(0 <= c.number(f"betas[{i}]", beta) < 1, f"betas[{i}] must be in [0, 1), got {beta}")
    c.one_of("fisher", FISHERS)
    c.one_of("precision", PRECISIONS)
    if group["batch_memory"] is not None:
        c.integer("batch_memory", 1)
    c.one_of("damping_mode", DAMPING_MODES)
    _check_rank(c, group["rank"])
    return c


def _check_rank(c: Checker, rank: Any) -> None:
    if rank is None:
        return
    if isinstance(rank, float):
        c.need(0 < rank <= 1, f"rank must be an integer or a fraction in (0, 1], got {rank!r}")
        return
    ranks = list(rank) if isinstance(rank, (tuple, list)) else [rank]
    ok = ranks and all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in ranks)
    c.need(
        bool(ok),
        f"rank must be a positive integer, a tuple of them (one per mode) or a fraction in (0, 1], got {rank!r}",
    )
