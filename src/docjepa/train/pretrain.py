"""``docjepa pretrain``: joint pre-training of the Document-JEPA encoders (I-JEPA, MLM, MIM, D-JEPA)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from tqdm.auto import tqdm

from ..data.collate import CollateConfig
from ..data.masking import MaskConfig, PretrainCollator
from ..data.shards import DocumentDataset
from ..modeling import DocJepaForPretraining, LossWeights, build_config
from ..modeling.ijepa import ema_momentum
from .checkpoint import latest_checkpoint, load_state, save_checkpoint, set_rng_state
from .config import to_dict
from .data import EpochDataset, make_loader
from .metrics import MetricsLogger, peak_memory_mb
from .optim import OptimConfig, build_optimizer, build_schedule

log = logging.getLogger("docjepa.train")


@dataclass
class ModelConfig:
    """Which model to build."""

    preset: str = "tiny"
    """Size preset (``docjepa.modeling.build``): tiny, small or base."""
    text_encoder: str = ""
    """Local directory of BERT weights (e.g. from ``docjepa text-encoder``) to start the text encoder from."""
    init: str = ""
    """Model directory (``save_pretrained`` output) to start all weights from."""


@dataclass
class DataConfig:
    """Training data."""

    train: list[str] = field(default_factory=lambda: ["data/synth"])
    """Folders of Parquet shards (``docjepa generate`` / ``docjepa import``)."""
    tokenizer: str = ""
    """Tokenizer directory; empty: the text encoder's, else one trained on ``train`` and saved in the run."""
    vocab_size: int = 8000
    """Vocabulary size when a tokenizer is trained here."""
    max_tokens: int = 256
    """Longest OCR token sequence."""
    workers: int = 0
    """DataLoader worker processes."""


@dataclass
class RunConfig:
    """Loop settings."""

    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 8
    """Pages per micro-batch."""
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
    """Target-encoder EMA momentum at step 0, rising linearly to ``ema_end``."""
    ema_end: float = 1.0
    """EMA momentum at the last step."""


@dataclass
class PretrainConfig:
    """Everything ``docjepa pretrain`` needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    masks: MaskConfig = field(default_factory=MaskConfig)
    loss: LossWeights = field(default_factory=LossWeights)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("run.device=cuda but no CUDA device is available")
    return torch.device(name)


def load_tokenizer(data: DataConfig, model: ModelConfig, out: Path):
    """The tokenizer named in the config, else the text encoder's, else one trained on the data (cached in out)."""
    from transformers import PreTrainedTokenizerFast

    from ..data.tokenizer import train_tokenizer

    for candidate in (data.tokenizer, model.text_encoder):
        if candidate:
            if not (Path(candidate) / "tokenizer.json").is_file():
                raise FileNotFoundError(f"no tokenizer.json in {candidate}")
            return PreTrainedTokenizerFast.from_pretrained(candidate)
    own = out / "tokenizer"
    if not (own / "tokenizer.json").is_file():
        log.info("training a %d-token WordPiece tokenizer on %s", data.vocab_size, ", ".join(data.train))
        train_tokenizer([Path(p) for p in data.train], own, vocab_size=data.vocab_size)
    return PreTrainedTokenizerFast.from_pretrained(own)


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


