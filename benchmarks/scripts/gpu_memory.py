"""Part 1 of ``gpu.py``: memory and step time of whole LLaMA-1B and LLaMA-7B models, bf16 weights, per optimizer.

The GaLore / SCALE setting: weights in bf16 (no float32 master copy), each optimizer's state in the dtype it keeps
for bf16 parameters, one micro-batch of ``batch`` × ``seq`` random tokens per step, no activation checkpointing.
For each (shape, optimizer) arm: the model is built on the device, ``warmup`` steps create the state, then ``steps``
steps are timed (forward + backward, and the optimizer step, each synchronised). Recorded: peak allocated memory
(``torch.cuda.max_memory_allocated`` since the model was built) and its split: weights, gradients (the largest
held at the end of a backward), optimizer state (``rsngd.optimizer_state_bytes``), and the rest (activations and
temporaries: peak − the three). An out-of-memory is recorded as the arm's result (with the peak reached), and the
next arm runs.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from gpu_common import (
    Deadline,
    allocated_bytes,
    is_oom,
    memory_kind,
    peak_bytes,
    reset_memory,
    sync,
    tensor_bytes,
    write_json,
)

import rsngd
from rsngd import kernels

SHAPES: dict[str, dict[str, int]] = {
    # GaLore's LLaMA configurations (hidden, MLP width, blocks, heads; vocabulary 32,000).
    "llama-1b": {"hidden": 2048, "intermediate": 5461, "layers": 24, "heads": 32, "vocab": 32000},
    "llama-7b": {"hidden": 4096, "intermediate": 11008, "layers": 32, "heads": 32, "vocab": 32000},
}
DRY_SHAPES: dict[str, dict[str, int]] = {
    "llama-1b": {"hidden": 64, "intermediate": 172, "layers": 2, "heads": 4, "vocab": 512},
    "llama-7b": {"hidden": 96, "intermediate": 256, "layers": 2, "heads": 4, "vocab": 512},
}
ARMS: list[tuple[str, str, dict[str, Any]]] = [
    # (label, create_optimizer name, extra keywords), in the order they run: when the budget runs short, the arms
    # the targets are about (7B with per-layer RS-SNGD under GaLore's 22 GB; both recipes' steps against Muon's)
    # have already run. "kernels": the hand-written kernels (rsngd.kernels) switched on for the arm.
    ("rsngd per_layer", "rsngd", {"per_layer": True}),
    ("rsngd", "rsngd", {}),
    ("rsngd-momentum", "rsngd-momentum", {}),
    ("muon", "muon", {"lr": 0.02}),
    ("rsngd-momentum kernel", "rsngd-momentum", {"kernels": ("momentum",)}),
    ("adamw", "adamw", {"lr": 1e-3}),
    ("rsngd-lite", "rsngd-lite", {}),
    ("rsngd cache_factors", "rsngd", {"cache_factors": True}),
]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_llama(shape: dict[str, int], device: torch.device, seq: int) -> torch.nn.Module:
    """A randomly initialised LLaMA of ``shape`` with bf16 weights, built directly on ``device``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        max_position_embeddings=max(seq, 256),
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    with default_dtype(torch.bfloat16), device:
        model = LlamaForCausalLM(cfg)
    return model.to(device=device, dtype=torch.bfloat16)


