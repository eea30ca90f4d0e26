"""Collate for promptable segmentation: pages + questions → images, OCR tokens, question tokens, target masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..eval.baseline import baseline_box
from .collate import CollateConfig, DocumentCollator
from .lexical import word_matches
from .record import Page


def token_matches(question: str, page: Page, word_index: torch.Tensor) -> torch.Tensor:
    """(L,) bool: the token's word equals a content word of the question (DrQA's exact-match feature)."""
    hits = torch.tensor([*word_matches(question, [w.text for w in page.words]), False])  # index −1 → False
    return hits[word_index]


def lexical_prior(question: str, page: Page, image_size: int, mask_size: int) -> torch.Tensor:
    """(M, M) float mask prompt: the OCR-matching baseline's answer box (``docjepa.eval.baseline``), padded by 2 page
    pixels as answers are, in the square frame at the decoder's output resolution; all zeros when it finds
    nothing. The model takes it as SAM takes a coarse mask to refine."""
    out = torch.zeros(mask_size, mask_size)
    box = baseline_box(question, page.words)
    if box is None:
        return out
    f = image_size / max(page.width, page.height) * mask_size / image_size  # page pixels → mask pixels
    x0, y0 = max(0, int((box[0] - 2) * f)), max(0, int((box[1] - 2) * f))
    x1, y1 = min(mask_size, int(-(-(box[2] + 2) * f // 1))), min(mask_size, int(-(-(box[3] + 2) * f // 1)))
    out[y0 : max(y1, y0 + 1), x0 : max(x1, x0 + 1)] = 1.0
    return out


class SegmentCollator:
    """Items ``(position, (page, question index))`` (``None`` items dropped) → a batch.

    The training target of an ambiguous question is one of its answers, drawn per sample from a generator
    seeded by (seed, position): over training, the decoder's three outputs learn to cover the alternatives
    (SAM's ambiguity training). All answers stay in ``masks`` / ``answer_valid`` for evaluation. With
    ``lexical_prior`` the batch has ``prior`` (B, 1, M, M), the baseline's box for each question (see
    :func:`lexical_prior`), which the model takes as its mask prompt.
    """

    def __init__(
        self,
        tokenizer,
        question_tokenizer,
        collate: CollateConfig,
        max_question_tokens: int = 32,
        seed: int = 0,
        lexical_prior: bool = False,
    ) -> None:
        self.base = DocumentCollator(tokenizer, collate)
        self.qtok, self.max_q, self.seed = question_tokenizer, max_question_tokens, seed
        self.lexical_prior = lexical_prior

    def questions(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.qtok(texts, padding=True, truncation=True, max_length=self.max_q, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    def __call__(self, items: Sequence[tuple[int, tuple[Page, int] | None]]) -> dict | None:
        good = [(pos, item) for pos, item in items if item is not None]
        if not good:
            return None
        batch = self.base([item for _, item in good])
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
        if self.lexical_prior:
            size, m = self.base.cfg.image_size, self.base.cfg.mask_size
            batch["prior"] = torch.stack(
                [lexical_prior(q, page, size, m) for q, (_, (page, _)) in zip(batch["questions"], good)]
            ).unsqueeze(1)  # (B, 1, M, M)
        targets = []
        for (pos, _), masks, valid in zip(good, batch["masks"], batch["answer_valid"]):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + pos)
            choices = valid.nonzero().squeeze(1)
            pick = choices[int(torch.randint(len(choices), (1,), generator=gen))] if len(choices) else 0
            targets.append(masks[pick])
        batch["target"] = torch.stack(targets).unsqueeze(1)  # (B, 1, M, M)
        batch["positions"] = torch.tensor([p for p, _ in good])
        return batch
