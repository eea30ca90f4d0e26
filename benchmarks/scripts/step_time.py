"""Optimizer step time on LLaMA layer shapes: median and max over a window with subspace renewals.

Usage: python benchmarks/scripts/step_time.py [--hidden 2048 --intermediate 5461 --layers 1] [--gap 10 --steps 31]
       [--threads 1] [--optimizers adamw,muon-fp32,rsngd,rsngd-subspace,rsngd-cached,galore] [--compile] [--out FILE]

Builds the attention and MLP matrices of ``--layers`` LLaMA blocks (default: one block of LLaMA-1B, 7
matrices, 50 M parameters) with random gradients and times ``optimizer.step()`` for each optimizer on the same
tensors: AdamW (torch's, foreach); Muon's step with its Newton–Schulz in float32 (``muon-fp32``: momentum 0.95,
Nesterov, one matrix at a time as ``torch.optim.Muon`` loops, the same quintic iterations as RS-SNGD's residual;
``muon`` is ``torch.optim.Muon`` itself, whose Newton–Schulz runs in bfloat16, slow on CPUs without bfloat16
matmul); RS-SNGD's default recipe (``rsngd``: rank 1/8, the orthogonalised residual, Newton–Schulz batched over
same-shape matrices), its subspace step alone (``rsngd-subspace``), the recipe with ``cache_factors=True``
(``rsngd-cached``); GaLore (rank hidden/4, SVD renewal). Renewals happen every ``--gap`` steps; step 0 (state
creation) is left out of the statistics.
With ``--compile`` it also counts the graphs and graph breaks of ``torch.compile(RSNGD.step)`` on a small
model (``torch._dynamo.explain``). Writes JSON and a plot of the step times beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch

import rsngd


def matrices(hidden: int, inter: int, layers: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(hidden, hidden)] * 4 + [(inter, hidden), (inter, hidden), (hidden, inter)]
    return [torch.nn.Parameter(torch.randn(*s, generator=gen) * 0.02) for _ in range(layers) for s in shapes]


def time_steps(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
    out = []
    for i in range(steps):
        for p, g in zip(params, grads):
            p.grad = g * (1 + 0.01 * i)
        t0 = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t0)
    return out


class MuonFP32(torch.optim.Optimizer):
    """Muon's step (momentum 0.95, Nesterov, Newton–Schulz, shape adjustment) with float32 Newton–Schulz: the same
    iterations as RS-SNGD's residual, so the two steps' times compare the work around them."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 0.02, momentum: float = 0.95) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self) -> None:
        from rsngd.orthogonal import orthogonalize, shape_factor

        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(p)
                buf = state["buf"].lerp_(p.grad, 1 - group["momentum"])
                update = p.grad.lerp(buf, group["momentum"])
                p.add_(orthogonalize(update) * shape_factor(update), alpha=-group["lr"])


def named(params: list[torch.nn.Parameter]) -> list[tuple[str, torch.nn.Parameter]]:
    """The matrices named as a LLaMA's attention and MLP weights: every one is projected by
    ``rsngd.create_optimizer``'s split, as in the model."""
    return [(f"layers.{i // 7}.{'self_attn' if i % 7 < 4 else 'mlp'}.w{i % 7}", p) for i, p in enumerate(params)]


