"""A scripted annotator: stands in for a person at the annotation page, on pages whose true answers are known.

It takes the model's proposal and corrects it the way the page allows (choose a candidate, click words in or
out, clear, drag a box), choosing the fewest edits that reach the true answer, and counts them. With
refinement (:func:`annotate_with_clicks`) it may first click where the answer is most wrong, as SAM's evaluation
does, and let the model answer again, before those edits. "Reached" means
the mask's IoU with the true answer is at least ``accept_iou`` (what a person sees as right: word boxes drawn a
pixel differently are not worth a click). Seconds come from a stated :class:`TimeModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....data.record import Page, words_under
from ....eval.interactive import next_click
from ....inference.mask_choice import mask_iou as iou


@dataclass
class TimeModel:
    """Seconds per action (assumed, not measured: a person's pace at a mouse and a keyboard)."""

    read: float = 4.0
    """Look at the page and the question before acting."""
    write_question: float = 6.0
    """Type a question (assisted stage: the annotator asks)."""
    click: float = 1.5
    """Click a word in or out, or choose another candidate."""
    box: float = 3.0
    """Drag a box."""
    clear: float = 0.7
    """Clear the mask (one key)."""
    submit: float = 0.8
    """Press Enter."""


@dataclass
class Outcome:
    """How a (page, question) was annotated."""

    edits: int
    """Mask edits (word clicks, boxes, clears), as the page counts them."""
    accepted: bool
    """A candidate was submitted as it was proposed."""
    candidate: int | None
    """The candidate started from (None: from an empty mask)."""
    seconds: float
    iou: float
    """IoU of the submitted mask with the true answer."""
    clicks: int = 0
    """Clicks sent to the model before the edits (refinement; each is also counted as an edit)."""


def word_boxes(page: Page) -> list[tuple[int, int, int, int]]:
    return [tuple(round(v) for v in w.box) for w in page.words]


def _paint(mask: np.ndarray, boxes, add: set[int], remove: set[int]) -> np.ndarray:
    out = mask.copy()
    for i in remove:
        x0, y0, x1, y1 = boxes[i]
        out[y0:y1, x0:x1] = False
    for i in add:
        x0, y0, x1, y1 = boxes[i]
        out[y0:y1, x0:x1] = True
    return out


def plans(start: np.ndarray | None, truth: np.ndarray, boxes) -> list[tuple[int, np.ndarray, int, bool]]:
    """Ways to reach ``truth`` from ``start`` (None: an empty mask): (edits, final mask, boxes dragged, cleared)."""
    want = set(words_under(boxes, truth))
    out = []
    empty = np.zeros_like(truth)
    if start is not None and start.any():
        have = set(words_under(boxes, start))
        out.append((len(want ^ have), _paint(start, boxes, want - have, have - want), 0, False))
    clear = 1 if start is not None and start.any() else 0
    out.append((clear + len(want), _paint(empty, boxes, want, set()), 0, bool(clear)))
    ys, xs = np.nonzero(truth)
    if len(ys):
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        boxed = empty.copy()
        boxed[y0:y1, x0:x1] = True
        extra = set(words_under(boxes, boxed)) - want
        out.append((clear + 1 + len(extra), _paint(boxed, boxes, set(), extra), 1, bool(clear)))
    return out


def annotate(
    truths: list[np.ndarray],
    boxes,
    candidates: list[np.ndarray] | None,
    best: int | None,
    time: TimeModel,
    accept_iou: float = 0.85,
    writes_question: bool = False,
) -> Outcome:
    """The fewest edits to any valid answer in ``truths``: from the proposal (``best`` is pre-selected, choosing
    another costs a click; starting over from it costs a clear), or, without a model (``candidates`` None), from an
    empty mask."""
    options = []  # (edits, extra clicks, boxes, cleared, final, candidate, accepted)
    starts = [(k, c) for k, c in enumerate(candidates)] if candidates else [(None, None)]
    for truth in truths:
        for k, cand in starts:
            switch = 1 if k is not None and k != best else 0
            if cand is not None and iou(cand, truth) >= accept_iou:
                options.append((0, switch, 0, False, cand, k, True))
                continue
            for edits, final, n_boxes, cleared in plans(cand, truth, boxes):
                if iou(final, truth) >= accept_iou:
                    options.append((edits, switch, n_boxes, cleared, final, k, False))
    if not options:  # no plan reaches the answer (a shape no word or box gives): brush it, counted as 3 strokes
        truth = truths[0]
        options.append((3 + (1 if candidates else 0), 0, 0, bool(candidates), truth, None, False))
    edits, switch, n_boxes, cleared, final, k, accepted = min(options, key=lambda o: (o[0], o[1]))
    clicks = edits - n_boxes - int(cleared) + switch
    seconds = time.read + (time.write_question if writes_question else 0.0) + time.submit
    seconds += clicks * time.click + n_boxes * time.box + int(cleared) * time.clear
    return Outcome(edits, accepted, k, seconds, max(iou(final, t) for t in truths))


def annotate_with_clicks(
    truths: list[np.ndarray],
    boxes,
    candidates: list[np.ndarray],
    best: int,
    refine,
    time: TimeModel,
    accept_iou: float = 0.85,
    writes_question: bool = False,
    max_clicks: int = 3,
) -> Outcome:
    """:func:`annotate`, with up to ``max_clicks`` refinement clicks first: each at the deepest pixel of the
    largest error of the current answer (:func:`docjepa.eval.interactive.next_click`, positive in a missed part,
    negative in a wrong one), after which ``refine(points, labels, current) -> (candidates, best)`` answers again.
    The annotator takes the cheapest of: no click, 1 click, … ``max_clicks`` clicks, each followed by the fewest
    edits from the model's new answer (a click costs ``time.click`` and counts as an edit)."""
    chosen = annotate(truths, boxes, candidates, best, time, accept_iou, writes_question)
    points: list[tuple[float, float]] = []
    labels: list[int] = []
    current = candidates[best]
    for n in range(1, max_clicks + 1):
        truth = max(truths, key=lambda t: iou(current, t))  # the valid answer the person is heading for
        if iou(current, truth) >= accept_iou:
            break
        click = next_click(current, truth)
        if click is None:
            break
        y, x, label = click
        points.append((x + 0.5, y + 0.5))
        labels.append(label)
        candidates, best = refine(list(points), list(labels), current)
        current = candidates[best]
        after = annotate(truths, boxes, candidates, best, time, accept_iou, writes_question)
        total = Outcome(after.edits + n, False, after.candidate, after.seconds + n * time.click, after.iou, n)
        if total.seconds < chosen.seconds:
            chosen = total
    return chosen
