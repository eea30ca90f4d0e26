import math

import pytest
import torch

from docjepa.data.record import Page, Word
from docjepa.inference.word_answer import (
    ANSWER_PATHS,
    choose_path,
    follows,
    span_confidence,
    word_span,
)


def _page() -> Page:
    """Two columns of text: a heading line, a line under it, and a page number far below."""
    words = [
        Word("Invoice", (10, 10, 60, 22)),  # 0
        Word("number:", (65, 10, 115, 22)),  # 1
        Word("INV-0042", (120, 10, 180, 22)),  # 2
        Word("Due", (10, 26, 35, 38)),  # 3: next line, under word 2's left
        Word("date", (40, 26, 70, 38)),  # 4
        Word("Notes", (300, 10, 340, 22)),  # 5: same height as line 1, far right (another column)
        Word("7", (150, 400, 156, 410)),  # 6: page number
    ]
    return Page("x", 0, 400, 420, b"", words, "t")


def test_follows_reads_lines_and_the_next_line_but_not_columns_or_far_words():
    page = _page()
    assert follows(page, 0, 1) and follows(page, 1, 2)  # one line, small gaps
    assert follows(page, 2, 3)  # the next line starts under the previous one
    assert not follows(page, 4, 5)  # back up to another column
    assert not follows(page, 2, 5)  # same line, 120 px (10 heights) away: another column
    assert not follows(page, 5, 6) and not follows(page, 4, 6)  # far below


def test_word_span_takes_neighbours_while_likely_and_never_scatters():
    page = _page()
    logits = torch.tensor([-3.0, 1.0, 4.0, -2.0, 2.0, 3.0, 3.5])
    # The best word (2) and its likely neighbour (1); word 3 is unlikely, so 4 is not reached; 5 and 6 are likely
    # but lie elsewhere on the page.
    assert word_span(logits, page) == [1, 2]
    assert word_span(logits, page, threshold=1.5) == [2]
    # A whole line and the next one when all are likely.
    assert word_span(torch.tensor([2.0, 2.0, 5.0, 2.0, 2.0, -1.0, -1.0]), page) == [0, 1, 2, 3, 4]
    # Nothing above the threshold: the single best word, wherever it is.
    assert word_span(torch.tensor([-5.0, -4.0, -3.0, -4.0, -4.0, -4.0, -0.5]), page) == [6]
    assert word_span(torch.full((7,), float("-inf")), page) == [] and word_span(torch.empty(0), page) == []


def test_choose_path_and_confidence():
    likely, unlikely = torch.tensor([-1.0, 2.0]), torch.tensor([-3.0, -1.0])
    assert span_confidence(likely) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert span_confidence(torch.full((2,), float("-inf"))) == 0.0
    assert choose_path("auto", likely, 0.5) == "words" and choose_path("auto", unlikely, 0.5) == "mask"
    assert choose_path("auto", unlikely, 0.2) == "words"
    assert choose_path("auto", likely) == "mask"  # no fitted threshold: the mask
    assert choose_path("words", unlikely) == "words" and choose_path("mask", likely) == "mask"
    for path in ANSWER_PATHS:  # no word decoder, or no word with tokens: always the mask
        assert choose_path(path, None) == "mask"
        assert choose_path(path, torch.full((2,), float("-inf"))) == "mask"
    with pytest.raises(ValueError, match="answer path"):
        choose_path("span", likely)
