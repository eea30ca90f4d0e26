"""Word answers: the OCR words the word decoder picks, shaped as people answer, and the choice between them and a mask.

The word decoder gives every OCR token an answer logit (``SegmentationOutput.token_logits``); :func:`word_logits`
turns them into one logit per word. A word answer (a number, a date, a name, an address block) is then the words
that touch one another on the page around the most likely word: :func:`word_span` starts from it and takes every
word the decoder does not rule out (the model's span threshold, by default :data:`WORD_LOGIT`) that sits beside a
word already taken, on its line or on the line above or below (:func:`touching`); across a line break only a word
the decoder marks more firmly (the model's line threshold, where its calibration chose one), and from a line further
away (an address block's) one that clears the far bar its calibration chose, if any; never from one line to another
when each is opened by a key of its own (:func:`keyed`: "Date: …" over "Due date: …" are two values); and from the
key that opens the most likely word's value on its line, every word up to it. Touching, not
reading order, joins them, so a block in one column of a two-column page is one answer, and an answer is never a
scatter of words over the page. A region answer (a table, a paragraph, a checkbox) stays the mask decoder's.
:func:`choose_path` decides per question which of the two is the answer.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import ClassVar

import numpy as np
import torch

from ..data.record import Page
from ..data.touching import LINE_GAP, ROW_GAP, one_line
from ..data.touching import touching as _touching
from .answer_paths import ANSWER_PATHS

WORD_LOGIT = -3.0
"""A word joins a word answer when the word decoder's logit of one of its tokens exceeds this (probability about
0.05) and it touches a word already in the answer; the default for a model whose calibration chose no threshold of
its own (``Calibration.span_logit``, chosen by ``docjepa calibrate``). Chosen on calibration pages
(docs/docjepa-extract.md): a low bar, because touching the most likely word already says much; at 0 (probability
½) dates and amounts of several words were cut to one of them."""


def word_logits(token_logits: torch.Tensor, word_index: torch.Tensor, words: int) -> torch.Tensor:
    """(words,) each OCR word's answer logit: the largest of its tokens' (−inf for a word left without tokens,
    beyond the encoder's ``max_tokens``). ``token_logits`` (L,), ``word_index`` (L,) the word of each token (−1:
    special)."""
    out = torch.full((words,), float("-inf"))
    index = word_index[: token_logits.shape[0]].cpu()
    real = index >= 0
    return out.scatter_reduce(0, index[real], token_logits.detach().float().cpu()[real], reduce="amax")


def touching(boxes: np.ndarray, row_gap: float = ROW_GAP, line_gap: float = LINE_GAP) -> np.ndarray:
    """(K, K) bool: whether two words (``boxes`` (K, 4) page pixels) sit beside each other
    (:func:`docjepa.data.touching.touching`)."""
    return _touching(torch.from_numpy(np.asarray(boxes, dtype=np.float64)), row_gap, line_gap).numpy()


def word_span(
    logits: torch.Tensor,
    page: Page,
    threshold: float = WORD_LOGIT,
    line_threshold: float | None = None,
    line_gap: float = LINE_GAP,
    far_threshold: float | None = None,
) -> list[int]:
    """The word answer, in reading order: the most likely word and every word whose logit exceeds ``threshold``
    that is joined to it through such words, each touching the next (:func:`touching`). With ``line_threshold``
    (above ``threshold``), a word joins from a word on another line only when its logit exceeds that too: a word
    beside the answer on its line needs the low bar, a line break the higher one, so that a name does not run on into
    the address below it unless the decoder marks the address as well.

    Lines touch when they stand at most :data:`~docjepa.data.touching.LINE_GAP` word heights apart. With
    ``far_threshold``, a word on a line up to ``line_gap`` heights away joins too when its logit exceeds that bar:
    OCR boxes hug the ink, so the lines of an address of short words ("rue", "75183") stand further apart than their
    boxes are high, while a value stacked under another key's value stands as near; a model's calibration chooses
    both, and a bar high enough to leave the stacked value out. Two words on two lines never join when each stands in
    a value its own line's key opens (:func:`keyed`): a value stacked under another key's value is another value.
    When a key opens the most likely word's value on its line, the words between the key and that word join too if
    the decoder does not rule any of them out (:data:`WORD_LOGIT`, or ``threshold`` where lower): the decoder often
    marks the last word of "7. 3. 2025" or "12 March 2025" firmly and the first ones less, and a value cut at its
    start reads another value ("3. 2025"). Empty when no word has a logit."""
    return word_spans(logits, page, [(threshold, line_threshold, line_gap, far_threshold)])[0]


def word_spans(logits: torch.Tensor, page: Page, rules: list[tuple]) -> list[list[int]]:
    """:func:`word_span` under each rule ``(threshold, line_threshold, line_gap, far_threshold)``, the rules of one
    threshold sharing their words' boxes and touching (``docjepa calibrate`` tries hundreds per question)."""
    if logits.numel() == 0 or not torch.isfinite(logits).any():
        return [[] for _ in rules]
    values = logits.detach().float().cpu().numpy()
    best = int(values.argmax())
    shared: dict = {}
    lines = _Lines.of(page)
    opened = lines.opened_all()
    before, by_key = lines.walk_left(best)  # the words between the key opening the best word's value and it
    out = []
    for threshold, line_threshold, line_gap, far_threshold in rules:
        if threshold not in shared:
            likely = np.union1d(np.flatnonzero(values > threshold), [best])  # the best word always
            boxes = torch.tensor(np.array([page.words[i].box for i in likely], dtype=np.float64).reshape(-1, 4))
            apart = opened[likely][:, None] & opened[likely][None, :]
            shared[threshold] = likely, boxes, _touching(boxes).numpy(), one_line(boxes).numpy(), apart, {}
        likely, boxes, near, same, apart, far_touching = shared[threshold]
        if line_threshold is not None and line_threshold > threshold:
            near = near & (same | (values[likely] > line_threshold)[None, :])
        if far_threshold is not None and line_gap > LINE_GAP:
            if line_gap not in far_touching:
                far_touching[line_gap] = _touching(boxes, ROW_GAP, line_gap).numpy()
            near = near | (far_touching[line_gap] & (values[likely] > far_threshold)[None, :])
        span = _grow(near & (same | ~apart), likely == best, likely)
        fill = before if by_key and all(values[k] > min(threshold, WORD_LOGIT) for k in before) else []
        out.append(sorted(set(span) | set(fill)))
    return out


