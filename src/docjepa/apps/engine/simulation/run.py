"""``docjepa engine simulate``: the engine curve without people.

A scripted annotator (:mod:`.annotator`) stands in for people on generated pages whose true answers are known.
From a model fine-tuned on a small seed set, each round annotates ``pages_per_round`` pool pages with the
current model's proposals, counting the edits needed to reach the true answers, then fine-tunes the model on
everything annotated so far (starting from the current model, as ``engine retrain`` does) and evaluates it on
held-out layouts and templates as ``docjepa evaluate`` does. Two stages pick the pages differently:
**assisted** (pages in order; the annotator writes each question) and **semi-automatic** (the engine asks the
page's questions itself and shows the ones it is least sure of first: pages ranked by uncertainty over a sample
of the pool). **Automatic** labels are measured each round: thresholds on predicted IoU and stability are chosen
on that round's human-annotated questions and applied to the rest of the sample; kept labels are compared with
the truth. Then the same edit budget is spent on **manual** annotation (no model) and a model is fine-tuned on
what it buys, and another on the same number of pages.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ....data.record import Page, rasterize
from ....data.shards import DocumentDataset, ShardWriter, shard_paths
from ....data.split import SplitConfig
from ....inference.mask_choice import mask_iou as iou
from .. import stages
from ..model import EngineModel
from .annotator import TimeModel, annotate, annotate_with_clicks, word_boxes
from .curve import plot

log = logging.getLogger("docjepa.engine.simulate")
MODES = ("assisted", "semi")


@dataclass
class SimConfig:
    """Sizes of the simulation (defaults: about 35 minutes on 2 CPU cores)."""

    init: str = "runs/demo/pretrain"
    """Pre-trained (or fine-tuned) run or model folder that the seed model is fine-tuned from."""
    pool_pages: int = 300
    """Unannotated pages the rounds draw from."""
    eval_pages: int = 120
    """Evaluation pages (another seed; held-out layouts and templates are scored)."""
    seed_pages: int = 50
    """Pages annotated before the engine starts (the seed model's training set)."""
    rounds: int = 5
    pages_per_round: int = 25
    steps: int = 60
    """Fine-tuning steps of a round (batch 8)."""
    seed_steps: int = 150
    """Fine-tuning steps of the seed model."""
    sample_pages: int = 75
    """Pool pages the semi-automatic stage scores each round (the most uncertain are annotated)."""
    eval_limit: int = 200
    """Most held-out questions evaluated."""
    probe_pages: int = 30
    """Evaluation pages on which every round's model is also annotated by the scripted annotator (the same pages
    each round, never trained on): edits per mask without the round-to-round change of pages."""
    page_size: int = 512
    accept_iou: float = 0.85
    """A mask this close to the true answer is submitted (see ``annotator``)."""
    max_clicks: int = 3
    """Most refinement clicks the scripted annotator tries on a proposal (the probe's ``assisted+refine``)."""
    threads: int = 2
    seed: int = 0
    time: TimeModel = field(default_factory=TimeModel)


def _has_shards(d: Path) -> bool:
    return d.is_dir() and bool(shard_paths(d))


def truths(page: Page, q: int) -> list[np.ndarray]:
    return [rasterize(a.regions, (page.height, page.width)) for a in page.questions[q].answers]


def write_pages(pages: list[Page], out: Path) -> Path:
    """Training shards of ``pages``; a resumed simulation checks that the folder holds exactly these pages (the
    rounds' choices are deterministic; a mismatch would pair one run's models with another run's counts)."""
    if _has_shards(out):
        ds = DocumentDataset(out)
        have = sorted((ds[i].doc_id, ds[i].page) for i in range(len(ds)))
        if have != sorted((p.doc_id, p.page) for p in pages):
            raise RuntimeError(f"{out} holds other pages than this run chose: simulate into a new --out")
        return out
    with ShardWriter(out) as w:
        for p in pages:
            w.add(p)
    return out


def improve(cfg: SimConfig, model: EngineModel, data: Path, out: Path, steps: int, eval_dir: Path):
    """Fine-tune from ``model`` on ``data`` (held-out layouts and templates left out, as ``docjepa finetune`` leaves
    them), then score held-out questions as ``docjepa evaluate`` does: (the new model, its scores)."""
    return model.improve(
        data,
        out,
        steps,
        eval_dir,
        split=SplitConfig(),
        part="heldout",
        limit=cfg.eval_limit,
        threads=cfg.threads,
        seed=cfg.seed,
        log_every=max(1, steps // 5),
    )


def propose_page(model: EngineModel, page: Page) -> list[dict]:
    """The current model's proposals for every question of a page, with what the stages need."""
    out = []
    for q, question in enumerate(page.questions):
        p = model.propose(page, question.text)
        out.append(
            {
                "q": q,
                "masks": p.masks,
                "best": p.best,
                "pred_iou": float(p.scores[p.best]),
                "stability": stages.stability(p.logits[p.best]),
                "uncertainty": stages.uncertainty(p.logits, p.scores, p.best),
                "true_iou": max(iou(p.masks[p.best], t) for t in truths(page, q)),
            }
        )
    return out


def annotate_pages(cfg: SimConfig, pages: list[Page], proposals: list[list[dict]] | None, mode: str) -> list[dict]:
    rows = []
    for i, page in enumerate(pages):
        boxes = word_boxes(page)
        for q in range(len(page.questions)):
            prop = proposals[i][q] if proposals is not None else None
            o = annotate(
                truths(page, q),
                boxes,
                prop["masks"] if prop else None,
                prop["best"] if prop else None,
                cfg.time,
                cfg.accept_iou,
                writes_question=mode in ("assisted", "manual"),
            )
            rows.append({"edits": o.edits, "accepted": o.accepted, "seconds": o.seconds, "iou": o.iou})
    return rows


def probe(cfg: SimConfig, model: EngineModel | None, pages: list[Page], mode: str) -> dict:
    """Scripted annotation of the fixed probe pages with a model's proposals (``model`` None: manual)."""
    if model is None:
        return summarise(annotate_pages(cfg, pages, None, mode))
    return summarise(annotate_pages(cfg, pages, [propose_page(model, p) for p in pages], mode))


def probe_refine(cfg: SimConfig, model: EngineModel, pages: list[Page], mode: str = "assisted") -> dict:
    """A stage's probe with refinement: the scripted annotator may click where the proposal is wrong and let the
    model answer again (from the cached page encoding) before editing (:func:`annotate_with_clicks`); it writes
    the questions in the assisted stage, not in the semi-automatic one."""
    rows = []
    for i, page in enumerate(pages):
        boxes = word_boxes(page)
        for q, question in enumerate(page.questions):
            p = model.propose(page, question.text, key=("probe", i))

            def refine(points, labels, current, page=page, text=question.text, key=("probe", i)):
                r = model.refine(page, text, points, labels, None, current, key=key)
                return r.masks, r.best

            o = annotate_with_clicks(
                truths(page, q),
                boxes,
                p.masks,
                p.best,
                refine,
                cfg.time,
                cfg.accept_iou,
                writes_question=mode == "assisted",
                max_clicks=cfg.max_clicks,
            )
            rows.append(
                {"edits": o.edits, "accepted": o.accepted, "seconds": o.seconds, "iou": o.iou, "clicks": o.clicks}
            )
    return summarise(rows)


def summarise(rows: list[dict]) -> dict:
    if not rows:
        return {"masks": 0}
    out = {
        "masks": len(rows),
        "edits_per_mask": float(np.mean([r["edits"] for r in rows])),
        "accepted_as_is": float(np.mean([r["accepted"] for r in rows])),
        "seconds_per_mask": float(np.mean([r["seconds"] for r in rows])),
        "edits": int(sum(r["edits"] for r in rows)),
    }
    if "clicks" in rows[0]:
        out["clicks_per_mask"] = float(np.mean([r["clicks"] for r in rows]))
    return out


def simulate(cfg: SimConfig, out: Path, progress: bool = True) -> dict:
    import torch

    from ....data.synth.generate import generate

    torch.set_num_threads(cfg.threads)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pool_dir, eval_dir = out / "data" / "pool", out / "data" / "eval"
    if not _has_shards(pool_dir):
        generate(cfg.pool_pages + cfg.seed_pages, pool_dir, seed=cfg.seed + 2000, size=cfg.page_size, progress=progress)
    if not _has_shards(eval_dir):
        generate(
            cfg.eval_pages, eval_dir, seed=cfg.seed + 1000, size=cfg.page_size, progress=progress, phrasings="original"
        )
    ds = DocumentDataset(pool_dir)
    pool = [ds[i] for i in range(len(ds))]
    seed_set, rest = pool[: cfg.seed_pages], pool[cfg.seed_pages :]

    seed_data = write_pages(seed_set, out / "data" / "seed")
    seed_model, seed_eval = improve(
        cfg, EngineModel(cfg.init, device="cpu"), seed_data, out / "seed", cfg.seed_steps, eval_dir
    )
    eval_ds = DocumentDataset(eval_dir)
    probe_set = [eval_ds[i] for i in range(min(cfg.probe_pages, len(eval_ds)))]
    seed_eval["probe"] = {m: probe(cfg, seed_model, probe_set, m) for m in MODES}
    for mode in MODES:
        seed_eval["probe"][f"{mode}+refine"] = probe_refine(cfg, seed_model, probe_set, mode)
    log.info("seed model: held-out mIoU %.3f", seed_eval["mIoU"])
    result: dict = {"config": asdict(cfg), "seed": seed_eval, "stages": {}}

    for mode in MODES:
        rng = random.Random(cfg.seed)
        model, annotated, remaining = seed_model, list(seed_set), list(range(len(rest)))
        rounds = []
        for r in range(1, cfg.rounds + 1):
            t0 = time.perf_counter()
            chosen, proposals, auto = _choose_pages(cfg, model, rest, remaining, rng, mode)
            rows = annotate_pages(cfg, [rest[i] for i in chosen], proposals, mode)
            annotated += [rest[i] for i in chosen]
            remaining = [i for i in remaining if i not in set(chosen)]
            data = write_pages(annotated, out / mode / f"round-{r}" / "data")
            model, heldout = improve(cfg, model, data, out / mode / f"round-{r}" / "model", cfg.steps, eval_dir)
            row = {
                "round": r,
                "pages_annotated": len(annotated),
                **summarise(rows),
                "heldout": heldout,
                "probe": probe(cfg, model, probe_set, mode),
            }
            row["probe_refine"] = probe_refine(cfg, model, probe_set, mode)  # the same probe, also clicking
            if auto is not None:
                row["automatic"] = auto
            row["seconds_wall"] = time.perf_counter() - t0
            rounds.append(row)
            log.info("%s round %d: %s", mode, r, json.dumps({k: row[k] for k in ("edits_per_mask", "accepted_as_is")}))
            (out / "simulate.json").write_text(
                json.dumps(result | {"stages": result["stages"] | {mode: rounds}}, indent=1)
            )
        result["stages"][mode] = rounds

    result["manual"] = _manual(cfg, result, rest, seed_set, seed_model, probe_set, out, eval_dir)
    result["seconds"] = time.perf_counter() - started
    (out / "simulate.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "engine_curve.png")
    return result


def _choose_pages(cfg: SimConfig, model, rest: list, remaining: list[int], rng: random.Random, mode: str):
    """A round's pages and the model's proposals for them: the next ones (``assisted``), or the most uncertain of a
    random sample, whose other proposals the automatic stage may keep (its thresholds chosen on the people's
    pages): (chosen indices, proposals, the automatic stage's figures or None)."""
    if mode == "assisted":
        chosen = remaining[: cfg.pages_per_round]
        return chosen, [propose_page(model, rest[i]) for i in chosen], None
    sample = rng.sample(remaining, min(cfg.sample_pages, len(remaining)))
    scored = {i: propose_page(model, rest[i]) for i in sample}
    ranked = sorted(sample, key=lambda i: -float(np.mean([p["uncertainty"] for p in scored[i]] or [0])))
    chosen = ranked[: cfg.pages_per_round]
    human = [p for i in chosen for p in scored[i]]
    th = stages.choose_thresholds(
        [p["pred_iou"] for p in human], [p["stability"] for p in human], [p["true_iou"] for p in human]
    )
    machine = [p for i in sample if i not in chosen for p in scored[i]]
    kept = [p for p in machine if p["pred_iou"] >= th.min_iou and p["stability"] >= th.min_stability]
    auto = {
        "thresholds": asdict(th),
        "labels_considered": len(machine),
        "kept": len(kept),
        "kept_fraction": len(kept) / max(1, len(machine)),
        "agree_at_0.8": float(np.mean([p["true_iou"] >= 0.8 for p in kept])) if kept else None,
    }
    return chosen, [scored[i] for i in chosen], auto


def _manual(cfg: SimConfig, result: dict, rest: list, seed_set: list, seed_model, probe_set: list, out: Path, eval_dir):
    """Manual annotation: the assisted stage's edit budget spent without a model, pages in order; and models
    fine-tuned from the seed model on the same edits and on the same pages, for as many steps as the rounds."""
    budget = sum(row["edits"] for row in result["stages"]["assisted"])
    manual_rows, manual_pages = [], []
    for page in rest:
        page_rows = annotate_pages(cfg, [page], None, "manual")
        if sum(x["edits"] for x in manual_rows + page_rows) > budget:
            break
        manual_rows += page_rows
        manual_pages.append(page)
    same_pages = rest[: cfg.rounds * cfg.pages_per_round]
    manual = {"edit_budget": budget, "pages": len(manual_pages), **summarise(manual_rows)}
    manual["probe"] = probe(cfg, None, probe_set, "manual")
    total = cfg.rounds * cfg.steps  # the same fine-tuning steps as the engine's rounds, from the same seed model
    for name, pages in (("same_edits", manual_pages), ("same_pages", same_pages)):
        data = write_pages(seed_set + pages, out / "manual" / name / "data")
        _, heldout = improve(cfg, seed_model, data, out / "manual" / name / "model", total, eval_dir)
        manual[name] = {"pages_annotated": len(seed_set) + len(pages), "heldout": heldout}
    manual["same_pages"]["edits_per_mask"] = summarise(annotate_pages(cfg, same_pages, None, "manual"))[
        "edits_per_mask"
    ]
    return manual
