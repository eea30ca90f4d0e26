"""Where the training text repeats: validation loss compared at equal training loss.

On a small corpus every optimizer's validation loss reaches a minimum and then climbs while its training loss keeps
falling. A method that fits the training text faster reaches that point sooner, so its final validation loss is
higher even where it generalises as well: the final loss ranks speed of memorisation as much as quality. Comparing
the methods at the same training loss separates the two: at a training loss every run reaches, which validation
loss does each method have?
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any


def smoothed_train(run: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(step, training loss, validation loss) at each evaluation, the training loss averaged over the steps since
    the evaluation before (a single batch's loss is too noisy to compare)."""
    curve = run.get("train_curve") or []
    out, last = [], 0
    for step, val in run.get("val_curve") or []:
        step = int(step)
        window = curve[last:step]
        if window:
            out.append((step, statistics.fmean(window), float(val)))
        last = step
    return out


def val_at_train_loss(run: dict[str, Any], target: float) -> tuple[float, float] | None:
    """(step, validation loss) where a run's smoothed training loss first falls to ``target``, interpolated linearly
    in training loss between the two evaluations around it; None if it never does."""
    points = smoothed_train(run)
    for i, (step, train, val) in enumerate(points):
        if train > target:
            continue
        if i == 0:
            return float(step), val
        s0, t0, v0 = points[i - 1]
        frac = (t0 - target) / (t0 - train)
        return s0 + frac * (step - s0), v0 + frac * (val - v0)
    return None


def repeats(run: dict[str, Any]) -> bool:
    """Whether a run saw its training text more than once (unknown: no)."""
    total, preset = run.get("train_tokens"), run["preset"]
    if not total or "batch" not in preset or "seq" not in preset:
        return False
    return run.get("steps", preset.get("steps", 0)) * preset["batch"] * preset["seq"] > total


def overfits(run: dict[str, Any]) -> bool:
    """Whether a run repeated its training text and its validation loss was lowest before its last evaluation."""
    curve = run.get("val_curve") or []
    return repeats(run) and len(curve) > 1 and min(v for _, v in curve) < curve[-1][1]


def equal_train_loss(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per optimizer of one setting: the mean validation loss (and step) at the lowest training loss that every run
    of the setting reaches."""
    lowest = [min(t for _, t, _ in points) for points in map(smoothed_train, runs) if points]
    if len(lowest) < len(runs) or not runs:
        return []
    target = max(lowest)
    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in runs:
        hit = val_at_train_loss(r, target)
        if hit is not None:
            per[r["optimizer"]].append(hit)
    rows = [
        {
            "optimizer": label,
            "train_loss": target,
            "val_loss": statistics.fmean(v for _, v in hits),
            "val_loss_std": statistics.stdev(v for _, v in hits) if len(hits) > 1 else 0.0,
            "step": statistics.fmean(s for s, _ in hits),
            "seeds": len(hits),
        }
        for label, hits in per.items()
    ]
    return sorted(rows, key=lambda row: row["val_loss"])


def equal_train_loss_markdown(groups: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """A line per setting where a run overfits (:func:`overfits`): validation loss at equal training loss."""
    parts = []
    for (dataset, preset), runs in groups.items():
        if not any(map(overfits, runs)):
            continue
        rows = equal_train_loss(runs)
        if not rows:
            continue
        parts.append(
            f"- {dataset} ({preset}), at training loss {rows[0]['train_loss']:.3f}: "
            + "; ".join(
                f"{r['optimizer']} {r['val_loss']:.3f}"
                + (f" ± {r['val_loss_std']:.3f}" if r["seeds"] > 1 else "")
                + f" (step {r['step']:.0f})"
                for r in rows
            )
        )
    return "\n".join(parts)
