"""How far a momentum kept in 8 or 4 bits drifts from the same momentum in float32.

Usage: python benchmarks/scripts/quantised_momentum.py [--steps 300] [--out FILE]

A 256 × 688 matrix (an MLP matrix of the ``cpu`` preset) receives gradients ``signal + noise · N(0, 1)`` (a fixed
random signal, fresh noise each step). The float32 momentum ``M ← β M + (1 − β) g`` (β 0.95) is compared with the
same momentum stored as RS-SNGD stores the residual's (``rsngd.compact``: block-wise companded codes, dequantised,
updated and quantised again every step). Reported at the last step: the relative error ``‖M_q − M‖ / ‖M‖`` and the
cosine of each buffer with the signal (how much of the noise it averaged away). Writes JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from rsngd import compact


def run(bits: int | None, noise: float, steps: int, beta: float = 0.95) -> dict:
    gen = torch.Generator().manual_seed(0)
    signal = torch.randn(256, 688, generator=gen)
    exact = torch.zeros_like(signal)
    stored = compact.quantize(exact, bits) if bits else None
    for _ in range(steps):
        g = signal + noise * torch.randn(signal.shape, generator=gen)
        exact.lerp_(g, 1 - beta)
        if bits:
            buffer = compact.dequantize(*stored, bits, signal.shape, torch.float32).lerp_(g, 1 - beta)
            stored = compact.quantize(buffer, bits)
    held = compact.dequantize(*stored, bits, signal.shape, torch.float32) if bits else exact

    def cos(a: torch.Tensor, b: torch.Tensor) -> float:
        return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()

    return {
        "bits": bits or 32,
        "noise": noise,
        "relative_error": ((held - exact).norm() / exact.norm()).item(),
        "cosine_with_signal": cos(held, signal),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/quantised_momentum.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [run(bits, noise, args.steps) for noise in (1.0, 4.0) for bits in (None, 8, 4)]
    for r in rows:
        print(f"noise {r['noise']:.0f}  {r['bits']:2d} bits  relative error {r['relative_error']:.3f}  "
              f"cosine with the signal {r['cosine_with_signal']:.3f}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"steps": args.steps, "beta": 0.95, "shape": [256, 688], "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
