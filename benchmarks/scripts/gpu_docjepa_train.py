"""Part 4 of ``gpu.py``: a Document-JEPA recipe trained longer on a GPU, its checkpoint brought back.

``--docjepa-recipe shipped`` (:func:`run_shipped`): the shipped model trained on as ``finetune/business`` trains it
(its generated pages, the real training pages ``gpu.py prepare --docjepa`` shrank when carried, the question read with
the page), sized to the budget by timing a short probe; the next shipped model comes from it.

``--docjepa-recipe demo`` (the default, :func:`run_demo`): the demo's data (``DemoConfig``: 400 synthetic training
pages in business wordings, 120 held-out pages, 512 px, its 4,000-piece lower-cased tokenizer), its pre-training
(``pretrain/tiny``, 200 steps), its question tower (the packaged sentence encoder, frozen, where the ``lang`` extra is
installed; else a CLIP tower pre-trained there, as the demo does) and its fine-tuning recipe (``finetune/tiny``) with
more steps: as many as the budget left after pre-training allows at the measured step time (at least the demo's
800, at most ``--max-finetune-steps``), a checkpoint every 100 steps. Real pages are added with ``--real-train DIR``
when they were carried along. Then, when time is left, the held-out synthetic score.

Either way the newest checkpoint is packed (weights in float16, tar + gzip, split into parts under 15 MiB) into the
output folder, also when the part is stopped by its deadline (``gpu.py`` packs what the killed run left).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import torch
from gpu_common import Deadline, write_json

PACK = "docjepa-train-model.tar.gz"
PART_BYTES = 15 * 2**20
FT_OVER_PT = 1.5
"""Fine-tuning step time over pre-training step time of the tiny preset (1.43 measured on an H200): how the
fine-tuning length is chosen before its first step."""


def generated(folder: Path, spec: dict[str, Any], progress: bool = False) -> Path:
    """``folder`` holding the pages ``docjepa.data.synth.generate.generate(**spec)`` makes, generated unless the
    folder's ``generated.json`` says they already are."""
    from docjepa.data.synth.generate import generate

    marker = folder / "generated.json"
    if not marker.is_file() or json.loads(marker.read_text()) != spec:
        shutil.rmtree(folder, ignore_errors=True)
        generate(out=folder, workers=None, progress=progress, **spec)
        marker.write_text(json.dumps(spec))
    return folder


def data_dirs(work: Path, demo, progress: bool = False) -> tuple[Path, Path]:
    """The demo's synthetic training and held-out pages (same seeds, sizes and wordings), generated once."""
    size = demo.page_size
    train = {"n": demo.train_pages, "seed": demo.seed, "size": size, "phrasings": demo.phrasings}
    heldout = {"n": demo.eval_pages, "seed": demo.seed + 1000, "size": size, "phrasings": "original"}
    return generated(work / "data" / "train", train, progress), generated(work / "data" / "eval", heldout, progress)


SHIPPED_PAGES: dict[str, dict[str, Any]] = {
    "business": {"n": 1500, "seed": 1, "size": 1024, "layout": "business"},
    "mix": {"n": 600, "seed": 0, "size": 512, "phrasings": "business"},
}
"""The pages ``finetune/business`` trains on (the ``docjepa generate`` commands in its header)."""
PROBE_STEPS = 30
"""Fine-tuning steps timed before the shipped recipe's run is sized (the mean of the last ten)."""


def shipped_pages(work: Path, dry_run: bool = False, progress: bool = False) -> list[Path]:
    """``SHIPPED_PAGES`` generated into ``work/data`` once (six of each in a dry run)."""
    return [
        generated(work / "data" / f"shipped-{name}", {**spec, "n": 6} if dry_run else spec, progress)
        for name, spec in SHIPPED_PAGES.items()
    ]


def run(args, deadline: Deadline, device: torch.device, out: Path) -> dict[str, Any]:
    """The recipe ``--docjepa-recipe`` names."""
    return run_shipped(args, deadline, out) if args.docjepa_recipe == "shipped" else run_demo(args, deadline, out)


