"""One benchmark run: train a LLaMA with one optimizer on one corpus and measure it."""

from __future__ import annotations

import atexit
import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import rsngd

from .data import Corpus, train_batches, val_batches
from .optimizers import OptimizerSpec, build_optimizer
from .presets import Preset


def build_model(preset: Preset, vocab: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.heads,
        max_position_embeddings=preset.seq,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


@torch.no_grad()
def evaluate(model, batches: list[torch.Tensor], device: torch.device, autocast: bool) -> float:
    model.eval()
    total = 0.0
    for x in batches:
        x = x.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            total += model(input_ids=x, labels=x).loss.float().item()
    model.train()
    return total / len(batches)


def init_distributed(device: str) -> tuple[int, int, str]:
    """(rank, world size, device) of a torchrun launch, the process group initialised; (0, 1, device) alone."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        atexit.register(dist.destroy_process_group)  # closed while the interpreter is still whole
    return dist.get_rank(), world, device


def distribute(model, strategy: str, world: int, device: torch.device):
    """The model as trained on ``world`` processes: itself, DDP, or FSDP2 (each decoder layer, then the root)."""
    if world == 1:
        return model
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def _mean(value: float, world: int) -> float:
    if world == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / world


def run_one(
    spec: OptimizerSpec,
    preset: Preset,
    corpus: Corpus,
    seed: int,
    device: torch.device,
    progress: bool = True,
    strategy: str = "ddp",
) -> dict[str, Any]:
    """Train once and return the measurements as a JSON-ready dict.

    Under torchrun (``WORLD_SIZE`` > 1, the process group initialised) each process trains on its share of
    every micro-batch with ``strategy`` (``ddp`` or ``fsdp2``), so the global batches are those of one process;
    losses are averaged over the processes, memory and optimizer state are this process's.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if strategy == "fsdp2" and world > 1 and spec.method not in ("rsngd", "adamw"):
        raise SystemExit(f"--dist fsdp2 supports rsngd and adamw; {spec.name} does not step sharded parameters")
    if preset.micro_batch % world:
        raise SystemExit(f"the preset's micro-batch {preset.micro_batch} must be divisible by {world} processes")
    base = build_model(preset, corpus.vocab_size, seed).to(device)
    model = distribute(base, strategy, world, device)
    # Under DDP the ranks split RS-SNGD's Newton–Schulz work instead of each repeating it.
    split = {"data_parallel": True} if strategy == "ddp" and world > 1 and spec.method == "rsngd" else {}
    opt = build_optimizer(spec, base, preset.hidden, preset.heads, **split)
    batches = train_batches(corpus.train, preset.seq, preset.micro_batch, seed)
    evals = val_batches(corpus.val, preset.seq, preset.micro_batch, preset.eval_batches)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    label = f"{spec.label} seed {seed}" if progress and rank == 0 else None
    curves = _train(model, opt, preset, batches, evals, device, world, rank, label)
    return _record(spec, preset, corpus, seed, strategy if world > 1 else "single", world, curves, opt, base, device)


@dataclass
class _Curves:
    """What one run measured, step by step."""

    train: list[float] = field(default_factory=list)
    val: list[tuple[int, float]] = field(default_factory=list)
    fwd_bwd_s: list[float] = field(default_factory=list)
    opt_s: list[float] = field(default_factory=list)
    peak_rss: int = 0
    wall: float = 0.0


def _train(model, opt, preset: Preset, batches, evals, device: torch.device, world: int, rank: int, label):
    """The training loop: warm-up + cosine lr, accumulated micro-batches (this process's share of each), bf16
    autocast on CUDA, an evaluation every ``eval_every`` steps; stops at a non-finite loss. ``label``: the progress
    bar's (None: no bar)."""
    from tqdm.auto import tqdm

    per = preset.micro_batch // world
    base_lrs = [g["lr"] for g in opt.param_groups]
    accum = max(1, preset.batch // preset.micro_batch)
    autocast = cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    c = _Curves(peak_rss=_rss_bytes())
    start = time.perf_counter()
    bar = tqdm(range(preset.steps), desc=label, disable=label is None, leave=False)
    for step in bar:
        for group, lr in zip(opt.param_groups, base_lrs):
            group["lr"] = lr * rsngd.lr_factor(step, preset.steps, preset.warmup, preset.min_lr)
        sync()
        t0 = time.perf_counter()
        loss_sum = 0.0
        for _ in range(accum):
            x = next(batches)[rank * per : (rank + 1) * per].to(device)  # this process's share of the micro-batch
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=x, labels=x).loss / accum
            loss.backward()
            loss_sum += loss.detach().float().item()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t2 = time.perf_counter()
        c.fwd_bwd_s.append(t1 - t0)
        c.opt_s.append(t2 - t1)
        c.train.append(_mean(loss_sum, world))
        c.peak_rss = max(c.peak_rss, _rss_bytes())
        if (step + 1) % preset.eval_every == 0 or step + 1 == preset.steps:
            c.val.append((step + 1, evaluate(model, evals, device, autocast)))
            bar.set_postfix(train=f"{loss_sum:.3f}", val=f"{c.val[-1][1]:.3f}")
        if not math.isfinite(c.train[-1]):
            bar.close()
            break
    c.wall = time.perf_counter() - start
    return c


def _record(spec, preset: Preset, corpus: Corpus, seed: int, strategy: str, world: int, c: _Curves, opt, base, device):
    """A run's JSON record."""
    cuda = device.type == "cuda"
    projected, _, _ = rsngd.split_parameters(base.named_parameters())
    tokens = len(c.train) * preset.batch * preset.seq
    return {
        "optimizer": spec.label,
        "optimizer_name": spec.name,
        "hyperparameters": spec.hyperparameters(preset.hidden),
        "preset": preset.to_dict(),
        "dataset": corpus.name,
        "dataset_note": corpus.note,
        "train_tokens": len(corpus.train),
        "seed": seed,
        "world_size": world,
        "strategy": strategy,
        "steps": len(c.train),
        "diverged": not math.isfinite(c.train[-1]),
        "final_val_loss": c.val[-1][1] if c.val else float("nan"),
        "final_train_loss": c.train[-1],
        "final_val_perplexity": math.exp(min(c.val[-1][1], 50.0)) if c.val else float("nan"),
        "optimizer_state_bytes": rsngd.optimizer_state_bytes(opt),
        "projected_state_bytes": rsngd.optimizer_state_bytes(opt, projected),
        "optimizer_step_s": statistics.median(c.opt_s),
        "optimizer_step_max_s": max(c.opt_s),
        "fwd_bwd_s": statistics.median(c.fwd_bwd_s),
        "tokens_per_s": tokens / c.wall,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else c.peak_rss,
        "peak_memory_kind": "cuda_max_allocated" if cuda else "process_rss",
        "model_params": sum(p.numel() for p in base.parameters()),
        "projected_params": sum(p.numel() for p in projected),
        # Curves rounded to keep the committed results small.
        "train_curve": [round(v, 4) for v in c.train],
        "val_curve": [(s, round(v, 4)) for s, v in c.val],
        "optimizer_step_curve_s": [round(v, 5) for v in c.opt_s],
        "fwd_bwd_curve_s": [round(v, 5) for v in c.fwd_bwd_s],
        "wall_s": c.wall,
        "device": torch.cuda.get_device_name(device) if cuda else _cpu_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _cpu_name() -> str:
    n = torch.get_num_threads()
    return f"cpu ({n} thread{'s' if n > 1 else ''})"


def write_results(path: Path, runs: list[dict[str, Any]]) -> None:
    """Write the list of runs atomically (a crash never leaves a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(runs, indent=1))
    tmp.replace(path)
