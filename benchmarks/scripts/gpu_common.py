"""What the parts of ``gpu.py`` share: the device, the deadline, memory accounting, out-of-memory, JSON files.

On CUDA, memory is ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` (what PyTorch's allocator handed out,
the figure GaLore and SCALE report); on the CPU (the dry run) it is the process's peak resident set, which cannot
be reset per arm, so the dry run checks the code path, not the figures.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import torch


def pick_device(dry_run: bool) -> torch.device:
    """CUDA when there is a GPU and this is not a dry run; the dry run always runs on the CPU."""
    if not dry_run and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def device_slug(device: torch.device, dry_run: bool) -> str:
    """A folder name for the results of this device: ``nvidia-h100-80gb-hbm3``, ``cpu-dry-run``."""
    if dry_run or device.type != "cuda":
        return "cpu-dry-run"
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def environment(device: torch.device) -> dict[str, Any]:
    """What produced a result: device, memory, torch, transformers, python."""
    import transformers

    env = {
        "device": device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        env["device_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    return env


class Deadline:
    """A point in time (``time.time()``) a part must finish by."""

    def __init__(self, at: float) -> None:
        self.at = at

    def left(self) -> float:
        return self.at - time.time()

    def passed(self, margin: float = 0.0) -> bool:
        return self.left() <= margin


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically: a part cut short leaves its last complete file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_memory(device: torch.device) -> None:
    """Free what the allocator caches and start a new peak (CUDA); nothing to reset on the CPU."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def allocated_bytes(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else _peak_rss_bytes()


def peak_bytes(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _peak_rss_bytes()


def memory_kind(device: torch.device) -> str:
    return "cuda_max_allocated" if device.type == "cuda" else "process_peak_rss"


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` is the device (or the host) running out of memory: a result to record, not a crash."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, (RuntimeError, MemoryError)) and ("out of memory" in text or "not enough memory" in text)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def gib(n: float | None) -> str:
    return "–" if n is None else f"{n / 2**30:.2f} GiB"