def run_shipped(args, deadline: Deadline, out: Path) -> dict[str, Any]:
    """The shipped model trained on as ``finetune/business`` trains it (its pages, the real training pages when
    carried, the question read with the page), for as many steps as the budget allows after a short probe."""
    from gpu_carry import tower_coverage

    from docjepa.apps.demo import question_tower, tower_name
    from docjepa.core.config import load_config
    from docjepa.train.finetune import FinetuneConfig, finetune
    from docjepa.train.metrics_log import read_metrics

    tower = question_tower(args.question_tower or "auto")
    if tower is None:
        raise SystemExit("the shipped recipe reads with the packaged question tower, not CLIP: carry gpu.py prepare's")
    work, path = Path(args.work) / "docjepa-train", out / "docjepa-train.json"
    timings: dict[str, float] = {}
    t = time.perf_counter()
    dirs = shipped_pages(work, args.dry_run) + ([Path(args.real_train)] if args.real_train else [])
    timings["data"] = time.perf_counter() - t
    result: dict[str, Any] = {
        "part": "docjepa-train",
        "recipe": {
            "name": "shipped",
            "config": "finetune/business",
            "pages": {d.name: json.loads((d / "generated.json").read_text()) for d in dirs[: len(SHIPPED_PAGES)]},
            "real_train": bool(args.real_train),
        },
        "question_tower": tower_name(tower),
        "tower_coverage": tower_coverage(tower, dirs),
    }
    cfg = load_config(FinetuneConfig, "finetune/business")
    cfg.model = dataclasses.replace(cfg.model, question_tower=str(tower))
    workers = 0 if args.dry_run else min(6, os.cpu_count() or 1)
    cfg.data = dataclasses.replace(cfg.data, train=[str(d) for d in dirs], workers=workers)

    def loop(steps: int, every: int, log: int):
        return dataclasses.replace(cfg.run, steps=steps, checkpoint_every=every, log_every=log, threads=0)

    for run in ("probe", "finetune"):
        shutil.rmtree(work / run, ignore_errors=True)
    t = time.perf_counter()
    probe = 2 if args.dry_run else PROBE_STEPS
    finetune(dataclasses.replace(cfg, run=loop(probe, probe, min(10, probe))), work / "probe", progress=False)
    step_s = read_metrics(work / "probe" / "metrics.jsonl")[-1]["step_s"]
    timings["probe"] = time.perf_counter() - t
    reserve = 10.0 if args.dry_run else 60.0  # packing
    fit = int((deadline.left() - reserve - 2 * timings["probe"]) / step_s) // 100 * 100
    steps = 4 if args.dry_run else max(100, min(fit, args.max_finetune_steps))
    result["finetune_plan"] = {"steps": steps, "probe_step_s": step_s, "fit_steps": fit}
    write_json(path, {**result, "timings_s": timings})
    t = time.perf_counter()
    finetune(dataclasses.replace(cfg, run=loop(steps, min(100, steps), 50)), work / "finetune", progress=False)
    timings["finetune"] = time.perf_counter() - t
    result["finetune_median_step_s"] = read_metrics(work / "finetune" / "metrics.jsonl")[-1]["step_s"]
    result.update(pack(work, out))
    write_json(path, {**result, "timings_s": timings})
    return {**result, "timings_s": timings}


def run_demo(args, deadline: Deadline, out: Path) -> dict[str, Any]:
    """The ``make demo`` recipe with more fine-tuning steps (the module's docstring)."""
    from docjepa.apps.demo import DemoConfig, question_tower, tower_name
    from docjepa.core.config import load_config
    from docjepa.data.tokenizer import train_tokenizer
    from docjepa.train.finetune import FinetuneConfig, finetune
    from docjepa.train.metrics_log import read_metrics
    from docjepa.train.pretrain import PretrainConfig, pretrain
    from docjepa.train.question_tower import ClipConfig, pretrain_clip

    demo = DemoConfig.quick() if args.dry_run else DemoConfig()
    work = Path(args.work) / "docjepa-train"
    path = out / "docjepa-train.json"
    timings: dict[str, float] = {}
    t = time.perf_counter()
    train, heldout = data_dirs(work, demo)
    train_dirs = [train] + ([Path(args.real_train)] if args.real_train else [])
    tok = work / "tokenizer"
    if not (tok / "tokenizer.json").is_file():
        train_tokenizer(train_dirs, tok, vocab_size=4000, lowercase=demo.lowercase)
    timings["data"] = time.perf_counter() - t
    for run in ("pretrain", "clip", "finetune"):  # the pages and tokenizer are kept between runs, the runs are not
        shutil.rmtree(work / run, ignore_errors=True)
    workers = 0 if args.dry_run else min(6, os.cpu_count() or 1)

    def data(cfg):
        return dataclasses.replace(cfg, train=[str(d) for d in train_dirs], tokenizer=str(tok), workers=workers)

    def loop(cfg, steps: int, every: int):
        return dataclasses.replace(cfg, steps=steps, checkpoint_every=every, seed=demo.seed, threads=0)

    result: dict[str, Any] = {
        "part": "docjepa-train",
        "recipe": {"demo": dataclasses.asdict(demo), "real_train": bool(args.real_train)},
    }
    t = time.perf_counter()
    pre = load_config(PretrainConfig, "pretrain/tiny")
    pre.data, pre.run = data(pre.data), loop(pre.run, demo.pretrain_steps, 50)
    pretrain(pre, work / "pretrain", resume=False, progress=False)
    timings["pretrain"] = time.perf_counter() - t
    pt_step = read_metrics(work / "pretrain" / "metrics.jsonl")[-1]["step_s"]

    tower = question_tower(args.question_tower or demo.question_tower)
    if tower is None:
        t = time.perf_counter()
        clip = load_config(ClipConfig, None)
        clip.model.init = str(work / "pretrain")
        clip.data, clip.run = data(clip.data), loop(clip.run, demo.clip_steps, 50)
        pretrain_clip(clip, work / "clip", resume=False, progress=False)
        timings["pretrain_clip"] = time.perf_counter() - t
    result["question_tower"] = tower_name(tower)

    reserve = 10.0 if args.dry_run else 90.0  # evaluation and packing
    fit = int((deadline.left() - reserve) / (FT_OVER_PT * pt_step)) // 100 * 100
    steps = demo.finetune_steps if args.dry_run else max(demo.finetune_steps, min(fit, args.max_finetune_steps))
    result["finetune_plan"] = {"steps": steps, "pretrain_step_s": pt_step, "fit_steps": fit}
    write_json(path, {**result, "timings_s": timings})
    ft = load_config(FinetuneConfig, "finetune/tiny")
    ft.model = dataclasses.replace(
        ft.model,
        init=str(work / "pretrain"),
        question_tower=str(tower if tower is not None else work / "clip"),
        freeze_question_tower=tower is not None,
        page_reader=tower is not None,  # as docjepa demo: a CLIP tower trained here does not read the page
    )
    ft.data, ft.run = data(ft.data), loop(ft.run, steps, 100)
    t = time.perf_counter()
    finetune(ft, work / "finetune", resume=False, progress=False)
    timings["finetune"] = time.perf_counter() - t
    result["finetune_median_step_s"] = read_metrics(work / "finetune" / "metrics.jsonl")[-1]["step_s"]
    result.update(pack(work, out))
    write_json(path, {**result, "timings_s": timings})
    if deadline.left() > reserve / 2:
        from docjepa.data.split import SplitConfig
        from docjepa.eval.evaluate import evaluate
        from docjepa.inference.predictor import DocumentPredictor

        t = time.perf_counter()
        predictor = DocumentPredictor.from_pretrained(work / "finetune")
        scores = evaluate(predictor, [heldout], SplitConfig(), part="heldout", limit=demo.eval_limit, progress=False)
        result["heldout"] = {k: scores[k] for k in ("model", "baseline") if k in scores}
        timings["evaluate"] = time.perf_counter() - t
        write_json(path, {**result, "timings_s": timings})
        print(f"held-out mIoU {scores['model']['mIoU']:.3f} (baseline {scores['baseline']['mIoU']:.3f})", flush=True)
    return {**result, "timings_s": timings}


