"""``rsngd bench tune``: one tuning protocol for every optimizer of the benchmark.

Every method gets the same budget: its projected matrices' lr at 0.5×, 1× and 2× its published setting
(:data:`rsngd.bench.optimizers.DEFAULTS`) crossed with the same two lrs for the tensors every method gives to AdamW
(embeddings, norms, LM head), 6 runs, on one tuning corpus and seed at the benchmark's length. The lowest final
validation loss wins (a diverged run never does); the winners are written to a settings file that ``rsngd bench``
reads (``--tuned``), with every run's loss, so the choice can be checked and reproduced.

Each run is its own JSON file in the runs folder, written when it ends: an interrupted tuning resumes where it
stopped, and ``--shard i/n`` splits the grid among several processes (e.g. on a machine with more cores).
A method whose best lr lies at an end of its grid gets up to :data:`MAX_EXTEND` more lrs that way.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
import zlib
from pathlib import Path
from typing import Any

from .optimizers import DEFAULTS, OptimizerSpec

LR_FACTORS = (0.5, 1.0, 2.0)
"""The projected matrices' lr, relative to the method's published lr."""
ADAMW_LRS = (3e-3, 1e-2)
"""The lr of the AdamW part (the same two for every method)."""
TUNED = ["adamw", "muon", "galore", "fira", "apollo", "apollo-mini", "adam-mini", "rsngd", "natural-galore"]
"""The methods tuned by default: every optimizer of the benchmark."""


MAX_EXTEND = 2
"""When a method's best lr lies at an end of its grid, the grid grows by one more ×2 step that way (both AdamW-part
lrs, 2 runs), at most this many times: the same rule for every method."""


def grid(method: str, factors: tuple[float, ...] | list[float] = LR_FACTORS) -> list[OptimizerSpec]:
    """The sweep of ``method``: ``factors`` (× its published lr) × :data:`ADAMW_LRS`."""
    if method not in DEFAULTS:
        raise SystemExit(f"unknown optimizer {method!r}; choose from {', '.join(DEFAULTS)}")
    centre = DEFAULTS[method]["lr"]
    return [
        OptimizerSpec.parse(f"{method}:lr={centre * f:.4g},adamw_lr={rest:g}")
        for f in sorted(factors)
        for rest in ADAMW_LRS
    ]


def run_file(folder: Path, spec: OptimizerSpec, seed: int) -> Path:
    """Where the run of ``spec`` with ``seed`` is stored."""
    slug = re.sub(r"[^A-Za-z0-9.=-]+", "_", spec.label)
    return folder / f"{slug}_seed{seed}.json"


def shard_of(spec: OptimizerSpec, shards: int) -> int:
    """The shard that runs ``spec``: fixed by its label, so concurrent shards never run the same point."""
    return zlib.crc32(spec.label.encode()) % shards


def _point(path: Path, spec: OptimizerSpec, factor: float) -> dict[str, Any]:
    run = json.loads(path.read_text())[0]  # a one-run list, as `rsngd bench report` reads it
    loss = run["final_val_loss"]
    ok = not run.get("diverged") and math.isfinite(loss)
    point = {**spec.overrides, "factor": factor, "val_loss": loss if ok else None, "diverged": not ok}
    return point | {"projected_state_bytes": run["projected_state_bytes"]} if "projected_state_bytes" in run else point


def select(
    folder: Path, methods: list[str], seed: int
) -> tuple[dict[str, dict[str, Any]], dict[str, list], list[OptimizerSpec]]:
    """(chosen settings, every grid point's result, the grid points still to run) from the runs in ``folder``.

    A method is chosen only when its grid has run, including the points that :data:`MAX_EXTEND` adds when the best
    lr lies at an end. A diverged run never wins."""
    chosen: dict[str, dict[str, Any]] = {}
    sweep: dict[str, list] = {}
    todo: list[OptimizerSpec] = []
    for method in methods:
        factors = list(LR_FACTORS)
        while True:
            specs = grid(method, factors)
            per_factor = [f for f in sorted(factors) for _ in ADAMW_LRS]
            missing = [spec for spec in specs if not run_file(folder, spec, seed).is_file()]
            points = [
                _point(run_file(folder, spec, seed), spec, f)
                for spec, f in zip(specs, per_factor)
                if spec not in missing
            ]
            sweep[method] = points
            if missing:
                todo += missing
                break
            finite = [p for p in points if p["val_loss"] is not None]
            if not finite:
                raise SystemExit(f"every run of {method} diverged; widen its grid")
            best = min(finite, key=lambda p: p["val_loss"])
            low, high = best["factor"] == min(factors), best["factor"] == max(factors)
            if (low or high) and len(factors) - len(LR_FACTORS) < MAX_EXTEND:
                factors.append(min(factors) / 2 if low else max(factors) * 2)
                continue
            chosen[method] = {
                "lr": best["lr"],
                "adamw_lr": best["adamw_lr"],
                "val_loss": best["val_loss"],
                "projected_state_bytes": best.get("projected_state_bytes"),
                "factors": sorted(factors),
                # Still at an end after the extensions: the optimum may lie outside the grid.
                "lr_at_edge": low or high,
            }
            break
    return chosen, sweep, todo


def write_settings(path: Path, chosen: dict, sweep: dict, meta: dict[str, Any], pending: list[str]) -> None:
    """Write the settings file; methods not chosen this time keep an earlier file's entry. ``pending`` names the
    methods whose sweep still lacks runs (their runs so far are in ``sweep``, nothing in ``settings``)."""
    old = json.loads(path.read_text()) if path.is_file() else {}
    settings = {**old.get("settings", {}), **{m: {"lr": c["lr"], "adamw_lr": c["adamw_lr"]} for m, c in chosen.items()}}
    results = {**old.get("results", {}), **chosen}
    sweeps = {**old.get("sweep", {}), **sweep}
    pending = sorted(set(pending) - set(results))
    data = {**meta, "settings": settings, "results": results, "sweep": sweeps, "pending": pending}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


TUNE_START = "<!-- tune:start -->"
TUNE_END = "<!-- tune:end -->"


def sweep_markdown(settings: dict[str, Any]) -> str:
    """The settings file as a table: each method's losses per lr factor (the chosen one in bold) and its choice."""
    factors = sorted({p["factor"] for points in settings["sweep"].values() for p in points})
    rests = " / ".join(f"{r:g}" for r in ADAMW_LRS)
    lines = [
        "Generated by `rsngd bench tune --tables-only --markdown FILE` from the settings file that "
        f"`{settings['command']}` wrote: "
        f"final validation loss after {settings['steps']} steps of `{settings['preset']}` on {settings['data']}, "
        f"seed {settings['seed']}. Columns: the projected matrices' lr as a multiple of the method's published lr; "
        f"each cell: the loss with the AdamW part's lr at {rests}.",
        "",
        "| method | published lr | " + " | ".join(f"{f:g}×" for f in factors) + " | chosen lr / AdamW-part lr |",
        "|---" * (len(factors) + 3) + "|",
    ]
    results, pending = settings["results"], settings.get("pending", [])
    order = sorted(results, key=lambda m: results[m]["val_loss"]) + pending
    for method in order:
        chosen = results.get(method, {"lr": None, "adamw_lr": None})
        cells = []
        for f in factors:
            texts = []
            for rest in ADAMW_LRS:
                p = next((p for p in settings["sweep"][method] if p["factor"] == f and p["adamw_lr"] == rest), None)
                if p is None:
                    continue
                text = "diverged" if p["val_loss"] is None else f"{p['val_loss']:.3f}"
                best = p["lr"] == chosen["lr"] and p["adamw_lr"] == chosen["adamw_lr"]
                texts.append(f"**{text}**" if best else text)
            cells.append(" / ".join(texts) if texts else "–")
        if method in results:
            edge = " (grid edge)" if chosen["lr_at_edge"] else ""
            choice = f"{chosen['lr']:g} / {chosen['adamw_lr']:g}{edge}"
        else:
            choice = "sweep not complete"
        lines.append(f"| {method} | {DEFAULTS[method]['lr']:g} | " + " | ".join(cells) + f" | {choice} |")
    return "\n".join(lines)


SUMMARY_START = "<!-- tune-summary:start -->"
SUMMARY_END = "<!-- tune-summary:end -->"


def summary_markdown(settings: dict[str, Any]) -> str:
    """One line per method: its best loss on the tuning run, its chosen lrs, its projected state against AdamW's."""
    results = settings["results"]
    # AdamW's state does not depend on its lr: any of its runs is the reference.
    adamw = [p.get("projected_state_bytes") for p in settings["sweep"].get("adamw", [])]
    ref = next((b for b in adamw if b), None)
    lines = [
        f"Tuning run (`{settings['preset']}`, {settings['steps']} steps, {settings['data']}, seed {settings['seed']}; "
        "each method's best of its lr sweep, from the packaged `tuned.json`):",
        "",
        "| optimizer | validation loss | lr / AdamW-part lr | state of projected matrices vs AdamW |",
        "|---|---|---|---|",
    ]
    for method in sorted(results, key=lambda m: results[m]["val_loss"]):
        r = results[method]
        state = r.get("projected_state_bytes")
        ratio = f"{100 * state / ref:.1f} %" if state is not None and ref else "–"
        lines.append(f"| {method} | {r['val_loss']:.3f} | {r['lr']:g} / {r['adamw_lr']:g} | {ratio} |")
    if settings.get("pending"):
        lines += ["", f"Sweeps not complete (runs still missing): {', '.join(settings['pending'])}."]
    return "\n".join(lines)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``rsngd bench tune``: sweep every optimizer's two learning rates alike and write the chosen settings."""
    ap = sub.add_parser(
        "tune",
        help="sweep every optimizer's two learning rates alike and write the chosen settings",
        description="Sweep every optimizer's two learning rates alike and write the chosen settings.",
    )
    ap.add_argument("--preset", default="cpu", help="the benchmark preset tuned at its length (default cpu)")
    ap.add_argument("--data", default="shakespeare", help="the tuning corpus (default shakespeare)")
    ap.add_argument("--seed", type=int, default=0, help="the tuning seed (default 0; keep it out of the headline)")
    ap.add_argument("--methods", nargs="+", default=TUNED, help=f"optimizers to tune (default: {' '.join(TUNED)})")
    ap.add_argument("--runs", type=Path, default=None, help="folder of the runs (default runs/bench/tune/PRESET)")
    ap.add_argument(
        "--settings", type=Path, default=None, help="the settings file written (default: the packaged tuned.json)"
    )
    ap.add_argument("--shard", default="0/1", help="i/n: run only the grid points whose label hashes to i mod n")
    ap.add_argument("--select-only", action="store_true", help="run nothing; choose from the runs already there")
    ap.add_argument(
        "--tables-only",
        action="store_true",
        help="run and choose nothing: fill --markdown / --summary from the settings file (it keeps every loss)",
    )
    ap.add_argument("--steps", type=int, default=None, help="override the preset's steps (for tests)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"))
    ap.add_argument("--cache", type=Path, default=Path("runs/cache"))
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--markdown", type=Path, default=None, help="fill this file's tune section with the sweep table")
    ap.add_argument("--summary", type=Path, default=None, help="fill this file's tune-summary section (one row each)")
    ap.set_defaults(func=run, parser=ap)
    return ap


