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

from ...config import load_config
from ...data.record import Page, rasterize
from ...data.shards import DocumentDataset, ShardWriter, shard_paths
from ...data.split import SplitConfig
from . import stages
from .annotator import TimeModel, annotate, iou, word_boxes

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


def finetune_round(cfg: SimConfig, init: Path, data: Path, out: Path, steps: int) -> Path:
    from ...train.finetune import FinetuneConfig, finetune

    if (out / "last_metrics.json").is_file():
        return out
    ft = load_config(
        FinetuneConfig,
        "finetune/tiny",
        [
            f"--model.init={init}",
            f"--data.train=[{data}]",
            f"--run.steps={steps}",
            f"--run.checkpoint_every={steps}",
            f"--run.log_every={max(1, steps // 5)}",
            f"--run.threads={cfg.threads}",
            f"--run.seed={cfg.seed}",
        ],
    )
    finetune(ft, out, progress=False)
    return out


def heldout_miou(cfg: SimConfig, run: Path, eval_dir: Path) -> dict:
    from ...eval.evaluate import evaluate
    from ...predictor import DocumentPredictor

    result = evaluate(
        DocumentPredictor.from_pretrained(run, device="cpu"),
        [eval_dir],
        SplitConfig(),
        "heldout",
        cfg.eval_limit,
        False,
    )
    return {
        "mIoU": result["model"]["mIoU"],
        "gIoU": result["model"]["gIoU"],
        "cIoU": result["model"]["cIoU"],
        "baseline_mIoU": result["baseline"]["mIoU"],
        "questions": result["questions"],
    }


