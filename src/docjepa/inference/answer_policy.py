"""From the decoder's candidates to an answer: which candidate, the mask or the word span, snapped to the OCR words,
made to agree with clicks, its text, and how far to trust it.

The predictor encodes and decodes (:mod:`docjepa.inference.predictor`); this module answers. An
:class:`AnswerPolicy` holds the settings (snapping, word answers, click rules, the answer path, the calibration);
:meth:`AnswerPolicy.read` gives a :class:`Reading` of one decoder output on one encoded page, which computes each
thing an answer needs (the chosen candidate, the words' logits, the word span, the path) once, however many of the
answer's forms a caller asks for. The CLI, the evaluation and the data engine read answers through it, so that an
answer is made by one set of rules wherever it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from ..data.record import union_box, words_under
from ..data.touching import LINE_GAP
from .clicks import apply_clicks, boxes_mask
from .decoded import Decoded, EncodedPage
from .mask_choice import FULL_PAGE, SNAP_AGREEMENT, choose_mask, coverage, mask_iou, snap_to_words, words_box
from .path_choice import path_features
from .word_answer import WORD_LOGIT, choose_path, span_confidence, without_keys, word_logits, word_span

Box = tuple[float, float, float, float]


@dataclass
class AnswerPolicy:
    """How answers are made from the decoder's candidates."""

    snap: float | None = SNAP_AGREEMENT
    """The ``min_agreement`` with which a mask is snapped to the box of the OCR words it covers (None: never)."""
    calibration: object | None = None
    """A :class:`~docjepa.inference.calibration.Calibration` (the model's own, beside its weights), or None."""
    word_answers: bool = True
    """When the chosen mask covers no word's centre, answer with the word decoder's span."""
    click_rules: bool = True
    """Make answers agree with the clicks in the prompt (:func:`apply_clicks`; False: the model's own answer)."""
    answer_path: str = "auto"
    """``mask``, ``words`` or ``auto`` (see :data:`~docjepa.inference.answer_paths.ANSWER_PATHS`)."""
    span_logit: float | None = None
    """The word decoder's logit above which a word joins a word span (:func:`word_span`); None: the calibration's
    ``span_logit`` (chosen for the model by ``docjepa calibrate``), else :data:`WORD_LOGIT`."""
    line_logit: float | None = None
    """The logit above which a word joins a word span across a line break (:func:`word_span`); None: the
    calibration's ``line_logit``, else no bar beyond the span threshold."""
    line_gap: float | None = None
    """How far apart, in word heights, two lines of a word span may stand when a word clears ``far_logit``
    (:func:`word_span`); None: the calibration's ``line_gap``, else :data:`~docjepa.data.touching.LINE_GAP`."""
    far_logit: float | None = None
    """The logit above which a word joins a word span from a line further than
    :data:`~docjepa.data.touching.LINE_GAP` heights away (:func:`word_span`); None: the calibration's
    ``far_logit``, else no word does."""
    drop_keys: bool = True
    """Leave out of a word span the key printed before its value on the same line ("Due date:" of "Due date:
    24/01/2024"; :func:`without_keys`)."""

    def __post_init__(self) -> None:
        choose_path(self.answer_path, None)  # checks the name

    @property
    def span_threshold(self) -> float:
        """The span threshold in force: :attr:`span_logit`, the calibration's, or :data:`WORD_LOGIT`."""
        if self.span_logit is not None:
            return float(self.span_logit)
        chosen = getattr(self.calibration, "span_logit", None)
        return WORD_LOGIT if chosen is None else float(chosen)

    @property
    def line_threshold(self) -> float | None:
        """The line-break threshold in force: :attr:`line_logit`, else the calibration's (None: none)."""
        chosen = self.line_logit if self.line_logit is not None else getattr(self.calibration, "line_logit", None)
        return None if chosen is None else float(chosen)

    @property
    def line_spacing(self) -> float:
        """The line gap in force: :attr:`line_gap`, the calibration's, or :data:`~docjepa.data.touching.LINE_GAP`."""
        chosen = self.line_gap if self.line_gap is not None else getattr(self.calibration, "line_gap", None)
        return LINE_GAP if chosen is None else float(chosen)

    @property
    def far_threshold(self) -> float | None:
        """The bar for a word on a line further than LINE_GAP: :attr:`far_logit`, else the calibration's (None:
        none joins)."""
        chosen = self.far_logit if self.far_logit is not None else getattr(self.calibration, "far_logit", None)
        return None if chosen is None else float(chosen)

    def read(self, encoded: EncodedPage, decoded: Decoded) -> Reading:
        """One decoder output on one encoded page, read under this policy."""
        return Reading(self, encoded, decoded)