def measure_arm(
    shape: dict[str, int],
    method: str,
    extra: dict[str, Any],
    device: torch.device,
    batch: int,
    seq: int,
    warmup: int,
    steps: int,
) -> dict[str, Any]:
    """One (shape, optimizer) arm; raises on out-of-memory (the caller records it)."""
    reset_memory(device)
    base = allocated_bytes(device)
    model = build_llama(shape, device, seq)
    named = list(model.named_parameters())
    weights = tensor_bytes(p for _, p in named)
    extra = dict(extra)
    kernels.ENABLED.update(dict.fromkeys(extra.pop("kernels", ()), True))  # for this arm only: run() restores them
    opt = rsngd.create_optimizer(named, method, **extra)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, shape["vocab"], (batch, seq), generator=gen).to(device)
    fwd_bwd, opt_s, grads, losses = [], [], 0, []
    for i in range(warmup + steps):
        sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        sync(device)
        t1 = time.perf_counter()
        grads = max(grads, tensor_bytes(p.grad for _, p in named))
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        t2 = time.perf_counter()
        losses.append(loss.item())
        if i >= warmup:
            fwd_bwd.append(t1 - t0)
            opt_s.append(t2 - t1)
    state = rsngd.optimizer_state_bytes(opt)
    peak = peak_bytes(device) - (base if device.type == "cuda" else 0)
    row = {
        "params": sum(p.numel() for _, p in named),
        "weights_bytes": weights,
        "grads_bytes": grads,
        "state_bytes": state,
        "peak_bytes": peak,
        "rest_bytes": peak - weights - grads - state if device.type == "cuda" else None,
        "model_plus_state_bytes": weights + state,
        "fwd_bwd_median_s": statistics.median(fwd_bwd),
        "opt_step_median_s": statistics.median(opt_s),
        "step_median_s": statistics.median(a + b for a, b in zip(fwd_bwd, opt_s)),
        "opt_step_times_s": [round(t, 5) for t in opt_s],
        "losses": [round(v, 4) for v in losses],
    }
    del model, opt, named, x
    return row


def run(args, deadline: Deadline, device: torch.device, out: Path) -> dict[str, Any]:
    """Every shape × optimizer arm that fits in the deadline; ``out/memory.json`` rewritten after each."""
    every = DRY_SHAPES if args.dry_run else SHAPES
    names = [n for n in getattr(args, "mem_shapes", ",".join(every)).split(",") if n]
    unknown = sorted(set(names) - set(every))
    if unknown:
        raise SystemExit(f"--mem-shapes: unknown {unknown}; choose from {sorted(every)}")
    shapes = {n: every[n] for n in names}
    wanted = [a for a in getattr(args, "mem_arms", "").split(",") if a]
    labels = [label for label, _, _ in ARMS]
    if unknown := sorted(set(wanted) - set(labels)):
        raise SystemExit(f"--mem-arms: unknown {unknown}; choose from {labels}")
    arms = [arm for arm in ARMS if not wanted or arm[0] in wanted]
    batch, seq = (1, 16) if args.dry_run else (args.mem_batch, args.mem_seq)
    warmup, steps = (1, 2) if args.dry_run else (2, args.mem_steps)
    result: dict[str, Any] = {
        "part": "memory",
        "protocol": {
            "weights": "bf16",
            "batch": batch,
            "seq": seq,
            "warmup_steps": warmup,
            "timed_steps": steps,
            "memory": memory_kind(device),
            "shapes": shapes,
        },
        "rows": [],
    }
    path = out / "memory.json"
    for shape_name, shape in shapes.items():
        for label, method, extra in arms:
            row: dict[str, Any] = {"shape": shape_name, "optimizer": label}
            if deadline.passed(margin=15.0):
                row["skipped"] = "budget"
            else:
                t = time.perf_counter()
                switches = dict(kernels.ENABLED)
                try:
                    row.update(measure_arm(shape, method, extra, device, batch, seq, warmup, steps))
                except Exception as err:  # an OOM is a result; anything else is recorded and the next arm runs
                    if is_oom(err):
                        row["oom"] = True
                    else:
                        row["error"] = traceback.format_exc()[-1500:]
                    row["peak_bytes_at_failure"] = peak_bytes(device)
                finally:
                    kernels.ENABLED.update(switches)
                row["wall_s"] = round(time.perf_counter() - t, 2)
                reset_memory(device)
            result["rows"].append(row)
            write_json(path, result)
            print(summary_line(row), flush=True)
    return result


def summary_line(row: dict[str, Any]) -> str:
    head = f"{row['shape']:>9} {row['optimizer']:<16}"
    if "peak_bytes" in row:
        return (
            f"{head} peak {row['peak_bytes'] / 2**30:7.2f} GiB  weights+state "
            f"{row['model_plus_state_bytes'] / 2**30:6.2f} GiB  state {row['state_bytes'] / 2**30:6.3f} GiB  "
            f"opt step {1000 * row['opt_step_median_s']:8.1f} ms  fwd+bwd {1000 * row['fwd_bwd_median_s']:8.1f} ms"
        )
    return f"{head} {'skipped (budget)' if row.get('skipped') else 'out of memory' if row.get('oom') else 'error'}"
