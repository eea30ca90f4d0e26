"""``docjepa pretrain``: joint pre-training of the Document-JEPA encoders (I-JEPA, MLM, MIM, D-JEPA)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..data.collate import CollateConfig
from ..data.masking import MaskConfig, PretrainCollator
from ..data.shards import DocumentDataset
from ..modeling import DocJepaForPretraining, LossWeights, build_config
from ..modeling.ijepa import ema_momentum
from .config import to_dict
from .data import EpochDataset, make_loader
from .loop import RunConfig, restore, start_run, train_loop
from .optim import OptimConfig, build_optimizer, build_schedule

log = logging.getLogger("docjepa.train")


@dataclass
class ModelConfig:
    """Which model to build."""

    preset: str = "tiny"
    """Size preset (``docjepa.modeling.build``): tiny, small or base."""
    text_encoder: str = ""
    """Local directory of BERT weights (e.g. from ``docjepa text-encoder``) to start the text encoder from."""
    init: str = ""
    """Model directory (``save_pretrained`` output) to start all weights from."""


@dataclass
class DataConfig:
    """Training data."""

    train: list[str] = field(default_factory=lambda: ["data/synth"])
    """Folders of Parquet shards (``docjepa generate`` / ``docjepa import``)."""
    tokenizer: str = ""
    """Tokenizer directory; empty: the text encoder's, else one trained on ``train`` and saved in the run."""
    vocab_size: int = 8000
    """Vocabulary size when a tokenizer is trained here."""
    max_tokens: int = 256
    """Longest OCR token sequence."""
    workers: int = 0
    """DataLoader worker processes."""


@dataclass
class PretrainConfig:
    """Everything ``docjepa pretrain`` needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    masks: MaskConfig = field(default_factory=MaskConfig)
    loss: LossWeights = field(default_factory=LossWeights)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)


def tokenizer_from_init(data: DataConfig, init: str) -> None:
    """When no tokenizer is named, use the one saved with the model in ``init`` (if it has one)."""
    if not data.tokenizer and init:
        from .checkpoint import resolve_model_dir

        src = resolve_model_dir(init)
        if (src / "tokenizer.json").is_file():
            data.tokenizer = str(src)


def load_tokenizer(data: DataConfig, out: Path, text_encoder: str = ""):
    """The tokenizer named in the config, else the text encoder's, else one trained on the data (cached in out)."""
    from transformers import PreTrainedTokenizerFast

    from ..data.tokenizer import train_tokenizer

    for candidate in (data.tokenizer, text_encoder):
        if candidate:
            if not (Path(candidate) / "tokenizer.json").is_file():
                raise FileNotFoundError(f"no tokenizer.json in {candidate}")
            return PreTrainedTokenizerFast.from_pretrained(candidate)
    own = out / "tokenizer"
    if not (own / "tokenizer.json").is_file():
        log.info("training a %d-token WordPiece tokenizer on %s", data.vocab_size, ", ".join(data.train))
        train_tokenizer([Path(p) for p in data.train], own, vocab_size=data.vocab_size)
    return PreTrainedTokenizerFast.from_pretrained(own)


def pretrain(
    cfg: PretrainConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) pre-training into ``out``; returns the last logged metrics.

    ``stop_after`` ends the process-level loop early at that step (after its checkpoint), as a kill would:
    tests use it to check that resuming reproduces an uninterrupted run.
    """
    out = Path(out)
    ckpt, device = start_run(out, resume, cfg.run)

    pages = DocumentDataset([Path(p) for p in cfg.data.train])
    tokenizer = load_tokenizer(cfg.data, out, cfg.model.text_encoder)
    if ckpt is not None:
        model = DocJepaForPretraining.from_pretrained(ckpt / "model")
    elif cfg.model.init:
        model = DocJepaForPretraining.from_pretrained(cfg.model.init)
    else:
        model = DocJepaForPretraining(build_config(cfg.model.preset, vocab_size=len(tokenizer)))
        if cfg.model.text_encoder:
            model.backbone.text_encoder.load_bert(cfg.model.text_encoder)
    mcfg = model.config
    if mcfg.bert().vocab_size != len(tokenizer):
        raise ValueError(f"model vocabulary {mcfg.bert().vocab_size} ≠ tokenizer size {len(tokenizer)}")
    masks = dataclasses.replace(cfg.masks, grid=mcfg.unit_grid)
    model.to(device)

    opt = build_optimizer(model.trainable_named_parameters(), cfg.optim, seed=cfg.run.seed)
    sched = build_schedule(opt, cfg.optim, cfg.run.steps)
    start, samples = restore(ckpt, opt, sched)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    tokenizer.save_pretrained(out / "tokenizer")

    collate = PretrainCollator(
        tokenizer, CollateConfig(image_size=mcfg.image_size, max_tokens=cfg.data.max_tokens), masks, seed=cfg.run.seed
    )
    loader = make_loader(EpochDataset(pages, cfg.run.seed), collate, cfg.run.batch_size, samples, cfg.data.workers)

    def after_step(done: int) -> dict[str, float]:
        momentum = ema_momentum(done, cfg.run.steps, cfg.run.ema_start, cfg.run.ema_end)
        model.update_target(momentum)
        return {"ema": momentum}

    return train_loop(
        model,
        lambda batch: model(batch, cfg.loss),
        model.trainable_parameters(),
        iter(loader),
        opt,
        sched,
        cfg.run,
        cfg.optim.grad_clip,
        out,
        device,
        start=start,
        samples=samples,
        progress=progress,
        stop_after=stop_after,
        desc="pretrain",
        after_step=after_step,
        save_extra=tokenizer.save_pretrained,
    )
