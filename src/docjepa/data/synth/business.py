"""Business documents drawn from a layout grammar instead of one template: the ``business`` layout.

A page is an invoice in one of nine languages (:mod:`.business_words`): a header (logo, seller, title; sometimes the
invoice number's key and value in the title's place), a block of keys and values (number, dates, order and customer
numbers; on some pages among them numbers never asked for, which the footer and the seller's address print too: bank
account, company registration, tax id, phone), the parties in one to three columns (the seller among them on some
pages, each a name and address under its heading or written as keys and values; on some pages stacked in a column
beside the keys and values; on some pages in another order than the seller's before the buyer's, as the keys too),
the line items (sometimes with a unit and a tax-rate column), the totals, a footer (bank details, the other numbers,
page number), sometimes a stamp. Where a value
stands against its key is the page's **family**:

- ``right``: the value right of its key on the same line, at a distance the page draws;
- ``below``: the key small above, the value under it;
- ``boxed``: each pair in a framed field, the key in the frame's corner;
- ``table``: the keys as a header row, the values in the cells under them;
- ``band``: the pairs one after another in a shaded band across the page;
- ``inline``: the value one space after its key ("Due date: 24/01/2024").

The totals have a style of their own (right-aligned lines, a framed total, a footer band, rows closing the items
table with the values in its amount column, the total as one large line, or a tax breakdown table, rate, net, tax
and gross under their headings, above the total's line). Several amounts and several dates stand on every page and
each question asks for one; a party is asked for by its block (``field``) or by its name alone (``key``: "Who is
the seller?"; each name on most pages, often beside its block's question). The page's
``layout`` is ``business/<family>/<language>``, so that a family or a language can be held out of training whole
(:class:`~docjepa.data.split.SplitConfig` holds out a layout when any of its parts is listed).
"""

from __future__ import annotations

import datetime
import random

from faker import Faker

from ..record import Question
from .business_words import (
    ADDRESS_KEYS,
    BANK,
    BREAKDOWN,
    HEADINGS,
    LANGUAGES,
    LOCALES,
    OTHER_NUMBERS,
    PAGE,
    RATE_HEADING,
    SHARED_WORDS,
    STAMPS,
    TITLES,
    UNIT_HEADING,
    UNITS,
    VAT_ID,
    Wording,
    other_number,
)
from .canvas import Canvas
from .layouts import ITEMS, Asker, _address_lines, locale_faker

FAMILIES = ("right", "below", "boxed", "table", "band", "inline")
TOTALS = ("right", "boxed", "footer", "table", "inline", "breakdown")
META = ("number", "date", "due date", "order number", "customer number", "delivery date")

