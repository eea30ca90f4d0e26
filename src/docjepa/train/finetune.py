"""``docjepa finetune``: promptable segmentation (question → answer mask) on top of the pre-trained backbone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoConfig

from ..core.errors import ConfigError
from ..data.collate import CollateConfig
from ..data.segment import SegmentCollator
from ..data.shards import DocumentDataset
from ..data.source import DataConfig, load_tokenizer
from ..data.split import SplitConfig, question_pairs
from ..modeling import DocJepaConfig, build_config
from ..modeling.build import special_ids
from ..modeling.files import BACKBONE, PRETRAINING, SEGMENTATION, require_model, resolve_model_dir
from ..modeling.key_neighbours import PATHS, check_paths
from ..modeling.prompt_encoder import tower_spec
from ..modeling.relative_layout import GAIN
from ..modeling.segmentation import TOKEN_LOSSES, DocJepaForSegmentation
from ..modeling.sentence_encoder import resolve_tower
from .data import EpochDataset
from .distributed import DistConfig
from .optim import OptimConfig
from .trainer import RunConfig, Task, Trainer

log = logging.getLogger("docjepa.train")


@dataclass
class SegModelConfig:
    """Which model to fine-tune."""

    preset: str = "tiny"
    """Size preset, used when starting from scratch."""
    init: str = ""
    """Pre-training run / checkpoint / model folder to take the backbone (or a whole segmentation model) from, or
    ``shipped``: the model shipped in the package, written into ``OUT/init`` first (with the modules it has, such as
    its page reader and joint layers, where the config leaves them out)."""
    question_tower: str = ""
    """Question tower: a local CLIP folder (``docjepa pretrain-clip`` output, or a user's CLIP checkpoint), any
    local pre-trained text-encoder folder, or ``packaged`` (the sentence encoder of the ``lang`` extra); empty: an
    untrained CLIP tower of the preset's size."""
    text_encoder: str = ""
    """Local BERT folder, or ``packaged`` (the lang extra's all-MiniLM-L6-v2), for the page text encoder when
    starting from scratch: its architecture, weights and tokenizer replace the preset's."""
    lexical_prior: bool = True
    """Give the decoder the OCR matcher's answer box as a mask prompt to refine (False: the question alone)."""
    prior_gain: float = 2.0
    """Initial (learned) weight with which that mask prompt, as ±1, is also added to the mask logits."""
    freeze_question_tower: bool = False
    """Keep the question tower as loaded: a pre-trained language tower keeps its knowledge of wording."""
    page_reader: bool = False
    """The question tower also reads the page's words (``modeling.page_reader``): its per-word states, projected as
    the question's, are added to the page tokens through a map that starts at zero, so question and page words
    meet in one pre-trained language. Needs a pre-trained ``question_tower``."""
    prompt_gate: bool = False
    """Scale the mask prompt's weight per question (``DocJepaConfig.prompt_gate``): the model learns which
    questions' matcher boxes to trust, rather than one weight for all. Ignored without a mask prompt added to the
    logits (``lexical_prior`` false or ``prior_gain`` 0)."""
    joint_layers: int = 0
    """The question tower's top N layers, copied from it and trained, read the question and the page's words in one
    sequence (``modeling.joint_reader``): every page word's state then depends on the question. Starts at zero
    (step 0 answers as without it); needs ``page_reader``. 0: none."""
    joint_relative: bool = False
    """The joint layers' attention also gets a learnt bias from where each pair of page words stands relative to each
    other (``modeling.relative_layout``: LayoutLMv2's spatial-aware attention), starting at zero. Needs
    ``joint_layers``."""
    relative_gain: float = GAIN
    """That bias is its learnt tables times this, so that it reaches the attention scores' scale within a
    fine-tuning run (measured: docs/docjepa-extract.md, "Where two words stand")."""
    key_neighbours: bool = False
    """The word decoder also reads, for every page word, the words left of it on its line and above it (where a
    value's key stands), through maps that start at zero (``modeling.key_neighbours``). Needs ``joint_layers``."""
    key_paths: list[str] = field(default_factory=lambda: list(PATHS))
    """The paths from a word to the neighbours it reads, each spelt in steps: ``l`` one word left on its line, ``a``
    the word above, ``L`` on left to the first word of its run (not across a column gap), ``A`` on up to the top
    (``al``: the left neighbour of the word above). A model started from one with other paths starts these maps
    anew."""
    freeze_text_layers: int = 0
    """Keep the page text encoder's embeddings and first N layers as loaded (-1: all; 0: train everything): a
    pre-trained encoder's knowledge kept while the new parts (layout embeddings, heads, fusion) learn."""


@dataclass
class SegDataConfig(DataConfig):
    """Training data and the held-out split."""

    max_question_tokens: int = 32
    """Longest question (tokens)."""
    split: SplitConfig = field(default_factory=SplitConfig)
    """Layouts and question templates held out of training (evaluated by ``docjepa evaluate``)."""


@dataclass
class FinetuneAblations:
    """Ablation switches: each measured worse than the default (off) in the demo's setting (docs/docjepa-results.md,
    "Ablations"). Kept for studies, not for use."""

    freeze_backbone: bool = False
    """Keep the pre-trained backbone (image and text encoders, fusion) fixed; train the question tower, prompt
    encoder and decoders only."""
    jitter: float = 0.0
    """Scale jitter: each training page is shrunk by a factor drawn from [1 − jitter, 1] and placed at a random
    position of the square input (0 = every page fitted at the top left, as at prediction time)."""
    min_answer: int = 0
    """Training targets narrower or shorter than this many mask pixels grow to it around their centre (0: as
    drawn; evaluation always uses the answers as drawn). Tried for page numbers, under one mask pixel at 72 dpi
    and the tiny preset: they stayed at IoU 0 and other kinds lost (docs/docjepa-real.md)."""


@dataclass
class FinetuneConfig:
    """Everything ``docjepa finetune`` needs."""

    model: SegModelConfig = field(default_factory=SegModelConfig)
    data: SegDataConfig = field(default_factory=SegDataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    multimask: bool = True
    """Train the 3 outputs with SAM's best-of-3 loss (False: one output)."""
    clicks: int = 0
    """Simulated interaction (as SAM's training): up to this many click rounds per chosen example, each a point
    drawn from the error of the previous answer, with that answer as the mask prompt (0: none; see
    ``DocJepaForSegmentation.forward``)."""
    click_share: float = 0.5
    """Share of the examples that get the click rounds (the others, and the first round of all, are the question
    alone)."""
    word_loss: float = 1.0
    """Weight of the word-choice loss (``segmentation.word_choice_loss``: the page's most likely token should be an
    answer token) added to the per-token binary cross-entropy (0: none). 1 found more page numbers and versions on
    the real pages than 0, on two seeds (docs/docjepa-real.md, "Word answers")."""
    token_loss: str = "mean"
    """How the word decoder's per-token binary cross-entropy is averaged: ``mean`` over every token of the batch,
    or ``balanced`` (per question, half over the answer's tokens and half over the others:
    ``segmentation.balanced_token_loss``), which reads values whole more often (docs/docjepa-extract.md, "A
    balanced word loss"), or ``neighbours`` (the others split again into those touching an answer token and the
    rest, a third each: ``segmentation.neighbour_token_loss``), against answers that run into their neighbours."""
    ablation: FinetuneAblations = field(default_factory=FinetuneAblations)
    """Switches measured worse than the defaults (see :class:`FinetuneAblations`)."""

    def __post_init__(self) -> None:
        if isinstance(self.clicks, bool) or not isinstance(self.clicks, int) or self.clicks < 0:
            raise ConfigError(f"clicks must be 0 or more, got {self.clicks!r}")
        if not self.word_loss >= 0.0:
            raise ConfigError(f"word_loss must be 0 or more, got {self.word_loss!r}")
        if self.token_loss not in TOKEN_LOSSES:
            raise ConfigError(f"token_loss must be one of {', '.join(TOKEN_LOSSES)}, got {self.token_loss!r}")
        if not 0.0 <= self.click_share <= 1.0:
            raise ConfigError(f"click_share must lie in [0, 1], got {self.click_share!r}")


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


def question_tokenizer_for(tower_dir: str, fallback):
    """The question tower folder's own tokenizer when it has one, else the document tokenizer."""
    if tower_dir and any((Path(tower_dir) / f).is_file() for f in ("tokenizer.json", "vocab.json")):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(tower_dir)
    return fallback


def start_from_shipped(cfg: FinetuneConfig, out: Path) -> Path:
    """The shipped model as a model folder under ``out/init`` (:func:`shipped_checkpoint`). Each module it has that
    ``cfg`` leaves out (:data:`~docjepa.modeling.shipped.ARCHITECTURE`) is switched on in ``cfg.model`` as the
    shipped model has it, with its key paths, and told; another number of joint layers than it has is refused (their
    trained weights would not fit)."""
    from ..modeling.shipped import ARCHITECTURE, shipped_checkpoint, shipped_dir

    shipped = DocJepaConfig.from_pretrained(shipped_dir())
    taken = []
    for key in ARCHITECTURE:
        have, want = getattr(shipped, key, False), getattr(cfg.model, key)
        if have and not want:
            setattr(cfg.model, key, have)
            taken.append(f"model.{key}={str(have).lower()}")
        elif have and want != have:
            raise ConfigError(f"model.init=shipped: the shipped model has model.{key}={have}, not {want}; keep it so")
    if "model.key_neighbours=true" in taken:
        cfg.model.key_paths = list(getattr(shipped, "key_paths", PATHS))
    if taken:
        log.info("model.init=shipped: %s, as the shipped model has them", ", ".join(taken))
    return shipped_checkpoint(out / "init")


def _set_key_paths(config: DocJepaConfig, model: SegModelConfig) -> None:
    """``model``'s key neighbours into ``config``, warning when the model it starts from read other paths (their
    maps then start anew)."""
    try:
        paths = list(check_paths(model.key_paths))
    except ValueError as e:
        raise ConfigError(f"model.key_paths: {e}") from None
    before = list(getattr(config, "key_paths", PATHS))
    if model.key_neighbours and getattr(config, "key_neighbours", False) and before != paths:
        log.warning("model.key_paths %s differs from the initial model's %s: their maps start anew", paths, before)
    config.key_neighbours, config.key_paths = model.key_neighbours, paths


def build_segmentation_model(cfg: FinetuneConfig, tokenizer, init: Path | None = None) -> DocJepaForSegmentation:
    """A fresh segmentation model: the backbone from ``init`` (default ``model.init``; or the preset), the question
    tower loaded."""
    init = init or cfg.model.init
    if init:
        src = require_model(init, (PRETRAINING, SEGMENTATION, BACKBONE), "model.init")
        config = DocJepaConfig.from_pretrained(src)
    else:
        text = cfg.model.text_encoder
        config = build_config(cfg.model.preset, len(tokenizer), special_ids=special_ids(tokenizer), text_encoder=text)
    config.lexical_prior = cfg.model.lexical_prior
    config.prior_gain = cfg.model.prior_gain if cfg.model.lexical_prior else 0.0
    if cfg.model.freeze_question_tower and not (cfg.model.question_tower or init):
        raise ValueError("model.freeze_question_tower needs a pre-trained tower: set model.question_tower")
    config.freeze_question_tower = cfg.model.freeze_question_tower
    if cfg.model.page_reader and not cfg.model.question_tower:
        raise ValueError(
            "model.page_reader reads the page with a pre-trained tower: set model.question_tower "
            "(or model.page_reader=false)"
        )
    config.page_reader = cfg.model.page_reader
    if cfg.model.joint_layers and not cfg.model.page_reader:
        raise ValueError("model.joint_layers reads the page's words as the page reader does: set model.page_reader")
    config.joint_layers = cfg.model.joint_layers
    if cfg.model.joint_relative and not cfg.model.joint_layers:
        raise ValueError("model.joint_relative biases the joint reader's attention: set model.joint_layers")
    config.joint_relative = cfg.model.joint_relative
    config.relative_gain = cfg.model.relative_gain
    if cfg.model.key_neighbours and not cfg.model.joint_layers:
        raise ValueError(
            "model.key_neighbours finds neighbours from the joint reader's word boxes: set model.joint_layers"
        )
    _set_key_paths(config, cfg.model)
    if cfg.model.joint_layers and cfg.model.question_tower:  # its layers are copied: built to the tower's shape
        config.question_tower = AutoConfig.from_pretrained(resolve_model_dir(cfg.model.question_tower)).to_dict()
    config.prompt_gate = cfg.model.prompt_gate and bool(config.prior_gain)  # no prompt added: nothing to weigh
    model = DocJepaForSegmentation(config)
    if init:
        n = load_weights(model, src)
        log.info("initialised %d tensors from %s", n, src)
    elif cfg.model.text_encoder:
        model.backbone.text_encoder.load_bert(cfg.model.text_encoder)
    if cfg.model.question_tower:
        model.question_encoder.load_pretrained_tower(resolve_model_dir(cfg.model.question_tower))
        model.config.question_tower = tower_spec(model.question_encoder.clip)
    if model.joint_reader is not None and not (init and saved_names(src, "joint_reader.")):
        model.joint_reader.begin(model.question_encoder.clip)  # the tower's own top layers, as loaded
    return model


def saved_names(model_dir: Path, prefix: str) -> list[str]:
    """The names of a saved model's tensors that start with ``prefix``."""
    from safetensors import safe_open

    with safe_open(str(Path(model_dir) / "model.safetensors"), framework="pt") as f:
        names = f.keys()
    return [k for k in names if k.startswith(prefix)]


class FinetuneTask(Task):
    """Promptable segmentation on (page, question) pairs of the training layouts and templates."""

    name = "finetune"

    def __init__(self, cfg: FinetuneConfig) -> None:
        cfg.model.question_tower = resolve_tower(cfg.model.question_tower)
        cfg.model.text_encoder = resolve_tower(cfg.model.text_encoder, "model.text_encoder")
        self.cfg = cfg
        self.workers = cfg.data.workers

    def build(self, out: Path, checkpoint: Path | None) -> nn.Module:
        from transformers import AutoTokenizer

        cfg = self.cfg
        source = cfg.model.init
        if source == "shipped":
            source = out / "init" if checkpoint is not None else start_from_shipped(cfg, out)
        init = resolve_model_dir(source) if source and not cfg.model.text_encoder else None
        self.tokenizer = load_tokenizer(cfg.data, out, cfg.model.text_encoder, init)
        tower = str(resolve_model_dir(cfg.model.question_tower)) if cfg.model.question_tower else ""
        self.qtok = question_tokenizer_for(tower, self.tokenizer)
        if not tower and init is not None and (init / "question_tokenizer").is_dir():  # the start model's own
            self.qtok = AutoTokenizer.from_pretrained(init / "question_tokenizer")
        if checkpoint is not None and (checkpoint / "question_tokenizer").is_dir():
            self.qtok = AutoTokenizer.from_pretrained(checkpoint / "question_tokenizer")
        if checkpoint is not None:
            model = DocJepaForSegmentation.from_pretrained(checkpoint)
        else:
            model = build_segmentation_model(cfg, self.tokenizer, Path(source) if source else None)
        vocab = model.config.bert().vocab_size
        if vocab != len(self.tokenizer):
            raise ValueError(f"model vocabulary {vocab} ≠ tokenizer size {len(self.tokenizer)}")
        model.backbone.text_encoder.freeze(cfg.model.freeze_text_layers)
        if cfg.ablation.freeze_backbone:
            model.backbone.requires_grad_(False)
        return model

    def trainable(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        log.info("%d trainable parameters", sum(p.numel() for _, p in named))
        return named

    def dataset(self) -> EpochDataset:
        cfg = self.cfg
        pairs = question_pairs(cfg.data.train, cfg.data.split, "train")
        log.info(
            "%d (page, question) pairs to train on (held out: layouts %s, templates crc32 %% %d == 0)",
            len(pairs),
            cfg.data.split.layouts,
            cfg.data.split.template_modulus,
        )
        return EpochDataset(DocumentDataset([Path(p) for p in cfg.data.train]), cfg.run.seed, pairs)

    def collate(self, model: nn.Module) -> SegmentCollator:
        cfg, mcfg = self.cfg, model.config
        return SegmentCollator(
            self.tokenizer,
            self.qtok,
            CollateConfig(
                image_size=mcfg.image_size,
                mask_size=mcfg.mask_size,
                max_tokens=cfg.data.max_tokens,
                min_answer=cfg.ablation.min_answer,
            ),
            cfg.data.max_question_tokens,
            seed=cfg.run.seed,
            lexical_prior=mcfg.lexical_prior,
            jitter=cfg.ablation.jitter,
            page_reader=bool(getattr(mcfg, "page_reader", False)),
        )

    def compute(self, model: nn.Module, batch: dict) -> dict:
        cfg = self.cfg
        return model(
            batch,
            multimask=cfg.multimask,
            clicks=cfg.clicks,
            click_share=cfg.click_share,
            word_loss=cfg.word_loss,
            token_loss=cfg.token_loss,
        )

    def save_extra(self, model_dir: Path) -> None:
        self.tokenizer.save_pretrained(model_dir)
        if self.qtok is not self.tokenizer:
            self.qtok.save_pretrained(model_dir / "question_tokenizer")


def finetune(
    cfg: FinetuneConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) fine-tuning into ``out``; returns the last logged metrics."""
    task = FinetuneTask(cfg)  # resolves the question tower name before the config is written
    trainer = Trainer(out, cfg.run, cfg.optim, cfg, resume=resume, progress=progress, dist=cfg.dist)
    return trainer.fit(task, stop_after=stop_after)
