"""The business layout grammar: families, languages, keys in their wordings, several amounts and dates per page, and
a family and a language held out whole."""

import datetime
import itertools
import random
import re
from collections import Counter

import pytest

pytest.importorskip("faker")

from docjepa.data.split import SplitConfig, layout_held_out
from docjepa.data.synth import business
from docjepa.data.synth.business import FAMILIES, NAME_SHARE, NAMES, QUESTIONS, TOTALS
from docjepa.data.synth.business_words import (
    BREAKDOWN,
    KEYS,
    LANGUAGES,
    OTHER_NUMBERS,
    SHARED_WORDS,
    Wording,
    other_number,
)
from docjepa.data.synth.canvas import Canvas
from docjepa.data.synth.generate import generate_page
from docjepa.data.synth.layouts import LAYOUTS
from docjepa.data.synth.phrasings import EXTRA


def wordings(field: str, asked: dict = QUESTIONS) -> set[str]:
    """The templates that ask for ``field`` (of ``asked``): its own and the extended phrasings of its first."""
    return {*asked[field], *EXTRA.get(asked[field][0], ())}


NAMED = {party: wordings(party, NAMES) for party in NAMES}
"""Party → the templates that ask for its name."""


AMOUNT = re.compile(r"^[£$]?\d{1,3}([.,  ]?\d{3})*[.,]\d{2}$")


@pytest.fixture(scope="module")
def pages():
    return [generate_page(i, seed=4, size=900, layout="business") for i in range(60)]


def test_every_family_and_language_is_drawn(pages):
    parts = [p.layout.split("/") for p in pages]
    assert all(len(x) == 3 and x[0] == "business" for x in parts)
    assert {x[1] for x in parts} == set(FAMILIES) and {x[2] for x in parts} == set(LANGUAGES)


def test_key_answers_are_the_values_not_their_labels(pages):
    labels = {w.rstrip(":").casefold() for by_lang in KEYS.values() for ws in by_lang.values() for w in ws}
    asked = set()
    for page in pages:
        for q in page.questions:
            if q.kind != "key":
                continue
            (answer,) = q.answers
            assert answer.word_ids and answer.text == " ".join(page.words[i].text for i in answer.word_ids)
            assert answer.text.rstrip(":").casefold() not in labels
            named = next((f"{p} name" for p, ts in NAMED.items() if q.template in ts), "by label")
            asked.add(next((f for f in QUESTIONS if q.template in wordings(f)), named))
    assert asked == set(QUESTIONS) | {"by label", "buyer name", "seller name"}


def test_each_page_has_several_amounts_and_dates(pages):
    for page in pages:
        amounts = [w for w in page.words if AMOUNT.match(w.text)]
        assert len(amounts) >= 6, page.layout  # line prices and amounts, subtotal, tax, total
        dated = [q for q in page.questions if q.template in wordings("date") | wordings("due date")]
        assert len(dated) == 2 and dated[0].answers[0].text != dated[1].answers[0].text


def _line(page, ids):
    """The words on the line of ``ids`` (overlapping its first word vertically), left to right."""
    top, bottom = page.words[ids[0]].box[1], page.words[ids[0]].box[3]
    return sorted((w.box[0], k) for k, w in enumerate(page.words) if w.box[1] < bottom and w.box[3] > top)


def test_a_name_question_answers_the_party_name_alone(pages):
    """Who is the seller or the buyer: the first line of that party's block (a company or a person), not its address."""
    asked = 0
    for page in pages:
        blocks = {q.template: q.answers[0] for q in page.questions if q.kind == "field"}
        for q in page.questions:
            if not any(q.template in ts for ts in NAMED.values()):
                continue
            asked += 1
            ids = q.answers[0].word_ids
            assert q.kind == "key" and 0 < len(ids) <= 8
            boxes = [page.words[i].box for i in ids]
            assert max(b[1] for b in boxes) < min(b[3] for b in boxes)  # one line
            for block in blocks.values():  # a block holding the name starts with it and goes on (the address)
                if set(ids) & set(block.word_ids):
                    assert block.word_ids[: len(ids)] == ids and len(block.word_ids) > len(ids)
    assert asked >= 20


