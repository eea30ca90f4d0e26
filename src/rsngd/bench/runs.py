"""The benchmark's run records: loading them, their settings' labels, the keys and the best loss the reports use."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from .optimizers import rank_as_rule


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        runs.extend(data if isinstance(data, list) else [data])
    if not runs:
        raise SystemExit("no runs in " + ", ".join(map(str, paths)))
    runs = label_settings(runs)
    seen = Counter((r["optimizer"], *_key(r), r["seed"]) for r in runs)
    twice = [
        f"{label} on {dataset} ({preset}), seed {seed}" for (label, dataset, preset, seed), n in seen.items() if n > 1
    ]
    if twice:  # pooled, they would count as more seeds than were run
        raise SystemExit("the same run more than once in " + ", ".join(map(str, paths)) + ": " + "; ".join(twice))
    return runs


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _settings(run: dict[str, Any]) -> dict[str, Any]:
    """A run's hyperparameters, with a rank that follows the model's width (GaLore's hidden/4) as its rule."""
    name = run.get("optimizer_name", run["optimizer"].split(":")[0])
    return rank_as_rule(name, run.get("hyperparameters") or {}, run["preset"].get("hidden"))


def label_settings(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one spec (e.g. ``rsngd``) made with different hyperparameters (from another settings file) are not
    pooled: each set becomes its own row, labelled with the values that tell the sets apart, e.g.
    ``rsngd (adamw_lr=0.01)``; the spec stays under ``spec``. A spec with one set keeps its plain label."""
    variants: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        hp = _settings(r)
        if hp not in variants[r["optimizer"]]:
            variants[r["optimizer"]].append(hp)
    out = []
    for r in runs:
        sets = variants[r["optimizer"]]
        if len(sets) == 1:
            out.append(r)
            continue
        hp = _settings(r)
        keys = sorted({k for v in sets for k in v if any(w.get(k) != v.get(k) for w in sets)})
        suffix = ", ".join(f"{k}={_value(hp.get(k))}" for k in keys)
        out.append({**r, "optimizer": f"{r['optimizer']} ({suffix})", "spec": r["optimizer"]})
    return out


def _key(run: dict[str, Any]) -> tuple[str, str]:
    """Runs are compared within one corpus and one preset at one number of steps."""
    preset = run["preset"]
    steps = preset.get("steps")
    return run["dataset"], preset["name"] + (f", {steps} steps" if steps else "")


def _tokens(run: dict[str, Any]) -> int | None:
    """Tokens one run trained on (None where its record lacks the preset's batch and sequence length)."""
    preset = run["preset"]
    if "batch" not in preset or "seq" not in preset:
        return None
    return run.get("steps", preset.get("steps", 0)) * preset["batch"] * preset["seq"]


def _best(run: dict[str, Any]) -> tuple[float, float]:
    """(step, loss) of a run's lowest validation loss (its final loss where it has no curve)."""
    finite = [(s, v) for s, v in run.get("val_curve") or [] if math.isfinite(v)]
    if not finite:
        return float(run.get("steps", 0)), run["final_val_loss"]
    return min(finite, key=lambda sv: sv[1])


def _order(dataset: str, preset: str) -> tuple[str, str, int]:
    """Settings in order: by corpus, then preset, then the number of steps as a number (200 before 1000)."""
    name, _, steps = preset.partition(", ")
    return dataset, name, int(steps.split()[0]) if steps else 0
