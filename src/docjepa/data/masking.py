"""Pre-training masks, made in the collate function.

* I-JEPA multi-block masks on Hiera's mask-unit grid: ``targets`` blocks (scale 0.15–0.2 of the grid, aspect
  0.75–1.5, one size per batch as in I-JEPA) and one context block (scale 0.85–1.0, square) with the targets
  removed; every context is cut to the batch's smallest so the encoder sees the same number of units per row.
  Each target block is the best of ``target_tries`` random positions by ink covered: pages are mostly blank
  paper, whose features are trivially predictable, so targets are steered onto content.
* MLM: transformers' ``DataCollatorForLanguageModeling`` (15 %, 80/10/10) applied to the token ids in place,
  so each token keeps its box.
* D-JEPA: (a) the target block holding the most words is the *image region* whose target embedding is
  predicted from the text; (b) a second block of the same size elsewhere is the *text region*: its words are
  replaced by [MASK] (and kept out of MLM) and predicted from the image.

All randomness comes from one generator seeded by (seed, position of the batch's first sample), so a batch
is the same whichever worker builds it and whenever a run resumes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DataCollatorForLanguageModeling

from .collate import CollateConfig, DocumentCollator
from .record import Page


@dataclass
class MaskConfig:
    """Settings of the pre-training masks."""

    grid: int = 16
    """Mask units per side of the image (image size / (patch stride · mask unit size))."""
    targets: int = 4
    """I-JEPA target blocks per image."""
    target_scale: tuple[float, float] = (0.15, 0.2)
    """Range of a target block's area, as a fraction of the grid."""
    target_aspect: tuple[float, float] = (0.75, 1.5)
    """Range of a target block's height / width."""
    context_scale: tuple[float, float] = (0.85, 1.0)
    """Range of the context block's area, as a fraction of the grid."""
    min_context: int = 4
    """Fewest visible units a context may have; blocks are re-drawn until it does."""
    target_tries: int = 8
    """Candidate positions per target block; the one covering the most ink wins (1 = uniform, as I-JEPA).
    Pages are mostly blank paper, whose features are trivial to predict; this keeps targets on content."""
    mlm_probability: float = 0.15
    """Fraction of text tokens chosen for MLM."""
    max_djepa_tokens: int = 64
    """Most tokens masked in the D-JEPA text region."""


def _block(gen: torch.Generator, grid: int, h: int, w: int) -> torch.Tensor:
    """A (grid, grid) bool mask of one h×w block at a random position."""
    top = int(torch.randint(0, grid - h + 1, (1,), generator=gen))
    left = int(torch.randint(0, grid - w + 1, (1,), generator=gen))
    m = torch.zeros(grid, grid, dtype=torch.bool)
    m[top : top + h, left : left + w] = True
    return m


