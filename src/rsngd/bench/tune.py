"""``rsngd bench tune``: one tuning protocol for every optimizer of the benchmark.

Every method gets the same budget: its projected matrices' lr at 0.5×, 1× and 2× its published setting
(:data:`rsngd.bench.optimizers.DEFAULTS`) crossed with the same two lrs for the tensors every method gives to AdamW
(embeddings, norms, LM head), 6 runs, on one tuning corpus and seed at the benchmark's length. The lowest final
validation loss wins (a diverged run never does); the winners are written to a settings file that ``rsngd bench``
reads (``--tuned``), with every run's loss, so the choice can be checked and reproduced.

Each run is its own JSON file in the runs folder, written when it ends: an interrupted tuning resumes where it
stopped, and ``--shard i/n`` splits the grid among several processes (e.g. two with one thread each).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from .optimizers import DEFAULTS, OptimizerSpec

LR_FACTORS = (0.5, 1.0, 2.0)
"""The projected matrices' lr, relative to the method's published lr."""
ADAMW_LRS = (3e-3, 1e-2)
"""The lr of the AdamW part (the same two for every method)."""
TUNED = ["adamw", "muon", "galore", "fira", "apollo", "apollo-mini", "adam-mini", "rsngd", "natural-galore"]
"""The methods tuned by default: every optimizer of the benchmark."""


def grid(method: str) -> list[OptimizerSpec]:
    """The sweep of ``method``: :data:`LR_FACTORS` × :data:`ADAMW_LRS` around its published lr."""
    if method not in DEFAULTS:
        raise SystemExit(f"unknown optimizer {method!r}; choose from {', '.join(DEFAULTS)}")
    centre = DEFAULTS[method]["lr"]
    return [
        OptimizerSpec.parse(f"{method}:lr={centre * f:.4g},adamw_lr={rest:g}") for f in LR_FACTORS for rest in ADAMW_LRS
    ]


def run_file(folder: Path, spec: OptimizerSpec, seed: int) -> Path:
    """Where the run of ``spec`` with ``seed`` is stored."""
    slug = re.sub(r"[^A-Za-z0-9.=-]+", "_", spec.label)
    return folder / f"{slug}_seed{seed}.json"


def select(folder: Path, methods: list[str], seed: int) -> tuple[dict[str, dict[str, Any]], dict[str, list], list[str]]:
    """(chosen settings, every grid point's result, missing run files) from the runs in ``folder``.

    A method is chosen only when its whole grid has run. The loss of a diverged run counts as +inf."""
    chosen: dict[str, dict[str, Any]] = {}
    sweep: dict[str, list] = {}
    missing: list[str] = []
    for method in methods:
        points = []
        for spec in grid(method):
            path = run_file(folder, spec, seed)
            if not path.is_file():
                missing.append(str(path))
                continue
            run = json.loads(path.read_text())[0]  # a one-run list, as `rsngd bench report` reads it
            loss = run["final_val_loss"]
            ok = not run.get("diverged") and math.isfinite(loss)
            points.append({**spec.overrides, "val_loss": loss if ok else None, "diverged": not ok})
        sweep[method] = points
        if len(points) < len(LR_FACTORS) * len(ADAMW_LRS):
            continue
        finite = [p for p in points if p["val_loss"] is not None]
        if not finite:
            raise SystemExit(f"every run of {method} diverged; widen its grid")
        best = min(finite, key=lambda p: p["val_loss"])
        lrs = sorted({p["lr"] for p in points})
        chosen[method] = {
            "lr": best["lr"],
            "adamw_lr": best["adamw_lr"],
            "val_loss": best["val_loss"],
            # The best lr at the grid's end means the optimum may lie outside it.
            "lr_at_edge": best["lr"] in (lrs[0], lrs[-1]),
        }
    return chosen, sweep, missing


def write_settings(path: Path, chosen: dict, sweep: dict, meta: dict[str, Any]) -> None:
    """Write the settings file; methods not chosen this time keep an earlier file's entry."""
    old = json.loads(path.read_text()) if path.is_file() else {}
    settings = {**old.get("settings", {}), **{m: {"lr": c["lr"], "adamw_lr": c["adamw_lr"]} for m, c in chosen.items()}}
    results = {**old.get("results", {}), **chosen}
    sweeps = {**old.get("sweep", {}), **{m: sweep[m] for m in chosen}}
    data = {**meta, "settings": settings, "results": results, "sweep": sweeps}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def tune_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(
        prog="rsngd bench tune",
        description="Sweep every optimizer's two learning rates alike and write the chosen settings.",
    )
    ap.add_argument("--preset", default="cpu", help="the benchmark preset tuned at its length (default cpu)")
    ap.add_argument("--data", default="shakespeare", help="the tuning corpus (default shakespeare)")
    ap.add_argument("--seed", type=int, default=0, help="the tuning seed (default 0; keep it out of the headline)")
    ap.add_argument("--methods", nargs="+", default=TUNED, help=f"optimizers to tune (default: {' '.join(TUNED)})")
    ap.add_argument(
        "--runs", type=Path, default=None, help="folder of the runs (default benchmarks/results/tune/PRESET)"
    )
    ap.add_argument("--settings", type=Path, default=Path("benchmarks/tuned.json"), help="the settings file written")
    ap.add_argument("--shard", default="0/1", help="i/n: run only every n-th grid point from the i-th")
    ap.add_argument("--select-only", action="store_true", help="run nothing; choose from the runs already there")
    ap.add_argument("--steps", type=int, default=None, help="override the preset's steps (for tests)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"))
    ap.add_argument("--cache", type=Path, default=Path("runs/cache"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not match or not int(match[1]) < int(match[2]):
        ap.error(f"--shard must be i/n with 0 <= i < n, got {args.shard!r}")
    shard, shards = int(match[1]), int(match[2])
    from .presets import get_preset

    preset = get_preset(args.preset)
    if args.steps:
        from dataclasses import replace

        preset = replace(preset, steps=args.steps, eval_every=min(preset.eval_every, args.steps))
    folder = args.runs or Path("benchmarks/results/tune") / preset.name
    specs = [s for m in args.methods for s in grid(m)]  # checks the names before any training
    todo = [s for i, s in enumerate(specs) if i % shards == shard and not run_file(folder, s, args.seed).is_file()]
    if todo and not args.select_only:
        import torch

        from .data import load_corpus
        from .runner import run_one, write_results

        if args.threads:
            torch.set_num_threads(args.threads)
        corpus = load_corpus(args.data, preset.vocab, cache=args.cache, shared=args.shared)
        print(f"tuning on {corpus.name}, seed {args.seed}, {preset.name} for {preset.steps} steps: {len(todo)} runs")
        for i, spec in enumerate(todo, 1):
            run = run_one(spec, preset, corpus, args.seed, torch.device("cpu"), not args.no_progress)
            run["tuning"] = {"shard": args.shard}
            write_results(run_file(folder, spec, args.seed), [run])
            print(f"  [{i}/{len(todo)}] {spec.label:36s} val {run['final_val_loss']:.4f}", flush=True)
    chosen, sweep, missing = select(folder, args.methods, args.seed)
    if missing:
        print(f"{len(missing)} grid runs not done yet (another shard?): settings written for the complete methods only")
    if not chosen:
        print("no method has its whole grid yet; nothing written", file=sys.stderr)
        return
    meta = {
        # The run that reproduces the choice (shards and --select-only only split or skip its work).
        "command": shlex.join(
            ["rsngd", "bench", "tune", "--preset", preset.name, "--data", args.data, "--seed", str(args.seed)]
            + (["--steps", str(args.steps)] if args.steps else [])
            + ["--methods", *args.methods]
        ),
        "preset": preset.name,
        "steps": preset.steps,
        "data": args.data,
        "seed": args.seed,
        "lr_factors": list(LR_FACTORS),
        "adamw_lrs": list(ADAMW_LRS),
        "runs": str(folder),
    }
    write_settings(args.settings, chosen, sweep, meta)
    for method, c in chosen.items():
        edge = "  (at the grid's edge)" if c["lr_at_edge"] else ""
        print(f"  {method:16s} lr {c['lr']:<8g} adamw_lr {c['adamw_lr']:<8g} val {c['val_loss']:.4f}{edge}")
    print(f"wrote {args.settings}")
