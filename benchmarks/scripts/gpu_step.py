"""The optimizer step alone on a GPU, at LLaMA-1B and LLaMA-7B shapes: RS-SNGD's step against Muon's, the factor draw
with and without its GPU forms, where the step's time goes, and the draw's parts one by one.

    python benchmarks/scripts/gpu_step.py --out DIR [--shapes llama-7b,llama-1b] [--steps 5] [--dry-run]

The model is built once per shape (bf16 weights, as ``gpu_memory.py``); its gradients are random bf16 tensors (the
step's work does not depend on their values), so no forward or backward runs. Per arm: an optimizer from
``rsngd.create_optimizer``, 2 warm-up steps (the state; the first compiles), then ``--steps`` steps timed one by
one, each synchronised; the median. The step has two GPU forms, each with a switch: the factors' normals in one
compiled kernel (``rsngd.fused.ENABLED["normals"]``) and bfloat16 factors orthonormalised without a float32 Gram
matrix, float64 Cholesky factorisations or a triangular solve with the normals (``rsngd.subspaces.NARROW``);
"before" arms switch both off, the step as it was. "kernel" arms also step the 8-bit residual momentum with its
Triton kernel (``rsngd.kernels.ENABLED["momentum"]``, off by default).

Then, for the arms in ``PROFILED``: one step with every call of the factor draw, the residual's Newton–Schulz and
its momentum timed (each synchronised), and one step under ``torch.profiler`` (its 20 costliest kernels). Then the
draw's parts at each matrix shape, for all matrices of that shape at once: the normals eager and compiled, the
float32 Cholesky QR and the narrow one, and how far the narrow factors are from the float32 ones rounded to
bfloat16 and from orthonormal. Then the momentum kernel on one MLP-shaped matrix: its time against the eager
step's, its codes and direction against a float64 reference. Writes ``DIR/step.json`` after each arm.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from gpu_common import environment, pick_device, reset_memory, sync, write_json
from gpu_memory import DRY_SHAPES, SHAPES, build_llama

import rsngd
from rsngd import compact, fused, kernels, orthogonal, strategies, subspaces
from rsngd.projection import clamp_ranks, keyed_normal, orthonormalize, orthonormalize_narrow
from rsngd.residual import quantised_momentum

BOTH = {"normals": True, "NARROW": True, "momentum_kernel": False}
OFF = {"normals": False, "NARROW": False, "momentum_kernel": False}
KERNEL = {**BOTH, "momentum_kernel": True}
ARMS: list[tuple[str, str, dict[str, Any], dict[str, bool]]] = [
    # (label, create_optimizer name, keywords, the GPU forms switched on)
    ("muon", "muon", {"lr": 0.02}, BOTH),
    ("rsngd", "rsngd", {}, BOTH),
    ("rsngd-momentum", "rsngd-momentum", {}, BOTH),
    ("rsngd-momentum kernel", "rsngd-momentum", {}, KERNEL),
    ("rsngd before", "rsngd", {}, OFF),
    ("rsngd-momentum before", "rsngd-momentum", {}, OFF),
    ("rsngd eager normals", "rsngd", {}, {**BOTH, "normals": False}),
    ("rsngd float32 orthonormalisation", "rsngd", {}, {**BOTH, "NARROW": False}),
    ("rsngd cache_factors", "rsngd", {"cache_factors": True}, BOTH),
    ("rsngd-momentum cache_factors", "rsngd-momentum", {"cache_factors": True}, BOTH),
    ("rsngd-momentum cache_factors kernel", "rsngd-momentum", {"cache_factors": True}, KERNEL),
]
PROFILED = ("rsngd", "rsngd-momentum", "rsngd-momentum kernel", "rsngd before", "rsngd-momentum before")
"""The arms stepped once more with their parts timed and once under the profiler."""


def switches(values: dict[str, bool]) -> None:
    fused.ENABLED["normals"] = values["normals"]
    subspaces.NARROW = values["NARROW"]
    kernels.ENABLED["momentum"] = values["momentum_kernel"]


def random_grads(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(0)
    named = list(model.named_parameters())
    for _, p in named:
        p.grad = torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32).mul_(1e-3).to(p.dtype)
    return named


def timed_steps(opt: Any, device: torch.device, warmup: int, steps: int) -> list[float]:
    times = []
    for i in range(warmup + steps):
        sync(device)
        t = time.perf_counter()
        opt.step()
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return times


class PhaseTimer:
    """Wraps the step's costly calls so each is timed (synchronised before and after), summed by name."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.total, self.calls, self.undo = device, defaultdict(float), defaultdict(int), []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            sync(self.device)
            t = time.perf_counter()
            out = inner(*args, **kwargs)
            sync(self.device)
            self.total[label] += time.perf_counter() - t
            self.calls[label] += 1
            return out

        setattr(owner, name, timed)
        self.undo.append((owner, name, inner))

    def restore(self) -> None:
        for owner, name, inner in reversed(self.undo):
            setattr(owner, name, inner)


