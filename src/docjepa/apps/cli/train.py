"""``docjepa``: the training and scoring commands (pretrain, pretrain-clip, finetune, text-encoder, average,
evaluate, calibrate)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ...inference.answer_paths import ANSWER_PATHS
from .args import int_at_least, model_path, writable_file

# Commands taking --key.sub=value config overrides.
OVERRIDABLE = ("pretrain", "pretrain-clip", "finetune", "text-encoder")


def cmd_pretrain(args: argparse.Namespace) -> None:
    import logging

    from ...core.config import load_config
    from ...train.pretrain import PretrainConfig, pretrain

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_config(PretrainConfig, args.config, args.overrides)
    last = pretrain(cfg, args.out, resume=args.resume, progress=not args.no_progress)
    _print_result({"out": str(args.out), **last})


def _print_result(result: dict) -> None:
    """The run's last metrics as JSON on stdout, once: by rank 0 of a torchrun launch."""
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(result, indent=1))


def _train_command(kind: str):
    def run(args: argparse.Namespace) -> None:
        import logging

        from ...core.config import load_config

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if kind == "finetune":
            from ...train.finetune import FinetuneConfig as Config
            from ...train.finetune import finetune as train
        elif kind == "text-encoder":
            from ...textenc import TextEncoderConfig as Config
            from ...textenc import run_chain as train
        else:
            from ...train.question_tower import ClipConfig as Config
            from ...train.question_tower import pretrain_clip as train
        cfg = load_config(Config, args.config, args.overrides)
        last = train(cfg, args.out, resume=args.resume, progress=not args.no_progress)
        _print_result({"out": str(args.out), **last})

    return run


def cmd_evaluate(args: argparse.Namespace) -> None:
    from ...data.split import SplitConfig
    from ...eval.evaluate import evaluate
    from ...inference.predictor import SNAP_AGREEMENT, DocumentPredictor

    writable_file(args.out)
    predictor = DocumentPredictor.from_pretrained(
        args.checkpoint,
        device=args.device,
        snap=None if args.no_snap else SNAP_AGREEMENT,
        answer_path=args.answer_path,
    )
    split = SplitConfig(layouts=args.heldout_layouts, template_modulus=args.template_modulus)
    result = evaluate(predictor, args.data, split, part=args.split, limit=args.limit, progress=not args.no_progress)
    text = json.dumps(result, indent=1, allow_nan=False)
    print(text, flush=True)  # before writing, so that a failed write loses nothing
    if args.out:
        args.out.write_text(text + "\n")


def cmd_calibrate(args: argparse.Namespace) -> None:
    from ...eval.calibrate import calibrate

    result = calibrate(
        args.checkpoint,
        args.data,
        args.threshold,
        progress=not args.no_progress,
        write=not args.dry_run,
        within_noise=args.within_noise,
    )
    print(json.dumps(result, indent=1, allow_nan=False))


def cmd_average(args: argparse.Namespace) -> None:
    from ...train.average import average_checkpoints

    print(json.dumps(average_checkpoints(args.run, args.out, args.last, args.from_step), indent=1))