def test_each_party_name_is_asked_apart_often_beside_its_block(pages):
    """Each party's name is asked on most pages, the seller's and the buyer's apart, so some pages ask both and a
    name is often asked of the page whose block is asked too."""
    both = beside = 0
    for page in pages:
        named = {p for p, ts in NAMED.items() for q in page.questions if q.template in ts}
        both += named == {"seller", "buyer"}
        blocks = [set(q.answers[0].word_ids) for q in page.questions if q.kind == "field"]
        names = [set(q.answers[0].word_ids) for q in page.questions if any(q.template in ts for ts in NAMED.values())]
        beside += any(n <= b for n in names for b in blocks)
    assert both >= 0.3 * len(pages) * NAME_SHARE**2 and beside >= len(pages) // 2


def test_inline_keys_and_totals_in_the_items_table(pages):
    """The inline family prints the value one space after its key on the key's line; totals closing the items table put
    their values in its amount column, under the line amounts."""
    inline = [p for p in pages if p.layout.split("/")[1] == "inline"]
    assert inline
    for page in inline:
        (number,) = [q.answers[0] for q in page.questions if q.template in wordings("number")]
        line = [k for _, k in _line(page, number.word_ids)]
        before = line[: line.index(number.word_ids[0])]
        assert before and page.words[before[-1]].text.rstrip(":").casefold() in {
            w.casefold() for ws in KEYS["number"].values() for w in ws
        } | {w.split()[-1].casefold() for ws in KEYS["number"].values() for w in ws}
    assert set(TOTALS) >= {"table", "inline"}
    in_table = 0
    for page in pages:
        (total,) = [q.answers[0] for q in page.questions if q.template in wordings("total")]
        value = page.words[total.word_ids[0]].box
        line = [k for _, k in _line(page, total.word_ids)]
        key = page.words[line[line.index(total.word_ids[0]) - 1]].box
        gap = (value[0] - key[2]) / page.height * 1000  # in thousandths of the page height, as layouts are drawn
        column = [w for w in page.words if abs(w.box[0] - value[0]) < 1 and w.box[3] < value[1]]
        if 10 < gap < 18:  # the key right-aligned against the amount column
            in_table += 1
            assert sum(any(ch.isdigit() for ch in w.text) for w in column) >= 2  # line amounts above it
    assert in_table >= 3


def _texts(page, ids) -> str:
    return " ".join(page.words[i].text for i in ids)


def test_a_tax_breakdown_puts_tax_and_net_under_their_headings(pages):
    """On a page whose totals are a tax breakdown (the page's tax label heading the tax asked for), the net left of
    it is the subtotal asked for, the gross right of it repeats the total, which is asked on its own line below."""
    labels = {x.split()[0] for ws in KEYS["tax"].values() for x in ws}
    seen = 0
    for page in pages:
        answers = {f: q.answers[0] for q in page.questions for f in ("tax", "subtotal", "total")
                   if q.template in wordings(f)}  # fmt: skip
        if "tax" not in answers:
            continue
        tax = page.words[answers["tax"].word_ids[0]].box
        above = [
            w.text for w in page.words if abs(w.box[0] - tax[0]) < 1 and 0 < tax[1] - w.box[3] < 0.03 * page.height
        ]
        if not above or above[0] not in labels:
            continue  # a tax line, not a breakdown
        seen += 1
        line = [k for _, k in _line(page, answers["tax"].word_ids)]
        start, end = line.index(answers["tax"].word_ids[0]), line.index(answers["tax"].word_ids[-1])
        assert _texts(page, line[end + 1 :]) == answers["total"].text  # the gross cell: the total's value again
        assert line[start - len(answers["subtotal"].word_ids) : start] == answers["subtotal"].word_ids
        assert page.words[answers["total"].word_ids[0]].box[1] > tax[3]  # the total on its own line below
        rates = {x for hs in BREAKDOWN.values() for x in hs[0]}
        assert any(" ".join(w.text for w in page.words[k : k + 2]) in rates or page.words[k].text in rates
                   for k in range(len(page.words)))  # fmt: skip
    assert seen >= 5