def keyed(page: Page, ids) -> np.ndarray:
    """(K,) bool: whether each word ``ids`` stands in a value that a key opens on its own line: walking left from
    it along its line, over gaps of at most :data:`~docjepa.data.touching.ROW_GAP` word heights, a word ending in
    ":" comes before the walk stops ("2024" of "Due date: 5 Aug 2024"; not a key's own words, nor a word of an
    address line under "Address: …")."""
    return _Lines.of(page).opened(ids)


class _Lines:
    """A page's words by line, for walking left along a line (:func:`keyed`, :func:`word_spans`). The last few
    pages' are kept (:meth:`of`): evaluation and calibration ask for a page's many questions, each under many span
    rules, and every word's walk costs as much as the rest of a word answer."""

    _recent: ClassVar[OrderedDict[tuple[int, int, int], _Lines]] = OrderedDict()
    KEEP = 4
    _lock = threading.Lock()

    @classmethod
    def of(cls, page: Page) -> _Lines:
        """The lines of ``page``, made once while it is among the last :attr:`KEEP` pages asked for (the entry holds
        the page and its word list, so their ids are not reused while it is kept; a new word list is a new entry)."""
        key = (id(page), id(page.words), len(page.words))
        with cls._lock:
            lines = cls._recent.get(key)
            if lines is not None and lines.page is page and lines.words is page.words:
                cls._recent.move_to_end(key)
                return lines
        lines = cls(page)
        with cls._lock:  # engine threads may ask at once
            cls._recent[key] = lines
            while len(cls._recent) > cls.KEEP:
                cls._recent.popitem(last=False)
        return lines

    def __init__(self, page: Page) -> None:
        self.page = page
        self.words = page.words
        self._opened: np.ndarray | None = None
        boxes = torch.tensor(np.array([w.box for w in page.words], dtype=np.float64).reshape(-1, 4))
        self.same = one_line(boxes).numpy()
        self.x0, self.x1 = boxes[:, 0].numpy(), boxes[:, 2].numpy()
        self.h = (boxes[:, 3] - boxes[:, 1]).clamp(min=1.0).numpy()

    def opened(self, ids) -> np.ndarray:
        """(K,) bool: whether a walk left from each word ``ids`` ends at a key (:meth:`walk_left`)."""
        return self.opened_all()[np.asarray(list(ids), dtype=np.int64)]

    def opened_all(self) -> np.ndarray:
        """(N,) bool: :meth:`opened` of every word of the page (computed once)."""
        if self._opened is None:
            self._opened = np.array([self.walk_left(j)[1] for j in range(len(self.words))], dtype=bool)
        return self._opened

    def walk_left(self, j: int) -> tuple[list[int], bool]:
        """The words passed walking left from word ``j`` along its line, over gaps of at most ``ROW_GAP`` of its
        height, up to a word ending in ":" (not included), and whether the walk ended at one."""
        left = [k for k in np.flatnonzero(self.same[j]) if k != j and self.x1[k] <= self.x0[j] + 0.5 * self.h[j]]
        edge, passed = self.x0[j], []
        for k in sorted(left, key=lambda k: -self.x1[k]):
            if edge - self.x1[k] > ROW_GAP * self.h[j]:
                break
            if self.words[k].text.endswith(":"):
                return passed, True
            passed.append(int(k))
            edge = min(edge, self.x0[k])
        return passed, False