QUESTIONS = {
    "number": ["What is the invoice number?", "Which number does this invoice have?"],
    "date": ["What is the invoice date?", "When was the invoice issued?"],
    "due date": ["What is the due date?", "By when must this be paid?"],
    "delivery date": ["When were the goods delivered?", "What is the delivery date?"],
    "order number": ["What is the order number?", "Which purchase order does this refer to?"],
    "customer number": ["What is the customer number?", "What is the customer's account number?"],
    "subtotal": ["What is the subtotal?", "What is the net amount?"],
    "tax": ["How much tax is charged?", "What is the VAT amount?"],
    "total": ["What is the total amount due?", "What is the invoice total?"],
}
"""Field → the English questions that ask for its value (``key``), and those naming the page's own label."""
BY_LABEL = ["What is the {label}?", "What does the document give as {label}?"]
PARTIES = {
    "buyer": ["What is the billing address?", "Where is the buyer's address?"],
    "ship to": ["Where is the delivery address?", "Where are the goods shipped to?"],
    "seller": ["What is the seller's address?", "Where is the supplier's address?"],
}
"""Party → the questions that ask for its block (``field``): its name and address (worded apart from the other
layouts' address questions, whose extended phrasings include "Who issued this invoice?")."""
NAMES = {
    "buyer": ["Who is the buyer?", "What is the customer's name?", "Who is billed?"],
    "seller": ["Who is the seller?", "What is the seller's name?", "Who is the supplier?"],
}
"""Party → the questions that ask for its name alone (``key``)."""
BESIDE_SHARE = 0.3
"""How often the parties stand stacked in the left half beside the keys and values (in the families that draw them
in one column), instead of below them."""
SHUFFLE_SHARE = 0.5
"""How often a page lists its keys and values, and its parties, in an order of its own (else number, dates, other
numbers; the seller before the buyer before the delivery address), so that neither a date nor a party is told by
its place among the others."""
NAME_SHARE = 0.7
"""How often each party's name is asked on a page (the buyer's and the seller's apart), so that "Who is the seller?"
and "What is the seller's address?" are often asked of one page and the name is told from its block."""
OTHER_IN_KEYS, OTHER_IN_FOOTER, OTHER_BY_SELLER = 0.5, 0.8, 0.4
"""How often the page's other numbers (:data:`~.business_words.OTHER_NUMBERS`: bank account, company registration,
tax id, phone; never asked for) stand among the keys and values (one or two of them, in the family's way), in the
footer beside the bank details (one to three), and under the seller's address in the header (one). They are drawn
from a generator of their own, so that a seed's page is the page it was without them, plus them."""
SHARED_SHARE = 0.35
"""How often a page words the invoice date's and the due date's keys alike, and (apart) the tax's and the total's
(:data:`~.business_words.SHARED_WORDS`: "Invoice date" and "Invoice due date"), drawn from a generator of their own,
so that a seed's page asks the same questions with the same answers with or without them."""


def business(c: Canvas, _fake: Faker, rng: random.Random, wording=None, vocab=None) -> list[Question]:
    """Draw one business document on ``c``; returns its questions (the page's layout name is left in
    ``c.variant``)."""
    other = random.Random(str(rng.getstate()[1][:8]))  # the other numbers' draws, apart from the page's
    alike = random.Random(str(rng.getstate()[1][:8]) + "alike")  # the keys worded alike, apart too
    lang, family, totals_style = rng.choice(LANGUAGES), rng.choice(FAMILIES), rng.choice(TOTALS)
    c.variant = f"{family}/{lang}"
    fake = locale_faker(LOCALES[lang])
    fake.seed_instance(rng.getrandbits(32))
    w, a = Wording(lang, rng), Asker(c, rng, wording)
    for fields in SHARED_WORDS:
        if alike.random() < SHARED_SHARE:
            w.share_words(fields, alike)
    m = c.px(rng.uniform(40, 70))
    values = _meta_values(fake, rng)
    seller_block, number_in_title = rng.random() < 0.4, rng.random() < 0.2
    by_seller = other.random() < OTHER_BY_SELLER  # an account, registration or tax id under its address
    seller_line = _keyed(w, *other_number(other.choice(list(OTHER_NUMBERS)[:3]), lang, other)) if by_seller else None
    header, titled, y = _header(
        c, fake, rng, w, m, not seller_block, values["number"] if number_in_title else None, seller_line
    )
    shown = ["number", "date", "due date", *rng.sample(META[3:], rng.randint(1, 3))][int(number_in_title) :]
    if rng.random() < SHUFFLE_SHARE:  # keys in another order: a value is told by its key, not by its place
        rng.shuffle(shown)
    beside = family in ("right", "below", "boxed", "inline") and rng.random() < BESIDE_SHARE
    text = [(f, w.label(f), w.date(values[f]) if isinstance(values[f], datetime.date) else values[f]) for f in shown]
    if other.random() < OTHER_IN_KEYS:
        across = family in ("table", "band")  # one cell each across the page: one more where the values still fit
        for k, kind in enumerate(other.sample(list(OTHER_NUMBERS), 1 if across else other.randint(1, 2))):
            key, value = other_number(kind, lang, other)
            more = [*text, (f"other {k}", key + ":" * w.colon, value)]
            if not across or _fits(c, [v for _, _, v in more], (c.width - 2 * m) / len(more) - c.px(6)):
                text.insert(other.randint(0, len(text)), more[-1])
    found, below_meta = _meta(c, rng, family, text, m, y, c.width * 0.52 if beside else None)
    if titled:
        found["number"] = titled
    top = y if beside else below_meta + c.px(20)
    parties, names, y = _parties(c, fake, rng, w, m, top, seller_block, c.width * 0.48 if beside else None)
    y = max(y, below_meta)
    parties, names = {**header[0], **parties}, {**header[1], **names}
    amounts, y, amount_x = _items(c, rng, w, lang, m, y + c.px(25))
    found |= _totals(c, rng, w, totals_style, amounts, m, y + c.px(12), amount_x)
    kinds = other.sample(list(OTHER_NUMBERS), other.randint(1, 3)) if other.random() < OTHER_IN_FOOTER else []
    others = [_keyed(w, *other_number(kind, lang, other)) for kind in kinds]
    total = _footer(c, fake, rng, w, m, lang, w.money(amounts["total"]) if totals_style == "footer" else None, others)
    if total:
        found["total"] = total
    if rng.random() < 0.3 and totals_style != "breakdown":  # a stamp left of the totals, not over a table
        _stamp(c, m, y + c.px(20), STAMPS[lang])
    for field, ids in found.items():
        if field in QUESTIONS:
            a.ask(QUESTIONS[field], "key", a.answer(ids))
            if rng.random() < 0.3:
                a.ask(BY_LABEL, "key", a.answer(ids), label=w.labels[field])
    for party in rng.sample(sorted(parties), min(2, len(parties))):
        a.ask(PARTIES[party], "field", a.answer(parties[party]))
    for party in sorted(p for p in names if p in NAMES):  # each name most often, its block's question beside it
        if rng.random() < NAME_SHARE:
            a.ask(NAMES[party], "key", a.answer(names[party]))
    return a.questions