TOWER = "question_encoder.clip."
"""Names of the question tower's weights in a Document-JEPA model."""


def pack(work: Path, out: Path) -> dict[str, Any]:
    """Pack the newest fine-tuning checkpoint's model folder into ``out``: float weights as float16, a frozen
    question tower left out (``packed.json`` says so; :func:`unpack` loads it again from its folder), one file or
    numbered parts when it is larger than the device's per-file limit. Returns what was packed."""
    from safetensors.torch import load_file, save_file

    from docjepa.modeling.files import resolve_model_dir

    run = work / "finetune"
    if not (run / "checkpoints").is_dir():
        return {"checkpoint": None}
    model_dir = resolve_model_dir(run)
    frozen = json.loads((model_dir / "config.json").read_text()).get("freeze_question_tower", False)
    manifest = {"weights": "float16", "left_out": TOWER if frozen else None}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(model_dir.rglob("*")):
            if not f.is_file():
                continue
            if f.suffix == ".safetensors":
                state = {k: v for k, v in load_file(f).items() if not (frozen and k.startswith(TOWER))}
                tmp = work / f".{f.name}.fp16"
                save_file({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, tmp)
                tar.add(tmp, arcname=str(f.relative_to(model_dir)))
                tmp.unlink()
            else:
                tar.add(f, arcname=str(f.relative_to(model_dir)))
        info = tarfile.TarInfo("packed.json")
        data = json.dumps(manifest).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(PACK + "*"):
        old.unlink()
    parts = [blob[i : i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)]
    names = [PACK] if len(parts) == 1 else [f"{PACK}.{i:02d}" for i in range(len(parts))]
    for name, part in zip(names, parts):
        (out / name).write_bytes(part)
    step = int(model_dir.parent.name.split("-")[-1]) if model_dir.parent.name.startswith("step-") else None
    return {"checkpoint": {"files": names, "bytes": len(blob), "step": step, **manifest}}


def unpack(files: list[Path], dest: Path, tower: Path | None = None) -> Path:
    """A model folder from :func:`pack`'s file or parts, its weights back in float32; a question tower that was left
    out is loaded from ``tower`` (default: the packaged sentence encoder, the demo's frozen tower)."""
    from safetensors.torch import load_file, save_file

    from docjepa.modeling.prompt_encoder import load_tower
    from docjepa.modeling.sentence_encoder import packaged_sentence_encoder

    blob = b"".join(Path(f).read_bytes() for f in sorted(files))
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    manifest = json.loads((dest / "packed.json").read_text())
    (dest / "packed.json").unlink()
    weights = dest / "model.safetensors"
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(weights).items()}
    if manifest["left_out"]:
        tower = tower or packaged_sentence_encoder()
        if tower is None:
            raise SystemExit("the packed model's question tower was left out: pass its folder (--tower)")
        state.update({manifest["left_out"] + k: v for k, v in load_tower(tower).state_dict().items()})
    save_file(state, weights)
    return dest
