"""``docjepa finetune``: promptable segmentation (question → answer mask) on top of the pre-trained backbone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from ..data.collate import CollateConfig
from ..data.segment import SegmentCollator
from ..data.shards import DocumentDataset
from ..data.split import SplitConfig, question_pairs
from ..modeling import DocJepaConfig, build_config
from ..modeling.prompt_encoder import tower_spec
from ..modeling.segmentation import DocJepaForSegmentation
from ..modeling.sentence_encoder import resolve_tower
from .checkpoint import resolve_model_dir
from .config import to_dict
from .data import EpochDataset, make_loader
from .loop import RunConfig, restore, start_run, train_loop
from .optim import OptimConfig, build_optimizer, build_schedule
from .pretrain import DataConfig, load_tokenizer, tokenizer_from_init

log = logging.getLogger("docjepa.train")


@dataclass
class SegModelConfig:
    """Which model to fine-tune."""

    preset: str = "tiny"
    """Size preset, used when starting from scratch."""
    init: str = ""
    """Pre-training run / checkpoint / model folder to take the backbone (or a whole segmentation model) from."""
    clip: str = ""
    """Question tower: a local CLIP folder (``docjepa pretrain-clip`` output, or a user's CLIP checkpoint), any
    local pre-trained text-encoder folder, or ``packaged`` (the sentence encoder of the ``lang`` extra)."""
    text_encoder: str = ""
    """Local BERT folder for the text encoder when starting from scratch."""
    lexical_prior: bool = True
    """Give the decoder the OCR matcher's answer box as a mask prompt to refine (False: the question alone)."""
    prior_gain: float = 2.0
    """Initial (learned) weight with which that mask prompt, as ±1, is also added to the mask logits."""
    freeze_backbone: bool = False
    """Keep the pre-trained backbone (image and text encoders, fusion) fixed; train the question tower, prompt
    encoder and decoders only."""
    freeze_question_tower: bool = False
    """Keep the question tower as loaded (``clip``): a pre-trained language tower keeps its knowledge of wording."""
    question_dropout: float = 0.0
    """Fraction of training samples with a non-empty mask prompt whose question is blanked (prompt-only samples)."""


@dataclass
class SegDataConfig(DataConfig):
    """Training data and the held-out split."""

    max_question_tokens: int = 32
    """Longest question (tokens)."""
    jitter: float = 0.0
    """Scale jitter: each training page is shrunk by a factor drawn from [1 − jitter, 1] and placed at a random
    position of the square input (0 = every page fitted at the top left, as at prediction time)."""
    split: SplitConfig = field(default_factory=SplitConfig)
    """Layouts and question templates held out of training (evaluated by ``docjepa evaluate``)."""


@dataclass
class FinetuneConfig:
    """Everything ``docjepa finetune`` needs."""

    model: SegModelConfig = field(default_factory=SegModelConfig)
    data: SegDataConfig = field(default_factory=SegDataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    multimask: bool = True
    """Train the 3 outputs with SAM's best-of-3 loss (False: one output)."""


def load_weights(model: torch.nn.Module, model_dir: Path) -> int:
    """Copy every tensor of a saved model whose name and shape match; the backbone must be complete."""
    state = load_file(model_dir / "model.safetensors")
    own = model.state_dict()
    matched = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    missing = [k for k in own if k.startswith("backbone.") and k not in matched]
    if missing:
        raise ValueError(f"{model_dir} lacks {len(missing)} backbone tensors of this model, e.g. {missing[0]}")
    model.load_state_dict(matched, strict=False)
    return len(matched)


def question_tokenizer_for(clip_dir: str, fallback):
    """The CLIP folder's own tokenizer when it has one, else the document tokenizer."""
    if clip_dir and any((Path(clip_dir) / f).is_file() for f in ("tokenizer.json", "vocab.json")):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(clip_dir)
    return fallback


def build_segmentation_model(cfg: FinetuneConfig, tokenizer, ckpt: Path | None) -> DocJepaForSegmentation:
    if ckpt is not None:
        return DocJepaForSegmentation.from_pretrained(ckpt / "model")
    if cfg.model.init:
        src = resolve_model_dir(cfg.model.init)
        config = DocJepaConfig.from_pretrained(src)
    else:
        special = {
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.cls_token_id,
            "eos_token_id": tokenizer.sep_token_id,
        }
        config = build_config(cfg.model.preset, len(tokenizer), special_ids=special)
    config.lexical_prior = cfg.model.lexical_prior
    config.prior_gain = cfg.model.prior_gain if cfg.model.lexical_prior else 0.0
    if cfg.model.freeze_question_tower and not (cfg.model.clip or cfg.model.init):
        raise ValueError("model.freeze_question_tower needs a pre-trained tower: set model.clip to its folder")
    config.freeze_question_tower = cfg.model.freeze_question_tower
    model = DocJepaForSegmentation(config)
    if cfg.model.init:
        n = load_weights(model, src)
        log.info("initialised %d tensors from %s", n, src)
    elif cfg.model.text_encoder:
        model.backbone.text_encoder.load_bert(cfg.model.text_encoder)
    if cfg.model.clip:
        model.question_encoder.load_clip(resolve_model_dir(cfg.model.clip))
        model.config.clip = tower_spec(model.question_encoder.clip)
    return model


def finetune(
    cfg: FinetuneConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) fine-tuning into ``out``; returns the last logged metrics."""
    out = Path(out)
    ckpt, device = start_run(out, resume, cfg.run)
    cfg.model.clip = resolve_tower(cfg.model.clip)
    if not cfg.model.text_encoder:
        tokenizer_from_init(cfg.data, cfg.model.init)
    tokenizer = load_tokenizer(cfg.data, out, cfg.model.text_encoder)
    qtok = question_tokenizer_for(str(resolve_model_dir(cfg.model.clip)) if cfg.model.clip else "", tokenizer)
    if ckpt is not None and (ckpt / "model" / "question_tokenizer").is_dir():
        from transformers import AutoTokenizer

        qtok = AutoTokenizer.from_pretrained(ckpt / "model" / "question_tokenizer")
    model = build_segmentation_model(cfg, tokenizer, ckpt).to(device)
    mcfg = model.config
    if mcfg.bert().vocab_size != len(tokenizer):
        raise ValueError(f"model vocabulary {mcfg.bert().vocab_size} ≠ tokenizer size {len(tokenizer)}")

    pairs = question_pairs(cfg.data.train, cfg.data.split, "train")
    log.info(
        "%d (page, question) pairs to train on (held out: layouts %s, templates crc32 %% %d == 0)",
        len(pairs),
        cfg.data.split.layouts,
        cfg.data.split.template_modulus,
    )
    pages = DocumentDataset([Path(p) for p in cfg.data.train])
    if cfg.model.freeze_backbone:
        model.backbone.requires_grad_(False)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    log.info("%d trainable parameters", sum(p.numel() for _, p in trainable))
    opt = build_optimizer(trainable, cfg.optim, seed=cfg.run.seed)
    sched = build_schedule(opt, cfg.optim, cfg.run.steps)
    start, samples = restore(ckpt, opt, sched)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))

    size = mcfg.image_size
    collate = SegmentCollator(
        tokenizer,
        qtok,
        CollateConfig(image_size=size, mask_size=mcfg.mask_size, max_tokens=cfg.data.max_tokens),
        cfg.data.max_question_tokens,
        seed=cfg.run.seed,
        lexical_prior=mcfg.lexical_prior,
        question_dropout=cfg.model.question_dropout if mcfg.lexical_prior else 0.0,
        jitter=cfg.data.jitter,
    )
    loader = make_loader(
        EpochDataset(pages, cfg.run.seed, pairs), collate, cfg.run.batch_size, samples, cfg.data.workers
    )

    def save_tokenizers(model_dir: Path) -> None:
        tokenizer.save_pretrained(model_dir)
        if qtok is not tokenizer:
            qtok.save_pretrained(model_dir / "question_tokenizer")

    return train_loop(
        model,
        lambda batch: model(batch, multimask=cfg.multimask),
        [p for _, p in trainable],
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
        desc="finetune",
        save_extra=save_tokenizers,
    )