@dataclass(frozen=True)
class Answer:
    """The answer to one prompt on one page."""

    best: int
    """The candidate the answer comes from (:func:`choose_mask`)."""
    mask: np.ndarray | None
    """(H, W) bool at the page's resolution, empty when the model has no answer (None: not asked for)."""
    lines: list[Box] | None
    """The answer's words as page-pixel boxes: one around a snapped mask or a word span, one per block of words
    where clicks edited it (None: the mask as the decoder drew it)."""
    box: Box | None
    """The answer's box in page pixels: around its lines, or around the drawn mask (None: no answer)."""
    path: str
    """``words`` (the word decoder's span) or ``mask`` (candidate ``best``, snapped)."""
    words: list[int]
    """The OCR words the answer covers, in reading order: those inside its lines (as they are drawn, 2 px
    around), or whose centre lies under the drawn mask in the decoder's frame."""
    text: str
    """Those words' text, joined by spaces ("" when it covers none)."""
    confidence: np.ndarray | None
    """(N,) the IoU each candidate can be expected to reach (None: the model is not calibrated)."""
    expected_iou: float | None
    """The IoU the answer can be expected to reach: its candidate's, or for a word answer the word decoder's
    confidence through the calibration's map for word answers, where it has one (None: not calibrated)."""
    known: bool | None
    """Whether ``expected_iou`` reaches the calibration's threshold (an empty answer is never known)."""
    words_confidence: float | None
    """The probability the word decoder gives its most likely word (None: the model has no word decoder)."""