def _fits(c: Canvas, values: list[str], width: float) -> bool:
    """Whether each value fits in a cell ``width`` wide (as :func:`_meta` prints values across the page)."""
    return all(c.font("sans", 11).getlength(v) <= width for v in values)


def _keyed(w: Wording, key: str, value: str) -> str:
    """A key and its value on one line, the key with the page's colon."""
    return f"{key}{':' * w.colon} {value}"


def _meta_values(fake: Faker, rng: random.Random) -> dict[str, str | datetime.date]:
    issued = datetime.date(2023, 1, 1) + datetime.timedelta(days=rng.randint(0, 1400))
    year = issued.year
    number = rng.choice(
        [f"{year}-{rng.randint(1, 9999):04d}", f"INV-{rng.randint(1000, 99999)}", f"{rng.randint(10000, 999999)}",
         f"F{year % 100:02d}/{rng.randint(1, 999):03d}", f"RE{year}{rng.randint(100, 9999)}"]
    )  # fmt: skip
    return {
        "number": number,
        "date": issued,
        "due date": issued + datetime.timedelta(days=rng.choice([8, 10, 14, 30, 45, 60])),
        "delivery date": issued - datetime.timedelta(days=rng.randint(1, 20)),
        "order number": rng.choice([f"PO-{rng.randint(1000, 99999)}", f"{rng.randint(100000, 9999999)}"]),
        "customer number": rng.choice([f"C{rng.randint(1000, 99999)}", f"{rng.randint(10000, 999999)}"]),
    }


