"""Training metrics: one JSON line per logged step plus TensorBoard event files."""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from pathlib import Path

import torch

log = logging.getLogger("docjepa.train")


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory so far: max allocated on a GPU, max RSS of the process on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


class MetricsLogger:
    """Appends to ``metrics.jsonl`` and writes TensorBoard scalars under ``tb/``.

    Each line is written by one ``write`` to a file opened for appending, so a kill leaves at most a torn last
    line, which readers skip. On resume from step s, lines after s (and a torn line) are dropped, as they belonged
    to the interrupted run, and TensorBoard is told to purge them, so curves never hold a step twice.
    """

    def __init__(self, out: Path, start_step: int = 0, tensorboard: bool = True) -> None:
        self.path = out / "metrics.jsonl"
        if self.path.exists():
            kept = [json.dumps(r) for r in read_metrics(self.path) if r.get("step", 0) <= start_step]
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(ln + "\n" for ln in kept))
            tmp.replace(self.path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: JSONL only
                SummaryWriter = None
            if SummaryWriter is not None:
                self.tb = SummaryWriter(str(out / "tb"), purge_step=start_step + 1 if start_step else None)

    def log(self, step: int, values: dict[str, float]) -> None:
        os.write(self.fd, (json.dumps({"step": step, **values}) + "\n").encode())
        if self.tb is not None:
            for k, v in values.items():
                self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        os.close(self.fd)
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: Path) -> list[dict]:
    """All complete lines of a ``metrics.jsonl``; a line that does not parse (torn by a kill) is logged, naming
    the file and line, and left out."""
    out = []
    for i, ln in enumerate(Path(path).read_text(errors="replace").splitlines(), 1):
        if not ln.strip():
            continue
        try:
            row = json.loads(ln)
        except json.JSONDecodeError:
            log.warning("%s line %d is not a complete JSON line (a run killed while writing it?): skipped", path, i)
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