class Reading:
    """One decoder output (:class:`Decoded`) on one encoded page under an :class:`AnswerPolicy`; every quantity is
    computed when first asked and kept for the other forms of the same answer."""

    def __init__(self, policy: AnswerPolicy, encoded: EncodedPage, decoded: Decoded) -> None:
        self.policy, self.encoded, self.decoded = policy, encoded, decoded

    @cached_property
    def region(self) -> np.ndarray:
        """The page's part of the square frame (the letterbox padding is never part of an answer)."""
        return self.encoded.frame.region()

    @cached_property
    def chosen(self) -> int:
        """The candidate :func:`choose_mask` picks."""
        return choose_mask(self.decoded.logits, self.decoded.scores, self.region)

    @cached_property
    def word_logits(self) -> torch.Tensor | None:
        """(words,) each OCR word's answer logit (None: the model has no word decoder)."""
        if self.decoded.token_logits is None:
            return None
        return word_logits(self.decoded.token_logits, self.encoded.word_index, len(self.encoded.page.words))

    @cached_property
    def words_confidence(self) -> float | None:
        """The probability the word decoder gives its most likely word (None: no word decoder)."""
        return None if self.word_logits is None else span_confidence(self.word_logits)

    @cached_property
    def path_features(self) -> np.ndarray | None:
        """The features of the two answers from which the calibration's path model estimates whether the word span
        is the better one (:func:`path_features`; None: no word decoder)."""
        if self.word_logits is None:
            return None
        span, span_lines = self.word_answer
        mask, lines = self._model_answer(self.chosen, "mask")
        page, frame = self.encoded.page, self.encoded.frame.frame
        mask_words = _answer_words(page, mask, lines, frame)
        word_probs = torch.sigmoid(self.word_logits.float()).cpu().numpy()
        pixel_probs = torch.sigmoid(self.decoded.logits[self.chosen].float()).cpu().numpy()
        return path_features(
            self.words_confidence or 0.0,
            mask_iou(span, mask),
            len(_answer_words(page, span, span_lines, frame)),
            len(mask_words),
            float(self.decoded.scores[self.chosen]),
            len(page.words),
            float(word_probs[mask_words].mean()) if mask_words else 0.0,
            float(pixel_probs[span].mean()) if span.any() else 0.0,
        )

    @cached_property
    def path_score(self) -> float | None:
        """What ``auto`` compares with the calibration's ``words_threshold``: its path model's estimate that the
        word span is the better answer, or without a path model the word decoder's confidence (None: no word
        decoder)."""
        model = getattr(self.policy.calibration, "path_model", None)
        if self.word_logits is None or model is None:
            return self.words_confidence
        return float(model(self.path_features))

    def path(self, path: str | None = None) -> str:
        """``words`` or ``mask``: how the question is answered under ``path`` (default: the policy's)."""
        path = path or self.policy.answer_path
        threshold = getattr(self.policy.calibration, "words_threshold", None)
        score = self.path_score if path == "auto" and threshold is not None else None
        return choose_path(path, self.word_logits, threshold, score)

    @cached_property
    def word_answer(self) -> tuple[np.ndarray, list[Box] | None]:
        """The word span (:func:`word_span`) in the square frame (M, M) bool, and the one page-pixel box around its
        words (a block of several lines is one region, as a snapped mask is; None, with an empty mask: no word
        logits, or no word has one)."""
        enc, size = self.encoded, self.decoded.logits.shape[-1]
        span = (
            []
            if self.word_logits is None
            else word_span(
                self.word_logits,
                enc.page,
                self.policy.span_threshold,
                self.policy.line_threshold,
                self.policy.line_spacing,
                self.policy.far_threshold,
            )
        )
        if self.policy.drop_keys:
            span = without_keys(span, enc.page)
        if not span:
            return np.zeros((size, size), dtype=bool), None
        lines = [union_box([enc.page.words[i].box for i in span])]
        return boxes_mask(lines, enc.page, enc.frame.frame, size), lines

    def answer_lines(self, best: int | None = None, path: str | None = None) -> tuple[np.ndarray, list[Box] | None]:
        """The answer in the square frame (M, M) bool, and its words as page-pixel boxes (see :attr:`Answer.lines`;
        None: the mask was kept as the decoder drew it).

        When ``path`` says the question is answered by words and ``best`` is None or the chosen candidate, the
        answer is the word span. Otherwise candidate ``best`` (default: the chosen one), snapped to the OCR words
        it covers (:func:`snap_to_words`). When the chosen candidate covers no word's centre (a speck beside a page
        number, a blob between two lines; with clicks: whenever it is not snapped) and the word decoder has logits,
        the answer is the word span: a few words are too small for the decoder's mask pixels,
        not for its per-token logits. When the chosen candidate covers the whole page (:data:`FULL_PAGE`; chosen
        only when every candidate does), the model has no answer and the mask is empty. With points in the prompt
        (a person's clicks), the answer is then made to agree with them (:func:`apply_clicks`)."""
        mask, lines = self._model_answer(best, path)
        clicks = self.decoded.clicks
        if clicks is None or not self.policy.click_rules:
            return mask, lines
        return apply_clicks(mask, lines, self.encoded.page, self.encoded.frame.frame, *clicks)

    def answer_mask(self, best: int | None = None, path: str | None = None) -> tuple[np.ndarray, Box | None]:
        """The answer in the square frame (M, M) bool, and the box around its words in page pixels (None: the mask
        as the decoder drew it); see :meth:`answer_lines`."""
        mask, lines = self.answer_lines(best, path)
        return mask, (union_box(lines) if lines else None)

    def _model_answer(self, best: int | None, path: str | None) -> tuple[np.ndarray, list[Box] | None]:
        enc, logits, clicks = self.encoded, self.decoded.logits, self.decoded.clicks
        if best in (None, self.chosen) and clicks is None and self.path(path) == "words":
            mask, lines = self.word_answer
            if lines:
                return mask, lines
        best = self.chosen if best is None else best
        if coverage(logits[best : best + 1], self.region)[0] >= FULL_PAGE:  # every candidate is the page: no answer
            return np.zeros_like(self.region), None
        mask = (logits[best] > 0).cpu().numpy() & self.region
        box = None
        if self.policy.snap is not None:
            mask, box = snap_to_words(mask, enc.page, enc.frame.frame, self.policy.snap)
        if box is not None:
            return mask, [box]
        # A region over words stays a region when the question stands alone; with clicks, the click rules work on
        # words (a click on blank page stretches a word answer there), so any mask left as drawn gives way to them.
        over_words = clicks is None and words_box(mask, enc.page, enc.frame.frame) is not None
        if self.policy.word_answers and best == self.chosen and self.word_logits is not None and not over_words:
            words, lines = self.word_answer
            if lines:
                return words, lines
        return mask, None

    def page_answer(self, best: int, masks: np.ndarray | None = None) -> tuple[np.ndarray, list[Box] | None]:
        """:meth:`answer_lines` at the page's resolution (H, W): its words' line boxes drawn there, or else candidate
        ``best`` at the page's resolution (``masks``: the candidates at page resolution, when already made)."""
        return self._at_page(best, *self.answer_lines(best), masks)

    def _at_page(self, best: int, small: np.ndarray, lines: list[Box] | None, masks: np.ndarray | None):
        page = self.encoded.page
        if lines:  # the words' boxes, drawn at the page's resolution as answers are drawn
            return boxes_mask(lines, page, 1.0, max(page.height, page.width))[: page.height, : page.width], lines
        if not small.any():
            return np.zeros((page.height, page.width), dtype=bool), None
        return (self.encoded.frame.to_page(small) if masks is None else masks[best]), None

    def answer(self, masks: np.ndarray | None = None, page_mask: bool = True) -> Answer:
        """The answer (from the chosen candidate) with its words, text, box and confidence; ``page_mask``: also at
        the page's resolution (``masks``: the candidates there, when already made), which a table of answers does
        not need."""
        best, enc, cal = self.chosen, self.encoded, self.policy.calibration
        small, lines = self.answer_lines(best)
        frame = enc.frame.frame
        words = _answer_words(enc.page, small, lines, frame)
        box = union_box(lines) if lines else _frame_box(small, frame)
        mask = self._at_page(best, small, lines, masks)[0] if page_mask else None
        raw = self.decoded.scores.cpu().numpy()
        conf = np.asarray(cal(raw), dtype=np.float32) if cal is not None else None
        path = self.path() if self.decoded.clicks is None and lines else "mask"
        expected = known = None
        if conf is not None:
            expected = float(conf[best])
            if path == "words" and self.words_confidence is not None and cal.words(self.words_confidence) is not None:
                expected = float(cal.words(self.words_confidence))
            known = bool(box is not None and expected >= cal.threshold)
        return Answer(
            best=best,
            mask=mask,
            lines=lines,
            box=box,
            path=path,
            words=words,
            text=" ".join(enc.page.words[i].text for i in words),
            confidence=conf,
            expected_iou=expected,
            known=known,
            words_confidence=self.words_confidence,
        )