def _header(c: Canvas, fake: Faker, rng: random.Random, w: Wording, m: float, seller: bool, number: str | None,
            other: str | None = None):  # fmt: skip
    """Logo, the seller's name and address (``seller``: else its block stands with the other parties; ``other``, a
    keyed number, on a line under it), the title, or the invoice number's key and value in its place (``number``);
    returns (({"seller": its words}, {"seller": its name's words}) or two empty dicts, the number's words or None,
    the y below the header)."""
    logo_right = rng.random() < 0.4
    x = c.width - m - c.px(60) if logo_right else m
    if rng.random() < 0.7:  # a logo: a shape with initials
        box = (x, c.px(40), x + c.px(55), c.px(95))
        shade = rng.choice(["#1f4e79", "#7f1d1d", "#14532d", "#444", "#b45309"])
        (c.draw.ellipse if rng.random() < 0.5 else c.rect)(box, fill=shade, outline=shade)
        c.draw.text((x + c.px(12), c.px(55)), "".join(rng.choice("ABCDEFGHKLMNPRSTVW") for _ in range(2)),
                    fill="white", font=c.font("sans-bold", 20))  # fmt: skip
    sx = m if logo_right else m + c.px(70)
    y, blocks = c.px(72), ({}, {})
    if seller:
        name = c.text(sx, c.px(45), fake.company(), "sans-bold", rng.choice([15, 17, 19]))
        block = list(name)
        for line in _address_lines(fake):
            block += c.text(sx, y, line, "sans", 10)
            y += c.px(15)
        if rng.random() < 0.6:
            c.text(sx, y, f"{VAT_ID[w.lang]} {fake.bothify('??#########').upper()}", "sans", 10)
            y += c.px(15)
        if other is not None:
            c.text(sx, y, other, "sans", 10)
            y += c.px(15)
        blocks = ({"seller": block}, {"seller": name})
    tx = rng.choice([c.width * 0.6, c.width / 2 - c.px(60), m])
    ty = y + c.px(12) if tx == m or tx < c.width / 2 else c.px(110)
    if number is None:
        c.text(tx, ty, rng.choice(TITLES[w.lang]), "sans-bold", rng.choice([20, 24, 28]))
        return blocks, None, max(y, ty) + c.px(42)
    size = rng.choice([16, 18, 20])
    ids = _inline(c, tx, ty, w.label("number"), number, size, ("sans-bold", "sans-bold"), right=c.width - m)
    return blocks, ids, max(y, ty) + c.px(42)


def _inline(c: Canvas, x: float, y: float, label: str, value: str, size: float, fonts=("sans", "sans"), right=None):
    """A key and its value on one line, one space apart ("Due date: 24/01/2024"), from ``x`` but moved left to end
    before ``right`` when given; returns the value's words."""
    kf, vf = c.font(fonts[0], size), c.font(fonts[1], size)
    gap = kf.getlength(" ")
    if right is not None:
        x = min(x, right - kf.getlength(label) - gap - vf.getlength(value))
    c.text(x, y, label, fonts[0], size)
    return c.text(x + kf.getlength(label) + gap, y, value, fonts[1], size)


def _pair(c: Canvas, family: str, label: str, value: str, x: float, y: float, width: float):
    """One key and its value in the family's way from (x, y); returns (the value's words, the height used)."""
    if family == "right":
        c.text(x, y, label, "sans-bold", 11)
        return c.text(x + width * 0.5, y, value, "sans", 11), c.px(19)
    if family == "inline":
        return _inline(c, x, y, label, value, 11, right=c.width - c.px(10)), c.px(19)
    if family == "below":
        c.text(x, y, label, "sans", 9, fill="#555")
        return c.text(x, y + c.px(14), value, "sans-bold", 12), c.px(36)
    # boxed: a frame with the key in its corner
    c.rect((x - c.px(5), y - c.px(4), x + width - c.px(10), y + c.px(36)), outline="#888")
    c.text(x, y - c.px(1), label, "sans", 8, fill="#555")
    return c.text(x + c.px(4), y + c.px(15), value, "sans", 12), c.px(46)


