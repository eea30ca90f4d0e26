"""The training loop shared by pre-training, CLIP pre-training and fine-tuning.

One step: ``accumulation`` micro-batches (forward under bf16 autocast on a GPU, backward of loss/accumulation),
gradient clipping, optimizer and schedule step, an optional hook (the EMA update), then metrics every
``log_every`` steps and an atomic checkpoint every ``checkpoint_every`` steps and at the end.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .checkpoint import latest_checkpoint, load_state, save_checkpoint, set_rng_state
from .metrics import MetricsLogger, peak_memory_mb

log = logging.getLogger("docjepa.train")


@dataclass
class RunConfig:
    """Loop settings."""

    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 8
    """Samples per micro-batch."""
    accumulation: int = 1
    """Micro-batches per optimizer step."""
    seed: int = 0
    """Seed of initialisation, data order and masks."""
    log_every: int = 10
    """Steps between metric lines."""
    checkpoint_every: int = 100
    """Steps between checkpoints (the last step always writes one)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    bf16: bool = True
    """bf16 autocast on a GPU (ignored on CPU)."""
    threads: int = 0
    """torch CPU threads (0 = torch's default)."""
    ema_start: float = 0.996
    """Target-encoder EMA momentum at step 0, rising linearly to ``ema_end`` (pre-training only)."""
    ema_end: float = 1.0
    """EMA momentum at the last step (pre-training only)."""


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("run.device=cuda but no CUDA device is available")
    return torch.device(name)


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


def open_run(out: Path, resume: bool) -> Path | None:
    """Check the run folder; the checkpoint to resume from (None for a fresh run)."""
    ckpt = latest_checkpoint(out) if resume else None
    if resume and ckpt is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {out / 'checkpoints'}")
    if not resume and (out / "checkpoints").exists() and any((out / "checkpoints").iterdir()):
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    return ckpt


def start_run(out: Path, resume: bool, run: RunConfig) -> tuple[Path | None, torch.device]:
    """Open the run folder (see :func:`open_run`), set threads and the seed; (checkpoint or None, device)."""
    ckpt = open_run(out, resume)
    if run.threads:
        torch.set_num_threads(run.threads)
    torch.manual_seed(run.seed)
    return ckpt, pick_device(run.device)


def restore(ckpt: Path | None, opt: torch.optim.Optimizer, sched) -> tuple[int, int]:
    """Load optimizer, schedule and RNG states of ``ckpt``; (step, samples consumed) to continue from."""
    if ckpt is None:
        return 0, 0
    opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    sched.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
    state = load_state(ckpt)
    set_rng_state(state["rng"])
    log.info("resumed from %s (step %d)", ckpt, state["step"])
    return state["step"], state["samples"]


def train_loop(
    model: torch.nn.Module,
    compute: Callable[[dict], dict[str, torch.Tensor]],
    params: list[torch.nn.Parameter],
    batches: Iterator[dict | None],
    opt: torch.optim.Optimizer,
    sched,
    run: RunConfig,
    grad_clip: float,
    out: Path,
    device: torch.device,
    start: int = 0,
    samples: int = 0,
    progress: bool = True,
    stop_after: int | None = None,
    desc: str = "train",
    after_step: Callable[[int], dict[str, float]] | None = None,
    save_extra: Callable[[Path], None] | None = None,
) -> dict:
    """Train from ``start`` to ``run.steps``; returns the last logged metrics.

    ``compute(batch)`` returns the losses (``"loss"`` is optimised, every scalar is logged); ``after_step(done)``
    runs after each optimizer step and may return more values to log; ``save_extra(model_dir)`` adds files to
    each checkpoint's model folder (tokenizers). ``stop_after`` ends the loop at that step, as a kill would.
    """
    metrics = MetricsLogger(out, start_step=start)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and run.bf16 else nullcontext()
    last: dict = {}
    sums: dict[str, float] = {}
    extra: dict[str, float] = {}
    count, busy = 0, 0.0  # steps and seconds of training work since the last log line
    bar = tqdm(total=run.steps, initial=start, desc=desc, disable=not progress, dynamic_ncols=True)
    model.train()
    for step in range(start, run.steps):
        t0 = time.perf_counter()
        for _ in range(run.accumulation):
            batch = next(batches)
            samples += run.batch_size
            if batch is None:  # every record of the micro-batch was unreadable
                continue
            batch = to_device(batch, device)
            with amp:
                losses = compute(batch)
            (losses["loss"] / run.accumulation).backward()
            for k, v in losses.items():
                if v.dim() == 0:
                    sums[k] = sums.get(k, 0.0) + float(v.detach()) / run.accumulation
        grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip) if grad_clip > 0 else torch.tensor(0.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if after_step is not None:
            extra = after_step(done) or {}
        count += 1
        busy += time.perf_counter() - t0
        bar.update(1)
        if done % run.log_every == 0 or done == run.steps:
            last = {k: v / count for k, v in sums.items()}
            last.update(
                extra,
                lr=sched.get_last_lr()[0],
                grad_norm=float(grad_norm),
                step_s=busy / count,
                samples_per_s=count * run.batch_size * run.accumulation / busy,
                peak_mem_mb=peak_memory_mb(device),
            )
            metrics.log(done, last)
            bar.set_postfix(loss=f"{last.get('loss', float('nan')):.3f}")
            sums, count, busy = {}, 0, 0.0
        if done % run.checkpoint_every == 0 or done == run.steps or done == stop_after:
            save_checkpoint(
                out, done, model, opt, sched, {"samples": samples}, keep=run.keep_checkpoints, save_extra=save_extra
            )
        if stop_after is not None and done >= stop_after:
            break
    bar.close()
    metrics.close()
    (out / "last_metrics.json").write_text(json.dumps(last, indent=1))
    return last
