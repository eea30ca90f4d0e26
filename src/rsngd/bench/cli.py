"""``rsngd bench`` and ``rsngd bench report``: their parsers (registered under ``rsngd``) and what they run."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .presets import Preset

# The headline lineup (about 20 minutes on the cpu preset); RS-SNGD variants are added by spec.
DEFAULT_OPTIMIZERS = [
    "adamw",
    "muon",
    "galore",
    "fira",
    "apollo",
    "apollo-mini",
    "adam-mini",
    "rsngd",
    "natural-galore",
]
RSNGD_VARIANTS = ["rsngd:fisher=tensor", "rsngd:residual=fira", "rsngd:projection=svd", "rsngd:rank=4,history=20"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``rsngd bench`` (train the same LLaMA with each optimizer) and its subcommands ``report``, ``tune``,
    ``retune`` and ``frontier``, each registered by its module."""
    from . import frontier, retune, tune
    from .presets import PRESETS

    ap = sub.add_parser(
        "bench",
        help="the optimizer benchmark; its subcommands: report (tables and plots), tune, retune, frontier",
        description="Train the same LLaMA with each optimizer.",
    )
    ap.add_argument("--preset", default="smoke", help=f"one of {', '.join(PRESETS)} (default smoke)")
    ap.add_argument(
        "--data",
        nargs="+",
        default=["shakespeare"],
        help="corpora: shakespeare, wikitext2 (from ../shared/data), gcide (apt-get install dict-gcide), "
        "c4:FOLDER (C4 json.gz shards) or "
        "comma-separated text files",
    )
    ap.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="a tokenizer.json (or a folder with one), e.g. T5's as GaLore uses; default: a BPE trained on the corpus",
    )
    ap.add_argument(
        "--optimizers",
        nargs="+",
        default=DEFAULT_OPTIMIZERS,
        help="optimizer specs, e.g. adamw galore rsngd:rank=32,fisher=tensor",
    )
    ap.add_argument(
        "--tuned",
        default="tuned",
        help="settings of `rsngd bench tune`: a file, or a packaged one (tuned, tuned-long, tuned-long-lr, "
        "tuned-cpu-long; default tuned, the 200-step choice); none: published settings",
    )
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, default=None, help="override the preset's number of steps")
    ap.add_argument(
        "--batch",
        type=int,
        default=None,
        help="override the preset's sequences per step (a multiple of its micro-batch, or smaller); the runs are "
        "then named PRESET-bN, and evaluations keep the preset's tokens between them",
    )
    ap.add_argument("--out", type=Path, default=Path("runs/bench/results.json"))
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"), help="folder of the shared corpora")
    ap.add_argument("--cache", type=Path, default=Path("runs/cache"), help="tokenizer and token cache")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in --out and run only the missing (optimizer, corpus, seed) combinations",
    )
    ap.add_argument(
        "--dist",
        choices=["ddp", "fsdp2"],
        default="ddp",
        help="under torchrun: DistributedDataParallel or FSDP2 fully_shard (rsngd and adamw only)",
    )
    ap.set_defaults(func=run_bench, parser=ap)
    more = ap.add_subparsers(dest="bench_command", metavar="{report,tune,retune,frontier}")
    _add_report(more)
    tune.add_parser(more)
    retune.add_parser(more)
    frontier.add_parser(more)
    return ap


