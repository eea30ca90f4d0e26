"""Part 2 of ``gpu.py``: loss of AdamW, Muon and RS-SNGD's two recipes (``rsngd``, ``rsngd-momentum``) at llama-60m
on real text, one seed, the same tokens.

``rsngd bench``'s own run (``rsngd.bench.runner.run_one``: bf16 autocast on CUDA, warm-up + cosine, the same batches
for every optimizer) at the ``llama-60m`` preset's model (GaLore's LLaMA-60M: hidden 512, 8 blocks, a 32,000-piece
BPE learnt on the corpus's training text) with batches of ``lm_batch`` × 256 tokens. The settings are the tuning
protocol's choice at 1,000 steps (the packaged ``tuned-long-lr``; ``rsngd-momentum``, which it did not tune, at its
recipe's; no tuning has run at this size). The number of steps is the requested one (default 1,000) or, when the
runs would not fit in the part's budget, as many as fit, measured by a 10-step probe of each optimizer first: every
optimizer gets the same number.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from gpu_common import Deadline, write_json

OPTIMIZERS = ("adamw", "muon", "rsngd", "rsngd-momentum")
SETTINGS = "tuned-long-lr"
"""The packaged settings the runs use: the tuning protocol's choice at 1,000 steps (cpu preset)."""
PROBE_STEPS = 10


def preset(args):
    from rsngd.bench.presets import PRESETS

    if args.dry_run:
        return replace(PRESETS["smoke"], steps=6, eval_every=3)
    p = PRESETS["llama-60m"]
    return replace(
        p, batch=args.lm_batch, micro_batch=args.lm_batch, steps=args.lm_steps, eval_every=100, eval_batches=8
    )


def run(args, deadline: Deadline, device: torch.device, out: Path) -> dict[str, Any]:
    from rsngd.bench.data import load_corpus
    from rsngd.bench.optimizers import OptimizerSpec, load_tuned
    from rsngd.bench.runner import run_one

    shared = Path(args.shared)
    data = "shakespeare" if args.dry_run else args.lm_data
    p = preset(args)
    t = time.perf_counter()
    corpus = load_corpus(data, p.vocab, cache=Path(args.cache), shared=shared)
    tuned = load_tuned(SETTINGS)
    specs = [OptimizerSpec.parse(name, tuned) for name in OPTIMIZERS]
    result: dict[str, Any] = {
        "part": "lm",
        "protocol": {
            "preset": p.name,
            "data": corpus.name,
            "data_note": corpus.note,
            "train_tokens_available": len(corpus.train),
            "settings": SETTINGS,
            "requested_steps": p.steps,
            "batch": p.batch,
            "seq": p.seq,
            "seed": 0,
        },
        "corpus_s": round(time.perf_counter() - t, 1),
        "runs": [],
    }
    path = out / "lm.json"
    if not args.dry_run:
        probes = [
            run_one(s, replace(p, steps=PROBE_STEPS, eval_every=PROBE_STEPS), corpus, 0, device, False) for s in specs
        ]
        # Each probe's wall time holds its model's build and one evaluation: an upper estimate of a step's cost.
        per_step = sum(r["wall_s"] for r in probes) / PROBE_STEPS
        room = deadline.left() - 20.0
        fit = int(room / (1.1 * per_step)) if room > 0 else 0
        steps = min(p.steps, fit // 50 * 50)
        result["probe"] = {"steps": PROBE_STEPS, "s_per_step_all_optimizers": per_step, "fit_steps": fit}
        if steps < 50:
            result["skipped"] = f"budget: {room:.0f} s left fits {fit} steps of the {len(specs)} optimizers"
            write_json(path, result)
            return result
        p = replace(p, steps=steps, eval_every=max(10, steps // 10))
        result["protocol"]["steps"] = steps
        result["protocol"]["train_tokens"] = steps * p.batch * p.seq
    else:
        result["protocol"]["steps"] = p.steps
    for spec in specs:
        if deadline.passed(margin=10.0):
            result["runs"].append({"optimizer": spec.label, "skipped": "budget"})
            write_json(path, result)
            continue
        run = run_one(spec, p, corpus, 0, device, progress=False)
        result["runs"].append(run)
        write_json(path, result)
        print(summary_line(run), flush=True)
    return result


def summary_line(run: dict[str, Any]) -> str:
    if "final_val_loss" not in run:
        return f"{run['optimizer']:>8} skipped ({run.get('skipped')})"
    loss = run["final_val_loss"]
    shown = f"{loss:.3f}" if math.isfinite(loss) else "diverged"
    return (
        f"{run['optimizer']:>8} val loss {shown} after {run['steps']} steps  state "
        f"{run['optimizer_state_bytes'] / 2**20:7.1f} MiB  peak {run['peak_memory_bytes'] / 2**30:5.2f} GiB  "
        f"{run['tokens_per_s']:9.0f} tokens/s"
    )
