"""What a run needs of the machine: the device, the CPU threads, and the disk space for its checkpoints (checked
before the first step)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch
from torch import nn

from ..core.errors import UsageError

log = logging.getLogger("docjepa.train")


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"run.device={name} but no CUDA device is available (use run.device=cpu or auto)")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UsageError(f"run.device={name} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return torch.device(name)


def set_threads(threads: int) -> int:
    """Give torch ``threads`` CPU threads (0: its default), never more than ``OMP_THREAD_LIMIT`` allows.

    Asking OpenMP for more threads than the limit lets oneDNN's convolution backward wait for threads that are
    never granted (a hang, not an error), so torch's count is capped at the limit. Returns the count in use.
    """
    limit = os.environ.get("OMP_THREAD_LIMIT", "")
    cap = int(limit) if limit.strip().isdigit() and int(limit) > 0 else None
    wanted = threads or torch.get_num_threads()
    if cap is not None and wanted > cap:
        if threads:
            log.warning("run.threads=%d but OMP_THREAD_LIMIT=%d: using %d threads", threads, cap, cap)
        wanted = cap
    if wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
    return wanted


def checkpoint_bytes(model: nn.Module, trainable: list[nn.Parameter]) -> int:
    """An upper estimate of one checkpoint's size: the model's tensors plus two optimizer moments per trainable
    element (AdamW's state; RS-SNGD keeps less)."""
    tensors = {id(t): t for t in model.state_dict().values() if torch.is_tensor(t)}
    model_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return model_bytes + sum(2 * p.numel() * 4 for p in trainable)


def preflight(out: Path, need: int) -> None:
    """Fail before the first step, not at the first checkpoint: ``out`` must be writable with ``need`` bytes free."""
    probe = out / ".write-test"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write to the run folder {out}: {err.strerror or err}") from None
    free = shutil.disk_usage(out).free
    if free < need:
        raise UsageError(
            f"only {free / 2**20:.0f} MiB free under {out}; one checkpoint needs about {need / 2**20:.0f} MiB"
        )