def phases(opt: Any, device: torch.device) -> dict[str, Any]:
    """One step with the draw, Newton–Schulz and the momentum timed, and the whole step's time."""
    timer = PhaseTimer(device)
    timer.wrap(subspaces, "keyed_normal", "draw: normals")
    timer.wrap(subspaces, "orthonormalize_narrow", "draw: orthonormalise (narrow)")
    timer.wrap(subspaces, "orthonormalize", "draw: orthonormalise (float32)")
    timer.wrap(orthogonal, "orthogonalize_stack", "residual: Newton-Schulz")
    timer.wrap(kernels, "momentum_step", "residual: momentum kernel")
    key = ("momentum", None)
    impl, owner = strategies.REGISTRY.strategies[key]
    holder = type("Holder", (), {"fn": staticmethod(impl)})
    timer.wrap(holder, "fn", "residual: momentum")
    strategies.REGISTRY.strategies[key] = (holder.fn, owner)
    try:
        whole = timed_steps(opt, device, 0, 1)[0]
    finally:
        strategies.REGISTRY.strategies[key] = (impl, owner)
        timer.restore()
    parts = {k: round(1000 * v, 2) for k, v in timer.total.items()}
    return {"step_ms": round(1000 * whole, 2), "parts_ms": parts, "calls": dict(timer.calls)}


def profile(opt: Any, device: torch.device) -> list[dict[str, Any]]:
    """The 20 kernels (or CPU ops, without CUDA) of one step that took the most time, with their counts."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with prof(activities=acts) as p:
        opt.step()
        sync(device)
    rows = []
    for e in p.key_averages():
        dev = getattr(e, "self_device_time_total", None)
        if dev is None:
            dev = getattr(e, "self_cuda_time_total", 0)
        t = dev if device.type == "cuda" else e.self_cpu_time_total
        if t > 0:
            rows.append({"name": e.key[:120], "count": e.count, "self_ms": round(t / 1000, 3)})
    return sorted(rows, key=lambda r: -r["self_ms"])[:20]


def median_ms(fn, device: torch.device, *args: Any, reps: int = 5) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn(*args)
        sync(device)
        times.append(time.perf_counter() - t)
    return round(1000 * statistics.median(times), 3)


def draw_parts(shape: dict[str, int], device: torch.device) -> list[dict[str, Any]]:
    """Each matrix shape's draw by parts, for all the model's matrices of that shape at once (both modes)."""
    h, m, layers = shape["hidden"], shape["intermediate"], shape["layers"]
    rows = []
    for dims, count in (((h, h), 4 * layers), ((m, h), 2 * layers), ((h, m), layers)):
        ranks = clamp_ranks(dims, 1 / 8)
        sizes = [(n, r) for n, r in zip(dims, ranks) if r < n]
        keys = torch.randint(0, 2**62, (count, len(sizes)), device=device)
        row: dict[str, Any] = {"shape": list(dims), "matrices": count, "rank": ranks[0]}
        fused.ENABLED["normals"] = False
        row["normals_eager_ms"] = median_ms(keyed_normal, device, sizes, keys, torch.float32)
        eager = keyed_normal(sizes, keys, torch.float32)
        fused.ENABLED["normals"] = True
        row["normals_compiled_ms"] = median_ms(keyed_normal, device, sizes, keys, torch.float32)
        compiled = keyed_normal(sizes, keys, torch.float32)
        row["normals_max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(eager, compiled))
        row["orthonormalise_float32_ms"] = median_ms(_each, device, orthonormalize, eager, 1)
        row["orthonormalise_narrow_ms"] = median_ms(_each, device, orthonormalize_narrow, eager, torch.bfloat16)
        row["cholesky_float64_ms"] = median_ms(_each, device, _cholesky, eager)
        wide = [orthonormalize(z, 1).to(torch.bfloat16) for z in eager]
        narrow = [orthonormalize_narrow(z, torch.bfloat16) for z in eager]
        row["narrow_vs_float32_max_abs"] = max((a.float() - b.float()).abs().max().item() for a, b in zip(wide, narrow))
        row["orthonormality_float32_rounded"] = max(_off_identity(q) for q in wide)
        row["orthonormality_narrow"] = max(_off_identity(q) for q in narrow)
        rows.append(row)
        del eager, compiled, wide, narrow
        reset_memory(device)
    return rows


def momentum_kernel_check(shape: dict[str, int], device: torch.device) -> dict[str, Any]:
    """The 8-bit momentum kernel (``rsngd.kernels``) on one random (MLP width × hidden) bf16 residual: its time
    against the eager step's, and its codes and direction against a float64 reference of the same step."""
    rows, cols = shape["intermediate"], shape["hidden"]
    gen = torch.Generator(device=device).manual_seed(1)
    old = torch.randn(rows, cols, generator=gen, device=device) * torch.rand(rows, cols, generator=gen, device=device)
    codes, scales = compact.quantize(old, 8)
    residual = torch.randn(rows, cols, generator=gen, device=device).to(torch.bfloat16)
    ok, beta = torch.ones((), dtype=torch.bool, device=device), 0.95
    x = residual.double()
    buffer = x + beta * (compact.dequantize(codes, scales, 8, (rows, cols), torch.float64) - x)
    want_codes, want_scales = compact.quantize(buffer, 8)
    direction = x + beta * (buffer - x)
    kernels.ENABLED["momentum"] = True
    got, got_codes, got_scales = residual.clone(), codes.clone(), scales.clone()
    row: dict[str, Any] = {"matrix": [rows, cols], "ran": kernels.momentum_step(got, got_codes, got_scales, beta, ok)}
    gap = (got_codes.int() - want_codes.int()).abs()
    row["codes_max_gap"], row["codes_equal_share"] = gap.max().item(), (gap == 0).float().mean().item()
    row["scales_max_rel"] = ((got_scales - want_scales).abs() / want_scales.clamp_min(1e-30)).max().item()
    row["direction_max_rel"] = ((got.double() - direction).abs().max() / direction.abs().max()).item()
    args = (residual.clone(), codes.clone(), scales.clone(), beta, ok)
    row["kernel_ms"] = median_ms(kernels.momentum_step, device, *args)
    kernels.ENABLED["momentum"] = False
    state = {"res_codes": codes.clone(), "res_scales": scales.clone()}
    row["eager_ms"] = median_ms(quantised_momentum, device, None, state, residual.clone(), beta, 8, ok)
    return row