def propose_page(predictor, page: Page) -> list[dict]:
    """The current model's proposals for every question of a page, with what the stages need."""
    from .proposer import candidate_masks

    predictor.set_page(page)
    out = []
    for q, question in enumerate(page.questions):
        logits, scores, best, masks = candidate_masks(predictor, page, question.text)
        ts = truths(page, q)
        out.append(
            {
                "q": q,
                "masks": masks,
                "best": best,
                "pred_iou": float(scores[best]),
                "stability": stages.stability(logits[best]),
                "uncertainty": stages.uncertainty(logits, scores, best),
                "true_iou": max(iou(masks[best], t) for t in ts),
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


def probe(cfg: SimConfig, run: Path | None, pages: list[Page], mode: str) -> dict:
    """Scripted annotation of the fixed probe pages with a model's proposals (``run`` None: manual)."""
    from ...predictor import DocumentPredictor

    if run is None:
        return summarise(annotate_pages(cfg, pages, None, mode))
    predictor = DocumentPredictor.from_pretrained(run, device="cpu")
    return summarise(annotate_pages(cfg, pages, [propose_page(predictor, p) for p in pages], mode))


def summarise(rows: list[dict]) -> dict:
    if not rows:
        return {"masks": 0}
    return {
        "masks": len(rows),
        "edits_per_mask": float(np.mean([r["edits"] for r in rows])),
        "accepted_as_is": float(np.mean([r["accepted"] for r in rows])),
        "seconds_per_mask": float(np.mean([r["seconds"] for r in rows])),
        "edits": int(sum(r["edits"] for r in rows)),
    }


def simulate(cfg: SimConfig, out: Path, progress: bool = True) -> dict:
    import torch

    from ...data.synth.generate import generate
    from ...predictor import DocumentPredictor

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

    seed_run = finetune_round(
        cfg, Path(cfg.init), write_pages(seed_set, out / "data" / "seed"), out / "seed", cfg.seed_steps
    )
    seed_eval = heldout_miou(cfg, seed_run, eval_dir)
    eval_ds = DocumentDataset(eval_dir)
    probe_set = [eval_ds[i] for i in range(min(cfg.probe_pages, len(eval_ds)))]
    seed_eval["probe"] = {m: probe(cfg, seed_run, probe_set, m) for m in MODES}
    log.info("seed model: held-out mIoU %.3f", seed_eval["mIoU"])
    result: dict = {"config": asdict(cfg), "seed": seed_eval, "stages": {}}

    for mode in MODES:
        rng = random.Random(cfg.seed)
        model, annotated, remaining = seed_run, list(seed_set), list(range(len(rest)))
        rounds = []
        for r in range(1, cfg.rounds + 1):
            t0 = time.perf_counter()
            predictor = DocumentPredictor.from_pretrained(model, device="cpu")
            auto = None
            if mode == "assisted":
                chosen = remaining[: cfg.pages_per_round]
                proposals = [propose_page(predictor, rest[i]) for i in chosen]
            else:
                sample = rng.sample(remaining, min(cfg.sample_pages, len(remaining)))
                scored = {i: propose_page(predictor, rest[i]) for i in sample}
                ranked = sorted(sample, key=lambda i: -float(np.mean([p["uncertainty"] for p in scored[i]] or [0])))
                chosen = ranked[: cfg.pages_per_round]
                proposals = [scored[i] for i in chosen]
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
            rows = annotate_pages(cfg, [rest[i] for i in chosen], proposals, mode)
            annotated += [rest[i] for i in chosen]
            remaining = [i for i in remaining if i not in set(chosen)]
            data = write_pages(annotated, out / mode / f"round-{r}" / "data")
            model = finetune_round(cfg, model, data, out / mode / f"round-{r}" / "model", cfg.steps)
            row = {
                "round": r,
                "pages_annotated": len(annotated),
                **summarise(rows),
                "heldout": heldout_miou(cfg, model, eval_dir),
                "probe": probe(cfg, model, probe_set, mode),
            }
            if auto is not None:
                row["automatic"] = auto
            row["seconds_wall"] = time.perf_counter() - t0
            rounds.append(row)
            log.info("%s round %d: %s", mode, r, json.dumps({k: row[k] for k in ("edits_per_mask", "accepted_as_is")}))
            (out / "simulate.json").write_text(
                json.dumps(result | {"stages": result["stages"] | {mode: rounds}}, indent=1)
            )
        result["stages"][mode] = rounds

    # Manual annotation: the assisted stage's edit budget spent without a model, pages in order.
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
        run = finetune_round(cfg, seed_run, data, out / "manual" / name / "model", total)
        manual[name] = {"pages_annotated": len(seed_set) + len(pages), "heldout": heldout_miou(cfg, run, eval_dir)}
    manual["same_pages"]["edits_per_mask"] = summarise(annotate_pages(cfg, same_pages, None, "manual"))[
        "edits_per_mask"
    ]
    result["manual"] = manual
    result["seconds"] = time.perf_counter() - started
    (out / "simulate.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "engine_curve.png")
    return result


def plot(result: dict, path: Path) -> None:
    """Per round: edits per mask, accepted as-is, held-out mIoU (assisted, semi-automatic, manual), and the
    automatic labels kept and their agreement with the truth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    colours = {"assisted": "tab:blue", "semi": "tab:orange"}
    manual = result["manual"]
    for mode, rounds in result["stages"].items():
        x = [r["round"] for r in rounds]
        axes[0].plot(
            x, [r["edits_per_mask"] for r in rounds], "o-", color=colours[mode], label=f"{mode}: that round's pages"
        )
        axes[1].plot(
            x, [r["accepted_as_is"] for r in rounds], "o-", color=colours[mode], label=f"{mode}: that round's pages"
        )
        if "probe" in rounds[0]:
            px = [0, *x]
            pe = [result["seed"]["probe"][mode]["edits_per_mask"]] + [r["probe"]["edits_per_mask"] for r in rounds]
            pa = [result["seed"]["probe"][mode]["accepted_as_is"]] + [r["probe"]["accepted_as_is"] for r in rounds]
            axes[0].plot(px, pe, "s--", color=colours[mode], alpha=0.6, label=f"{mode}: fixed probe pages")
            axes[1].plot(px, pa, "s--", color=colours[mode], alpha=0.6, label=f"{mode}: fixed probe pages")
        axes[2].plot(
            [0, *x],
            [result["seed"]["mIoU"]] + [r["heldout"]["mIoU"] for r in rounds],
            "o-",
            color=colours[mode],
            label=mode,
        )
    axes[0].axhline(manual.get("probe", manual)["edits_per_mask"], color="gray", ls="--", label="manual (no model)")
    last = max(len(r) for r in result["stages"].values())
    axes[2].plot([last], [manual["same_edits"]["heldout"]["mIoU"]], "s", color="gray", label="manual, same edits")
    axes[2].plot([last], [manual["same_pages"]["heldout"]["mIoU"]], "^", color="black", label="manual, same pages")
    semi = result["stages"].get("semi", [])
    if semi:
        x = [r["round"] for r in semi]
        axes[3].plot(x, [r["automatic"]["kept_fraction"] for r in semi], "o-", color="tab:green", label="kept")
        axes[3].plot(
            x, [r["automatic"]["agree_at_0.8"] or 0 for r in semi], "o-", color="tab:red", label="agree (IoU ≥ 0.8)"
        )
        axes[3].axhline(0.9, color="tab:red", ls=":", lw=1)
    titles = ["edits per mask", "accepted as-is", "held-out mIoU", "automatic labels"]
    for ax, title in zip(axes, titles):
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


CURVE_START, CURVE_END = "<!-- engine-curve:start -->", "<!-- engine-curve:end -->"


def markdown(result: dict, command: str) -> str:
    """The engine curve as a markdown table (per stage and round), with the manual comparison."""
    lines = [
        f"Generated by `{command}` from the simulation's JSON. Edits, accepted and seconds: the annotations made "
        "with the previous round's model; mIoU: held-out layouts and templates after the round's retraining.",
        "",
        "| stage | round | pages annotated | masks | edits / mask | accepted as-is | seconds / mask | probe: edits / "
        "mask, accepted, s / mask | held-out mIoU | automatic: kept / agree (IoU ≥ 0.8) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pr(p: dict | None) -> str:
        return f"{p['edits_per_mask']:.2f}, {p['accepted_as_is']:.2f}, {p['seconds_per_mask']:.1f}" if p else ""

    for mode in result["stages"]:
        seed_probe = result["seed"].get("probe", {}).get(mode)
        lines.append(
            f"| seed ({mode}) | 0 | {result['config']['seed_pages']} | | | | | {pr(seed_probe)} | "
            f"{result['seed']['mIoU']:.3f} | |"
        )
    for mode, rounds in result["stages"].items():
        for r in rounds:
            auto = r.get("automatic")
            a = ""
            if auto:
                agree = auto["agree_at_0.8"]
                a = f"{auto['kept_fraction']:.2f} / {'–' if agree is None else f'{agree:.2f}'}"
            lines.append(
                f"| {mode} | {r['round']} | {r['pages_annotated']} | {r['masks']} | {r['edits_per_mask']:.2f} | "
                f"{r['accepted_as_is']:.2f} | {r['seconds_per_mask']:.1f} | {pr(r.get('probe'))} | "
                f"{r['heldout']['mIoU']:.3f} | {a} |"
            )
    m = result["manual"]
    for name, label in (("same_edits", "manual, same edits"), ("same_pages", "manual, same pages")):
        e = m["edits_per_mask"] if name == "same_edits" else m["same_pages"]["edits_per_mask"]
        lines.append(
            f"| {label} | – | {m[name]['pages_annotated']} | | {e:.2f} | 0.00 | {m['seconds_per_mask']:.1f} | "
            f"{pr(m.get('probe'))} | {m[name]['heldout']['mIoU']:.3f} | |"
        )
    return "\n".join(lines)


def write_report(result_path: Path, markdown_files: list[Path], plot_path: Path | None) -> str:
    result = json.loads(Path(result_path).read_text())
    cmd = f"docjepa engine curve {result_path}" + "".join(f" --markdown {m}" for m in markdown_files)
    if plot_path is not None:
        cmd += f" --plot {plot_path}"
        plot(result, plot_path)
    from docsections import fill_section

    table = markdown(result, cmd)
    for md in markdown_files:
        fill_section(md, CURVE_START, CURVE_END, table)
    return table
