"""Cost of a subspace renewal step against an ordinary step (the "periodic stall").

Usage: python benchmarks/renewal_stall.py [--gap 10 --steps 41 --threads 2] [--out FILE]

Builds the attention and MLP matrices of llama-60m (hidden 512, intermediate 1376, 8 layers:
56 matrices) with random gradients, and times ``optimizer.step()`` with a subspace renewal every
``gap`` steps, for GaLore (SVD renewal, rank hidden/4) and RS-SNGD (random and SVD renewal,
rank hidden/8). Reports the median ordinary step, the median renewal step and their ratio.
Writes JSON.
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


def matrices(hidden: int = 512, inter: int = 1376, layers: int = 8) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(hidden, hidden)] * 4 + [(inter, hidden), (inter, hidden), (hidden, inter)]
    return [torch.nn.Parameter(torch.randn(*s, generator=gen) * 0.02) for _ in range(layers) for s in shapes]


def time_steps(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-3
        t0 = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gap", type=int, default=10)
    ap.add_argument("--steps", type=int, default=41)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/renewal_stall.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    results = []
    for name in ("galore", "rsngd-random", "rsngd-svd"):
        params = matrices()
        if name == "galore":
            from galore_torch import GaLoreAdamW

            opt = GaLoreAdamW(
                [{"params": params, "rank": 128, "update_proj_gap": args.gap, "scale": 0.25, "proj_type": "std"}],
                lr=1e-3,
            )
        else:
            opt = rsngd.RSNGD(params, lr=1e-3, rank=64, update_gap=args.gap, projection=name.split("-")[1])
        times = time_steps(opt, params, args.steps)
        # Step 0 builds the state; renewals then happen at steps gap, 2·gap, … (both optimizers).
        renewal = [t for i, t in enumerate(times) if i > 0 and i % args.gap == 0]
        ordinary = [t for i, t in enumerate(times) if i > 0 and i % args.gap != 0]
        row = {
            "optimizer": name,
            "ordinary_step_s": statistics.median(ordinary),
            "renewal_step_s": statistics.median(renewal),
            "first_step_s": times[0],
            "step_times_s": times,
        }
        row["renewal_over_ordinary"] = row["renewal_step_s"] / row["ordinary_step_s"]
        results.append(row)
        print(
            f"{name:13s} ordinary {1000 * row['ordinary_step_s']:7.1f} ms  renewal "
            f"{1000 * row['renewal_step_s']:7.1f} ms  ×{row['renewal_over_ordinary']:.1f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gap": args.gap, "threads": args.threads, "rows": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
