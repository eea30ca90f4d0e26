"""Parts 3 and 4 of ``gpu.py``: Document-JEPA on a GPU.

Part 3 (``docjepa-base``): the ``base`` preset (Hiera-B image encoder at 1024 × 1024, BERT-base page encoder) on
synthetic pages generated there: a short pre-training run (the packaged ``pretrain/base`` config, every objective),
then fine-tuning steps from it (the ``finetune/tiny`` recipe at the base preset, its question tower the preset's
own CLIP tower, trained). Recorded per stage: peak allocated memory, median step time and pages/s (the trainer's
``metrics.jsonl``, logged every step), and whether the pre-training loss fell (mean of the last quarter of the
steps against the first quarter).

Part 4 (``docjepa-train``): the ``make demo`` recipe (``docjepa.apps.demo.DemoConfig``: its pages, tokenizer,
question tower, tiny preset and 200 pre-training steps) with as many fine-tuning steps as the part's budget allows
(at least the demo's 800), then the held-out synthetic score when time is left. The newest fine-tuning checkpoint
is packed into ``docjepa-train-model.tar.gz`` (its weights in float16, the frozen pre-trained question tower left
out and named instead) so it comes back through the device's output folder; ``gpu.py unpack`` restores a model
folder from it, to score on the real-page benchmark on a CPU.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from gpu_common import Deadline, memory_kind, reset_memory, write_json


def stage_metrics(run: Path, batch: int) -> dict[str, Any]:
    """Step time, pages/s, peak memory and the loss curve of a run, from its ``metrics.jsonl``."""
    from docjepa.train.metrics_log import read_metrics

    rows = read_metrics(run / "metrics.jsonl")
    losses = [r["loss"] for r in rows]
    # step_s is a running mean since the last log line: with log_every=1 it is each step's time.
    times = [r["step_s"] for r in rows][1:] or [r["step_s"] for r in rows]
    quarter = max(1, len(losses) // 4)
    first, last = statistics.fmean(losses[:quarter]), statistics.fmean(losses[-quarter:])
    return {
        "steps": len(rows),
        "batch": batch,
        "median_step_s": statistics.median(times),
        "pages_per_s": batch / statistics.median(times),
        "peak_memory_bytes": int(max(r["peak_mem_mb"] for r in rows) * 2**20),
        "loss_first_quarter": first,
        "loss_last_quarter": last,
        "loss_fell": last < first,
        "loss_curve": [round(v, 4) for v in losses],
    }


def run_base(args, deadline: Deadline, device: torch.device, out: Path) -> dict[str, Any]:
    from docjepa.core.config import load_config
    from docjepa.data.synth.generate import generate
    from docjepa.train.finetune import FinetuneConfig, finetune
    from docjepa.train.pretrain import PretrainConfig, pretrain

    dry = args.dry_run
    preset, size = ("tiny", 256) if dry else ("base", 1024)
    pages, batch = (8, 2) if dry else (args.base_pages, args.base_batch)
    pre_steps, ft_steps = (3, 2) if dry else (args.base_pretrain_steps, args.base_finetune_steps)
    work = Path(args.work) / "docjepa-base"
    result: dict[str, Any] = {
        "part": "docjepa-base",
        "protocol": {
            "preset": preset,
            "image_size": size,
            "pages": pages,
            "batch": batch,
            "memory": memory_kind(device),
        },
    }
    path = out / "docjepa-base.json"
    t = time.perf_counter()
    data = work / "data"
    if not (data / "generated.json").is_file():
        generate(pages, data, seed=0, size=size, workers=min(8, os.cpu_count() or 1), progress=False)
        (data / "generated.json").write_text(f'{{"pages": {pages}, "size": {size}}}')
    result["data_s"] = round(time.perf_counter() - t, 1)
    for run in ("pretrain", "finetune"):  # the generated pages are kept between runs, the training runs are not
        shutil.rmtree(work / run, ignore_errors=True)
    workers = 0 if dry else min(8, os.cpu_count() or 1)

    cfg = load_config(PretrainConfig, "pretrain/base")
    cfg.model.preset = preset
    cfg.data = dataclasses.replace(cfg.data, train=[str(data)], workers=workers)
    if dry:
        cfg.data.vocab_size, cfg.data.max_tokens = 1000, 128
    cfg.run = dataclasses.replace(
        cfg.run, steps=pre_steps, batch_size=batch, accumulation=1, log_every=1, checkpoint_every=pre_steps
    )
    reset_memory(device)
    t = time.perf_counter()
    pretrain(cfg, work / "pretrain", resume=False, progress=False)
    result["pretrain"] = {"wall_s": round(time.perf_counter() - t, 1), **stage_metrics(work / "pretrain", batch)}
    write_json(path, result)
    print(f"docjepa {preset} pretrain: {summary(result['pretrain'])}", flush=True)

    if not dry:  # as many fine-tuning steps as fit, at most the asked number (a step costs about 1.5 pre-training's)
        fit = int((deadline.left() - 30.0) / (1.5 * result["pretrain"]["median_step_s"]))
        ft_steps = min(ft_steps, fit)
        if ft_steps < 4:
            result["finetune"] = {"skipped": f"budget: {deadline.left():.0f} s left"}
            write_json(path, result)
            return result
    ft = load_config(FinetuneConfig, "finetune/tiny")
    ft.model = dataclasses.replace(
        ft.model,
        preset=preset,
        init=str(work / "pretrain"),
        question_tower="",  # the preset's untrained CLIP tower, trained along: no reader of the page with it
        freeze_question_tower=False,
        page_reader=False,
    )
    ft.data = dataclasses.replace(ft.data, train=[str(data)], workers=workers, max_tokens=cfg.data.max_tokens)
    ft.run = dataclasses.replace(
        ft.run, steps=ft_steps, batch_size=batch, log_every=1, checkpoint_every=ft_steps, threads=0
    )
    reset_memory(device)
    t = time.perf_counter()
    finetune(ft, work / "finetune", resume=False, progress=False)
    result["finetune"] = {"wall_s": round(time.perf_counter() - t, 1), **stage_metrics(work / "finetune", batch)}
    write_json(path, result)
    print(f"docjepa {preset} finetune: {summary(result['finetune'])}", flush=True)
    return result


def summary(stage: dict[str, Any]) -> str:
    return (
        f"{stage['steps']} steps, {stage['median_step_s']:.3f} s/step, {stage['pages_per_s']:.3g} pages/s, peak "
        f"{stage['peak_memory_bytes'] / 2**30:.2f} GiB, loss {stage['loss_first_quarter']:.3f} → "
        f"{stage['loss_last_quarter']:.3f}"
    )