def build(name: str, params: list[torch.nn.Parameter], hidden: int, gap: int) -> torch.optim.Optimizer:
    """The optimizer ``name`` through the library's factory (``muon-fp32``, a reference step, is this script's)."""
    if name == "muon-fp32":
        return MuonFP32(params)
    settings = {
        "adamw": ("adamw", {"lr": 1e-3, "weight_decay": 0.01, "foreach": True}),  # torch.optim.AdamW's defaults
        "muon": ("muon", {"lr": 0.02}),
        "galore": ("galore", {"lr": 1e-3, "rank": hidden // 4, "update_proj_gap": gap, "scale": 0.25}),
        "rsngd-subspace": ("rsngd-subspace", {"update_gap": gap}),
        "rsngd": ("rsngd", {"update_gap": gap}),  # the recipe: rank 1/8, orthogonalised residual
        "rsngd-cached": ("rsngd", {"update_gap": gap, "cache_factors": True}),
        "rsngd-momentum": ("rsngd-momentum", {"update_gap": gap}),  # + the residual's 8-bit momentum
    }
    method, hp = settings[name]
    return rsngd.create_optimizer(named(params), method, **hp)


def count_graph_breaks() -> list[dict]:
    """``torch.compile(opt.step)`` on one matrix and on a few mixed tensors: five compiled steps each (a
    renewal included); graphs, graph breaks, and whether it ran."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    out = []
    for shapes in ([(64, 48)], [(64, 48), (48, 64), (64,), (5, 6, 7)]):
        torch._dynamo.reset()
        counters.clear()
        gen = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(*s, generator=gen)) for s in shapes]
        opt = rsngd.RSNGD(params, lr=1e-3, rank=8, update_gap=3)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()  # state created eagerly
        step = torch.compile(opt.step)
        row: dict = {"shapes": shapes}
        try:
            for _ in range(5):
                for p in params:
                    p.grad = torch.randn(p.shape, generator=gen)
                step()
            row["ran"] = True
        except Exception as err:  # report, do not hide: the eager step is what runs
            row["ran"] = False
            row["error"] = str(err).splitlines()[0][:200]
        row["graphs"] = counters["stats"].get("unique_graphs", 0)
        row["graph_breaks"] = sum(counters["graph_break"].values())
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5461)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--gap", type=int, default=10)
    ap.add_argument("--steps", type=int, default=31)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--optimizers",
        default="adamw,muon-fp32,rsngd,rsngd-subspace,rsngd-cached,galore",
        help="comma-separated; 'none' to skip",
    )
    ap.add_argument("--compile", action="store_true", help="also count torch.compile graph breaks of the step")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/step_time.json"))
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    rows = []
    for name in [] if args.optimizers == "none" else args.optimizers.split(","):
        params = matrices(args.hidden, args.intermediate, args.layers)
        opt = build(name, params, args.hidden, args.gap)
        times = time_steps(opt, params, args.steps)
        window = times[1:]  # step 0 creates the state
        renewal = [t for i, t in enumerate(times) if i > 0 and i % args.gap == 0]
        row = {
            "optimizer": name,
            "median_s": statistics.median(window),
            "max_s": max(window),
            "renewal_median_s": statistics.median(renewal) if renewal else None,
            "first_step_s": times[0],
            "step_times_s": times,
            "state_bytes": rsngd.optimizer_state_bytes(opt)
            + (opt.factor_cache_bytes() if isinstance(opt, rsngd.RSNGD) else 0),
        }
        row["max_over_median"] = row["max_s"] / row["median_s"]
        rows.append(row)
        print(
            f"{name:13s} median {1000 * row['median_s']:8.1f} ms  max {1000 * row['max_s']:8.1f} ms "
            f"(×{row['max_over_median']:.2f})  state {row['state_bytes'] / 2**20:8.1f} MiB",
            flush=True,
        )
    by = {r["optimizer"]: r for r in rows}
    for ref in ("adamw", "muon-fp32"):
        if ref in by:
            for r in rows:
                r[f"median_over_{ref.replace('-', '_')}"] = r["median_s"] / by[ref]["median_s"]
    result = {
        "shapes": {"hidden": args.hidden, "intermediate": args.intermediate, "layers": args.layers},
        "gap": args.gap,
        "steps": args.steps,
        "threads": args.threads,
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.compile:
        result["compile"] = count_graph_breaks()
        print("torch.compile(RSNGD.step):", result["compile"], flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    if rows:
        plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in rows:
        ax.plot(range(1, len(r["step_times_s"])), [1000 * t for t in r["step_times_s"][1:]], label=r["optimizer"])
    ax.set_xlabel("step")
    ax.set_ylabel("optimizer step (ms)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