def trust(expected_iou: float | None, score: float) -> float | None:
    """How far to trust an answer, in [0, 1]: the IoU it can be expected to reach (:attr:`Answer.expected_iou`), or,
    for a model without calibration, its candidate's IoU-head ``score``, clipped; None when that is not finite."""
    if expected_iou is not None:
        return float(expected_iou)
    return min(max(float(score), 0.0), 1.0) if np.isfinite(score) else None


MARGIN = 2.0
"""Page pixels by which an answer's line boxes are grown when drawn (as the generator pads its answer boxes)."""


def _words_in(page, lines: list[Box]) -> list[int]:
    """The words whose centre lies inside one of the line boxes grown by :data:`MARGIN`, in reading order."""
    out = []
    for i, w in enumerate(page.words):
        cx, cy = (w.box[0] + w.box[2]) / 2, (w.box[1] + w.box[3]) / 2
        if any(b[0] - MARGIN <= cx <= b[2] + MARGIN and b[1] - MARGIN <= cy <= b[3] + MARGIN for b in lines):
            out.append(i)
    return out


def _answer_words(page, small: np.ndarray, lines: list[Box] | None, frame: float) -> list[int]:
    """The words an answer covers (:attr:`Answer.words`): those inside its lines, or without lines those whose
    centre lies under its mask in the decoder's frame."""
    if lines:
        return _words_in(page, lines)
    return words_under(page.word_boxes(), small, frame) if small.any() else []


def _frame_box(small: np.ndarray, frame: float) -> Box | None:
    """The page-pixel box of a mask in the decoder's frame (None: empty)."""
    ys, xs = np.nonzero(small)
    if not len(xs):
        return None
    return (xs.min() / frame, ys.min() / frame, (xs.max() + 1) / frame, (ys.max() + 1) / frame)