def _add_training(sub: Any) -> None:
    """pretrain, pretrain-clip, finetune, text-encoder: a config, overrides, a run folder."""
    p = sub.add_parser(
        "pretrain",
        help="pre-train the encoders (I-JEPA, MLM, MIM, D-JEPA)",
        epilog="Any config field can be overridden as --key.sub=value, e.g. --run.steps=50.",
    )
    p.add_argument(
        "--config", type=Path, default=None, help="YAML file, or a packaged config: pretrain/tiny, pretrain/base"
    )
    p.add_argument("--out", type=Path, required=True, help="run folder (checkpoints, metrics, TensorBoard)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_pretrain)
    for kind, helptext, default in (
        (
            "pretrain-clip",
            "CLIP-style pre-training of the question tower on document regions",
            "clip/tiny",
        ),
        ("finetune", "fine-tune promptable segmentation (question → mask)", "finetune/tiny"),
        (
            "text-encoder",
            "text-encoder chain: LLM → LLM2Vec (MNTP, SimCSE) → distilled BERT → MLM, and its evaluation "
            "(choose stages with --stages=distill,mlm,eval)",
            "text_encoder/tiny",
        ),
    ):
        example = "--teacher.run.steps=50" if kind == "text-encoder" else "--run.steps=50"
        f = sub.add_parser(
            kind, help=helptext, epilog=f"Any config field can be overridden as --key.sub=value, e.g. {example}."
        )
        f.add_argument("--config", type=Path, default=None, help=f"YAML file, or a packaged config (e.g. {default})")
        f.add_argument("--out", type=Path, required=True, help="run folder (checkpoints, metrics, TensorBoard)")
        f.add_argument("--resume", action="store_true", help="continue the run(s) in --out from the last checkpoint")
        f.add_argument("--no-progress", action="store_true")
        f.set_defaults(func=_train_command(kind))


def _add_evaluate(sub: Any) -> None:
    e = sub.add_parser("evaluate", help="mIoU / gIoU / cIoU of a model and of the OCR-matching baseline")
    e.add_argument(
        "--checkpoint",
        type=model_path,
        required=True,
        help="fine-tuning run, checkpoint or model folder, or 'shipped' (the model shipped in the package)",
    )
    e.add_argument("--data", type=Path, nargs="+", required=True, help="dataset folder(s)")
    e.add_argument(
        "--split",
        choices=["heldout", "train", "all"],
        default="heldout",
        help="which questions: held-out layouts/templates (default), the training kind, or all",
    )
    e.add_argument("--heldout-layouts", nargs="*", default=["receipt", "boxed", "it"])
    e.add_argument("--template-modulus", type=int_at_least(0), default=4)
    e.add_argument("--limit", type=int_at_least(1), default=None, help="at most this many questions")
    e.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    e.add_argument("--device", default=None)
    e.add_argument(
        "--no-snap",
        action="store_true",
        help="the decoder's chosen mask as drawn, not snapped to the box of the OCR words it covers",
    )
    e.add_argument(
        "--answer-path",
        choices=ANSWER_PATHS,
        default="auto",
        help="how a question is answered: auto (default: the word decoder's span where it is as sure as the model's "
        "calibration asks, else the mask), words (always the span), mask (the mask decoder's candidate)",
    )
    e.add_argument("--no-progress", action="store_true")
    e.set_defaults(func=cmd_evaluate)


def _add_calibrate(sub: Any) -> None:
    c = sub.add_parser(
        "calibrate",
        help="fit the map from the model's predicted IoU to measured IoU on labelled pages it was not trained on, "
        "and for a model with a word decoder its word span's threshold and when the span answers (stored as "
        "calibration.json beside its weights)",
    )
    c.add_argument("--checkpoint", type=Path, required=True, help="fine-tuning run, checkpoint or model folder")
    c.add_argument("--data", type=Path, nargs="+", required=True, help="dataset folder(s) with questions")
    c.add_argument("--threshold", type=float, default=0.5, help="an answer is 'known' at calibrated IoU ≥ this")
    c.add_argument("--dry-run", action="store_true", help="report the fit without writing calibration.json")
    c.add_argument(
        "--within-noise",
        action="store_true",
        help="choose the word span's rule and the path threshold by the one-standard-error rule: the preferred "
        "setting among those the pages cannot tell from the best (measured in docs/docjepa-extract.md)",
    )
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(func=cmd_calibrate)


def _add_average(sub: Any) -> None:
    a = sub.add_parser(
        "average",
        help="one model whose weights are the mean of a run's checkpoints (by default those of its second half; "
        "train with --run.keep_checkpoints=N to keep them)",
    )
    a.add_argument("run", type=Path, help="training run folder (its checkpoints/)")
    a.add_argument("--out", type=Path, required=True, help="new model folder for the averaged model")
    a.add_argument("--last", type=int_at_least(2), default=None, help="average the newest N checkpoints")
    a.add_argument("--from-step", type=int_at_least(0), default=None, help="average the checkpoints from this step")
    a.set_defaults(func=cmd_average)


def add_parsers(sub: Any) -> None:
    """Add this module's commands to the ``docjepa`` subparsers."""
    _add_training(sub)
    _add_average(sub)
    _add_evaluate(sub)
    _add_calibrate(sub)