def run(args: argparse.Namespace) -> None:
    match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not match or not int(match[1]) < int(match[2]):
        args.parser.error(f"--shard must be i/n with 0 <= i < n, got {args.shard!r}")
    shard, shards = int(match[1]), int(match[2])
    from .presets import get_preset

    preset = get_preset(args.preset)
    if args.steps:
        from dataclasses import replace

        preset = replace(preset, steps=args.steps, eval_every=min(preset.eval_every, args.steps))
    folder = args.runs or Path("runs/bench/tune") / preset.name
    if args.settings is None:
        from .optimizers import packaged_settings

        args.settings = packaged_settings("tuned")
    if args.tables_only:
        return fill_tables(args.settings, args.markdown, args.summary)
    for method in args.methods:  # checks the names before any training
        grid(method)
    corpus = None
    while True:
        chosen, sweep, missing = select(folder, args.methods, args.seed)
        todo = [s for s in missing if shard_of(s, shards) == shard]
        if args.select_only or not todo:
            break
        import torch

        from .data import load_corpus
        from .runner import run_one, write_results

        if corpus is None:
            if args.threads:
                torch.set_num_threads(args.threads)
            corpus = load_corpus(args.data, preset.vocab, cache=args.cache, shared=args.shared)
            print(f"tuning on {corpus.name}, seed {args.seed}, {preset.name} for {preset.steps} steps")
        print(f"{len(todo)} runs to make: {', '.join(s.label for s in todo)}", flush=True)
        for i, spec in enumerate(todo, 1):
            run = run_one(spec, preset, corpus, args.seed, torch.device("cpu"), not args.no_progress)
            run["tuning"] = {"shard": args.shard}
            write_results(run_file(folder, spec, args.seed), [run])
            print(f"  [{i}/{len(todo)}] {spec.label:36s} val {run['final_val_loss']:.4f}", flush=True)
    if missing:
        print(f"{len(missing)} grid runs not done yet (another shard?): settings written for the complete methods only")
    if not chosen and not any(sweep.values()):
        print("no grid run yet; nothing written", file=sys.stderr)
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
    pending = sorted({s.name for s in missing})
    write_settings(args.settings, chosen, sweep, meta, pending)
    for method, c in chosen.items():
        edge = "  (at the grid's edge)" if c["lr_at_edge"] else ""
        print(f"  {method:16s} lr {c['lr']:<8g} adamw_lr {c['adamw_lr']:<8g} val {c['val_loss']:.4f}{edge}")
    print(f"wrote {args.settings}")
    fill_tables(args.settings, args.markdown, args.summary)


def fill_tables(settings: Path, markdown: Path | None, summary: Path | None) -> None:
    """The sweep table into ``markdown``'s tune section and the one-row-per-method table into ``summary``'s
    tune-summary section, both from the settings file."""
    from docsections import fill_section

    data = json.loads(Path(settings).read_text())
    if markdown is not None:
        fill_section(markdown, TUNE_START, TUNE_END, sweep_markdown(data))
        print(f"filled the tune section of {markdown}")
    if summary is not None:
        fill_section(summary, SUMMARY_START, SUMMARY_END, summary_markdown(data))
        print(f"filled the tune-summary section of {summary}")
