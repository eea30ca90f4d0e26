"""``docjepa pretrain-clip``: CLIP-style pre-training of the question tower on document regions.

No pre-trained CLIP can be downloaded here, so the question encoder's text tower learns from the documents
themselves: pairs of (a region's text, the pooled image embedding of that region). Regions are the answers of
the pages' questions (values, addresses, titles…) and short runs of words on one line. The image side is the
frozen pre-trained image encoder's embedding map (before fusion, so the text of the page cannot leak in),
averaged over the region's cells; both sides are projected to a shared space and trained with the symmetric
InfoNCE loss and a learned temperature, as CLIP. The output folder is a plain ``CLIPTextModel`` checkpoint
with its tokenizer, which is exactly what ``finetune --model.question_tower=DIR`` (or a user's own CLIP) takes.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import CLIPTextModel

from ..data.collate import CollateConfig, DocumentCollator
from ..data.frame import fit_scale
from ..data.record import Page, union_box
from ..data.shards import DocumentDataset
from ..data.source import DataConfig, load_tokenizer
from ..modeling import DocJepaConfig, DocJepaModel, build_config
from ..modeling.files import BACKBONE, PRETRAINING, SEGMENTATION, require_model
from ..modeling.image_encoder import EMBED_STRIDE
from ..modeling.segmentation import question_tower_config
from .data import EpochDataset
from .optim import OptimConfig
from .trainer import RunConfig, Task, Trainer

log = logging.getLogger("docjepa.train")
HEADS = "contrastive_heads.safetensors"


@dataclass
class ClipModelConfig:
    """Where the image side and the tower come from."""

    init: str = ""
    """Pre-training run / checkpoint / model folder whose image encoder gives the region embeddings."""
    preset: str = "tiny"
    """Size preset when no ``init`` is given (an untrained image encoder: only for tests)."""
    tower: str = ""
    """Continue from a local CLIP text model folder instead of the preset's fresh tower."""
    dim: int = 128
    """Shared embedding width."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        if "clip" in data:  # the key's former name
            data.setdefault("tower", data.pop("clip"))
        return data


@dataclass
class ClipConfig:
    """Everything ``docjepa pretrain-clip`` needs."""

    model: ClipModelConfig = field(default_factory=ClipModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    regions_per_page: int = 8
    """Region/text pairs drawn from each page."""
    max_text_tokens: int = 32
    """Longest region text (tokens)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adamw", lr=1e-3))
    run: RunConfig = field(default_factory=lambda: RunConfig(steps=200, batch_size=8))


