"""Atomic checkpoints and exact resumption.

A checkpoint is a folder ``checkpoints/step-NNNNNNN`` holding the model (``save_pretrained``: safetensors +
config JSON), the optimizer and scheduler state, and ``state.pt`` (step, samples consumed, RNG states). It is
written under a temporary name and renamed into place, and ``checkpoints/latest`` (a one-line file) is
replaced atomically after that, so a run killed at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ..modeling.files import latest_checkpoint, resolve_model_dir

__all__ = ["latest_checkpoint", "load_state", "resolve_model_dir", "save_checkpoint"]


def rng_state() -> dict:
    """Every RNG a training step may draw from."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    out: Path, step: int, model, optimizer, scheduler, extra: dict, keep: int = 2, save_extra=None, weights=None
) -> Path:
    """Write checkpoint ``step`` under ``out/checkpoints`` atomically; keep the newest ``keep``.

    ``optimizer`` is an optimizer or its state dict. ``save_extra(model_dir)`` may add files (tokenizers) to the
    model folder, making it self-contained. ``weights``: the model's whole state dict when the model itself
    holds only shards (FSDP2).
    """
    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if weights is None:
        model.save_pretrained(tmp / "model")
    else:
        model.save_pretrained(tmp / "model", state_dict=weights)
    if save_extra is not None:
        save_extra(tmp / "model")
    torch.save(optimizer if isinstance(optimizer, dict) else optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save({"step": step, "rng": rng_state(), **extra}, tmp / "state.pt")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name + "\n")
    os.replace(pointer, root / "latest")
    old = sorted(p for p in root.glob("step-*") if p.is_dir())
    for p in old[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)
    return final


def load_state(path: Path) -> dict:
    """``state.pt`` of a checkpoint (tensors, numbers and RNG states only)."""
    return torch.load(path / "state.pt", weights_only=False)
