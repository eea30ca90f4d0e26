"""Which questions are scored by their text, and the text an answer reads as."""

import numpy as np
import pytest

pytest.importorskip("transformers")

from docjepa.data.record import Answer, Page, Question, Word, box_polygon
from docjepa.eval.evaluate import mask_text, text_truths


def _page() -> Page:
    words = [Word("Contents", (20, 20, 90, 32)), Word("1", (20, 40, 26, 52)), Word("Introduction", (30, 40, 110, 52))]
    words += [Word("2", (20, 60, 26, 72)), Word("Usage", (30, 60, 80, 72)), Word("8", (150, 180, 156, 192))]
    questions = [
        Question("What is the page number?", "page-number", [Answer([box_polygon((149, 181, 157, 190))], "8")]),
        # a contents page: its text names the region, the region holds every line of it
        Question("Where is the table of contents?", "contents", [Answer([box_polygon((15, 15, 115, 75))], "Contents")]),
        Question("Where is the figure?", "layout", [Answer([box_polygon((120, 20, 190, 90))], "")]),
        Question("What is the version?", "version", [Answer([box_polygon((20, 60, 80, 72))], "Usage 2")]),
    ]
    return Page("x", 0, 200, 200, b"", words, "t", questions=questions)


def test_only_answers_whose_region_reads_as_their_text_are_scored_by_text():
    page = _page()
    assert text_truths(page, 0) == ["8"]  # a glyph box tighter than the word's box still holds its centre
    assert text_truths(page, 1) == []  # "Contents" against five words: a region answer, scored by IoU only
    assert text_truths(page, 2) == []  # no text at all
    assert text_truths(page, 3) == []  # "2 Usage" read against "Usage 2": 4 edits in 7, not the same words


def test_mask_text_reads_the_covered_words_in_order():
    page = _page()
    mask = np.zeros((100, 100), bool)  # a square frame at half the page's resolution
    mask[18:38, 8:60] = True  # covers the centres of "1", "Introduction", "2" and "Usage"
    assert mask_text(page, mask, 0.5) == "1 Introduction 2 Usage"
    assert mask_text(page, np.zeros((100, 100), bool), 0.5) == ""
