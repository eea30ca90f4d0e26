"""Document layouts: each draws one page on a :class:`Canvas` and returns its questions.

Each question has a registered kind (``data.kinds``): ``key`` (look up a field's value), ``field`` (where is a
described block), ``table`` (a cell, row or column), ``layout`` (a structural element), ``choice`` (which box is
ticked) and ``ambiguous`` (several valid answers, all kept).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable

from faker import Faker

from ..kinds import check_kind
from ..record import Answer, Question, box_polygon
from .canvas import Canvas
from .phrasings import EXTRA
from .vocabulary import Vocabulary

_FIRST_DAY, _LAST_DAY = datetime.date(2023, 1, 1), datetime.date(2027, 1, 1)
DATE_FORMATS = ["%d/%m/%Y", "%m/%d/%Y", "%Y-%m-%d", "%d %b %Y", "%B %d, %Y", "%d.%m.%Y"]


class Asker:
    """Builds questions whose answers are groups of words (or explicit boxes) on the canvas."""

    def __init__(self, c: Canvas, rng: random.Random, wording: random.Random | None = None) -> None:
        self.c, self.rng, self.wording, self.questions = c, rng, wording, []

    def answer(self, ids: list[int], box=None) -> Answer:
        box = box if box is not None else self.c.box_of(ids)
        return Answer([box_polygon(box)], " ".join(self.c.words[i].text for i in ids), list(ids))

    def ask(self, templates: list[str], kind: str, *answers: Answer, **fmt: str) -> None:
        check_kind(kind, "generator")
        if answers and all(a.word_ids or a.regions for a in answers):
            template = self.rng.choice(templates)
            if self.wording is not None:  # extended phrasings: their own stream, so the page is unchanged
                more = EXTRA.get(templates[0], ())
                k = self.wording.randrange(len(templates) + len(more))
                template = more[k - len(templates)] if k >= len(templates) else template
            self.questions.append(Question(template.format(**fmt), kind, list(answers), template))


_FAKERS: dict[str, Faker] = {}


def locale_faker(locale: str) -> Faker:
    """One Faker per locale (seed it per page with ``seed_instance``), its city lists sorted: Faker's it_IT address
    provider builds its list from a set, so the city a seed picks would otherwise follow PYTHONHASHSEED."""
    if locale not in _FAKERS:
        fake = Faker(locale)
        for provider in fake.get_providers():
            if isinstance(getattr(provider, "cities", None), list):
                provider.cities = sorted(provider.cities)
        _FAKERS[locale] = fake
    return _FAKERS[locale]


def _date(fake: Faker, rng: random.Random) -> str:
    # Fixed bounds: Faker's relative ones ("-3y") move with today's date, and the data with them.
    return fake.date_between(_FIRST_DAY, _LAST_DAY).strftime(rng.choice(DATE_FORMATS))


def _money(rng: random.Random, lo: float = 1, hi: float = 500) -> float:
    return round(rng.uniform(lo, hi), 2)


def _address_lines(fake: Faker) -> list[str]:
    return [line for line in fake.address().replace("\r", "").split("\n") if line.strip()]


# ------------------------------------------------------------------------------------------- form
FORM_TITLES = [
    "Application Form",
    "Patient Registration",
    "Change of Address",
    "Membership Application",
    "Vehicle Registration Request",
    "Employee Information Sheet",
    "Customer Account Form",
]
FORM_FIELDS: list[tuple[str, Callable[[Faker, random.Random], str]]] = [
    ("Full name", lambda f, r: f.name()),
    ("Date of birth", lambda f, r: _date(f, r)),
    ("Email", lambda f, r: f.email()),
    ("Phone", lambda f, r: f.phone_number()),
    ("Street address", lambda f, r: f.street_address()),
    ("City", lambda f, r: f.city()),
    ("Postal code", lambda f, r: f.postcode()),
    ("Company", lambda f, r: f.company()),
    ("Job title", lambda f, r: f.job()),
    ("Account number", lambda f, r: f.bban()),
    ("Reference", lambda f, r: f"REF-{r.randint(10000, 99999)}"),
    ("Date", lambda f, r: _date(f, r)),
    ("Nationality", lambda f, r: f.country()),
    ("Emergency contact", lambda f, r: f.name()),
]


def form(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a = Asker(c, rng, wording)
    m = c.px(60)
    title = c.text(m, c.px(50), rng.choice(FORM_TITLES), "sans-bold", 26)
    c.hline(m, c.width - m, c.px(92), 2)
    fields = rng.sample(FORM_FIELDS, rng.randint(6, 11))
    cols = rng.choice([1, 2])
    col_w = (c.width - 2 * m) / cols
    stacked = rng.random() < 0.4  # value under its label instead of beside it
    y, col, row_h = c.px(120), 0, c.px(62 if stacked else 40)
    values = {}
    for label, gen in fields:
        x = m + col * col_w
        lab = c.text(x, y, label + ":", "sans-bold", 13)
        vx, vy = (x, y + c.px(22)) if stacked else (x + c.font("sans-bold", 13).getlength(label + ": ") + c.px(8), y)
        val = c.text(vx, vy, gen(fake, rng), rng.choice(["sans", "mono", "serif"]), 13, max_x=x + col_w - c.px(10))
        c.hline(vx, x + col_w - c.px(20), vy + c.px(19), 1, "#999")
        values[label] = (lab, val)
        col = (col + 1) % cols
        if col == 0:
            y += row_h
    y += row_h + (c.px(10) if col else 0)
    # Checkboxes: one ticked option.
    group, options = rng.choice(
        [
            ("Marital status", ["Single", "Married", "Divorced", "Widowed"]),
            ("Preferred contact", ["Email", "Phone", "Post"]),
            ("Membership", ["Basic", "Standard", "Premium"]),
        ]
    )
    c.text(m, y, group + ":", "sans-bold", 13)
    x, ticked = m + c.px(200), rng.randrange(len(options))
    chosen = None
    for i, opt in enumerate(options):
        s = c.px(14)
        c.rect((x, y + c.px(2), x + s, y + c.px(2) + s), width=max(1, round(c.px(1.5))))
        if i == ticked:
            c.draw.line(
                [(x + 2, y + c.px(9)), (x + s / 2, y + s), (x + s - 1, y + c.px(3))],
                fill="black",
                width=max(1, round(c.px(2))),
            )
        ids = c.text(x + s + c.px(6), y, opt, "sans", 13)
        if i == ticked:
            box = c.box_of(ids)
            chosen = a.answer(ids, (x - 2, min(box[1], y), box[2], max(box[3], y + s + 4)))
        x += s + c.px(30) + c.font("sans", 13).getlength(opt)
    y += c.px(70)
    sig_label = c.text(m, y, "Signature:", "sans-bold", 13)
    sx0, sy = m + c.px(110), y + c.px(18)
    c.hline(sx0, sx0 + c.px(260), sy, 1)
    if rng.random() < 0.6:  # a scribble
        pts = [(sx0 + c.px(10) + i * c.px(12), sy - c.px(6) - rng.uniform(0, c.px(14))) for i in range(16)]
        c.draw.line(pts, fill="#123", width=max(1, round(c.px(1.5))))
    sig = Answer([box_polygon((sx0, sy - c.px(26), sx0 + c.px(260), sy + c.px(4)))], "", [])
    date_ids = c.text(sx0 + c.px(300), y, "Date: " + _date(fake, rng), "sans", 13)

    for label, (lab, val) in rng.sample(list(values.items()), min(4, len(values))):
        a.ask(
            ["What is the {l}?", "What is written in the {l} field?", "Give the {l}."],
            "key",
            a.answer(val),
            l=label.lower(),
        )
        a.ask(["Where is the {l} field?", "Find the {l} entry."], "field", a.answer(lab + val), l=label.lower())
    a.ask(["Which {g} option is checked?", "What is ticked for {g}?"], "choice", chosen, g=group.lower())
    a.ask(["Where is the signature?", "Where should the form be signed?"], "layout", sig)
    a.ask(["What is the title of this form?", "Where is the form title?"], "layout", a.answer(title))
    a.ask(["Where is the signature date?"], "key", a.answer(date_ids[1:]))
    del sig_label
    return a.questions


# ---------------------------------------------------------------------------------------- invoice
ITEMS = [
    "Consulting services",
    "Software licence",
    "Office chairs",
    "Printer toner",
    "Cloud hosting",
    "Support plan",
    "Laptop stand",
    "Design work",
    "Training session",
    "Shipping",
    "Maintenance",
    "Cable set",
    "Desk lamp",
]


def invoice(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a, v = Asker(c, rng, wording), vocab or Vocabulary()
    m = c.px(55)
    seller = c.text(m, c.px(50), fake.company(), "sans-bold", 18)
    y = c.px(78)
    seller_addr = []
    for line in _address_lines(fake):
        seller_addr += c.text(m, y, line, "sans", 11)
        y += c.px(17)
    rx = c.width * 0.58
    c.text(rx, c.px(48), rng.choice(["INVOICE", "Invoice", "TAX INVOICE"]), "sans-bold", 24)
    fields = {}
    ry = c.px(88)
    for key, val in [
        ("Invoice no.", f"{rng.choice(['INV', 'F', 'No'])}-{rng.randint(1000, 99999)}"),
        ("Date", _date(fake, rng)),
        ("Due date", _date(fake, rng)),
    ]:
        k = c.text(rx, ry, v.label(key) + ":", "sans-bold", 12)
        value = c.text(rx + c.px(110), ry, val, "sans", 12)
        fields[key] = (k, value)
        ry += c.px(20)
    y = max(y, ry) + c.px(30)
    c.text(m, y, v.label("Bill to:"), "sans-bold", 12)
    y += c.px(20)
    bill = c.text(m, y, fake.name(), "sans", 12)
    y += c.px(18)
    for line in _address_lines(fake):
        bill += c.text(m, y, line, "sans", 12)
        y += c.px(18)
    y += c.px(25)
    cols = [m, c.width * 0.55, c.width * 0.66, c.width * 0.8]
    rows, table_box, y = _line_items(c, rng, v, cols, y)
    subtotal = sum(q * p for _, q, p, _ in rows)
    rate = rng.choice([0.05, 0.07, 0.1, 0.19, 0.2])
    y += c.px(12)
    totals = {}
    for key, val in [("Subtotal", subtotal), (f"Tax ({rate:.0%})", subtotal * rate), ("Total", subtotal * (1 + rate))]:
        k = c.text(cols[2], y, v.label(key) + ":", "sans-bold", 12)
        value = c.text(cols[3], y, v.money(val), "sans-bold" if key == "Total" else "sans", 12)
        totals[key.split()[0]] = (k, value)
        y += c.px(22)
    c.paragraph(m, y + c.px(30), c.width - 2 * m, "Payment terms: " + fake.sentence(nb_words=14), "sans", 10)

    _ask_invoice(a, rng, fields, totals, rows, bill, seller + seller_addr, table_box)
    return a.questions


def _line_items(c: Canvas, rng: random.Random, v: Vocabulary, cols: list[float], y: float):
    """An invoice's table of 3 to 8 items (description, quantity, unit price, amount) from ``y``: (rows as (item,
    quantity, price, cells), the table's box, the next line's y)."""
    m, top = cols[0], y
    c.rect((m - 4, y - 4, c.width - m, y + c.px(22)), fill="#e8e8e8", outline="#e8e8e8")
    for x, h in zip(cols, ["Description", "Qty", "Unit price", "Amount"]):
        c.text(x, y, h, "sans-bold", 12)
    y += c.px(30)
    rows = []
    for item in rng.sample(ITEMS, rng.randint(3, 8)):
        qty, price = rng.randint(1, 20), _money(rng, 5, 400)
        cells = [
            c.text(cols[0], y, item, "sans", 12),
            c.text(cols[1], y, str(qty), "sans", 12),
            c.text(cols[2], y, v.money(price), "sans", 12),
            c.text(cols[3], y, v.money(qty * price), "sans", 12),
        ]
        rows.append((item, qty, price, cells))
        y += c.px(24)
        c.hline(m, c.width - m, y - c.px(5), 1, "#ccc")
    return rows, (m - 4, top - 4, c.width - m, y), y


def _ask_invoice(a: Asker, rng: random.Random, fields: dict, totals: dict, rows: list, bill, seller, table_box) -> None:
    """The invoice's questions: its number, dates, total, a line's amount and quantity, the addresses, the table."""
    a.ask(
        ["What is the invoice number?", "Which number does this invoice have?"],
        "key",
        a.answer(fields["Invoice no."][1]),
    )
    a.ask(["What is the invoice date?", "When was the invoice issued?"], "key", a.answer(fields["Date"][1]))
    a.ask(["What is the due date?", "By when must this be paid?"], "key", a.answer(fields["Due date"][1]))
    a.ask(
        ["Where is a date?", "Show a date on this invoice."],
        "ambiguous",
        a.answer(fields["Date"][1]),
        a.answer(fields["Due date"][1]),
    )
    a.ask(["What is the total amount due?", "What is the invoice total?"], "key", a.answer(totals["Total"][1]))
    k = rng.randrange(len(rows))
    a.ask(["What is the amount of line {n}?", "Total of line {n}?"], "table", a.answer(rows[k][3][3]), n=str(k + 1))
    item, _, _, cells = rows[rng.randrange(len(rows))]
    a.ask(["How many {i} were billed?", "What is the quantity of {i}?"], "table", a.answer(cells[1]), i=item.lower())
    a.ask(["Where is the billing address?", "Who is this invoice addressed to?"], "field", a.answer(bill))
    a.ask(["Where is the seller's address?", "Where is the sender's address?"], "field", a.answer(seller))
    a.ask(
        ["Where is the line-items table?", "Where are the invoice items listed?"],
        "layout",
        Answer([box_polygon(table_box)], "", []),
    )


# ---------------------------------------------------------------------------------------- receipt
def receipt(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a, v = Asker(c, rng, wording), vocab or Vocabulary()
    w = c.width * rng.uniform(0.42, 0.55)
    x0 = (c.width - w) / 2
    c.rect((x0 - c.px(15), c.px(30), x0 + w + c.px(15), c.height - c.px(30)), outline="#bbb", fill="#fbfbf6")
    store = c.text(x0 + c.px(10), c.px(50), fake.company().upper(), "mono", 15, max_x=x0 + w)
    y = c.px(80)
    for line in _address_lines(fake)[:2]:
        c.text(x0, y, line, "mono", 10, max_x=x0 + w)
        y += c.px(16)
    when = c.text(x0, y + c.px(6), _date(fake, rng) + " " + fake.time("%H:%M", end_datetime=_LAST_DAY), "mono", 11)
    y += c.px(40)
    items = []
    for name in rng.sample(ITEMS, rng.randint(3, 9)):
        price = _money(rng, 1, 60)
        n = c.text(x0, y, name, "mono", 11, max_x=x0 + w * 0.7)
        p = c.text(x0 + w * 0.75, y, v.money(price, grouped=False), "mono", 11)
        items.append((name, price, n, p))
        y += c.px(19)
    c.hline(x0, x0 + w, y + c.px(4), 1)
    y += c.px(14)
    total = sum(p for _, p, _, _ in items)
    tk = c.text(x0, y, v.label("TOTAL"), "mono", 13)
    tv = c.text(x0 + w * 0.75, y, v.money(total, grouped=False), "mono", 13)
    y += c.px(26)
    pay = rng.choice(["VISA", "CASH", "MASTERCARD", "DEBIT CARD"])
    pk = c.text(x0, y, v.label("Paid by") + " " + pay, "mono", 11)
    c.text(x0 + c.px(10), y + c.px(40), "Thank you for shopping!", "mono", 10)

    a.ask(["What is the total?", "How much was paid in total?"], "key", a.answer(tv))
    name, _, _, p = items[rng.randrange(len(items))]
    a.ask(["What did {i} cost?", "What is the price of {i}?"], "table", a.answer(p), i=name.lower())
    a.ask(["When was this purchase made?", "What is the date of the receipt?"], "key", a.answer(when))
    a.ask(["Where is the store name?", "Which shop issued this receipt?"], "layout", a.answer(store))
    a.ask(["How was it paid?", "What payment method was used?"], "key", a.answer(pk[-len(pay.split()) :]))
    a.ask(["Where is the total line?"], "field", a.answer(tk + tv))
    return a.questions


# ----------------------------------------------------------------------------------------- letter
def letter(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a = Asker(c, rng, wording)
    m = c.px(70)
    colour = rng.choice(["#1f3a68", "#5a1f1f", "#1f5a3a", "#333333"])
    c.rect((0, 0, c.width, c.px(12)), fill=colour, outline=colour)
    company = c.text(m, c.px(40), fake.company(), "serif-bold", 20, fill=colour)
    y = c.px(70)
    sender = []
    for line in [*_address_lines(fake), fake.phone_number()]:
        sender += c.text(m, y, line, "sans", 10, fill="#444")
        y += c.px(15)
    y += c.px(30)
    date = c.text(c.width - m - c.px(170), y, _date(fake, rng), "serif", 12)
    y += c.px(30)
    recipient = c.text(m, y, fake.name(), "serif", 12)
    y += c.px(19)
    for line in _address_lines(fake):
        recipient += c.text(m, y, line, "serif", 12)
        y += c.px(19)
    y += c.px(25)
    subject = c.text(m, y, "Re: " + fake.sentence(nb_words=5).rstrip("."), "serif-bold", 12)
    y += c.px(35)
    name = fake.name()
    c.text(m, y, f"Dear {name.split()[-1]},", "serif", 12)
    y += c.px(30)
    paragraphs = []
    for _ in range(rng.randint(2, 4)):
        ids, y = c.paragraph(m, y, c.width - 2 * m, fake.paragraph(nb_sentences=rng.randint(3, 6)), "serif", 12)
        paragraphs.append(ids)
        y += c.px(14)
    c.text(m, y + c.px(5), rng.choice(["Sincerely,", "Yours faithfully,", "Kind regards,"]), "serif", 12)
    sy = y + c.px(45)
    pts = [(m + i * c.px(10), sy + rng.uniform(-c.px(8), c.px(8))) for i in range(14)]
    c.draw.line(pts, fill="#124", width=max(1, round(c.px(1.5))))
    signer = c.text(m, sy + c.px(20), fake.name(), "serif", 12)
    c.text(m, sy + c.px(38), fake.job(), "serif", 11, max_x=c.width - m)

    a.ask(["Where is the sender's address?", "Where is the letterhead address?"], "field", a.answer(sender))
    a.ask(["Where is the recipient's address?", "To whom is the letter addressed?"], "field", a.answer(recipient))
    a.ask(["What is the date of the letter?", "When was this letter written?"], "key", a.answer(date))
    a.ask(["Who signed the letter?", "What is the name of the signatory?"], "key", a.answer(signer))
    a.ask(["What is the subject?", "What is this letter about?"], "key", a.answer(subject[1:]))
    a.ask(["Which company sent this letter?"], "key", a.answer(company))
    if len(paragraphs) >= 2 and paragraphs[1]:
        a.ask(["Where is the second paragraph?"], "layout", a.answer(paragraphs[1]))
    a.ask(
        ["Where is the signature?"],
        "layout",
        Answer([box_polygon((m - 4, sy - c.px(14), m + c.px(150), sy + c.px(14)))], "", []),
    )
    return a.questions


# ------------------------------------------------------------------------------------------ table
def table(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a = Asker(c, rng, wording)
    m = c.px(50)
    kind = rng.choice(["staff", "sales"])
    if kind == "staff":
        title_text, headers = "Staff directory", ["Name", "Department", "Phone", "Start date"]
        gen = [
            lambda: fake.name(),
            lambda: rng.choice(["Sales", "Finance", "IT", "Legal", "HR", "Support"]),
            lambda: fake.phone_number(),
            lambda: _date(fake, rng),
        ]
    else:
        title_text, headers = f"Sales by region {rng.randint(2015, 2026)}", ["Region", "Q1", "Q2", "Q3", "Q4"]
        gen = [lambda: fake.city()] + [lambda: f"{rng.randint(100, 99999):,}"] * 4
    title = c.text(m, c.px(50), title_text, "sans-bold", 20)
    n_rows = rng.randint(6, 18)
    col_w = (c.width - 2 * m) / len(headers)
    y0 = c.px(100)
    row_h = c.px(rng.choice([26, 30, 34]))
    c.rect((m, y0, c.width - m, y0 + row_h), fill="#dde4ee", outline="#99a")
    header_ids = []
    for j, h in enumerate(headers):
        header_ids.append(c.text(m + j * col_w + c.px(6), y0 + c.px(5), h, "sans-bold", 12))
    cells = []
    for i in range(n_rows):
        y = y0 + (i + 1) * row_h
        c.rect((m, y, c.width - m, y + row_h), outline="#99a", fill="#f6f6f6" if i % 2 else None)
        cells.append(
            [
                c.text(m + j * col_w + c.px(6), y + c.px(5), g(), "sans", 11, max_x=m + (j + 1) * col_w - 4)
                for j, g in enumerate(gen)
            ]
        )
    for j in range(1, len(headers)):
        c.draw.line([(m + j * col_w, y0), (m + j * col_w, y0 + (n_rows + 1) * row_h)], fill="#99a")
    i, j = rng.randrange(n_rows), rng.randrange(1, len(headers))
    key = " ".join(c.words[w].text for w in cells[i][0])
    a.ask(["What is the {h} of {k}?", "Find {h} for {k}."], "table", a.answer(cells[i][j]), h=headers[j], k=key)
    col = rng.randrange(len(headers))
    col_box = (m + col * col_w, y0, m + (col + 1) * col_w, y0 + (n_rows + 1) * row_h)
    a.ask(["Where is the {h} column?"], "table", Answer([box_polygon(col_box)], "", []), h=headers[col])
    a.ask(["Where is the table header?"], "layout", Answer([box_polygon((m, y0, c.width - m, y0 + row_h))], "", []))
    a.ask(["What is the title of the table?", "Where is the title?"], "layout", a.answer(title))
    r = rng.randrange(n_rows)
    row_box = (m, y0 + (r + 1) * row_h, c.width - m, y0 + (r + 2) * row_h)
    a.ask(
        ["Where is the row for {k}?"],
        "table",
        Answer([box_polygon(row_box)], "", []),
        k=" ".join(c.words[w].text for w in cells[r][0]),
    )
    return a.questions


# ------------------------------------------------------------------------------------ multicolumn
def multicolumn(
    c: Canvas, fake: Faker, rng: random.Random, wording: random.Random | None = None, vocab: Vocabulary | None = None
) -> list[Question]:
    a = Asker(c, rng, wording)
    m = c.px(50)
    headline = c.text(m, c.px(45), fake.catch_phrase().title(), "serif-bold", 24, max_x=c.width - m)
    author = fake.name()
    by = c.text(m, c.px(85), f"By {author}", "sans", 11, fill="#555")
    n_cols = rng.choice([2, 3])
    gap = c.px(25)
    col_w = (c.width - 2 * m - gap * (n_cols - 1)) / n_cols
    sections = []
    column_ids: list[list[int]] = []
    for j in range(n_cols):
        x, y, ids = m + j * (col_w + gap), c.px(120), []
        while y < c.height - c.px(150):
            heading = fake.word().capitalize() + " " + fake.word()
            h = c.text(x, y, heading, "sans-bold", 13, max_x=x + col_w)
            body, y = c.paragraph(x, y + c.px(22), col_w, fake.paragraph(nb_sentences=rng.randint(3, 6)), "serif", 11)
            sections.append((heading, h, body))
            ids += h + body
            y += c.px(18)
        column_ids.append(ids)
    a.ask(["Where is the headline?", "What is the title of the article?"], "layout", a.answer(headline))
    a.ask(["Who wrote this article?", "Who is the author?"], "key", a.answer(by[1:]))
    heading, h, body = sections[rng.randrange(len(sections))]
    a.ask(["Where is the section about {s}?", "Find the section titled {s}."], "field", a.answer(h + body), s=heading)
    j = rng.randrange(n_cols)
    a.ask(["Where is the {o} column?"], "layout", a.answer(column_ids[j]), o=["first", "second", "third"][j])
    return a.questions


LAYOUTS: dict[str, Callable[..., list[Question]]] = {
    # (canvas, faker, rng, wording=None) → questions
    "form": form,
    "invoice": invoice,
    "receipt": receipt,
    "letter": letter,
    "table": table,
    "multicolumn": multicolumn,
}
