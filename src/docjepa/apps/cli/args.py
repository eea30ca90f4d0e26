"""``docjepa``: argument types and checks the commands share."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...core.errors import UsageError
from ..model_names import SHIPPED

MAX_DPI = 600
"""Highest rendering resolution of PDFs: a page at 600 dpi is already ~35 Mpx, far more than OCR needs."""


def model_path(text: str) -> Path | None:
    """An argparse type for a model: a run, checkpoint or model folder, or None for ``shipped``."""
    return None if text == SHIPPED else Path(text)


def int_at_least(minimum: int, maximum: int | None = None):
    """An argparse type: an integer in [minimum, maximum]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def writable_file(path: Path | None) -> None:
    """Fail now, not after the work, when ``path`` cannot be written."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--out {path} is a folder; give a file name")
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write to {parent}")
