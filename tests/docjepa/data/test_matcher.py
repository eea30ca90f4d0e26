"""The OCR matcher (the baseline) and the mask prompt drawn from its box."""

import numpy as np
import pytest

pytest.importorskip("transformers")


from docjepa.data.lexical import content_words, word_matches
from docjepa.data.matcher import asks_page_number, baseline_box, quoted
from docjepa.data.prompt import lexical_prior
from docjepa.data.record import Answer, Page, Question, Word, box_polygon
from docjepa.eval.evaluate import answer_masks


def _page(words: list[tuple[str, tuple]]) -> list[Word]:
    return [Word(t, b) for t, b in words]


def test_baseline_finds_the_value_next_to_the_key():
    words = _page(
        [
            ("Invoice", (10, 10, 60, 20)),
            ("no.:", (62, 10, 80, 20)),
            ("INV-4821", (300, 10, 360, 20)),
            ("Date:", (10, 40, 40, 50)),
            ("12", (45, 40, 57, 50)),
            ("May", (60, 40, 80, 50)),
            ("2024", (83, 40, 110, 50)),
            ("Billing", (10, 80, 50, 90)),
            ("address", (52, 80, 100, 90)),
            ("Jane", (10, 95, 40, 105)),
            ("Doe", (43, 95, 65, 105)),
        ]
    )
    assert content_words("What is the invoice number?") == ["invoice", "number"]
    assert baseline_box("What is the invoice number?", words) == (300, 10, 360, 20)  # far right, same line
    assert baseline_box("When is the date?", words) == (45, 40, 110, 50)
    assert baseline_box("Where is the billing address?", words) == (10, 95, 65, 105)  # nothing right: below
    assert baseline_box("Who signed it?", words) is None
    # The same normalisation gives the model's exact-match feature (word level, case and punctuation folded).
    assert word_matches("What is the invoice number?", [w.text for w in words])[:3] == [True, False, False]
    assert word_matches("Where is the billing address?", ["Billing", "address:", "the"]) == [True, True, False]


def test_a_key_without_a_colon_keeps_the_value_that_follows_it_closely():
    words = _page(
        [
            ("Version", (10, 10, 60, 20)),
            ("2.8a", (64, 10, 90, 20)),  # as close as the words of a label, and no ':' anywhere after the key
            ("2019/05/01", (94, 10, 150, 20)),
            ("Introduction", (10, 40, 90, 50)),
            ("Order", (10, 70, 45, 80)),
            ("number", (48, 70, 95, 80)),
            ("(internal):", (98, 70, 160, 80)),  # a label that runs on to its ':'
            ("A-17", (170, 70, 200, 80)),
        ]
    )
    assert baseline_box("What is the version number?", words) == (64, 10, 150, 20)  # not the line below
    assert baseline_box("What is the order number?", words) == (170, 70, 200, 80)


def _manual_page(header: list[tuple[str, tuple]], footer: list[tuple[str, tuple]]) -> list[Word]:
    body = [
        ("See", (40, 100, 60, 110)),
        ("page", (64, 100, 90, 110)),  # "page" in the running text, with a number after it
        ("12", (94, 100, 106, 110)),
        ("for", (110, 100, 125, 110)),
        ("the", (128, 100, 145, 110)),
        ("number", (148, 100, 190, 110)),
        ("3", (40, 130, 46, 140)),  # a heading's number at a line's start, not in the first or last line
        ("Usage", (50, 130, 90, 140)),
    ]
    return _page(header + body + footer)


