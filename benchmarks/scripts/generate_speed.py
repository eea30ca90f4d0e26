"""Synthetic page generation throughput (pages/s) at a given size with all cores.

Usage: python benchmarks/scripts/generate_speed.py [--n 200 --size 1024 --workers 2] [--out FILE]

Generates ``n`` pages into a temporary folder (shards written as in ``docjepa generate``), after a
warm-up that builds every Faker locale in each worker, and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
from pathlib import Path

from docjepa.data.synth.generate import NoiseOptions, generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=mp.cpu_count())
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/generate_speed.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warm = generate(4 * args.workers * 8, Path(tmp) / "warm", size=args.size, workers=args.workers, progress=False)
        noise = NoiseOptions(p=args.noise)
        run = generate(
            args.n, Path(tmp) / "run", seed=1, size=args.size, workers=args.workers, noise=noise, progress=False
        )
    result = {"size": args.size, "workers": args.workers, "noise": args.noise, "warmup_pages": warm["pages"], **run}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