def _grow(near: np.ndarray, taken: np.ndarray, likely: np.ndarray) -> list[int]:
    """The words of ``likely`` reached from ``taken`` through ``near`` (K, K), in reading order."""
    while True:
        grown = taken | near[taken].any(axis=0)
        if (grown == taken).all():
            return [int(i) for i in likely[taken]]
        taken = grown


def without_keys(span: list[int], page: Page) -> list[int]:
    """A word answer without the key printed before its value: on each line of the answer, the words up to and
    including the last word ending in ":" that a word of the answer not ending in ":" follows on that line ("Due
    date: 24/01/2024" → "24/01/2024", "Name: Thomas-Arnold" → "Thomas-Arnold"). Business documents print a key
    before its value; a question asks for the value (the generator's answers never hold the key), and the word
    decoder sometimes takes the key with it on layouts unlike its training pages. An answer of keys alone is kept."""
    if len(span) < 2:
        return span
    boxes = torch.tensor([page.words[i].box for i in span], dtype=torch.float64)
    same = one_line(boxes).numpy()
    left = boxes[:, 0].numpy()
    keyish = np.array([page.words[i].text.endswith(":") for i in span])
    drop = np.zeros(len(span), dtype=bool)
    for a in np.flatnonzero(keyish):
        after = same[a] & (left > left[a])
        if (after & ~keyish).any():
            drop |= same[a] & ~after
    kept = [i for i, gone in zip(span, drop) if not gone]
    return kept or span


def span_confidence(logits: torch.Tensor) -> float:
    """The probability the word decoder gives its most likely word (0 when no word has a logit)."""
    if logits.numel() == 0 or not torch.isfinite(logits).any():
        return 0.0
    return 1.0 / (1.0 + math.exp(-float(logits.max())))


def choose_path(
    path: str, logits: torch.Tensor | None, threshold: float | None = None, score: float | None = None
) -> str:
    """``words`` or ``mask``: which answer a question gets under ``path`` (see :data:`ANSWER_PATHS`), from the
    words' logits (None: the model has no word decoder) and, for ``auto``, whether ``score`` (default: the word
    decoder's confidence, :func:`span_confidence`) reaches ``threshold`` (None: no threshold was fitted, so the
    mask)."""
    if path not in ANSWER_PATHS:
        raise ValueError(f"unknown answer path {path!r}; choose one of {', '.join(ANSWER_PATHS)}")
    if logits is None or path == "mask" or not torch.isfinite(logits).any():
        return "mask"
    if path == "words":
        return "words"
    if threshold is None:
        return "mask"
    return "words" if (span_confidence(logits) if score is None else score) >= threshold else "mask"
