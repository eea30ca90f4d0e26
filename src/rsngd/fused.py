"""Elementwise chains of the step run as one compiled kernel on a GPU.

Drawing a batch's random normals (``rsngd.projection.keyed_normal``: splitmix64 and Box–Muller over int64 counters)
is some thirty elementwise operations; eagerly each reads and writes an array the size of the batch's factors, and
at LLaMA-7B shapes the draws of a step took 170 ms of it on an H200, compiled 33 ms (docs/rsngd.md, "The step on
a GPU"). :func:`fused` wraps such a function: on a CUDA device it runs compiled (once per process, shapes dynamic),
elsewhere, when switched off in :data:`ENABLED`, or if compiling fails (warned once), eagerly. Compiled, integer
arithmetic is exact and floating point agrees up to the last bit of the functions the compiler's libraries evaluate
(the normals measured bit-identical on an H200).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ENABLED", "OBSERVERS", "fused", "running"]

ENABLED: dict[str, bool] = {}
"""Whether each fused function (by name) runs compiled on a CUDA device: ``rsngd.fused.ENABLED["normals"] = False``
switches the normals' kernel off (``benchmarks/scripts/gpu_step.py`` compares the two)."""

DEVICES = ("cuda",)
"""The device types the fused functions run compiled on."""

OBSERVERS: list[Callable[[tuple, Any], None]] = []
"""Called with each eager fused call's arguments and result (``rsngd.bench.replay`` counts the bytes a compiled
kernel would read and write from them)."""

_COMPILED: dict[str, Any] = {}
_EAGER = {"call": 0, "inside": False}


def running() -> int | None:
    """The number of the fused function's call running eagerly now, or None: ``rsngd.bench.replay`` counts the
    operations of one call as the one launch its compiled kernel makes on a GPU."""
    return _EAGER["call"] if _EAGER["inside"] else None


def _eager(fn: Callable[..., Any], args: tuple) -> Any:
    if _EAGER["inside"]:
        return fn(*args)
    _EAGER["call"] += 1
    _EAGER["inside"] = True
    try:
        out = fn(*args)
    finally:
        _EAGER["inside"] = False
    for observe in OBSERVERS:
        observe(args, out)
    return out


def fused(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the function, compiled on a CUDA device (:data:`DEVICES`; the device of its first tensor
    argument)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        ENABLED.setdefault(name, True)

        @functools.wraps(fn)
        def run(*args: Any) -> Any:
            device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
            if device is None or device.type not in DEVICES or not ENABLED[name] or _COMPILED.get(name) is False:
                return _eager(fn, args)
            try:
                if name not in _COMPILED:
                    _COMPILED[name] = torch.compile(fn, dynamic=True)
                return _COMPILED[name](*args)
            except Exception as exc:  # no working compiler here: the eager operations compute the same
                warnings.warn(
                    f"rsngd: {name} runs eagerly, torch.compile failed ({type(exc).__name__}: {exc})", stacklevel=2
                )
                _COMPILED[name] = False
                return fn(*args)

        run.eager = fn  # type: ignore[attr-defined]
        return run

    return wrap