def _cell(c: Canvas, x: float, y: float, text: str, right: float, family: str, size: int) -> list[int]:
    """``text`` in a cell from (x, y), whole: at ``size`` where it fits before ``right``, else up to two points
    smaller, and on two lines (about y) where one line still does not hold it; returns the ids of its words."""
    for smaller in (size, size - 1, size - 2):
        if c.font(family, smaller).getlength(text) <= right - x:
            return c.text(x, y, text, family, smaller)
    size, words, font = size - 2, text.split(), c.font(family, size - 2)
    cut = max(1, max(k for k in range(len(words) + 1) if font.getlength(" ".join(words[:k])) <= right - x))
    first = c.text(x, y - c.px(size * 0.4), " ".join(words[:cut]), family, size)
    return first + c.text(x, y + c.px(size * 0.75), " ".join(words[cut:]), family, size, max_x=right)


def _meta(c: Canvas, rng: random.Random, family: str, text: list, m: float, y: float, x0=None):
    """The keys and values block, ``text`` its (field, key, value) triples (from ``x0`` in one column when given);
    returns ({field: the value's words}, the y below it)."""
    found = {}
    if family in ("table", "band"):
        width = (c.width - 2 * m) / len(text)
        if family == "band":
            c.rect((m - c.px(8), y - c.px(8), c.width - m + c.px(8), y + c.px(42)), fill="#e6e9ef", outline="#e6e9ef")
        for k, (field, label, value) in enumerate(text):
            x = m + k * width
            if family == "table":
                c.rect((x - c.px(4), y - c.px(4), x + width - c.px(4), y + c.px(40)), outline="#999")
                c.hline(x - c.px(4), x + width - c.px(4), y + c.px(17), 1, "#999")
            _cell(c, x, y, label.rstrip(":"), x + width - c.px(6), "sans-bold", 9)
            found[field] = _cell(c, x, y + c.px(21), value, x + width - c.px(6), "sans", 11)
        return found, y + c.px(58)
    columns = rng.choice([1, 2]) if family not in ("right", "inline") and x0 is None else 1
    x0 = x0 if x0 is not None else rng.choice([m, c.width * (0.45 if family == "inline" else 0.52)])
    width = (c.width - m - x0) / columns if x0 > m else c.width * 0.42 / columns
    top = y
    for k, (field, label, value) in enumerate(text):
        col = k % columns
        found[field], h = _pair(c, family, label, value, x0 + col * width, y, width)
        y += h if col == columns - 1 else 0
    return found, max(y + c.px(46), top + c.px(46))


def _parties(c: Canvas, fake: Faker, rng: random.Random, w: Wording, m: float, y: float, seller: bool, right=None):
    """The buyer (the seller too when ``seller``, a delivery address sometimes; in that order or, on some pages, in
    another) in one to three columns (one, ending at ``right``, when given), each a name and address under its
    heading, or written as keys and values (name, street, town); the heading bold or plain, the lines under it as
    small as 8 points on some pages, each block framed on some; returns ({party: its words}, {party: its name's
    words}, the y below)."""
    names = ["seller"] * seller + ["buyer"] + (["ship to"] if rng.random() < 0.5 else [])
    if rng.random() < SHUFFLE_SHARE:
        rng.shuffle(names)
    cols = 1 if right is not None else min(3, max(len(names), rng.randint(1, 3)))
    keyed = cols < 3 and rng.random() < 0.4
    heading, bold = rng.choice([11, 11, 13, 15]), rng.random() < 0.75
    size = 10 if keyed else rng.choice([8, 9, 10, 11, 11])
    framed = rng.random() < 0.25
    width = ((right if right is not None else c.width - m) - m) / cols
    out, who, bottom = {}, {}, y
    for k, name in enumerate(names):
        x, yy = m + k * width, y
        if cols == 1 and k:
            x, yy = m, bottom + c.px(12 + 10 * framed)
        top = yy
        c.text(x, yy, w.labels[name], "sans-bold" if bold else "sans", heading)
        yy += c.px(heading + 6)
        lines = _address_lines(fake)
        rows = [fake.company() if rng.random() < 0.6 else fake.name(), lines[0], " ".join(lines[1:])]
        vx = x + width * 0.35 if keyed else x
        drawn = []
        for key, line in zip(ADDRESS_KEYS[w.lang], rows):
            if not line:
                continue
            if keyed:
                c.text(x, yy, key + ":", "sans", 10)
            drawn.append(c.text(vx, yy, line, "sans", size, max_x=x + width - c.px(8)))
            yy += c.px(19 if keyed else size + 4)
        if framed:
            c.rect((x - c.px(6), top - c.px(6), x + width - c.px(6), yy + c.px(4)), outline="#333")
        out[name], who[name] = [i for ids in drawn for i in ids], drawn[0]
        bottom = max(bottom, yy + c.px(10 * framed))
    return out, who, bottom