def run_bench(args: argparse.Namespace) -> None:
    """Train the preset with every optimizer spec on every corpus and seed; write the runs to ``--out``."""
    import torch

    from .data import load_corpus
    from .optimizers import OptimizerSpec, load_tuned
    from .presets import get_preset
    from .runner import init_distributed, run_one, write_results

    ap = args.parser
    # Checked before any training: a bad --out would otherwise fail after the first optimizer's run.
    if args.out.is_dir():
        ap.error(f"--out {args.out} is a folder; give a JSON file name such as {args.out / 'results.json'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(args.out.parent, os.W_OK):
        ap.error(f"--out: cannot write to {args.out.parent}")
    if args.steps is not None and args.steps < 1:
        ap.error(f"--steps must be at least 1, got {args.steps}")
    if args.batch is not None and args.batch < 1:
        ap.error(f"--batch must be at least 1, got {args.batch}")
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be at least 1, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    if args.batch and args.batch != preset.batch:
        preset = with_batch(preset, args.batch, ap)
    if args.steps:
        preset = replace(preset, steps=args.steps, eval_every=min(preset.eval_every, args.steps))
    tuned = load_tuned(args.tuned)
    specs = [OptimizerSpec.parse(s, tuned) for s in args.optimizers]
    if rank_zero():
        print(f"settings: {'published defaults' if not tuned else args.tuned} (a spec's own key=value first)")
        untuned = sorted({s.name for s in specs if tuned and s.name not in tuned})
        if untuned:
            print(f"  not in {args.tuned}, so at their published settings: {', '.join(untuned)}")
    rank, world, device_name = init_distributed(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    device = torch.device(device_name)
    runs = load_done(args.out, preset.name, preset.steps) if args.resume else []
    done = {(r["optimizer"], r["dataset"], r["seed"]) for r in runs}
    if runs and rank == 0:
        print(f"resuming: {len(runs)} runs already in {args.out}")
    for data in args.data:
        if world > 1 and rank > 0:
            torch.distributed.barrier()  # rank 0 trains and caches the tokenizer first
        corpus = load_corpus(data, preset.vocab, cache=args.cache, shared=args.shared, tokenizer=args.tokenizer)
        if world > 1 and rank == 0:
            torch.distributed.barrier()
        if rank == 0:
            print(f"{corpus.name}: {len(corpus.train):,} train / {len(corpus.val):,} validation tokens ({corpus.note})")
        for seed in args.seeds:
            for spec in specs:
                if (spec.label, corpus.name, seed) in done:
                    continue
                run = run_one(spec, preset, corpus, seed, device, not args.no_progress, args.dist)
                runs.append(run)
                if rank > 0:
                    continue
                write_results(args.out, runs)
                print(
                    f"  {spec.label:32s} seed {seed}  val {run['final_val_loss']:.4f}  "
                    f"state {run['projected_state_bytes'] / 2**20:7.2f} MiB  "
                    f"opt {1000 * run['optimizer_step_s']:6.1f} ms  fwd+bwd {1000 * run['fwd_bwd_s']:7.1f} ms",
                    flush=True,
                )
    if rank == 0:
        print(f"wrote {len(runs)} runs to {args.out}")


def with_batch(preset: Preset, batch: int, ap: argparse.ArgumentParser) -> Preset:
    """``preset`` at ``batch`` sequences per step, named ``NAME-bN``; the same windows in the same order
    (micro-batches of the preset's size, accumulated), evaluated every as many tokens as the preset is."""
    if batch > preset.micro_batch and batch % preset.micro_batch:
        ap.error(f"--batch {batch} must be a multiple of the preset's micro-batch {preset.micro_batch} (or smaller)")
    return replace(
        preset,
        name=f"{preset.name}-b{batch}",
        batch=batch,
        micro_batch=min(preset.micro_batch, batch),
        eval_every=max(1, preset.eval_every * preset.batch // batch),
    )


def load_done(out: Path, preset: str, steps: int) -> list[dict]:
    """The runs of an earlier call of the same preset and steps in ``out`` (none if it does not exist)."""
    import json

    if not out.is_file():
        return []
    runs = json.loads(out.read_text())
    other = sorted({(r["preset"]["name"], r["preset"]["steps"]) for r in runs} - {(preset, steps)})
    if other:
        raise SystemExit(
            f"--resume: {out} holds runs of {other} (preset, steps), this call makes {(preset, steps)}; "
            "use another --out"
        )
    return runs


def rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _add_report(sub: Any) -> argparse.ArgumentParser:
    """``rsngd bench report``: results JSON → markdown tables (into marked doc sections) and plots."""
    ap = sub.add_parser(
        "report",
        help="results JSON → markdown tables and plots",
        description="Results JSON → markdown table and plots.",
    )
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/report"))
    ap.add_argument("--readme", type=Path, default=None, help="refresh this markdown file's results section")
    ap.add_argument("--summary", type=Path, default=None, help="refresh this markdown file's headline table")
    ap.add_argument("--ours", default="rsngd", help="the optimizer compared seed by seed with the best baseline")
    ap.add_argument(
        "--front",
        type=Path,
        action="append",
        default=[],
        help="refresh this markdown file's front-page table: the protocol's settings only (repeat for several files)",
    )
    ap.add_argument("--plots", type=Path, default=None, help="write the plots here (default: --out)")
    ap.set_defaults(func=run_report, parser=ap)
    return ap


def run_report(args: argparse.Namespace) -> None:
    from .report import report

    command = shlex.join(args.command_line)
    print(report(args.results, args.out, args.readme, command, args.summary, args.ours, args.front, args.plots))
    print(f"wrote {args.out}/report.md and plots", file=sys.stderr)
