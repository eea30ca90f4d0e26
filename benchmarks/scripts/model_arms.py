"""The models a click benchmark compares (``clicks.py``, ``refine_time.py``): each with the predictor's click rules
(``--model``) or as the model alone (``--alone``)."""

from __future__ import annotations

import argparse


def add_model_args(ap: argparse.ArgumentParser, alone: str) -> None:
    """``--model NAME=CHECKPOINT`` and ``--alone NAME=CHECKPOINT`` (both repeatable); ``alone``: what ``--alone``
    measures, for its help."""
    ap.add_argument("--model", action="append", required=True, help="NAME=CHECKPOINT (repeat)")
    ap.add_argument("--alone", action="append", default=[], help=f"NAME=CHECKPOINT (repeat): {alone}")


def model_arms(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(name, checkpoint, click rules on) for each ``--model``, then each ``--alone``."""
    specs = [(m, True) for m in args.model] + [(m, False) for m in args.alone]
    return [(*spec.partition("=")[::2], rules) for spec, rules in specs]