def _items(c: Canvas, rng: random.Random, w: Wording, lang: str, m: float, y: float):
    """The line items: description, quantity, sometimes a unit, the unit price, sometimes the tax rate, the amount;
    returns (the amounts: subtotal, tax rate, tax, total; the y below the table; the amount column's x)."""
    rate = rng.choice([0.05, 0.06, 0.07, 0.1, 0.19, 0.2, 0.21, 0.22])
    unit, with_rate = rng.random() < 0.35, rng.random() < 0.35
    heads = [*HEADINGS[lang][:2], *[UNIT_HEADING[lang]] * unit, HEADINGS[lang][2], *[RATE_HEADING[lang]] * with_rate,
             HEADINGS[lang][3]]  # fmt: skip
    step = max(0.105, min(0.13, 0.38 / (len(heads) - 2)))
    cols = [m] + [c.width * (0.8 - step * (len(heads) - 2 - k)) for k in range(len(heads) - 1)]
    c.rect((m - 4, y - 4, c.width - m, y + c.px(20)), fill=rng.choice(["#e8e8e8", "#dde7f3", "#ffffff"]))
    for x, h in zip(cols, heads):
        c.text(x, y, h, "sans-bold", 11)
    y += c.px(27)
    subtotal, units = 0.0, UNITS[lang]
    for item in rng.sample(ITEMS, rng.randint(2, 7)):
        qty, price = rng.randint(1, 20), round(rng.uniform(3, 600), 2)
        cells = [
            str(qty),
            *[rng.choice(units)] * unit,
            w.money(price),
            *[f"{rate:.0%}"] * with_rate,
            w.money(qty * price),
        ]
        c.text(cols[0], y, item, "sans", 11, max_x=cols[1] - c.px(6))
        for x, cell in zip(cols[1:], cells):
            c.text(x, y, cell, "sans", 11)
        subtotal += qty * price
        y += c.px(21)
        if rng.random() < 0.6:
            c.hline(m, c.width - m, y - c.px(4), 1, "#ccc")
    return {"subtotal": subtotal, "rate": rate, "tax": subtotal * rate, "total": subtotal * (1 + rate)}, y, cols[-1]


def _totals(c: Canvas, rng: random.Random, w: Wording, style: str, amounts: dict, m: float, y: float, amount_x: float):
    """Subtotal, tax and (unless the footer carries it) the total: right-aligned lines, the total framed, rows that
    close the items table (the value in its amount column), or the total as one large line ("Total: 1.035,84 €");
    returns {field: the value's words}."""
    lx, vx = c.width * rng.uniform(0.5, 0.62), c.width * 0.8
    found = {}
    fields = ["subtotal", "tax"] + ([] if style == "footer" else ["total"])
    if style == "breakdown":
        found, y = _breakdown(c, rng, w, amounts, m, y)
        fields = ["total"]
    rate = f"({amounts['rate']:.0%})" if rng.random() < 0.3 else f"{amounts['rate']:.0%}"
    for field in fields:
        label = w.label(field) if field != "tax" else f"{w.labels['tax']} {rate}" + ":" * w.colon
        font = "sans-bold" if field == "total" else "sans"
        if field == "total" and style == "inline":
            y += c.px(10)
            found[field] = _inline(c, lx, y, label, w.money(amounts[field]), 15, (font, font), right=c.width - m)
            break
        if style == "table":
            c.hline(m - 4, c.width - m, y - c.px(5), 1, "#999")
            key = c.font(font, 11).getlength(label)
            c.text(amount_x - c.px(14) - key, y, label, font, 11)
            found[field] = c.text(amount_x, y, w.money(amounts[field]), font, 11)
            y += c.px(21)
            continue
        if field == "total" and style == "boxed":
            y += c.px(6)
            c.rect((lx - c.px(8), y - c.px(6), c.width - m, y + c.px(22)), outline="black", width=2)
        c.text(lx, y, label, font, 12)
        found[field] = c.text(vx, y, w.money(amounts[field]), font, 12)
        y += c.px(24)
    return found


