import math

import numpy as np
import pytest
import torch

from docjepa.data.record import Page, Word
from docjepa.inference.word_answer import (
    ANSWER_PATHS,
    choose_path,
    keyed,
    span_confidence,
    touching,
    without_keys,
    word_span,
    word_spans,
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


def _boxes(page: Page, *words: int) -> np.ndarray:
    return np.array([page.words[i].box for i in words], dtype=np.float64)


def test_touching_joins_a_line_and_the_lines_above_and_below_but_not_columns_or_far_words():
    page = _page()
    near = touching(_boxes(page, *range(7)))
    assert (near == near.T).all()
    assert near[0, 1] and near[1, 2]  # one line, small gaps
    assert near[0, 3] and near[0, 4] and near[1, 4]  # the line below, where its words overlap the line's
    assert not near[2, 3] and not near[2, 4]  # the line below, but further left: no overlap
    assert not near[4, 5] and not near[2, 5]  # another column: 10 heights away on the same line
    assert not near[5, 6] and not near[4, 6]  # far below
    assert not near[2, 6]
    # A line further down than one line height is not the next line; a wider LINE_GAP reaches it.
    lower = np.array([[10, 10, 60, 22], [10, 40, 60, 52]], dtype=np.float64)
    assert not touching(lower)[0, 1] and touching(lower, line_gap=1.5)[0, 1]
    assert not touching(np.array([[0, 0, 10, 12], [50, 0, 60, 12]], dtype=np.float64))[0, 1]  # 40 px: > 3 heights


def test_word_span_grows_through_touching_likely_words_and_never_scatters():
    page = _page()
    logits = torch.tensor([-5.0, 1.0, 4.0, -4.0, -3.5, 3.0, 3.5])
    # The best word (2) and its likely neighbour (1); 0, 3 and 4 are ruled out; 5 and 6 are likely but lie
    # elsewhere on the page.
    assert word_span(logits, page) == [1, 2]
    assert word_span(logits, page, threshold=1.5) == [2]
    # A word only reached through another likely word: 0 through 1, then 3 under 0.
    assert word_span(torch.tensor([-1.0, 0.5, 5.0, -2.0, -9.0, -1.0, -1.0]), page) == [0, 1, 2, 3]
    # Two lines of one column are one block, whatever the page's reading order puts between them.
    assert word_span(torch.tensor([2.0, 2.0, 5.0, 2.0, 2.0, -5.0, -5.0]), page) == [0, 1, 2, 3, 4]
    # Nothing above the threshold: the single best word, wherever it is.
    assert word_span(torch.tensor([-9.0, -8.0, -7.0, -8.0, -8.0, -8.0, -3.5]), page) == [6]
    assert word_span(torch.full((7,), float("-inf")), page) == [] and word_span(torch.empty(0), page) == []


def test_an_address_block_of_short_words_reads_whole_with_further_lines_above_their_bar():
    """OCR boxes hug the ink: the lines of an address of short words ("rue", "75183") stand further apart than
    their boxes are high, so with the nearest lines alone the span stops at the name; further lines join above
    their own bar, which leaves out a value marked less, and never reach the line standing apart below."""
    words = [
        Word("Salmon", (55, 50, 116, 62)),  # 0: the name, 12 px high
        Word("SARL", (120, 50, 160, 62)),  # 1
        Word("rue", (55, 77, 75, 84)),  # 2: 15 px under the name, 1.25 of its height
        Word("Camus", (78, 77, 110, 84)),  # 3
        Word("75183", (55, 92, 83, 99)),  # 4: 8 px under, 1.14 of 7
        Word("Gimenez", (85, 92, 130, 99)),  # 5
        Word("Total:", (55, 130, 90, 137)),  # 6: 31 px under, 4.4 heights
    ]
    page = Page("x", 0, 300, 300, b"", words, "t")
    logits = torch.tensor([6.0, 5.5, 4.0, 4.0, 5.0, 3.0, 5.0])
    assert word_span(logits, page, 0.0, 1.0) == [0, 1]
    assert word_span(logits, page, 0.0, 1.0, line_gap=1.5) == [0, 1]  # a gap without its bar joins nothing
    assert word_span(logits, page, 0.0, 1.0, 1.5, far_threshold=2.0) == [0, 1, 2, 3, 4, 5]
    assert word_span(logits, page, 0.0, 1.0, 2.0, far_threshold=2.0) == [0, 1, 2, 3, 4, 5]
    # Above the bar only: "rue Camus" (4) stays out at 4.5, and the city's line with it, though "75183" clears it.
    assert word_span(logits, page, 0.0, 1.0, 2.0, far_threshold=4.5) == [0, 1]
    # One bar for both tiers where it is the line threshold's: the same as that threshold across a wider gap.
    assert word_span(logits, page, 0.0, 4.5, 2.0, 4.5) == [0, 1]
    rules = [(0.0, 1.0, 1.0, None), (0.0, 1.0, 1.5, 2.0), (-9.0, 1.0, 2.0, 4.5), (0.0, None, 2.0, 3.5)]
    assert word_spans(logits, page, rules) == [word_span(logits, page, *rule) for rule in rules]
    assert word_spans(torch.empty(0), page, rules) == [[]] * 4


def test_a_line_break_needs_the_line_threshold_and_a_line_the_span_threshold():
    page = _page()
    # The answer is word 2; its line's words 0 and 1 are likely, and so, less, are 3 and 4 on the line below.
    logits = torch.tensor([0.5, 1.0, 5.0, 0.5, 0.5, -5.0, -5.0])
    assert word_span(logits, page) == [0, 1, 2, 3, 4]
    assert word_span(logits, page, line_threshold=None) == word_span(logits, page, line_threshold=-3.0)
    assert word_span(logits, page, line_threshold=2.0) == [0, 1, 2]  # the line below stays out
    # A word of the line below that clears the bar joins, and brings its line's likely words with it.
    assert word_span(torch.tensor([0.5, 1.0, 5.0, 0.5, 3.0, -5.0, -5.0]), page, line_threshold=2.0) == [0, 1, 2, 3, 4]
    # On one line the low bar stays: word 1 (logit 1) joins though it is under the line threshold.
    assert word_span(torch.tensor([-5.0, 1.0, 5.0, -5.0, -5.0, -5.0, -5.0]), page, line_threshold=4.0) == [1, 2]


def _stacked(colon: str = ":") -> Page:
    """A date keyed over a due date, an address keyed on its first line, and a note in another column."""
    words = [
        (f"Date{colon}", (10, 10, 45, 22)),  # 0
        ("6", (50, 10, 58, 22)),  # 1
        ("Jul", (62, 10, 85, 22)),  # 2
        ("2024", (90, 10, 120, 22)),  # 3
        ("Due", (10, 26, 35, 38)),  # 4: the next line, 4 px below
        (f"date{colon}", (38, 26, 70, 38)),  # 5
        ("5", (75, 26, 83, 38)),  # 6: under "Jul"
        ("Aug", (87, 26, 110, 38)),  # 7
        ("2024", (114, 26, 144, 38)),  # 8
        (f"Address{colon}", (10, 80, 60, 92)),  # 9
        ("12", (65, 80, 80, 92)),  # 10
        ("Elm", (84, 80, 110, 92)),  # 11
        ("Paris", (65, 96, 100, 108)),  # 12: the address's second line, under "12"
        ("Notes", (300, 10, 340, 22)),  # 13: another column of line 1
    ]
    return Page("z", 0, 400, 120, b"", [Word(t, b) for t, b in words], "t")


def test_two_lines_each_opened_by_a_key_of_its_own_are_two_values():
    page = _stacked()
    opened = [1, 2, 3, 6, 7, 8, 10, 11]  # not the keys, nor "Paris" under the address's key, nor the other column
    assert np.flatnonzero(keyed(page, np.arange(14))).tolist() == opened
    assert keyed(page, np.array([], dtype=int)).tolist() == []
    logits = torch.full((14,), 5.0)
    logits[[0, 4, 5, 9, 13]] = -5.0
    date, due = logits.clone(), logits.clone()
    date[1], due[6] = 6.0, 6.0
    assert word_span(date, page) == [1, 2, 3]  # "6 Jul 2024", not the due date stacked under it
    assert word_span(due, page) == [6, 7, 8]
    address = logits.clone()
    address[10] = 6.0
    assert word_span(address, page) == [10, 11, 12]  # a key's value on two lines stays one value
    # Without the keys' colons nothing tells the two dates apart: the span takes both, as touching words.
    assert word_span(date, _stacked(colon="")) == [1, 2, 3, 6, 7, 8]
    rules = [(0.0, None, 1.0, None), (0.0, 1.0, 2.0, 2.0)]
    assert word_spans(date, page, rules) == [[1, 2, 3]] * 2


def test_a_keyed_value_runs_from_its_key_to_its_most_likely_word():
    """The decoder marks the last word of "5 Aug 2024" firmly and the first less: the words between the key and the
    most likely word join when the decoder does not rule them out, even below the span's own bar."""
    page = _stacked()
    logits = torch.full((14,), -8.0)
    logits[[6, 7, 8]] = torch.tensor([-2.0, -0.5, 6.0])  # "5" under the bar 0, "Aug" too; "2024" firm
    assert word_span(logits, page, threshold=0.0) == [6, 7, 8]
    assert word_span(logits, page, threshold=-1.0) == [6, 7, 8]
    # Only up to the most likely word: a word after it still needs the bar.
    after = logits.clone()
    after[[6, 7, 8]] = torch.tensor([-2.0, 6.0, -0.5])
    assert word_span(after, page, threshold=0.0) == [6, 7]
    # A word the decoder rules out (below WORD_LOGIT and the bar) between them: no fill at all.
    out = logits.clone()
    out[6] = -4.0
    assert word_span(out, page, threshold=0.0) == [8]
    assert word_span(out, page, threshold=-5.0) == [6, 7, 8]  # under a lower bar it joins as usual
    # No key on the line: nothing fills; the span's bar alone decides.
    assert word_span(logits, _stacked(colon=""), threshold=0.0) == [8]
    rules = [(0.0, None, 1.0, None), (3.0, 4.0, 2.0, 5.0)]
    assert word_spans(logits, page, rules) == [[6, 7, 8]] * 2


def test_a_pages_lines_are_walked_once_for_all_its_questions(monkeypatch):
    """Evaluation asks many questions of one page under many span rules: every word's walk to its key is made once
    per page, and a page whose words change (or another page) is walked anew, with the same answers as fresh."""
    from docjepa.inference import word_answer

    walks = []
    walk = word_answer._Lines.walk_left
    monkeypatch.setattr(word_answer._Lines, "walk_left", lambda self, j: walks.append(j) or walk(self, j))
    page = _stacked()
    logits = torch.full((14,), 5.0)
    logits[[0, 4, 5, 9, 13]] = -5.0
    logits[1] = 6.0
    first = word_span(logits, page)
    assert len(walks) == 14 + 1  # every word's walk, then the most likely word's for its key's fill
    for t in (-3.0, 0.0, 2.0):
        assert word_span(logits, page, threshold=t) == first
    assert keyed(page, np.arange(14)).tolist() == keyed(_stacked(), np.arange(14)).tolist()
    assert len(walks) == 15 + 3 + 14  # the same page: its fill's walk alone; the fresh copy: all its words
    count = len(walks)
    page.words = page.words[:9]  # the page's words replaced: its lines are read again
    fresh = Page("y", 0, page.width, page.height, b"", page.words, "t")
    assert word_span(logits[:9], page) == word_span(logits[:9], fresh)
    assert len(walks) > count


def test_a_word_answer_leaves_out_the_key_before_its_value():
    page = _page()
    assert without_keys([0, 1, 2], page) == [2]  # "Invoice number: INV-0042" → the value
    assert without_keys([1, 2, 3, 4], page) == [2, 3, 4]  # the key of its own line only; the line below stays
    assert without_keys([0, 1], page) == [0, 1]  # a key with no value after it is kept whole
    assert without_keys([2, 3, 4], page) == [2, 3, 4] and without_keys([2], page) == [2]  # no key: unchanged
    keyed = [
        ("Name:", (10, 10, 50, 22)),
        ("Street:", (10, 26, 50, 38)),
        ("Elm", (60, 26, 80, 38)),
        ("Road", (85, 26, 110, 38)),
    ]
    both = Page("y", 0, 400, 40, b"", [Word(t, b) for t, b in keyed], "t")
    assert without_keys([0, 1, 2, 3], both) == [0, 2, 3]  # "Name:" has no value on its line: kept


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
