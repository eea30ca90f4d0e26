"""Clicks on an answer made of words: where a click lands, how words are drawn, and the click rules."""

import numpy as np
import pytest

from docjepa.data.record import Page, Word
from docjepa.inference.clicks import apply_clicks, boxes_mask, clicked_word, stretch_to, tighten_at, word_blocks


def _page(words: list[tuple[str, tuple]]) -> list[Word]:
    return [Word(t, b) for t, b in words]


def test_clicks_land_on_words_and_decide_them():
    words = _page(
        [
            ("Total", (10, 40, 50, 52)),
            ("due:", (55, 40, 80, 52)),
            ("1,234.56", (120, 40, 170, 52)),
            ("EUR", (120, 56, 150, 68)),  # the line under the amount, 4 px below it
            ("page", (10, 100, 40, 110)),
        ]
    )
    page = Page("x", 0, 200, 120, b"", words, "t")
    assert clicked_word(page, (30, 46)) == 0  # inside "Total"
    assert clicked_word(page, (52, 46)) in (0, 1)  # between two words: the nearer within reach
    assert clicked_word(page, (130, 54)) in (2, 3)  # the gap between two lines
    assert clicked_word(page, (100, 80)) is None  # white space
    # Lines close together and overlapping are one block; a far line is its own.
    assert word_blocks(page, [2, 3]) == [(120, 40, 170, 68)]
    assert word_blocks(page, [2, 4]) == [(120, 40, 170, 52), (10, 100, 40, 110)]
    frame = 0.5
    size = 100

    def drawn(ids):
        return boxes_mask(word_blocks(page, ids), page, frame, size)

    answer = drawn([0, 1])
    lines = word_blocks(page, [0, 1])
    # A positive click on a missed word adds it; a negative one on a chosen word removes it.
    got, blocks = apply_clicks(answer, lines, page, frame, [(140, 62)], [1])
    assert blocks == word_blocks(page, [0, 1, 3]) and np.array_equal(got, drawn([0, 1, 3]))
    got, blocks = apply_clicks(answer, lines, page, frame, [(20, 45)], [0])
    assert blocks == [(55, 40, 80, 52)] and np.array_equal(got, drawn([1]))
    # A word clicked off a line between two chosen words splits the line: the drawn answer leaves it out.
    got, blocks = apply_clicks(drawn([0, 1, 2]), word_blocks(page, [0, 1, 2]), page, frame, [(65, 45)], [0])
    assert blocks == [(10, 40, 50, 52), (120, 40, 170, 52)] and not got[23, 33]
    # The later click on a word decides; clicks the answer agrees with, or on no word, change nothing.
    got, blocks = apply_clicks(answer, lines, page, frame, [(20, 45), (20, 45)], [0, 1])
    assert blocks is lines and got is answer
    got, blocks = apply_clicks(answer, lines, page, frame, [(100, 80)], [0])
    assert blocks is lines and got is answer
    # Removing every word leaves no answer.
    got, blocks = apply_clicks(answer, lines, page, frame, [(20, 45), (60, 45)], [0, 0])
    assert blocks is None and not got.any()
    # A drawn mask (not words) gains and loses the clicked words' boxes, and stays a drawn mask.
    region = np.zeros((size, size), dtype=bool)
    region[15:35, 55:90] = True  # around "1,234.56" and "EUR"
    got, blocks = apply_clicks(region, None, page, frame, [(20, 45), (130, 62)], [1, 0])
    assert blocks is None
    assert got[23, 15] and not got[31, 67] and got[20, 80]
    with pytest.raises(ValueError):
        apply_clicks(answer, lines, page, frame, [(20, 45)], [1, 0])
    # Correcting the answer the person saw: the model's new words elsewhere do not appear; on the line of a
    # positive click they may.
    seen = drawn([0, 1])
    moved = drawn([1, 4])  # the model's new answer dropped "Total" and added "page", far below
    got, blocks = apply_clicks(moved, word_blocks(page, [1, 4]), page, frame, [(30, 46)], [1], previous=seen)
    assert blocks == word_blocks(page, [0, 1])
    grown = drawn([0, 1, 2])  # after a click on "due:", the model adds "1,234.56" on the same line
    got, blocks = apply_clicks(grown, word_blocks(page, [0, 1, 2]), page, frame, [(60, 45)], [1], previous=drawn([0]))
    assert blocks == word_blocks(page, [0, 1, 2])
    got, blocks = apply_clicks(moved, word_blocks(page, [1, 4]), page, frame, [(20, 45)], [0], previous=seen)
    assert blocks == word_blocks(page, [1])  # a negative click only takes away


def test_clicks_on_no_word_stretch_or_tighten_the_answer():
    words = _page(
        [
            ("Total", (10, 40, 50, 52)),
            ("1,234.56", (150, 40, 190, 52)),
            ("EUR", (150, 56, 180, 68)),
            ("Notes", (10, 80, 40, 92)),
        ]
    )
    page = Page("x", 0, 200, 120, b"", words, "t")
    frame, size = 0.5, 100
    total = [(10, 40, 50, 52)]
    answer = boxes_mask(total, page, frame, size)
    # A positive click in the space after "Total", on its line: the answer stretches to it.
    got, blocks = apply_clicks(answer, total, page, frame, [(100, 46)], [1])
    assert blocks == [(10, 40, 100, 52)] and got[23, 45]
    # Beside no block's line or column: a small block one text line (12 px) a side appears there.
    assert stretch_to(total, (100, 100), 12.0) == [(10, 40, 50, 52), (94, 94, 106, 106)]
    assert stretch_to([], (100, 100), 12.0) == [(94, 94, 106, 106)]
    # In the column of a block: it stretches down.
    assert stretch_to(total, (30, 90), 12.0) == [(10, 40, 50, 90)]
    # A negative click in the white space of a loose block draws it again around its words, split at the click.
    loose = [(10, 40, 190, 92)]  # "Total" … "EUR" and "Notes" as one box
    got, blocks = apply_clicks(boxes_mask(loose, page, frame, size), loose, page, frame, [(100, 46)], [0])
    assert blocks == [(10, 40, 50, 52), (150, 40, 190, 52), (150, 56, 180, 68), (10, 80, 40, 92)]
    assert not got[23, 50]
    assert tighten_at([(60, 80, 100, 100)], (70, 90), page) == []  # a block with no word in it goes
    assert tighten_at(total, (120, 110), page) == total  # a click outside every block changes nothing
    # A negative click beside a word but outside its box is on no word: it tightens and keeps the word.
    got, blocks = apply_clicks(answer, total, page, frame, [(52, 46)], [0])
    assert blocks is total and got is answer
