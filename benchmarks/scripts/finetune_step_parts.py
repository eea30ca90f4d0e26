"""Where a fine-tuning step's time goes: what caching the frozen parts' features could save.

    python benchmarks/scripts/finetune_step_parts.py --run runs/demo/finetune --steps 12 --threads 1 \\
        --out benchmarks/results/docjepa/step-parts/demo-seed0.json

Builds the run's fine-tuning task from its ``config.yaml`` and newest checkpoint (its data, tokenizers, collator,
losses and optimizer, as ``docjepa finetune`` builds them) and times ``--steps`` steps after two warm-up steps:
the collator (pages → batch), the forward pass of each part (timed by forward hooks: the question tower, which
fine-tuning keeps frozen, the backbone, the question encoder's projection, the prompt, mask and word decoders),
the backward pass and the optimizer step. Only frozen parts can have their features computed once and cached;
everything else changes at every step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch


def main() -> None:
    from docjepa.core.config import load_config
    from docjepa.modeling.files import latest_checkpoint
    from docjepa.train.finetune import FinetuneConfig, FinetuneTask
    from docjepa.train.optim import build_optimizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a fine-tuning run folder")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/step_parts.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(FinetuneConfig, args.run / "config.yaml")
    task = FinetuneTask(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        model = task.build(Path(tmp), latest_checkpoint(args.run) / "model")
    model.train()
    named = task.trainable(model)
    opt = build_optimizer(named, cfg.optim, seed=cfg.run.seed)
    data, collate = task.dataset(), task.collate(model)
    parts = {
        "question tower (frozen)": model.question_encoder.clip,
        "backbone (image + text encoders, fusion)": model.backbone,
        "prompt encoder": model.prompt_encoder,
        "mask decoder": model.mask_decoder,
        "word decoder": model.word_decoder,
        "layout painter": model.painter,
    }
    spent: dict[str, float] = defaultdict(float)
    started: dict[str, float] = {}
    for name, module in parts.items():
        module.register_forward_pre_hook(lambda m, a, name=name: started.__setitem__(name, time.perf_counter()))
        module.register_forward_hook(
            lambda m, a, o, name=name: spent.__setitem__(name, spent[name] + time.perf_counter() - started[name])
        )
    rows = []
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0)).tolist()
    bs = cfg.run.batch_size
    for step in range(args.steps + 2):
        spent.clear()
        t0 = time.perf_counter()
        batch = collate([data[i] for i in order[step * bs : (step + 1) * bs]])
        t1 = time.perf_counter()
        out = task.compute(model, batch)
        t2 = time.perf_counter()
        out["loss"].backward()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if step >= 2:
            rows.append(
                {"collate": t1 - t0, "forward": t2 - t1, "backward": t3 - t2, "optimizer": t4 - t3, **dict(spent)}
            )
    keys = list(rows[0])
    median = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys}
    total = statistics.median(r["collate"] + r["forward"] + r["backward"] + r["optimizer"] for r in rows)
    result = {
        "command": "python benchmarks/scripts/finetune_step_parts.py "
        + f"--run {args.run} --steps {args.steps} --threads {args.threads}",
        "batch_size": bs,
        "threads": args.threads,
        "steps": len(rows),
        "step_s_median": total,
        "median_s": median,
        "share_of_step": {k: v / total for k, v in median.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
