"""Collate for promptable segmentation: pages + questions → images, OCR tokens, question tokens, target masks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..eval.baseline import baseline_box
from .collate import CollateConfig, DocumentCollator, Placement, paste, random_placement
from .lexical import word_matches
from .record import Page, box_polygon, rasterize


def token_matches(question: str, page: Page, word_index: torch.Tensor) -> torch.Tensor:
    """(L,) bool: the token's word equals a content word of the question (DrQA's exact-match feature)."""
    hits = torch.tensor([*word_matches(question, [w.text for w in page.words]), False])  # index −1 → False
    return hits[word_index]


def box_mask(
    box: tuple[float, float, float, float] | None, page: Page, scale: float, size: int, dx: int = 0, dy: int = 0
) -> np.ndarray:
    """A page-pixel box as a boolean (size, size) mask in the square frame (page × scale, its corner at (dx, dy)),
    drawn exactly as the answers are (the generator pads answer boxes by 2 px and fills them as polygons); all
    False for None."""
    m = np.zeros((size, size), dtype=bool)
    if box is not None:
        h, w = max(1, round(page.height * scale)), max(1, round(page.width * scale))
        padded = (box[0] - 2, box[1] - 2, box[2] + 2, box[3] + 2)
        paste(m, rasterize([box_polygon(padded)], (page.height, page.width), (h, w)) > 0, dx, dy)
    return m


def lexical_prior(question: str, page: Page, mask_size: int, place: Placement | None = None) -> torch.Tensor:
    """(M, M) float mask prompt: the OCR-matching baseline's answer box (``docjepa.eval.baseline``) in the square
    frame at the decoder's output resolution, drawn as the answers are (:func:`box_mask`), so the prompt scores
    exactly what the baseline scores; all zeros when it finds nothing. The model takes it as SAM takes a coarse
    mask to refine. ``place``: where the page lies in the square (default: fitted at the top left)."""
    place = place or Placement()
    box = baseline_box(question, page.words)
    return torch.from_numpy(box_mask(box, page, place.scale(page, mask_size), mask_size, place.dx, place.dy)).float()


class SegmentCollator:
    """Items ``(position, (page, question index))`` (``None`` items dropped) → a batch.

    The training target of an ambiguous question is one of its answers, drawn per sample from a generator
    seeded by (seed, position): over training, the decoder's three outputs learn to cover the alternatives
    (SAM's ambiguity training). All answers stay in ``masks`` / ``answer_valid`` for evaluation. With
    ``lexical_prior`` the batch has ``prior`` (B, 1, M, M), the baseline's box for each question (see
    :func:`lexical_prior`), which the model takes as its mask prompt. With ``question_dropout`` > 0, that fraction
    of the samples whose prompt is not empty (drawn per position) lose their question: the model sees the mask
    prompt alone and learns to refine it without relying on the wording (as SAM trains mask-only prompts).
    With ``jitter`` > 0 each sample's page is shrunk by a factor drawn from [1 − jitter, 1] and put at a random
    place in the square input (drawn per position; image, words, target and prompt move together), so where an
    answer usually lies on a trained layout is no shortcut (SAM's scale jitter).
    """

    def __init__(
        self,
        tokenizer,
        question_tokenizer,
        collate: CollateConfig,
        max_question_tokens: int = 32,
        seed: int = 0,
        lexical_prior: bool = False,
        question_dropout: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        if not 0.0 <= question_dropout < 1.0:
            raise ValueError(f"question_dropout must be in [0, 1), not {question_dropout}")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), not {jitter}")
        self.base = DocumentCollator(tokenizer, collate)
        self.qtok, self.max_q, self.seed = question_tokenizer, max_question_tokens, seed
        self.lexical_prior, self.question_dropout, self.jitter = lexical_prior, question_dropout, jitter

    def questions(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.qtok(texts, padding=True, truncation=True, max_length=self.max_q, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    def __call__(self, items: Sequence[tuple[int, tuple[Page, int] | None]]) -> dict | None:
        good = [(pos, item) for pos, item in items if item is not None]
        if not good:
            return None
        m = self.base.cfg.mask_size
        places = [
            random_placement(page, m, self.jitter, torch.Generator().manual_seed(self.seed * 1_000_003 + pos + 29))
            if self.jitter
            else Placement()
            for pos, (page, _) in good
        ]
        batch = self.base([item for _, item in good], places)
        if self.lexical_prior:
            batch["prior"] = torch.stack(
                [lexical_prior(q, page, m, place) for q, (_, (page, _)), place in zip(batch["questions"], good, places)]
            ).unsqueeze(1)  # (B, 1, M, M)
            if self.question_dropout:
                for i, (pos, _) in enumerate(good):
                    gen = torch.Generator().manual_seed(self.seed * 1_000_003 + pos + 17)
                    if batch["prior"][i].any() and float(torch.rand(1, generator=gen)) < self.question_dropout:
                        batch["questions"][i] = ""
        batch["question_ids"], batch["question_mask"] = self.questions(batch["questions"])
        words = self.base.tokenizer(
            batch["questions"], padding=True, truncation=True, max_length=self.max_q, return_tensors="pt"
        )  # the question in the document tokenizer (lexical path)
        batch["question_word_ids"], batch["question_word_mask"] = words["input_ids"], words["attention_mask"]
        batch["word_match"] = torch.stack(
            [
                token_matches(q, page, idx)
                for q, (_, (page, _)), idx in zip(batch["questions"], good, batch["word_index"])
            ]
        )
        targets = []
        for (pos, _), masks, valid in zip(good, batch["masks"], batch["answer_valid"]):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + pos)
            choices = valid.nonzero().squeeze(1)
            pick = choices[int(torch.randint(len(choices), (1,), generator=gen))] if len(choices) else 0
            targets.append(masks[pick])
        batch["target"] = torch.stack(targets).unsqueeze(1)  # (B, 1, M, M)
        batch["positions"] = torch.tensor([p for p, _ in good])
        return batch
