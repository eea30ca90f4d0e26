"""Word answers: the OCR words the word decoder picks, shaped as people answer, and the choice between them and a mask.

The word decoder gives every OCR token an answer logit (``SegmentationOutput.token_logits``); :func:`word_logits`
turns them into one logit per word. A short answer (a number, a date, a version, a name, a heading) is then a run of
words that follow one another in the page's reading order: :func:`word_span` starts from the most likely word and
takes its neighbours while they are likely too and sit beside it (the same line, or the next line under it), so an
answer is never a scatter of words over the page. A region answer (a table, a paragraph, a checkbox) stays the mask
decoder's. :func:`choose_path` decides per question which of the two is the answer.
"""

from __future__ import annotations

import math

import torch

from ..data.record import Page
from .answer_paths import ANSWER_PATHS

WORD_LOGIT = 0.0
"""A word is in a word answer when the word decoder's logit of one of its tokens exceeds this (probability ½)."""


def word_logits(token_logits: torch.Tensor, word_index: torch.Tensor, words: int) -> torch.Tensor:
    """(words,) each OCR word's answer logit: the largest of its tokens' (−inf for a word left without tokens,
    beyond the encoder's ``max_tokens``). ``token_logits`` (L,), ``word_index`` (L,) the word of each token (−1:
    special)."""
    out = torch.full((words,), float("-inf"))
    index = word_index[: token_logits.shape[0]].cpu()
    real = index >= 0
    return out.scatter_reduce(0, index[real], token_logits.detach().float().cpu()[real], reduce="amax")


def follows(page: Page, a: int, b: int) -> bool:
    """Whether word ``b`` comes right after word ``a`` when the page is read: on the same line (their vertical
    extents overlap by half the smaller height) and at most three heights to its right, or first on the next line
    (its top within one line height under ``a``'s bottom)."""
    _, ay0, ax1, ay1 = page.words[a].box
    bx0, by0, _, by1 = page.words[b].box
    h = max(1.0, min(ay1 - ay0, by1 - by0))
    overlap = min(ay1, by1) - max(ay0, by0)
    if overlap >= 0.5 * h:
        return -h <= bx0 - ax1 <= 3 * h
    return 0 <= by0 - ay1 <= max(ay1 - ay0, by1 - by0) and bx0 <= ax1


def word_span(logits: torch.Tensor, page: Page, threshold: float = WORD_LOGIT) -> list[int]:
    """The word answer: the most likely word, and the words before and after it in the OCR order, each taken while
    its logit exceeds ``threshold`` and it follows its neighbour on the page (:func:`follows`). Empty when no word
    has a logit."""
    if logits.numel() == 0 or not torch.isfinite(logits).any():
        return []
    best = int(logits.argmax())
    lo = hi = best
    while lo > 0 and float(logits[lo - 1]) > threshold and follows(page, lo - 1, lo):
        lo -= 1
    while hi + 1 < logits.numel() and float(logits[hi + 1]) > threshold and follows(page, hi, hi + 1):
        hi += 1
    return list(range(lo, hi + 1))


def span_confidence(logits: torch.Tensor) -> float:
    """The probability the word decoder gives its most likely word (0 when no word has a logit)."""
    if logits.numel() == 0 or not torch.isfinite(logits).any():
        return 0.0
    return 1.0 / (1.0 + math.exp(-float(logits.max())))


def choose_path(path: str, logits: torch.Tensor | None, threshold: float | None = None) -> str:
    """``words`` or ``mask``: which answer a question gets under ``path`` (see :data:`ANSWER_PATHS`), from the
    words' logits (None: the model has no word decoder) and, for ``auto``, the confidence ``threshold`` (None: no
    threshold was fitted, so the mask)."""
    if path not in ANSWER_PATHS:
        raise ValueError(f"unknown answer path {path!r}; choose one of {', '.join(ANSWER_PATHS)}")
    if logits is None or path == "mask" or not torch.isfinite(logits).any():
        return "mask"
    if path == "words":
        return "words"
    return "words" if threshold is not None and span_confidence(logits) >= threshold else "mask"
