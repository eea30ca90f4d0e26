"""``rsngd bench retune``: choose one lr again at a longer horizon, alike for every method.

``rsngd bench tune`` chooses both lrs of each method at the benchmark's shortest length (``cpu``, 200 steps). At a
longer horizon either may want another value. This step keeps everything but one hyperparameter (``--key``) from a
base settings file and picks, per method, the value with the lowest final validation loss among runs that tried each
candidate on one tuning corpus, seed and length (made with ``rsngd bench``; every method must have tried every
candidate: the same budget for all). The candidates: for ``adamw_lr`` (the tensors every method gives to AdamW:
embeddings, norms, LM head) :data:`rsngd.bench.tune.ADAMW_LRS`; for ``lr`` (the projected matrices) the base lr times
:data:`rsngd.bench.tune.LR_FACTORS`. It writes a settings file that ``rsngd bench --tuned`` reads; methods not
retuned keep the base file's settings.

A best value at the end of a grid of three or more is not yet bracketed. The same rule then holds for every method:
a run one grid step beyond that end (the grid's own ratio, e.g. ``lr`` × 0.25 or × 4) is taken in, and again while
the best sits at the new end; without such a run the choice is flagged ``grid_edge`` and a message names the value
to run. Runs beyond an end that is not the best are not used, so no method gains from extra runs on the losing side.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
from pathlib import Path
from typing import Any

from .optimizers import OptimizerSpec, load_tuned
from .tune import ADAMW_LRS, LR_FACTORS

KEYS = ("adamw_lr", "lr")
"""The hyperparameters that can be chosen again: the AdamW part's lr, the projected matrices' lr."""


def candidates(key: str, base_hp: dict[str, Any]) -> tuple[float, ...]:
    """The values of ``key`` every method must try: fixed for the AdamW part, relative to its base for the matrices."""
    if key == "adamw_lr":
        return tuple(ADAMW_LRS)
    if key == "lr":
        return tuple(base_hp["lr"] * f for f in LR_FACTORS)
    raise SystemExit(f"cannot retune {key!r}; choose one of {', '.join(KEYS)}")


def _match(value: float, values: tuple[float, ...]) -> float | None:
    return next((v for v in values if math.isclose(value, v, rel_tol=1e-9)), None)


def _step(values: tuple[float, ...]) -> float | None:
    """The grid's ratio between neighbouring values when it is geometric with three or more values, else None."""
    if len(values) < 3:
        return None
    ratios = [b / a for a, b in itertools.pairwise(values)]
    return ratios[0] if all(math.isclose(r, ratios[0], rel_tol=1e-9) for r in ratios) and ratios[0] > 1 else None


def _on_lattice(value: float, values: tuple[float, ...]) -> float | None:
    """``value`` if it is a grid value or lies whole grid steps beyond the grid's ends, else None."""
    hit = _match(value, values)
    step = _step(values)
    if hit is not None or step is None or value <= 0:
        return hit
    k = math.log(value / values[0]) / math.log(step)
    return value if abs(k - round(k)) < 1e-6 else None


def _bracket(per: dict[float, dict[str, Any]], values: tuple[float, ...]) -> tuple[list[float], float | None, bool]:
    """(values used, best, best still at an end): the grid, then one step beyond an end while the best sits there."""
    step = _step(values)
    used = sorted(values)

    def loss(v: float) -> float:
        return per[v]["final_val_loss"] if not per[v].get("diverged") else math.nan

    while True:
        finite = [v for v in used if math.isfinite(loss(v))]
        if not finite:
            return used, None, False
        best = min(finite, key=loss)
        if step is None:
            return used, best, False
        if best == used[-1] or best == used[0]:
            beyond = best * step if best == used[-1] else best / step
            hit = next((v for v in per if math.isclose(v, beyond, rel_tol=1e-9)), None)
            if hit is None:
                return used, best, True
            used = sorted([*used, hit])
            continue
        return used, best, False


def _setting(run: dict[str, Any]) -> tuple[str, str, int, int]:
    """The tuning run a run belongs to: corpus, preset, steps, seed."""
    return run["dataset"], run["preset"]["name"], run.get("steps", run["preset"].get("steps")), run["seed"]


