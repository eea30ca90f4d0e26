"""Collate for promptable segmentation: pages + questions → images, OCR tokens, question tokens, target masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .collate import CollateConfig, DocumentCollator
from .lexical import word_matches
from .record import Page


def token_matches(question: str, page: Page, word_index: torch.Tensor) -> torch.Tensor:
    """(L,) bool: the token's word equals a content word of the question (DrQA's exact-match feature)."""
    hits = torch.tensor([*word_matches(question, [w.text for w in page.words]), False])  # index −1 → False
    return hits[word_index]


class SegmentCollator:
    """Items ``(position, (page, question index))`` (``None`` items dropped) → a batch.

    The training target of an ambiguous question is one of its answers, drawn per sample from a generator
    seeded by (seed, position): over training, the decoder's three outputs learn to cover the alternatives
    (SAM's ambiguity training). All answers stay in ``masks`` / ``answer_valid`` for evaluation.
    """

    def __init__(
        self, tokenizer, question_tokenizer, collate: CollateConfig, max_question_tokens: int = 32, seed: int = 0
    ) -> None:
        self.base = DocumentCollator(tokenizer, collate)
        self.qtok, self.max_q, self.seed = question_tokenizer, max_question_tokens, seed

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
        targets = []
        for (pos, _), masks, valid in zip(good, batch["masks"], batch["answer_valid"]):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + pos)
            choices = valid.nonzero().squeeze(1)
            pick = choices[int(torch.randint(len(choices), (1,), generator=gen))] if len(choices) else 0
            targets.append(masks[pick])
        batch["target"] = torch.stack(targets).unsqueeze(1)  # (B, 1, M, M)
        batch["positions"] = torch.tensor([p for p, _ in good])
        return batch