def pretrain(
    cfg: PretrainConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) pre-training into ``out``; returns the last logged metrics.

    ``stop_after`` ends the process-level loop early at that step (after its checkpoint), as a kill would:
    tests use it to check that resuming reproduces an uninterrupted run.
    """
    out = Path(out)
    ckpt = latest_checkpoint(out) if resume else None
    if resume and ckpt is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {out / 'checkpoints'}")
    if not resume and (out / "checkpoints").exists() and any((out / "checkpoints").iterdir()):
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    device = pick_device(cfg.run.device)
    torch.manual_seed(cfg.run.seed)

    pages = DocumentDataset([Path(p) for p in cfg.data.train])
    tokenizer = load_tokenizer(cfg.data, cfg.model, out)
    if ckpt is not None:
        model = DocJepaForPretraining.from_pretrained(ckpt / "model")
    elif cfg.model.init:
        model = DocJepaForPretraining.from_pretrained(cfg.model.init)
    else:
        model = DocJepaForPretraining(build_config(cfg.model.preset, vocab_size=len(tokenizer)))
        if cfg.model.text_encoder:
            model.backbone.text_encoder.load_bert(cfg.model.text_encoder)
    mcfg = model.config
    if mcfg.bert().vocab_size != len(tokenizer):
        raise ValueError(f"model vocabulary {mcfg.bert().vocab_size} ≠ tokenizer size {len(tokenizer)}")
    masks = dataclasses.replace(cfg.masks, grid=mcfg.unit_grid)
    model.to(device)

    opt = build_optimizer(model.trainable_named_parameters(), cfg.optim, seed=cfg.run.seed)
    sched = build_schedule(opt, cfg.optim, cfg.run.steps)
    start, samples = 0, 0
    if ckpt is not None:
        opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        sched.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
        state = load_state(ckpt)
        start, samples = state["step"], state["samples"]
        set_rng_state(state["rng"])
        log.info("resumed from %s (step %d)", ckpt, start)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    tokenizer.save_pretrained(out / "tokenizer")

    collate = PretrainCollator(
        tokenizer, CollateConfig(image_size=mcfg.image_size, max_tokens=cfg.data.max_tokens), masks, seed=cfg.run.seed
    )
    loader = make_loader(EpochDataset(pages, cfg.run.seed), collate, cfg.run.batch_size, samples, cfg.data.workers)
    batches = iter(loader)
    metrics = MetricsLogger(out, start_step=start)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and cfg.run.bf16 else nullcontext()
    last: dict = {}
    sums: dict[str, float] = {}
    count, busy = 0, 0.0  # steps and seconds of training work since the last log line
    bar = tqdm(total=cfg.run.steps, initial=start, desc="pretrain", disable=not progress, dynamic_ncols=True)
    model.train()
    for step in range(start, cfg.run.steps):
        t0 = time.perf_counter()
        for _ in range(cfg.run.accumulation):
            batch = next(batches)  # (B, …) tensors; see PretrainCollator
            samples += cfg.run.batch_size
            if batch is None:  # every page of the micro-batch was unreadable
                continue
            batch = to_device(batch, device)
            with amp:
                losses = model(batch, cfg.loss)
            (losses["loss"] / cfg.run.accumulation).backward()
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach()) / cfg.run.accumulation
        grad_norm = (
            torch.nn.utils.clip_grad_norm_(model.trainable_parameters(), cfg.optim.grad_clip)
            if cfg.optim.grad_clip > 0
            else torch.tensor(0.0)
        )
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        momentum = ema_momentum(step + 1, cfg.run.steps, cfg.run.ema_start, cfg.run.ema_end)
        model.update_target(momentum)
        count += 1
        busy += time.perf_counter() - t0
        done = step + 1
        bar.update(1)
        if done % cfg.run.log_every == 0 or done == cfg.run.steps:
            last = {k: v / count for k, v in sums.items()}
            last.update(
                lr=sched.get_last_lr()[0],
                grad_norm=float(grad_norm),
                ema=momentum,
                step_s=busy / count,
                pages_per_s=count * cfg.run.batch_size * cfg.run.accumulation / busy,
                peak_mem_mb=peak_memory_mb(device),
            )
            metrics.log(done, last)
            bar.set_postfix(loss=f"{last['loss']:.3f}")
            sums, count, busy = {}, 0, 0.0
        if done % cfg.run.checkpoint_every == 0 or done == cfg.run.steps or done == stop_after:
            save_checkpoint(out, done, model, opt, sched, {"samples": samples}, keep=cfg.run.keep_checkpoints)
        if stop_after is not None and done >= stop_after:
            break
    bar.close()
    metrics.close()
    (out / "last_metrics.json").write_text(json.dumps(last, indent=1))
    return last