def test_the_page_number_is_read_by_page_convention():
    running_header = [("2.1", (40, 20, 55, 30)), ("Options", (60, 20, 110, 30)), ("17", (280, 20, 292, 30))]
    alone_footer = [("18", (150, 300, 162, 310))]
    # a number alone in the last line wins over one that ends the first line
    assert baseline_box("What is the page number?", _manual_page(running_header, alone_footer)) == (150, 300, 162, 310)
    # no footer: the running header's number at the line's end (not "2.1", not "12" in the text)
    assert baseline_box("What page is this?", _manual_page(running_header, [])) == (280, 20, 292, 30)
    # "Page 4 of 9": the number after "Page"
    footer = [
        ("Page", (120, 300, 150, 310)),
        ("4", (154, 300, 160, 310)),
        ("of", (164, 300, 176, 310)),
        ("9", (180, 300, 186, 310)),
    ]
    assert baseline_box("What is the page number?", _manual_page([], footer)) == (154, 300, 160, 310)
    # roman numerals in front matter
    assert baseline_box("Which page number?", _manual_page([], [("iv", (150, 300, 160, 310))])) == (150, 300, 160, 310)
    # no number in the first or last line: matched as any other question (the value after "page" in the text)
    assert baseline_box("What is the page number?", _manual_page([], [])) == (94, 100, 106, 110)
    assert asks_page_number("What is the page number?") and asks_page_number("What page is this?")
    assert not asks_page_number("On which page does section 'Usage' begin?")
    assert not asks_page_number("What is the invoice number?")


def test_a_quoted_text_is_answered_by_where_it_stands_not_by_the_value_after_it():
    words = _page(
        [
            ("6", (10, 100, 18, 112)),
            ("Feature", (24, 100, 80, 112)),
            ("structures", (84, 100, 150, 112)),
            ("Feature", (10, 130, 60, 140)),  # the same words again in the running text below
            ("lists", (64, 130, 90, 140)),
            ("are", (94, 130, 110, 140)),
            ("Options:", (10, 200, 60, 210)),
            ("none", (70, 200, 100, 210)),
        ]
    )
    assert baseline_box("Where does section 'Feature structures' begin?", words) == (24, 100, 150, 112)
    assert baseline_box("Find \u201coptions\u201d", words) == (10, 200, 60, 210)  # the label itself, not "none"
    assert baseline_box("What are the options?", words) == (70, 200, 100, 210)  # unquoted: the value, as before
    assert baseline_box("Where does section 'Glossary' begin?", words) is None  # not on the page
    assert quoted("What is the company's name and the client's address?") is None  # apostrophes quote nothing
    assert quoted("What's the date?") is None
    assert quoted("Where is the form field 'name'?") == "name"


def test_lexical_prior_is_the_baseline_box_in_the_mask_frame():
    words = _page([("Date:", (10, 40, 40, 50)), ("12", (45, 40, 57, 50)), ("May", (60, 40, 80, 50))])
    page = Page("x", 0, 400, 200, b"", words, "t")  # wider than tall: scale = 256 / 400 onto the square
    m = lexical_prior("When is the date?", page, 128)
    f = 256 / 400 * 128 / 256  # page pixels → mask pixels
    ys, xs = m.nonzero(as_tuple=True)
    assert m.shape == (128, 128) and set(m.unique().tolist()) == {0.0, 1.0}
    # the box of "12 May" padded by 2 page px, within the pixel a polygon fill may round to
    assert abs(xs.min() - (45 - 2) * f) <= 1 and abs(xs.max() + 1 - (80 + 2) * f) <= 1
    assert abs(ys.min() - (40 - 2) * f) <= 1 and abs(ys.max() + 1 - (50 + 2) * f) <= 1
    assert int(m.sum()) == (xs.max() - xs.min() + 1) * (ys.max() - ys.min() + 1)  # a filled rectangle
    drawn = Page(
        "x", 0, 400, 200, b"", words, "t", questions=[Question("q", "key", [Answer([box_polygon((43, 38, 82, 52))])])]
    )
    assert np.array_equal(m.numpy() > 0, answer_masks(drawn, 0, f, 128)[0])  # drawn as answers are (2 px padding)
    assert lexical_prior("Who signed it?", page, 128).sum() == 0  # no match: no prompt