def test_parties_stand_beside_the_keys_on_some_pages(pages):
    """Some pages stack the parties in the left half beside the keys and values: a party's name on a line the dates
    share, left of them."""
    beside = 0
    for page in pages:
        names = [q.answers[0].word_ids for q in page.questions if any(q.template in ts for ts in NAMED.values())]
        dates = [q.answers[0].word_ids for q in page.questions if q.template in wordings("date") | wordings("due date")]
        for ids in dates:
            box = page.words[ids[0]].box
            row = {k for _, k in _line(page, ids) if page.words[k].box[2] < page.width * 0.5}
            beside += any(set(n) <= row for n in names) and box[0] > page.width * 0.5
    assert beside >= 5


def test_a_family_and_a_language_are_held_out_whole():
    cfg = SplitConfig()
    assert layout_held_out("business/boxed/de", cfg) and layout_held_out("business/right/it", cfg)
    assert layout_held_out("receipt", cfg) and not layout_held_out("business/right/de", cfg)
    assert not layout_held_out("invoice", cfg) and not layout_held_out(None, cfg)
    assert not layout_held_out("business/right/de", SplitConfig(layouts=[]))


def test_wordings_print_amounts_and_dates_as_the_language_does():
    rng = random.Random(0)
    seen = {Wording("de", rng).money(1234.5) for _ in range(40)}
    assert seen <= {"1.234,50 €", "1.234,50 EUR", "1.234,50", "1234,50 €"} and "1.234,50 €" in seen
    fr = {Wording("fr", rng).date(datetime.date(2024, 3, 5)) for _ in range(40)}
    assert "5 mars 2024" in fr and "05/03/2024" in fr
    cs = {Wording("cs", rng).date(datetime.date(2025, 2, 21)) for _ in range(40)}
    assert {"21. 2. 2025", "21.02.2025", "21. února 2025"} <= cs
    pt = {Wording("pt", rng).money(23762.27) for _ in range(60)}
    assert {"23.762,27 €", "R$ 23.762,27", "23 762,27 €"} <= pt


def test_the_default_mix_is_unchanged():
    """business pages are made only when asked for: a seed's default pages keep their layouts."""
    layouts = {generate_page(i, seed=0, size=256).layout for i in range(30)}
    assert layouts <= set(LAYOUTS)


def test_keys_and_parties_stand_in_either_order(pages):
    """The due date stands above or left of the invoice date on some pages and below or right of it on others, and so
    does the buyer's name against the seller's: neither is told by its place among the others."""
    orders = {"dates": set(), "parties": set()}
    for page in pages:
        first = {}
        for q in page.questions:
            field = next((f for f in ("date", "due date") if q.template in wordings(f)), None)
            field = field or next((p for p, ts in NAMED.items() if q.template in ts), None)
            if field:
                box = page.words[q.answers[0].word_ids[0]].box
                first[field] = (box[1], box[0])
        if {"date", "due date"} <= first.keys():
            orders["dates"].add(first["due date"] < first["date"])
        if {"seller", "buyer"} <= first.keys():
            orders["parties"].add(first["buyer"] < first["seller"])
    assert orders == {"dates": {True, False}, "parties": {True, False}}