def _each(fn, zs: list[torch.Tensor], *args: Any) -> list:
    return [fn(z, *args) for z in zs]


def _cholesky(z: torch.Tensor) -> torch.Tensor:
    return torch.linalg.cholesky_ex((z.mT @ z).double())[0]


def _off_identity(q: torch.Tensor) -> float:
    g = q.double().mT @ q.double()
    return (g - torch.eye(g.shape[-1], dtype=g.dtype, device=g.device)).abs().max().item()


def run_shape(name: str, shape: dict[str, int], device: torch.device, args, result: dict, path: Path) -> None:
    model = build_llama(shape, device, 256)
    named = random_grads(model)
    for label, method, extra, flags in ARMS:
        switches(flags)
        row: dict[str, Any] = {"shape": name, "optimizer": label, "switches": flags}
        t = time.perf_counter()
        opt = rsngd.create_optimizer(named, method, **extra)
        times = timed_steps(opt, device, 2, args.steps)
        row["opt_step_median_ms"] = round(1000 * statistics.median(times), 2)
        row["opt_step_times_ms"] = [round(1000 * x, 2) for x in times]
        row["state_bytes"] = rsngd.optimizer_state_bytes(opt)
        if label in PROFILED:
            row["phases"] = phases(opt, device)
            row["profile"] = profile(opt, device)
        row["wall_s"] = round(time.perf_counter() - t, 2)
        del opt
        reset_memory(device)
        result["rows"].append(row)
        write_json(path, result)
        print(f"{name:>9} {label:<34} {row['opt_step_median_ms']:9.1f} ms", flush=True)
    switches(BOTH)
    del model, named
    reset_memory(device)
    result["draw_parts"][name] = draw_parts(shape, device)
    result["momentum_kernel"][name] = momentum_kernel_check(shape, device)
    switches(BOTH)
    write_json(path, result)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="llama-7b,llama-1b")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU: checks the code path only")
    args = ap.parse_args(argv)
    device = pick_device(args.dry_run)
    every = DRY_SHAPES if args.dry_run else SHAPES
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "step.json"
    result: dict[str, Any] = {
        "part": "step",
        "environment": environment(device),
        "protocol": {"weights": "bf16", "gradients": "random bf16", "warmup_steps": 2, "timed_steps": args.steps},
        "rows": [],
        "draw_parts": {},
        "momentum_kernel": {},
    }
    for name in args.shapes.split(","):
        run_shape(name, every[name], device, args, result, path)
    switches(BOTH)


if __name__ == "__main__":
    main()
