"""Where a saved model lies: a run folder (its newest complete checkpoint), a checkpoint folder, or a model folder.

Training runs write ``RUN/checkpoints/step-NNNNNNN/model`` (see ``docjepa.train.checkpoint``); every command
that loads a model accepts any of the three levels.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    root = out / "checkpoints"
    for p in root.glob(".tmp-step-*"):  # leftovers of a run killed while writing
        shutil.rmtree(p, ignore_errors=True)
    pointer = root / "latest"
    if pointer.is_file():
        path = root / pointer.read_text().strip()
        if (path / "state.pt").is_file():
            return path
    done = sorted(p for p in root.glob("step-*") if (p / "state.pt").is_file())
    return done[-1] if done else None


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder from a run folder (its latest checkpoint), a checkpoint folder, or a model folder."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / "model" / "config.json").is_file():
        return path / "model"
    ckpt = latest_checkpoint(path) if (path / "checkpoints").is_dir() else None
    if ckpt is not None:
        return ckpt / "model"
    raise FileNotFoundError(f"no model at {path} (expected a run, checkpoint or model folder)")
