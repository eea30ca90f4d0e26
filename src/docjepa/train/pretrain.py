"""``docjepa pretrain``: joint pre-training of the Document-JEPA encoders (I-JEPA, MLM, MIM, D-JEPA)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from ..data.collate import CollateConfig
from ..data.masking import MaskConfig, PretrainCollator
from ..data.shards import DocumentDataset
from ..data.source import DataConfig, load_tokenizer
from ..modeling import DocJepaForPretraining, LossWeights, build_config
from ..modeling.build import special_ids
from ..modeling.ijepa import ema_momentum
from ..modeling.sentence_encoder import resolve_tower
from .data import EpochDataset
from .distributed import DistConfig
from .optim import OptimConfig
from .trainer import RunConfig, Task, Trainer


@dataclass
class ModelConfig:
    """Which model to build."""

    preset: str = "tiny"
    """Size preset (``docjepa.modeling.build``): tiny, small or base."""
    text_encoder: str = ""
    """Local BERT folder (e.g. from ``docjepa text-encoder``), or ``packaged`` (the lang extra's all-MiniLM-L6-v2),
    to start the page text encoder from: its architecture, weights and tokenizer replace the preset's."""
    init: str = ""
    """Model directory (``save_pretrained`` output) to start all weights from."""
    freeze_text_layers: int = 0
    """Keep the page text encoder's embeddings and first N layers as loaded (-1: all; 0: train everything): a
    pre-trained encoder's knowledge kept while the new parts (layout embeddings, heads, fusion) learn."""


@dataclass
class PretrainConfig:
    """Everything ``docjepa pretrain`` needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    masks: MaskConfig = field(default_factory=MaskConfig)
    loss: LossWeights = field(default_factory=LossWeights)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)


class PretrainTask(Task):
    """The encoders with their pre-training heads; the EMA target encoder follows after every step."""

    name = "pretrain"

    def __init__(self, cfg: PretrainConfig) -> None:
        cfg.model.text_encoder = resolve_tower(cfg.model.text_encoder, "model.text_encoder")
        self.cfg = cfg
        self.workers = cfg.data.workers

    def build(self, out: Path, checkpoint: Path | None) -> nn.Module:
        cfg = self.cfg
        if cfg.model.text_encoder and not (Path(cfg.model.text_encoder) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"no tokenizer.json in {cfg.model.text_encoder}")
        self.tokenizer = load_tokenizer(cfg.data, out, cfg.model.text_encoder)
        if checkpoint is not None:
            model = DocJepaForPretraining.from_pretrained(checkpoint)
        elif cfg.model.init:
            model = DocJepaForPretraining.from_pretrained(cfg.model.init)
        else:
            tok, text = self.tokenizer, cfg.model.text_encoder
            config = build_config(cfg.model.preset, len(tok), special_ids=special_ids(tok), text_encoder=text)
            model = DocJepaForPretraining(config)
            if cfg.model.text_encoder:
                model.backbone.text_encoder.load_bert(cfg.model.text_encoder)
        vocab = model.config.bert().vocab_size
        if vocab != len(self.tokenizer):
            raise ValueError(f"model vocabulary {vocab} ≠ tokenizer size {len(self.tokenizer)}")
        model.backbone.text_encoder.freeze(cfg.model.freeze_text_layers)
        return model

    def dataset(self) -> EpochDataset:
        return EpochDataset(DocumentDataset([Path(p) for p in self.cfg.data.train]), self.cfg.run.seed)

    def collate(self, model: nn.Module) -> PretrainCollator:
        cfg, mcfg = self.cfg, model.config
        masks = dataclasses.replace(cfg.masks, grid=mcfg.unit_grid)
        base = CollateConfig(image_size=mcfg.image_size, max_tokens=cfg.data.max_tokens)
        return PretrainCollator(self.tokenizer, base, masks, seed=cfg.run.seed)

    def compute(self, model: nn.Module, batch: dict) -> dict:
        return model(batch, self.cfg.loss)

    def after_step(self, model: nn.Module, done: int) -> dict[str, float]:
        run = self.cfg.run
        momentum = ema_momentum(done, run.steps, run.ema_start, run.ema_end)
        model.update_target(momentum)
        return {"ema": momentum}

    def save_extra(self, model_dir: Path) -> None:
        self.tokenizer.save_pretrained(model_dir)

    def started(self, out: Path) -> None:
        self.tokenizer.save_pretrained(out / "tokenizer")


def pretrain(
    cfg: PretrainConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) pre-training into ``out``; returns the last logged metrics."""
    trainer = Trainer(out, cfg.run, cfg.optim, cfg, resume=resume, progress=progress, dist=cfg.dist)
    return trainer.fit(PretrainTask(cfg), stop_after=stop_after)