def _breakdown(c: Canvas, rng: random.Random, w: Wording, amounts: dict, m: float, y: float):
    """The tax breakdown: rate, net, tax (the page's own tax label) and gross under their headings, one row, on the
    left or the right; returns ({"subtotal": the net's words, "tax": the tax's words}, the y below)."""
    rates, nets, grosses = BREAKDOWN[w.lang]
    heads = [rng.choice(rates), rng.choice(nets), w.labels["tax"], rng.choice(grosses)]
    cells = [f"{amounts['rate']:.2%}" if rng.random() < 0.4 else f"{amounts['rate']:.0%}",
             *(w.money(amounts[k]) for k in ("subtotal", "tax", "total"))]  # fmt: skip
    col = c.width * rng.uniform(0.13, 0.16)
    x0 = m if rng.random() < 0.6 else c.width - m - 4 * col
    c.hline(x0, x0 + 4 * col - c.px(6), y + c.px(16), 1, "#999")
    found = {}
    for k, (head, cell, field) in enumerate(zip(heads, cells, (None, "subtotal", "tax", None))):
        x = x0 + k * col
        c.text(x, y, head, "sans-bold", 10, max_x=x + col - c.px(6))
        ids = c.text(x, y + c.px(22), cell, "sans", 10)
        if field:
            found[field] = ids
    return found, y + c.px(56)


def _footer(c: Canvas, fake: Faker, rng: random.Random, w: Wording, m: float, lang: str, total: str | None,
            others: list[str] = ()):  # fmt: skip
    """Bank details, the ``others`` lines (keys and values) in a column beside them, and the page number; with a
    ``total`` (the ``footer`` totals style), a band holding it, whose value's words are returned."""
    y = c.height - c.px(rng.uniform(90, 120))
    ids = None
    if total is not None:
        c.rect((m - c.px(8), y - c.px(48), c.width - m + c.px(8), y - c.px(14)), fill="#e6e9ef", outline="#e6e9ef")
        c.text(m, y - c.px(40), w.label("total"), "sans-bold", 13)
        ids = c.text(c.width * 0.6, y - c.px(40), total, "sans-bold", 13)
    c.hline(m, c.width - m, y - c.px(6), 1, "#999")
    c.text(m, y, f"{BANK[lang]}: IBAN {fake.iban()}", "sans", 9, max_x=c.width * 0.54 if others else c.width - m)
    c.text(m, y + c.px(14), f"BIC {fake.swift()}", "sans", 9)
    for k, line in enumerate(others):  # the third beside the page number, and ending before it
        c.text(c.width * 0.55, y + c.px(14 * k), line, "sans", 9, max_x=c.width - m - c.px(70 if k == 2 else 0))
    c.text(c.width - m - c.px(60), y + c.px(30), f"{PAGE[lang]} 1/1", "sans", 9)
    return ids


def _stamp(c: Canvas, x: float, y: float, word: str) -> None:
    """A stamp ("PAID") left of the totals."""
    c.rect((x, y, x + c.px(130), y + c.px(42)), outline="#c0392b", width=3)
    c.text(x + c.px(14), y + c.px(8), word, "sans-bold", 22, fill="#c0392b")


EXTRA_LAYOUTS = {"business": business}
"""Layouts made only when asked for by name (``--layout business``): the default mix stays
:data:`~docjepa.data.synth.layouts.LAYOUTS`, so the pages of a seed are what they were."""