def _uniform(gen: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(torch.rand(1, generator=gen))


class MultiBlockMasker:
    """I-JEPA multi-block masks for a batch; see the module docstring."""

    def __init__(self, cfg: MaskConfig) -> None:
        self.cfg = cfg

    def block_size(self, gen: torch.Generator, scale: tuple[float, float], aspect: tuple[float, float]) -> tuple:
        g = self.cfg.grid
        s, a = _uniform(gen, *scale), _uniform(gen, *aspect)
        h = max(1, min(g - 1, round(math.sqrt(s * g * g * a))))
        w = max(1, min(g - 1, round(math.sqrt(s * g * g / a))))
        return h, w

    def _target(self, gen: torch.Generator, h: int, w: int, ink: torch.Tensor | None) -> torch.Tensor:
        best, best_ink = None, -1.0
        for _ in range(self.cfg.target_tries if ink is not None else 1):
            blk = _block(gen, self.cfg.grid, h, w).flatten()
            amount = float(ink[blk].sum()) if ink is not None else 0.0
            if amount > best_ink:
                best, best_ink = blk, amount
        return best

    def __call__(
        self, batch: int, gen: torch.Generator, ink: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
        """Returns keep (B, U) bool, targets (B, T, U) bool, and the target block size (h, w).

        ``ink`` (B, U), the fraction of dark pixels per unit, steers target blocks towards content."""
        g, n_t = self.cfg.grid, self.cfg.targets
        th, tw = self.block_size(gen, self.cfg.target_scale, self.cfg.target_aspect)
        ch, cw = self.block_size(gen, self.cfg.context_scale, (1.0, 1.0))
        targets = torch.zeros(batch, n_t, g * g, dtype=torch.bool)
        contexts = []
        for b in range(batch):
            for _ in range(20):
                tb = torch.stack([self._target(gen, th, tw, None if ink is None else ink[b]) for _ in range(n_t)])
                ctx = _block(gen, g, ch, cw).flatten() & ~tb.any(0)
                if int(ctx.sum()) >= self.cfg.min_context:
                    break
            targets[b] = tb
            contexts.append(ctx)
        k = min(int(c.sum()) for c in contexts)
        keep = torch.zeros(batch, g * g, dtype=torch.bool)
        for b, ctx in enumerate(contexts):
            idx = ctx.nonzero().squeeze(1)
            keep[b, idx[torch.randperm(len(idx), generator=gen)[:k]]] = True
        return keep, targets, (th, tw)


def token_units(bbox: torch.Tensor, grid: int) -> torch.Tensor:
    """(B, L, 4) boxes in 0…1000 → (B, L) index of the unit holding each box's centre."""
    cx = ((bbox[..., 0] + bbox[..., 2]).float() / 2000 * grid).long().clamp(0, grid - 1)
    cy = ((bbox[..., 1] + bbox[..., 3]).float() / 2000 * grid).long().clamp(0, grid - 1)
    return cy * grid + cx


class PretrainCollator:
    """Items ``(position, page or None)`` → a pre-training batch (``None`` items, unreadable records, are dropped)."""

    def __init__(self, tokenizer, collate: CollateConfig, masks: MaskConfig, seed: int = 0) -> None:
        self.base = DocumentCollator(tokenizer, collate)
        self.tokenizer, self.cfg, self.seed = tokenizer, masks, seed
        self.masker = MultiBlockMasker(masks)
        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=masks.mlm_probability)

    def __call__(self, items: Sequence[tuple[int, Page | None]]) -> dict | None:
        good = [(pos, page) for pos, page in items if page is not None]
        if not good:
            return None
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + good[0][0])
        batch = self.base([(page, None) for _, page in good])
        for key in ("masks", "answer_valid", "questions", "question_kinds"):
            batch.pop(key)
        b, _length = batch["input_ids"].shape
        gray = batch["pixel_values"].mean(1, keepdim=True)  # (B, 1, S, S) in −1…1
        ink = torch.nn.functional.adaptive_avg_pool2d((gray < 0).float(), self.cfg.grid).flatten(1)  # (B, U)
        keep, targets, _ = self.masker(b, gen, ink)
        g = self.cfg.grid
        units = token_units(batch["bbox"], g)  # (B, L)
        real = batch["attention_mask"].bool()
        special = (
            torch.tensor(
                [
                    self.tokenizer.get_special_tokens_mask(row.tolist(), already_has_special_tokens=True)
                    for row in batch["input_ids"]
                ],
                dtype=torch.bool,
            )
            | ~real
        )
        # D-JEPA image region: the target block with the most words in it.
        words_in = targets.gather(2, units.unsqueeze(1).expand(-1, targets.shape[1], -1)) & ~special.unsqueeze(1)
        best = words_in.sum(2).argmax(1)  # (B,)
        region = targets[torch.arange(b), best]  # (B, U)
        djepa_image_idx = torch.stack([r.nonzero().squeeze(1) for r in region])  # (B, Kr): same size per batch
        # D-JEPA text region: a block of the same size, its words masked and predicted from the image.
        th, tw = self._size(region[0])
        text_pos, text_labels = [], []
        input_ids = batch["input_ids"].clone()
        for i in range(b):
            choice = None
            for _ in range(10):
                blk = _block(gen, g, th, tw).flatten()
                inside = (blk[units[i]] & ~special[i]).nonzero().squeeze(1)
                if len(inside):
                    choice = inside[: self.cfg.max_djepa_tokens]
                    break
            choice = choice if choice is not None else torch.zeros(0, dtype=torch.long)
            text_pos.append(choice)
            text_labels.append(input_ids[i, choice].clone())
            input_ids[i, choice] = self.tokenizer.mask_token_id
            special[i, choice] = True
        n = max(1, max(len(p) for p in text_pos))
        pos = torch.zeros(b, n, dtype=torch.long)
        lab = torch.full((b, n), -100, dtype=torch.long)
        for i, (p, lb) in enumerate(zip(text_pos, text_labels)):
            pos[i, : len(p)], lab[i, : len(p)] = p, lb
        # MLM on the remaining tokens (boxes are untouched: ids change in place).
        self.mlm.generator = gen
        input_ids, mlm_labels = self.mlm.torch_mask_tokens(input_ids, special_tokens_mask=special)
        batch.update(
            input_ids=input_ids,  # (B, L) with [MASK] / random / kept tokens
            mlm_labels=mlm_labels,  # (B, L), -100 where not predicted
            context_keep=keep,  # (B, U) visible units, same count per row
            target_idx=torch.stack([torch.stack([t.nonzero().squeeze(1) for t in row]) for row in targets]),
            djepa_image_idx=djepa_image_idx,  # (B, Kr)
            djepa_text_pos=pos,  # (B, Ld) token positions masked for D-JEPA
            djepa_text_labels=lab,  # (B, Ld) their ids, -100 = padding
            positions=torch.tensor([p for p, _ in good]),
        )
        return batch

    @staticmethod
    def _size(region: torch.Tensor) -> tuple[int, int]:
        g = math.isqrt(region.numel())
        rows, cols = region.view(g, g).any(1), region.view(g, g).any(0)
        return int(rows.sum()), int(cols.sum())
