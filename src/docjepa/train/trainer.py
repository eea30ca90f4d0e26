"""One trainer for every training run here: pre-training, fine-tuning, the question tower, each text-encoder stage.

A run's life is the same whatever is trained, so it is written once: open (or resume) the run folder, seed,
pick the device, build the model through the task, build the optimizer and schedule (``optim.py``), restore
their state and the RNGs from the newest checkpoint, dump the config, build the loader, then the flat loop
below. One step: ``accumulation`` micro-batches (bf16 autocast on a GPU, backward of loss/accumulation),
gradient clipping, optimizer and schedule step, the task's ``after_step`` hook (the EMA update), metrics every
``log_every`` steps, an atomic checkpoint every ``checkpoint_every`` steps and at the end.

What differs between runs is a :class:`Task`: how the model is built (fresh or from the checkpoint being
resumed), which parameters train, the data and its collator, the losses, and extra files for each checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from tqdm.auto import tqdm

from ..core.config import to_dict
from ..core.errors import ConfigError, UsageError, positive
from . import distributed as D
from .checkpoint import latest_checkpoint, load_state, rng_state, save_checkpoint, set_rng_state
from .data import EpochDataset, make_loader
from .distributed import DistConfig, World
from .machine import checkpoint_bytes, pick_device, preflight, set_threads
from .metrics_log import MetricsLogger, peak_memory_mb, read_metrics
from .optim import OptimConfig, build_optimizer, build_schedule

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

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "accumulation", "log_every", "checkpoint_every", "keep_checkpoints"):
            positive(name, getattr(self, name))
        positive("threads", self.threads, 0)
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")


RESUME_SAFE = (
    "run.steps",
    "run.log_every",
    "run.checkpoint_every",
    "run.keep_checkpoints",
    "run.device",
    "run.threads",
    "dist.strategy",
)
"""Settings a resumed run may change (its length, how often it logs and saves, where and on how many processes
it runs); a change to any other setting is refused, since the restored model and optimizer were made with the
old one."""


class Task:
    """What one kind of training run builds and computes; the :class:`Trainer` does everything else."""

    name = "train"
    """Progress-bar label."""
    workers = 0
    """DataLoader worker processes."""

    def build(self, out: Path, checkpoint: Path | None) -> nn.Module:
        """The model: fresh (``checkpoint`` None) or loaded from the model folder of the checkpoint being resumed.
        ``out`` is the run folder (a tokenizer trained for the run is cached there)."""
        raise NotImplementedError

    def trainable(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        """(name, parameter) pairs the optimizer updates (default: every parameter that requires grad)."""
        if hasattr(model, "trainable_named_parameters"):
            return model.trainable_named_parameters()
        return [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def dataset(self) -> EpochDataset:
        """The training items in a seeded, resumable order."""
        raise NotImplementedError

    def collate(self, model: nn.Module) -> Callable:
        """Items → a batch (None when every item of the micro-batch was unreadable)."""
        raise NotImplementedError

    def compute(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """Losses of a batch; ``"loss"`` is optimised, every scalar is logged."""
        return model(batch)

    def after_step(self, model: nn.Module, done: int) -> dict[str, float] | None:
        """Runs after each optimizer step (``done`` steps taken); may return more values to log."""
        return None

    def save_extra(self, model_dir: Path) -> None:
        """Add files (tokenizers) to each checkpoint's model folder, so that it is self-contained."""

    def started(self, out: Path) -> None:
        """Called once the run folder is set up, before the first step."""


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted key: leaf value}."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def config_changes(old: dict, new: dict, ignore: Sequence[str] = ()) -> list[str]:
    """Lines ``key: old → new`` for every setting that differs, except :data:`RESUME_SAFE` ones (matched at the
    end of the key, so ``teacher.run.steps`` is safe too) and keys under an ``ignore`` prefix."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if any(key == s or key.endswith("." + s) for s in RESUME_SAFE):
            continue
        if any(key == p or key.startswith(p + ".") for p in ignore):
            continue
        if a.get(key, "(unset)") != b.get(key, "(unset)"):
            lines.append(f"  {key}: {a.get(key, '(unset)')!r} → {b.get(key, '(unset)')!r}")
    return lines


class _CountSkipped:
    """Wraps a collate function: items → (how many were unreadable records, batch)."""

    def __init__(self, collate: Callable) -> None:
        self.collate = collate

    def __call__(self, items):
        return sum(1 for item in items if item[1] is None), self.collate(items)


def to_device(batch: dict, device: torch.device) -> dict:
    """Tensors and prompt objects (anything with ``.to``) moved to ``device``; the rest as is."""
    return {
        k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v.to(device) if hasattr(v, "to") else v
        for k, v in batch.items()
    }


@dataclass
class _Session:
    """The state of one :meth:`Trainer.fit` call."""

    world: World
    device: torch.device
    model: nn.Module
    wrapped: nn.Module
    params: list
    opt: Any
    sched: Any
    start: int
    samples: int
    skipped_before: int
    batches: Any
    metrics: MetricsLogger | None
    amp: Any
    sums: dict = field(default_factory=dict)
    """Loss sums since the last log line."""
    skipped: int = 0
    """Unreadable records met by this process since the start or resume."""
    previous: Any = None
    """The last readable micro-batch."""
    count: int = 0
    busy: float = 0.0
    """Steps and seconds of training work since the last log line."""


class Trainer:
    """Owns a run folder: ``Trainer(out, run, optim, config).fit(task)`` trains (or resumes) one run.

    ``config`` (a dataclass or mapping) is written to ``out/config.yaml``. ``resume``: continue from the newest
    checkpoint; a config that differs from the run's in anything outside :data:`RESUME_SAFE` (and the
    ``resume_ignores`` key prefixes) is refused with the difference shown. A run folder without a complete
    checkpoint (killed before its first one finished) starts again from step 0, with or without ``resume``.
    Without ``resume``, a folder that holds a checkpoint is refused.
    """

    def __init__(
        self,
        out: str | Path,
        run: RunConfig,
        optim: OptimConfig,
        config: Any = None,
        resume: bool = False,
        progress: bool = True,
        resume_ignores: Sequence[str] = (),
        dist: DistConfig | None = None,
    ) -> None:
        self.out, self.run, self.optim, self.config = Path(out), run, optim, config
        self.resume, self.progress, self.resume_ignores = resume, progress, tuple(resume_ignores)
        self.dist = dist or DistConfig()
        self.world = World()

    # ------------------------------------------------------------------ run folder
    @staticmethod
    def checkpoint_step(out: str | Path) -> int | None:
        """Steps taken by the newest complete checkpoint of the run in ``out`` (None: no checkpoint)."""
        out = Path(out)
        ckpt = latest_checkpoint(out) if (out / "checkpoints").is_dir() else None
        return None if ckpt is None else int(load_state(ckpt)["step"])

    @staticmethod
    def is_finished(out: str | Path, steps: int) -> bool:
        """Has the run in ``out`` written the checkpoint of its last step?"""
        done = Trainer.checkpoint_step(out)
        return done is not None and done >= steps

    def _config_dict(self) -> dict | None:
        if self.config is None:
            return None
        return self.config if isinstance(self.config, dict) else to_dict(self.config)

    def _open(self) -> Path | None:
        """The checkpoint to resume from (None: start at step 0), after checking the folder and the config."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file, not a run folder")
        ckpt = latest_checkpoint(out) if (out / "checkpoints").is_dir() else None
        if not self.resume:
            if ckpt is not None:
                raise FileExistsError(
                    f"{out} already holds a run; pass --resume to continue it or choose another --out"
                )
        elif ckpt is None:
            if not (out / "config.yaml").is_file():
                raise FileNotFoundError(f"--resume: no run in {out} (no checkpoint and no config.yaml)")
            log.warning("%s has no complete checkpoint (killed before its first one): starting from step 0", out)
        saved, new = out / "config.yaml", self._config_dict()
        if self.resume and ckpt is not None and saved.is_file() and new is not None:
            changes = config_changes(yaml.safe_load(saved.read_text()) or {}, new, self.resume_ignores)
            if changes:
                raise ConfigError(
                    f"--resume with a config that differs from the run in {out} (only "
                    f"{', '.join(RESUME_SAFE)} may change):\n" + "\n".join(changes)
                )
        out.mkdir(parents=True, exist_ok=True)
        return ckpt

    def _last_metrics(self) -> dict:
        path = self.out / "last_metrics.json"
        if path.is_file():
            return json.loads(path.read_text())
        lines = read_metrics(self.out / "metrics.jsonl") if (self.out / "metrics.jsonl").is_file() else []
        return {k: v for k, v in lines[-1].items() if k != "step"} if lines else {}

    def _restore(self, ckpt: Path | None, model: nn.Module, opt: torch.optim.Optimizer, sched) -> tuple[int, int, int]:
        """Optimizer, schedule and RNG states of ``ckpt``; (step, samples consumed, records skipped) so far."""
        if ckpt is None:
            return 0, 0, 0
        D.load_optimizer_state(model, opt, torch.load(ckpt / "optimizer.pt", weights_only=True))
        sched.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
        state = load_state(ckpt)
        ranks = state.get("rng_ranks")
        if ranks is not None and len(ranks) == self.world.size:
            set_rng_state(ranks[self.world.rank])
        else:
            if self.world.size > 1:
                log.warning("resuming on %d processes a run saved on another count: RNGs restart", self.world.size)
            set_rng_state(state["rng"])
        log.info("resumed from %s (step %d)", ckpt, state["step"])
        return state["step"], state["samples"], state.get("skipped", 0)

    def _save(self, done: int, model: nn.Module, opt, sched, samples: int, skipped: int, task: Task) -> None:
        """One checkpoint: every process takes part in gathering the state, rank 0 writes it."""
        world = self.world
        weights = D.model_state(model)
        optimizer = D.optimizer_state(model, opt)
        rngs = D.gather_objects(rng_state(), world)
        if world.main:
            extra = {"samples": samples, "skipped": skipped}
            if world.size > 1:
                extra["rng_ranks"] = rngs
            save_checkpoint(
                self.out, done, model, optimizer, sched, extra, self.run.keep_checkpoints, task.save_extra, weights
            )
        D.barrier(world)

    # ------------------------------------------------------------------ training
    def fit(self, task: Task, stop_after: int | None = None) -> dict:
        """Train ``task`` from its newest checkpoint (or step 0) to ``run.steps``; the last logged metrics.

        ``stop_after`` ends the loop at that step (after writing its checkpoint), as a kill would: tests use it
        to check that resuming reproduces an uninterrupted run.
        """
        run, out = self.run, self.out
        ckpt = self._open()
        if ckpt is not None and int(load_state(ckpt)["step"]) >= run.steps:  # nothing left to do
            log.info("%s already finished (%d steps)", out, run.steps)
            return self._last_metrics()
        s = self._session(task, ckpt)
        last: dict = {}
        bar = tqdm(total=run.steps, initial=s.start, desc=task.name, disable=not (self.progress and s.world.main),
                   dynamic_ncols=True)  # fmt: skip
        s.model.train()
        for step in range(s.start, run.steps):
            t0 = time.perf_counter()
            self._accumulate(task, s)
            D.sync_unsharded(s.model, s.world, self.dist.strategy)
            clip = self.optim.grad_clip
            grad_norm = torch.nn.utils.clip_grad_norm_(s.params, clip) if clip > 0 else torch.tensor(0.0)
            s.opt.step()
            s.sched.step()
            s.opt.zero_grad(set_to_none=True)
            done = step + 1
            extra = task.after_step(s.model, done) or {}
            s.count += 1
            s.busy += time.perf_counter() - t0
            bar.update(1)
            if done % run.log_every == 0 or done == run.steps:
                last = self._log(s, done, extra, grad_norm)
                bar.set_postfix(loss=f"{last.get('loss', float('nan')):.3f}")
            if done % run.checkpoint_every == 0 or done == run.steps or done == stop_after:
                skipped = s.skipped_before + D.sum_over_ranks(s.skipped, s.world)
                self._save(done, s.model, s.opt, s.sched, s.samples, skipped, task)
            if stop_after is not None and done >= stop_after:
                break
        bar.close()
        if s.metrics is not None:
            s.metrics.close()
        if last and s.world.main:
            tmp = out / ".last_metrics.json.tmp"
            tmp.write_text(json.dumps(last, indent=1))
            tmp.replace(out / "last_metrics.json")
        return last

    def _session(self, task: Task, ckpt: Path | None) -> _Session:
        """Everything a run needs, built or restored from ``ckpt``: the processes, the model (wrapped for DDP or
        FSDP2), the optimizer and schedule, the data from where the checkpoint left it, the metrics log."""
        run, out = self.run, self.out
        set_threads(run.threads)
        world, device = D.init_world(run.device)
        self.world = world
        device = device or pick_device(run.device)
        torch.manual_seed(run.seed)  # the same initial weights on every process
        if world.size > 1 and not world.main:
            D.barrier(world)  # rank 0 builds first: it may train and cache the run's tokenizer
        model = task.build(out, None if ckpt is None else ckpt / "model").to(device)
        if world.size > 1 and world.main:
            D.barrier(world)
        wrapped = D.wrap(model, world, self.dist.strategy, device)
        if world.size > 1:
            torch.manual_seed(run.seed + 1_000_003 * world.rank)  # dropout and noise differ between processes
        named = task.trainable(model)
        params = [p for _, p in named]
        if world.main:
            preflight(out, checkpoint_bytes(model, params))
        opt = build_optimizer(named, self.optim, seed=run.seed)
        sched = build_schedule(opt, self.optim, run.steps)
        start, samples, skipped_before = self._restore(ckpt, model, opt, sched)
        config = self._config_dict()
        if config is not None and world.main:
            tmp = out / ".config.yaml.tmp"
            tmp.write_text(yaml.safe_dump(config, sort_keys=False))
            tmp.replace(out / "config.yaml")
        if world.main:
            task.started(out)
        collate = _CountSkipped(task.collate(model))
        loader = make_loader(task.dataset(), collate, run.batch_size, samples, task.workers, world)
        return _Session(
            world=world,
            device=device,
            model=model,
            wrapped=wrapped,
            params=params,
            opt=opt,
            sched=sched,
            start=start,
            samples=samples,
            skipped_before=skipped_before,
            batches=iter(loader),
            metrics=MetricsLogger(out, start_step=start) if world.main else None,
            amp=torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and run.bf16 else nullcontext(),
        )

    def _accumulate(self, task: Task, s: _Session) -> None:
        """One step's micro-batches: forward, backward (gradients reduced on the last), losses summed for the log.
        A micro-batch whose every record was unreadable is passed over, or under several processes stood in for by
        the last readable one, weighted 0, so that every process takes part in the reduction."""
        run = self.run
        for micro in range(run.accumulation):
            bad, batch = next(s.batches)
            s.samples += run.batch_size
            s.skipped += bad
            weight = 1.0 / run.accumulation
            if batch is None:  # every record of the micro-batch was unreadable
                if s.world.size == 1 or s.previous is None:
                    continue
                batch, weight = s.previous, 0.0
            s.previous = batch
            with D.accumulate(s.wrapped, s.world, self.dist.strategy, last=micro == run.accumulation - 1):
                with s.amp:
                    losses = task.compute(s.wrapped, to_device(batch, s.device))
                (losses["loss"] * weight).backward()
            for k, v in losses.items():
                if v.dim() == 0:
                    s.sums[k] = s.sums.get(k, 0.0) + float(v.detach()) * weight

    def _log(self, s: _Session, done: int, extra: dict, grad_norm: torch.Tensor) -> dict:
        """The metrics since the last log line, averaged over the steps and the processes; logged; counts reset."""
        run = self.run
        last = D.mean_over_ranks({k: v / s.count for k, v in s.sums.items()}, s.world)
        last.update(
            extra,
            lr=s.sched.get_last_lr()[0],
            grad_norm=D.scalar(grad_norm),
            step_s=s.busy / s.count,
            samples_per_s=s.count * run.batch_size * run.accumulation / s.busy,
            peak_mem_mb=peak_memory_mb(s.device),
            skipped_records=s.skipped_before + D.sum_over_ranks(s.skipped, s.world),
        )
        if s.metrics is not None:
            s.metrics.log(done, last)
        s.sums, s.count, s.busy = {}, 0, 0.0
        return last