def test_other_numbers_are_added_to_the_page_and_never_asked(pages, monkeypatch):
    """The other numbers (account, registration, tax id, phone) come from a generator of their own: without them a
    seed's page asks the same questions with the same answers, and with them most pages print some, their keys in the
    page's language, among the keys and values on some pages."""
    with monkeypatch.context() as m:
        for share in ("OTHER_IN_KEYS", "OTHER_IN_FOOTER", "OTHER_BY_SELLER"):
            m.setattr(business, share, 0.0)
        plain = [generate_page(i, seed=4, size=900, layout="business") for i in range(len(pages))]
    keys = {lang: {k.rstrip(":") for by in OTHER_NUMBERS.values() for k in by[lang]} for lang in LANGUAGES}
    added = among_keys = 0
    for page, without in zip(pages, plain):
        assert page.layout == without.layout
        asked = [(q.template, q.kind, [a.text for a in q.answers]) for q in page.questions]
        assert asked == [(q.template, q.kind, [a.text for a in q.answers]) for q in without.questions]
        extra = Counter(w.text for w in page.words) - Counter(w.text for w in without.words)
        if not extra:
            continue
        added += 1
        text = " ".join(w.text for w in page.words)
        assert any(key in text for key in keys[page.layout.split("/")[2]])
        date = next(q.answers[0] for q in page.questions if q.template in wordings("date") | wordings("due date"))
        top = page.words[date.word_ids[0]].box[1]  # a number among the keys: above the parties, near the dates
        among_keys += any(
            w.text in extra and any(ch.isdigit() for ch in w.text) and abs(w.box[1] - top) < 0.12 * page.height
            for w in page.words
        )
    assert added >= 0.7 * len(pages) and among_keys >= 0.2 * len(pages)


def test_other_numbers_read_as_their_language_prints_them():
    rng = random.Random(0)
    for lang in LANGUAGES:
        for kind, by_lang in OTHER_NUMBERS.items():
            key, value = other_number(kind, lang, rng)
            assert key in by_lang[lang] and sum(ch.isdigit() for ch in value) >= 5
    accounts = [other_number("account", "cs", rng)[1] for _ in range(5)]
    assert all(re.fullmatch(r"\d{6,10}/\d{4}", a) for a in accounts)  # the bank's code after the account number
    phones = {other_number("phone", "de", rng)[1][:4] for _ in range(5)}
    assert phones == {"+49 "}


DATES = wordings("date") | wordings("due date") | wordings("delivery date")


def dates_whole(page) -> bool:
    """Whether each date ``page`` asks for is answered with its year, nothing cut after it."""
    answers = [q.answers[0].text for q in page.questions if q.template in DATES]
    return all(re.search(r"\b20\d\d\b", date) and date[-1].isdigit() for date in answers)


def test_a_cell_prints_its_key_and_value_whole():
    """A key or value too wide for its cell of a table or band is printed smaller, or on two lines, not cut."""
    c = Canvas(900, 1273)
    text = "Fecha de vencimiento de la factura"
    for share, lines in ((1.05, 1), (0.95, 1), (0.6, 2)):  # the room it has, against its width at the usual size
        right = 100 + share * c.font("sans-bold", 9).getlength(text)
        ids = business._cell(c, 100, 300, text, right, "sans-bold", 9)
        assert " ".join(c.words[i].text for i in ids) == text
        assert max(c.words[i].box[2] for i in ids) <= right + 1
        assert 1 + sum(c.words[j].box[0] < c.words[i].box[0] for i, j in itertools.pairwise(ids)) == lines
    cut_before = [generate_page(i, seed=5, size=900, layout="business") for i in (46, 80, 109)]  # "14 de" then
    assert all(dates_whole(page) for page in cut_before)


def test_keys_worded_alike_are_added_apart_and_printed_whole(pages, monkeypatch):
    """Keys worded alike ("Invoice date" and "Invoice due date", "VAT" and "Total incl. VAT") come from a generator
    of their own: with them on every page, or on none, a seed's page asks the same questions with the same answers.
    With them, both keys of each pair are printed whole."""

    def asked(page):
        return [(q.template, q.kind, [a.text for a in q.answers]) for q in page.questions]

    made = {}
    for share in (0.0, 1.0):
        with monkeypatch.context() as m:
            m.setattr(business, "SHARED_SHARE", share)
            made[share] = [generate_page(i, seed=4, size=900, layout="business") for i in range(len(pages))]
    for page, without, alike in zip(pages, made[0.0], made[1.0]):
        assert asked(page) == asked(without) == asked(alike)
        text = " " + " ".join(w.text.rstrip(":") for w in alike.words) + " "
        lang = page.layout.split("/")[2]
        for by_lang in SHARED_WORDS.values():
            assert any(all(f" {key} " in text for key in pair) for pair in by_lang[lang]), (page.layout, by_lang[lang])