class ClipCollator:
    """Items ``(position, page)`` → pixels plus region texts, their pages and their cells on the embedding grid."""

    def __init__(self, tokenizer, image_size: int, per_page: int, max_tokens: int, seed: int) -> None:
        self.base = DocumentCollator(tokenizer, CollateConfig(image_size=image_size, max_tokens=8))
        self.tok, self.size, self.per_page, self.max_tokens, self.seed = (
            tokenizer,
            image_size,
            per_page,
            max_tokens,
            seed,
        )
        self.grid = image_size // EMBED_STRIDE

    def regions(self, page: Page, rng: random.Random) -> list[tuple[str, tuple]]:
        out = []
        for q in page.questions:
            for a in q.answers:
                if a.text.strip() and a.regions:
                    xs, ys = [v for r in a.regions for v in r[0::2]], [v for r in a.regions for v in r[1::2]]
                    out.append((a.text, (min(xs), min(ys), max(xs), max(ys))))
        words = page.words
        for _ in range(2 * self.per_page):
            if not words:
                break
            i = rng.randrange(len(words))
            n = rng.randint(1, 3)
            run = words[i : i + n]
            out.append((" ".join(w.text for w in run), union_box([w.box for w in run])))
        rng.shuffle(out)
        return out[: self.per_page]

    def __call__(self, items: Sequence[tuple[int, Page | None]]) -> dict | None:
        good = [(pos, page) for pos, page in items if page is not None]
        if not good:
            return None
        batch = self.base([(page, None) for _, page in good])
        texts, owners, cells, seen = [], [], [], set()
        for b, (pos, page) in enumerate(good):
            rng = random.Random(self.seed * 1_000_003 + pos)
            s = fit_scale(page.width, page.height, self.size) / EMBED_STRIDE  # page pixels → embedding cells
            for text, (x0, y0, x1, y1) in self.regions(page, rng):
                key = text.lower().strip()
                if key in seen:  # duplicate texts would be false negatives for each other
                    continue
                seen.add(key)
                m = torch.zeros(self.grid, self.grid)
                c0, r0 = min(self.grid - 1, int(x0 * s)), min(self.grid - 1, int(y0 * s))
                c1, r1 = max(c0 + 1, min(self.grid, math.ceil(x1 * s))), max(r0 + 1, min(self.grid, math.ceil(y1 * s)))
                m[r0:r1, c0:c1] = 1
                texts.append(text)
                owners.append(b)
                cells.append(m)
        enc = self.tok(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt")
        return {
            "pixel_values": batch["pixel_values"],
            "text_ids": enc["input_ids"],
            "text_mask": enc["attention_mask"],
            "owner": torch.tensor(owners),
            "cells": torch.stack(cells),
        }


class ClipPretrainer(nn.Module):
    """Frozen image encoder + trainable CLIP text tower, two projections and a temperature."""

    def __init__(self, backbone: DocJepaModel, tower: CLIPTextModel, dim: int) -> None:
        super().__init__()
        self.image_encoder = backbone.image_encoder.requires_grad_(False).eval()
        self.tower = tower
        self.text_proj = nn.Linear(tower.config.hidden_size, dim, bias=False)
        self.image_proj = nn.Linear(backbone.config.neck_dim, dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def train(self, mode: bool = True) -> ClipPretrainer:
        super().train(mode)
        self.image_encoder.eval()  # frozen: no dropout, statistics fixed
        return self

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.named_parameters() if not n.startswith("image_encoder.")]

    def forward(self, batch: dict) -> dict[str, Tensor]:
        with torch.no_grad():
            emb = self.image_encoder(batch["pixel_values"]).embedding  # (B, D, G, G)
        cells = batch["cells"].unsqueeze(1)  # (R, 1, G, G)
        pooled = (emb[batch["owner"]] * cells).flatten(2).sum(-1) / cells.flatten(2).sum(-1)  # (R, D)
        img = F.normalize(self.image_proj(pooled), dim=-1)
        txt = self.tower(input_ids=batch["text_ids"], attention_mask=batch["text_mask"]).pooler_output
        txt = F.normalize(self.text_proj(txt), dim=-1)
        logits = self.logit_scale.clamp(max=math.log(100)).exp() * txt @ img.T  # (R, R)
        labels = torch.arange(len(logits), device=logits.device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
        acc = (logits.argmax(1) == labels).float().mean()
        return {"loss": loss, "retrieval_acc": acc, "regions": torch.tensor(float(len(labels)))}

    def save_pretrained(self, path: Path) -> None:
        """The tower as a ``CLIPTextModel`` folder, plus the contrastive heads (for resuming)."""
        self.tower.save_pretrained(path)
        heads = {
            k: v.detach().contiguous()
            for k, v in self.state_dict().items()
            if k.startswith(("text_proj.", "image_proj.", "logit_scale"))
        }
        save_file(heads, str(Path(path) / HEADS))

    def load_heads(self, path: Path) -> None:
        self.load_state_dict(load_file(str(Path(path) / HEADS)), strict=False)


class QuestionTowerTask(Task):
    """CLIP pre-training: a trainable text tower against the frozen image encoder's region embeddings."""

    name = "pretrain-clip"

    def __init__(self, cfg: ClipConfig) -> None:
        self.cfg = cfg
        self.workers = cfg.data.workers

    def build(self, out: Path, checkpoint: Path | None) -> nn.Module:
        from transformers.utils import logging as hf_logging

        cfg = self.cfg
        kinds = (PRETRAINING, SEGMENTATION, BACKBONE)
        init = require_model(cfg.model.init, kinds, "model.init") if cfg.model.init else None
        self.tokenizer = load_tokenizer(cfg.data, out, init)
        if init is not None:
            hf_logging.set_verbosity_error()  # the pre-training heads are expected to be left out
            backbone = DocJepaModel.from_pretrained(init)
            hf_logging.set_verbosity_warning()
        else:
            backbone = DocJepaModel(build_config(cfg.model.preset, len(self.tokenizer)))
        if checkpoint is not None:
            tower = CLIPTextModel.from_pretrained(checkpoint)
        elif cfg.model.tower:
            tower = CLIPTextModel.from_pretrained(cfg.model.tower)
        else:
            dj: DocJepaConfig = backbone.config
            tower = CLIPTextModel(question_tower_config(dj, len(self.tokenizer)))
        self.image_size = backbone.config.image_size
        model = ClipPretrainer(backbone, tower, cfg.model.dim)
        if checkpoint is not None:
            model.load_heads(checkpoint)
        return model

    def dataset(self) -> EpochDataset:
        return EpochDataset(DocumentDataset([Path(p) for p in self.cfg.data.train]), self.cfg.run.seed)

    def collate(self, model: nn.Module) -> ClipCollator:
        cfg = self.cfg
        return ClipCollator(self.tokenizer, self.image_size, cfg.regions_per_page, cfg.max_text_tokens, cfg.run.seed)

    def save_extra(self, model_dir: Path) -> None:
        self.tokenizer.save_pretrained(model_dir)


def pretrain_clip(
    cfg: ClipConfig, out: Path, resume: bool = False, progress: bool = True, stop_after: int | None = None
) -> dict:
    """Run (or resume) CLIP pre-training of the question tower into ``out``."""
    trainer = Trainer(out, cfg.run, cfg.optim, cfg, resume=resume, progress=progress)
    return trainer.fit(QuestionTowerTask(cfg), stop_after=stop_after)