def retune(
    runs: list[dict[str, Any]], base: dict[str, dict[str, Any]], key: str = "adamw_lr"
) -> tuple[dict[str, Any], tuple[str, str, int, int] | None, list[str]]:
    """(per retuned method: the chosen value of ``key`` and every candidate's loss; the tuning run's corpus, preset,
    steps and seed; messages about the runs not used).

    A run counts for its method when its hyperparameters are the base setting's except ``key`` and its ``key`` is one
    of :func:`candidates`; a diverged run never wins; a method that has not tried every candidate is not retuned."""
    notes: list[str] = []
    tried: dict[str, dict[float, dict[str, Any]]] = {}
    values: dict[str, tuple[float, ...]] = {}
    for run in runs:
        name = run.get("optimizer_name", run["optimizer"].split(":")[0])
        hp = dict(run.get("hyperparameters") or {})
        want = OptimizerSpec.parse(name, base).hyperparameters(run["preset"]["hidden"])
        values[name] = candidates(key, want)
        who = f"{run['optimizer']} (seed {run['seed']})"
        if {k: v for k, v in hp.items() if k != key} != {k: v for k, v in want.items() if k != key}:
            notes.append(f"{who}: not the base setting but for {key}; not used")
            continue
        value = _on_lattice(hp[key], values[name]) if key in hp else None
        if value is None:
            tries = ", ".join(f"{v:g}" for v in values[name])
            notes.append(f"{who}: {key}={hp.get(key)} is none of the values to try ({tries}); not used")
            continue
        if value in tried.setdefault(name, {}):
            raise SystemExit(f"two runs of {name} with {key}={value:g}: one tuning run per value")
        tried[name][value] = run
    used = {_setting(r) for per in tried.values() for r in per.values()}
    if len(used) > 1:
        raise SystemExit("the runs come from more than one tuning run (corpus, preset, steps, seed): " + str(used))
    chosen: dict[str, Any] = {}
    for name, per in tried.items():
        missing = [v for v in values[name] if v not in per]
        if missing:
            notes.append(f"{name}: no run at {key}={', '.join(f'{v:g}' for v in missing)}; not retuned")
            continue
        tried_values, best, edge = _bracket(per, values[name])
        if best is None:
            raise SystemExit(f"every run of {name} diverged")
        for v in sorted(set(per) - set(tried_values)):
            notes.append(f"{per[v]['optimizer']} (seed {per[v]['seed']}): beyond an end that is not the best; not used")
        if edge:
            step = _step(values[name]) or 1.0
            beyond = best * step if best == max(tried_values) else best / step
            notes.append(f"{name}: the best {key}={best:g} is at the end of the values tried; run {key}={beyond:g}")
        chosen[name] = {
            key: best,
            "val_loss": per[best]["final_val_loss"],
            "losses": {f"{v:g}": per[v]["final_val_loss"] for v in tried_values},
            "grid_edge": edge,
        }
    return chosen, next(iter(used), None), notes


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``rsngd bench retune``: choose one lr again from longer tuning runs."""
    ap = sub.add_parser(
        "retune",
        help="choose one lr again from longer tuning runs",
        description="Choose one lr again from longer tuning runs, keeping each method's other settings.",
    )
    ap.add_argument("results", nargs="+", type=Path, help="results JSON of `rsngd bench` (the longer tuning runs)")
    ap.add_argument(
        "--base", default="tuned", help="the settings kept but for it: a file or a packaged name (default tuned)"
    )
    ap.add_argument("--settings", type=Path, required=True, help="the settings file written")
    ap.add_argument(
        "--key",
        choices=KEYS,
        default="adamw_lr",
        help="adamw_lr: the AdamW part's lr, from 3e-3 and 1e-2; lr: the matrices' lr, from 0.5, 1 and 2 × the base "
        "(and one step beyond an end while the best sits there, when such a run is given)",
    )
    ap.set_defaults(func=run, parser=ap)
    return ap


def run(args: argparse.Namespace) -> None:
    from .runs import load_runs

    base = load_tuned(args.base)
    runs = load_runs(args.results)
    key = args.key
    chosen, setting, notes = retune(runs, base, key)
    for note in notes:
        print("  " + note)
    if not chosen or setting is None:
        raise SystemExit("no method has a run at every value; nothing written")
    dataset, preset, steps, seed = setting
    command = ["rsngd", "bench", "retune", *map(str, args.results), "--base", str(args.base), "--key", key]
    data = {
        "command": shlex.join([*command, "--settings", str(args.settings)]),
        "base": str(args.base),
        "runs": [str(p) for p in args.results],
        "preset": preset,
        "steps": steps,
        "data": dataset,
        "seed": seed,
        "retuned": key,
        "settings": {**base, **{m: {**base.get(m, {}), key: c[key]} for m, c in chosen.items()}},
        "results": chosen,
    }
    args.settings.parent.mkdir(parents=True, exist_ok=True)
    args.settings.write_text(json.dumps(data, indent=1) + "\n")
    for method, c in chosen.items():
        tried = ", ".join(f"{v}: {loss:.4f}" for v, loss in c["losses"].items())
        edge = " (grid edge)" if c["grid_edge"] else ""
        print(f"  {method:16s} {key} {c[key]:<8g} ({tried}){edge}")
    print(f"wrote {args.settings} ({dataset}, {preset} {steps} steps, seed {seed}; other settings from {args.base})")
