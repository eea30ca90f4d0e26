"""``rsngd bench retune``: choose the AdamW part's lr again at a longer horizon, alike for every method.

``rsngd bench tune`` chooses both lrs of each method at the benchmark's shortest length (``cpu``, 200 steps). At a
longer horizon the lr of the tensors every method gives to AdamW (embeddings, norms, LM head) may want another value
while the matrices' lr holds. This step keeps each method's matrix lr (and everything else) from a base settings file
and picks, per method, the AdamW-part lr with the lowest final validation loss among runs that tried each of
:data:`rsngd.bench.tune.ADAMW_LRS` on one tuning corpus, seed and length (made with ``rsngd bench``; every method must
have tried every value: the same budget for all). It writes a settings file that ``rsngd bench --tuned`` reads;
methods not retuned keep the base file's settings.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from pathlib import Path
from typing import Any

from .optimizers import OptimizerSpec, load_tuned
from .tune import ADAMW_LRS

KEY = "adamw_lr"
"""The hyperparameter chosen again (the AdamW part's lr)."""


def _setting(run: dict[str, Any]) -> tuple[str, str, int, int]:
    """The tuning run a run belongs to: corpus, preset, steps, seed."""
    return run["dataset"], run["preset"]["name"], run.get("steps", run["preset"].get("steps")), run["seed"]


def retune(
    runs: list[dict[str, Any]], base: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], tuple[str, str, int, int] | None, list[str]]:
    """(per retuned method: the chosen lr and every tried value's loss; the tuning run's corpus, preset, steps and
    seed; messages about the runs not used).

    A run counts for its method when its hyperparameters are the base setting's except :data:`KEY`; a diverged run
    never wins; a method that has not tried every value of :data:`rsngd.bench.tune.ADAMW_LRS` is not retuned."""
    notes: list[str] = []
    tried: dict[str, dict[float, dict[str, Any]]] = {}
    for run in runs:
        name = run.get("optimizer_name", run["optimizer"].split(":")[0])
        hp = dict(run.get("hyperparameters") or {})
        want = OptimizerSpec.parse(name, base).hyperparameters(run["preset"]["hidden"])
        if KEY not in hp or {k: v for k, v in hp.items() if k != KEY} != {k: v for k, v in want.items() if k != KEY}:
            notes.append(f"{run['optimizer']} (seed {run['seed']}): not the base setting but for {KEY}; not used")
            continue
        if hp[KEY] in tried.setdefault(name, {}):
            raise SystemExit(f"two runs of {name} with {KEY}={hp[KEY]:g}: one tuning run per value")
        tried[name][hp[KEY]] = run
    used = {_setting(r) for per in tried.values() for r in per.values()}
    if len(used) > 1:
        raise SystemExit("the runs come from more than one tuning run (corpus, preset, steps, seed): " + str(used))
    chosen: dict[str, Any] = {}
    for name, per in tried.items():
        missing = [v for v in ADAMW_LRS if v not in per]
        if missing:
            notes.append(f"{name}: no run at {KEY}={', '.join(f'{v:g}' for v in missing)}; not retuned")
            continue
        losses = {v: per[v]["final_val_loss"] for v in ADAMW_LRS}
        finite = {v: loss for v, loss in losses.items() if math.isfinite(loss) and not per[v].get("diverged")}
        if not finite:
            raise SystemExit(f"every run of {name} diverged")
        best = min(finite, key=finite.get)
        chosen[name] = {KEY: best, "val_loss": finite[best], "losses": {f"{v:g}": losses[v] for v in ADAMW_LRS}}
    return chosen, next(iter(used), None), notes


def retune_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(
        prog="rsngd bench retune",
        description="Choose the AdamW part's lr again from longer tuning runs, keeping each method's matrix lr.",
    )
    ap.add_argument("results", nargs="+", type=Path, help="results JSON of `rsngd bench` (the longer tuning runs)")
    ap.add_argument("--base", type=Path, default=Path("benchmarks/tuned.json"), help="the settings kept but for it")
    ap.add_argument("--settings", type=Path, required=True, help="the settings file written")
    args = ap.parse_args(argv)
    from .report import load_runs

    base = load_tuned(args.base)
    runs = load_runs(args.results)
    chosen, setting, notes = retune(runs, base)
    for note in notes:
        print("  " + note)
    if not chosen or setting is None:
        raise SystemExit("no method has a run at every value; nothing written")
    dataset, preset, steps, seed = setting
    command = ["rsngd", "bench", "retune", *map(str, args.results), "--base", str(args.base)]
    data = {
        "command": shlex.join([*command, "--settings", str(args.settings)]),
        "base": str(args.base),
        "runs": [str(p) for p in args.results],
        "preset": preset,
        "steps": steps,
        "data": dataset,
        "seed": seed,
        "retuned": KEY,
        "adamw_lrs": list(ADAMW_LRS),
        "settings": {**base, **{m: {**base.get(m, {}), KEY: c[KEY]} for m, c in chosen.items()}},
        "results": chosen,
    }
    args.settings.parent.mkdir(parents=True, exist_ok=True)
    args.settings.write_text(json.dumps(data, indent=1) + "\n")
    for method, c in chosen.items():
        tried = ", ".join(f"{v}: {loss:.4f}" for v, loss in c["losses"].items())
        print(f"  {method:16s} {KEY} {c[KEY]:<8g} ({tried})")
    print(f"wrote {args.settings} ({dataset}, {preset} {steps} steps, seed {seed}; other settings from {args.base})")
