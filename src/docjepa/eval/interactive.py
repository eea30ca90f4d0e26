"""Answers corrected by clicks: the IoU after 1, 2, 3 … simulated clicks (SAM's "IoU against clicks" curve).

A simulated person looks at the current answer and clicks once where it is most wrong, as SAM's and RITM's
evaluations do: in the larger of the missed part (a positive click) and the wrongly marked part (a negative
click), at the pixel farthest from that region's edge (the one nearest its middle when several are: in a
line of text two or three pixels tall, most are). The model answers again from the cached page encoding
with every click so far as point prompts and its current answer as the mask prompt; the question stays. Click 0 is
the question alone, scored exactly as :func:`docjepa.eval.evaluate.evaluate` scores it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import ndimage
from tqdm.auto import tqdm

from ..data.frame import PageFrame
from ..data.record import Page, words_under
from ..data.shards import DocumentDataset
from ..data.split import SplitConfig
from ..inference.clicks import boxes_mask, word_blocks
from .evaluate import answer_masks, questions_by_page
from .scores import Scores, best_answer, iou_parts

CLICKS = (0, 1, 2, 3, 5)
"""Where the curve is read: the question alone, then after this many clicks."""


def next_click(pred: np.ndarray, truth: np.ndarray, region: np.ndarray | None = None) -> tuple[int, int, int] | None:
    """(y, x, label) in mask pixels of the click a person makes on ``pred`` to reach ``truth`` (both (M, M) bool;
    ``region``: where the page lies): label 1 inside the larger missed part, 0 inside the larger wrongly marked
    part, at its pixel farthest from the part's edge (of several, the one nearest the part's centre of mass). None
    when there is nothing to fix."""
    region = np.ones_like(truth, dtype=bool) if region is None else region
    missed, wrong = truth & ~pred & region, pred & ~truth & region
    best = None
    for error, label in ((missed, 1), (wrong, 0)):
        if not error.any():
            continue
        parts, n = ndimage.label(error)
        sizes = ndimage.sum(error, parts, range(1, n + 1))
        part = parts == (1 + int(np.argmax(sizes)))
        if best is None or part.sum() > best[0].sum():
            best = (part, label)
    if best is None:
        return None
    part, label = best
    depth = ndimage.distance_transform_edt(np.pad(part, 1))[1:-1, 1:-1]
    ys, xs = np.nonzero(depth == depth.max())  # a line of text is 2 or 3 pixels tall: many pixels are deepest
    cy, cx = ndimage.center_of_mass(part)
    k = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    return int(ys[k]), int(xs[k]), label


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter, union = iou_parts(a, b)
    return inter / union if union else 1.0


def click_curve(
    predictor,
    roots: list[Path],
    split: SplitConfig,
    part: str = "heldout",
    limit: int | None = None,
    clicks: tuple[int, ...] = CLICKS,
    progress: bool = True,
) -> dict:
    """mIoU (and gIoU, per kind) after each number of ``clicks`` on the ``part`` questions of ``roots``; the
    answer after k clicks is the predictor's (its chosen candidate, snapped to words, else the word decoder's
    words) given the question, the k clicks and the answer after k − 1 clicks."""
    pairs, by_page = questions_by_page(roots, split, part, limit)
    pages = DocumentDataset(list(roots))
    scores = {k: Scores() for k in clicks}
    bar = tqdm(total=len(pairs), desc=f"clicks ({part})", disable=not progress, dynamic_ncols=True)
    for p, questions in by_page.items():
        page = pages[p]
        predictor.set_page(page)
        for q in questions:
            question = page.questions[q]
            points: list[tuple[float, float]] = []
            labels: list[int] = []
            answer = None
            for k in range(max(clicks) + 1):
                decoded = predictor.decode(
                    question.text, points=points or None, point_labels=labels or None, mask=answer
                )
                place = predictor.encoded.frame
                region = place.region()
                answer, _ = predictor.read(decoded).answer_mask()
                truths = answer_masks(page, q, place.frame, place.mask_size)
                inter, union = best_answer(answer, truths)
                if k in scores:
                    scores[k].add(question.kind, inter, union, question.template)
                truth = max(truths, key=lambda t: _iou(answer, t))  # the valid answer the person is heading for
                click = next_click(answer, truth, region)
                if click is None:  # perfect: later clicks change nothing
                    for later in (c for c in clicks if c > k):
                        scores[later].add(question.kind, inter, union, question.template)
                    break
                y, x, label = click
                points.append(place.to_page_point(y, x))
                labels.append(label)
            bar.update(1)
    bar.close()
    out = {"split": part, "questions": len(pairs), "clicks": list(clicks), "curve": {}}
    for k in clicks:
        summary = scores[k].summary()
        summary.pop("per_template", None)
        out["curve"][str(k)] = summary
    return out


def word_ceiling(
    roots: list[Path], split: SplitConfig, mask_size: int, part: str = "heldout", limit: int | None = None
) -> dict:
    """The best an answer made of whole OCR words can score: mIoU of each question's true answer against its own
    words (those whose centre it covers) drawn as the predictor draws a word answer (:func:`word_blocks`), at the
    decoder's resolution (``mask_size``). Where an answer is smaller than a mask pixel, or not the words' boxes (a
    form field, a figure), clicks on words cannot reach it."""
    pairs, by_page = questions_by_page(roots, split, part, limit)
    pages = DocumentDataset(list(roots))
    size = mask_size
    ious = []
    for p, questions in by_page.items():
        page = pages[p]
        frame = PageFrame.of(page, size, size).frame  # page pixels → mask pixels, as set_page places the page
        ious += [question_ceiling(page, q, frame, size) for q in questions]
    return {"split": part, "questions": len(pairs), "mIoU": float(np.mean(ious))}


def question_ceiling(page: Page, question: int, frame: float, size: int) -> float:
    """The best IoU an answer of whole OCR words reaches on one question: each true answer's own words (those whose
    centre it covers) drawn as the predictor draws a word answer, against that answer, at ``size`` mask pixels
    (page pixels × ``frame``); the best over the question's answers."""
    best = 0.0
    for truth in answer_masks(page, question, frame, size):
        words = words_under(page.word_boxes(), truth, frame)
        drawn = boxes_mask(word_blocks(page, words), page, frame, size) if words else np.zeros_like(truth)
        best = max(best, _iou(drawn, truth))
    return best
