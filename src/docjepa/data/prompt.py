"""The prompt of a question, prepared one way for training (``SegmentCollator``) and inference (the predictor).

A :class:`QuestionPrompt` holds everything the decoder takes besides the page: the question in the question
tower's tokenizer, the same question in the document tokenizer (the lexical path), which page tokens match its
words, the OCR matcher's answer box as a mask prompt, and optional point / box prompts. :class:`PromptBuilder`
makes it from question texts and pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import torch
from torch import Tensor

from .collate import Placement, paste
from .lexical import word_matches
from .matcher import baseline_box
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


def prior_mask(
    box: tuple[float, float, float, float] | None, page: Page, mask_size: int, place: Placement | None = None
) -> torch.Tensor:
    """(M, M) float mask prompt from a page-pixel box, drawn as the answers are (:func:`box_mask`) in the square
    frame at the decoder's output resolution; all zeros for None. ``place``: where the page lies in the square
    (default: fitted at the top left)."""
    place = place or Placement()
    return torch.from_numpy(box_mask(box, page, place.scale(page, mask_size), mask_size, place.dx, place.dy)).float()


def lexical_prior(question: str, page: Page, mask_size: int, place: Placement | None = None) -> torch.Tensor:
    """(M, M) the mask prompt of a question: the OCR matcher's answer box (``docjepa.data.matcher``, also the
    evaluation's baseline) drawn by :func:`prior_mask`, so the prompt scores exactly what the baseline scores. The
    model takes it as SAM takes a coarse mask to refine."""
    return prior_mask(baseline_box(question, page.words), page, mask_size, place)


@dataclass
class QuestionPrompt:
    """A batch of prompts for the decoder; at least a question or a point / box prompt."""

    question_ids: Tensor | None = None
    """(B, T) the question in the question tower's tokenizer."""
    question_mask: Tensor | None = None
    """(B, T) 1 for real question tokens."""
    word_ids: Tensor | None = None
    """(B, T') the question in the document tokenizer (the word decoder's lexical path)."""
    word_mask: Tensor | None = None
    """(B, T') 1 for real tokens."""
    word_match: Tensor | None = None
    """(B, L) bool: the page token's word is a content word of the question (:func:`token_matches`)."""
    mask_prompt: Tensor | None = None
    """(B, 1, M, M) a coarse mask to refine at the decoder's output resolution (all zeros: none), the OCR
    matcher's box (:func:`lexical_prior`)."""
    points: Tensor | None = None
    """(B, P, 2) point prompts in pixels of the square model input."""
    point_labels: Tensor | None = None
    """(B, P) 1 = on the answer, 0 = not."""
    boxes: Tensor | None = None
    """(B, 4) box prompts in pixels of the square model input."""
    lexical_boxes: list | None = None
    """The OCR matcher's answer box of each question in page pixels (None where it found nothing), as drawn into
    ``mask_prompt``."""

    def select(self, idx: Tensor) -> QuestionPrompt:
        """The prompts of examples ``idx`` (1-D indices)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        out = {k: v[idx] for k, v in moved.items() if torch.is_tensor(v)}
        if self.lexical_boxes is not None:
            out["lexical_boxes"] = [self.lexical_boxes[i] for i in idx.tolist()]
        return replace(self, **out)

    def to(self, device: torch.device | str) -> QuestionPrompt:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: v.to(device) for k, v in moved.items() if torch.is_tensor(v)})


class PromptBuilder:
    """Questions about pages → a :class:`QuestionPrompt` (the same code at training and at prediction time)."""

    def __init__(
        self, tokenizer, question_tokenizer, max_question_tokens: int, mask_size: int, lexical_prior: bool
    ) -> None:
        self.tok, self.qtok = tokenizer, question_tokenizer or tokenizer
        self.max_q, self.mask_size, self.lexical_prior = max_question_tokens, mask_size, lexical_prior

    def __call__(
        self,
        questions: Sequence[str],
        pages: Sequence[Page],
        word_index: Tensor,
        places: Sequence[Placement] | None = None,
    ) -> QuestionPrompt:
        """``word_index`` (B, L): each page token's word (−1: none), as the document collator makes it;
        ``places``: where each page lies in the square input (default: fitted at the top left)."""
        questions = list(questions)
        places = places or [Placement()] * len(questions)
        enc = self.qtok(questions, padding=True, truncation=True, max_length=self.max_q, return_tensors="pt")
        words = self.tok(questions, padding=True, truncation=True, max_length=self.max_q, return_tensors="pt")
        match = torch.stack([token_matches(q, page, idx) for q, page, idx in zip(questions, pages, word_index)])
        prior = boxes = None
        if self.lexical_prior:
            m = self.mask_size
            boxes = [baseline_box(q, page.words) for q, page in zip(questions, pages)]
            prior = torch.stack(
                [prior_mask(box, page, m, place) for box, page, place in zip(boxes, pages, places)]
            ).unsqueeze(1)  # (B, 1, M, M)
        return QuestionPrompt(
            question_ids=enc["input_ids"],
            question_mask=enc["attention_mask"],
            word_ids=words["input_ids"],
            word_mask=words["attention_mask"],
            word_match=match,
            mask_prompt=prior,
            lexical_boxes=boxes,
        )
