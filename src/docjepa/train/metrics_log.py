"""Training metrics: one JSON line per logged step plus TensorBoard event files."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import torch


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory so far: max allocated on a GPU, max RSS of the process on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


class MetricsLogger:
    """Appends to ``metrics.jsonl`` and writes TensorBoard scalars under ``tb/``.

    On resume from step s, lines after s are dropped (they belonged to the interrupted run) and TensorBoard is
    told to purge them, so curves never hold a step twice.
    """

    def __init__(self, out: Path, start_step: int = 0, tensorboard: bool = True) -> None:
        self.path = out / "metrics.jsonl"
        if self.path.exists():
            kept = [
                ln
                for ln in self.path.read_text().splitlines()
                if ln.strip() and json.loads(ln).get("step", 0) <= start_step
            ]
            self.path.write_text("".join(ln + "\n" for ln in kept))
        self.file = self.path.open("a")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: JSONL only
                SummaryWriter = None
            if SummaryWriter is not None:
                self.tb = SummaryWriter(str(out / "tb"), purge_step=start_step + 1 if start_step else None)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.file.write(json.dumps({"step": step, **values}) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in values.items():
                self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: Path) -> list[dict]:
    """All lines of a ``metrics.jsonl``."""
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
