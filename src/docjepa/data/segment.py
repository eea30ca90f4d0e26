"""Collate for promptable segmentation: pages + questions → images, OCR tokens, the question prompt, target masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .collate import CollateConfig, DocumentCollator, Placement, random_placement
from .prompt import PromptBuilder
from .record import Page


class SegmentCollator:
    """Items ``(position, (page, question index))`` (``None`` items dropped) → a batch.

    The training target of an ambiguous question is one of its answers, drawn per sample from a generator
    seeded by (seed, position): over training, the decoder's three outputs learn to cover the alternatives
    (SAM's ambiguity training). All answers stay in ``masks`` / ``answer_valid`` for evaluation. The
    batch's ``prompt`` is a :class:`~docjepa.data.prompt.QuestionPrompt` (with ``lexical_prior``, its mask prompt
    is the OCR matcher's box for each question). With ``jitter`` > 0 (an ablation) each sample's page is shrunk
    by a factor drawn from [1 − jitter, 1] and put at a random place in the square input (drawn per position;
    image, words, target and prompt move together), so where an answer usually lies on a trained layout is no
    shortcut (SAM's scale jitter). With ``page_reader``, the batch also holds the page's words in the question
    tokenizer's pieces (:func:`~docjepa.data.reader.reader_inputs`).
    """

    def __init__(
        self,
        tokenizer,
        question_tokenizer,
        collate: CollateConfig,
        max_question_tokens: int = 32,
        seed: int = 0,
        lexical_prior: bool = False,
        jitter: float = 0.0,
        page_reader: bool = False,
    ) -> None:
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), not {jitter}")
        self.base = DocumentCollator(tokenizer, collate, question_tokenizer if page_reader else None)
        m = collate.mask_size
        self.prompts = PromptBuilder(tokenizer, question_tokenizer, max_question_tokens, m, lexical_prior)
        self.seed, self.jitter = seed, jitter

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
        pages = [page for _, (page, _) in good]
        batch["prompt"] = self.prompts(batch["questions"], pages, batch["word_index"], places)
        targets = []
        for (pos, _), masks, valid in zip(good, batch["masks"], batch["answer_valid"]):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + pos)
            choices = valid.nonzero().squeeze(1)
            pick = choices[int(torch.randint(len(choices), (1,), generator=gen))] if len(choices) else 0
            targets.append(masks[pick])
        batch["target"] = torch.stack(targets).unsqueeze(1)  # (B, 1, M, M)
        batch["positions"] = torch.tensor([p for p, _ in good])
        return batch
