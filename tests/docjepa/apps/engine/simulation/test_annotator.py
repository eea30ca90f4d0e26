"""The scripted annotator that stands in for people in the simulation."""

import numpy as np
import pytest

from docjepa.data.record import Page, Word


def _page(words):
    return Page("d", 0, 400, 300, b"", [Word(t, b) for t, b in words], "t")


def _words(boxes, *ids):
    """The mask of some words' boxes on a 400 × 300 page."""
    m = np.zeros((300, 400), bool)
    for i in ids:
        x0, y0, x1, y1 = boxes[i]
        m[y0:y1, x0:x1] = True
    return m


def test_scripted_annotator_counts_the_edits_the_page_needs():
    from docjepa.apps.engine.simulation.annotator import TimeModel, annotate, word_boxes

    page = _page([("a", (10, 10, 40, 20)), ("b", (50, 10, 80, 20)), ("c", (90, 10, 120, 20)), ("d", (10, 40, 40, 50))])
    boxes = word_boxes(page)

    def words(*ids):
        return _words(boxes, *ids)

    t = TimeModel()
    truth = words(0, 1)
    exact = annotate([truth], boxes, [truth, words(3), words(2)], 0, t)
    assert (exact.edits, exact.accepted, exact.candidate) == (0, True, 0)
    assert exact.seconds == pytest.approx(t.read + t.submit)
    other = annotate([truth], boxes, [words(3), truth, words(2)], 0, t)  # the right one is not pre-selected
    assert (other.edits, other.accepted, other.candidate) == (0, True, 1)
    assert other.seconds == pytest.approx(t.read + t.submit + t.click)
    one_off = annotate([truth], boxes, [words(0), words(3), words(2)], 0, t)
    assert (one_off.edits, one_off.accepted) == (1, False) and one_off.iou == 1.0  # click "b" in
    line = np.zeros((300, 400), bool)
    line[10:20, 10:120] = True  # an answer drawn as one box over a, b, c (gaps included), as the pages' answers are
    wrong = annotate([line], boxes, [words(3), words(3), words(3)], 0, t)
    assert wrong.edits == 2 and wrong.iou == 1.0  # clear, then one box (clicking a, b, c misses the gaps: IoU 0.82)
    assert wrong.seconds == pytest.approx(t.read + t.submit + t.clear + t.box)
    gaps = annotate([words(0, 1, 2)], boxes, [words(3), words(3), words(3)], 0, t)
    assert gaps.edits == 4  # word by word: d out, a b c in (a box would fill the gaps: IoU 0.82 < 0.85)
    manual = annotate([truth], boxes, None, None, t, writes_question=True)
    assert manual.edits == 1 and manual.candidate is None  # one box from an empty page
    assert manual.seconds == pytest.approx(t.read + t.write_question + t.box + t.submit)
    two_ways = annotate([words(3), truth], boxes, [words(0), words(2), words(2)], 0, t)
    assert two_ways.edits == 1  # an ambiguous question: the closest valid answer


def test_clicks_are_used_when_the_model_fixes_the_answer_sooner_than_edits():
    from docjepa.apps.engine.simulation.annotator import TimeModel, annotate, annotate_with_clicks, word_boxes

    page = _page([(c, (10 + 40 * i, 10, 40 + 40 * i, 20)) for i, c in enumerate("abcdef")])
    boxes = word_boxes(page)

    def words(*ids):
        return _words(boxes, *ids)

    t = TimeModel()
    truth, proposal = words(0, 1, 2, 3), words(5)
    seen = []

    def fixes(points, labels, current):  # one click and the model has it
        seen.append((points, labels))
        return [truth, proposal], 0

    plain = annotate([truth], boxes, [proposal], 0, t)
    clicked = annotate_with_clicks([truth], boxes, [proposal], 0, fixes, t)
    assert plain.edits == 5 and clicked.clicks == 1 and clicked.edits == 1 and clicked.iou == 1.0
    assert clicked.seconds == pytest.approx(t.read + t.submit + t.click) and clicked.seconds < plain.seconds
    ((points, labels),) = seen
    assert labels == [1] and truth[int(points[0][1]), int(points[0][0])]  # a positive click inside the missed words

    def useless(points, labels, current):
        return [current], 0

    same = annotate_with_clicks([truth], boxes, [proposal], 0, useless, t, max_clicks=3)
    assert same == plain  # clicks that change nothing are not worth their seconds
    already = annotate_with_clicks([truth], boxes, [truth], 0, fixes, t)
    assert already.clicks == 0 and already.accepted
