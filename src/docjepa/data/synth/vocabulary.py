"""How real business documents word their labels and print their amounts (``phrasings="business"``).

Invoices and receipts in the wild say "Invoice #", "Bill number" or "Invoice no.", "Amount due", "Balance due"
or "Grand total", and print 1,234.56, 1.234,56 or 1 234,56 with or without a currency sign. The layouts draw
each label through :meth:`Vocabulary.label` and each amount through :meth:`Vocabulary.money`: with no random
stream (``original`` and ``extended`` phrasings) they print exactly what they always did, so those pages are
unchanged; with one (``business``), each page picks its own wording of every label and one number format, from a
stream of its own, so the page's layout, values and questions are drawn as before.
"""

from __future__ import annotations

import random

LABELS: dict[str, tuple[str, ...]] = {
    "Invoice no.": ("Invoice #", "Invoice number", "Bill number", "Invoice No", "Document no."),
    "Date": ("Invoice date", "Date of issue", "Issue date", "Dated"),
    "Due date": ("Payment due", "Due", "Pay by", "Due by"),
    "Bill to:": ("Billed to:", "Invoice to:", "Customer:", "Sold to:"),
    "Subtotal": ("Net amount", "Sub-total", "Net total"),
    "Total": ("Amount due", "Balance due", "Grand total", "Total due", "Amount payable"),
    "TOTAL": ("TOTAL DUE", "AMOUNT", "BALANCE", "TO PAY"),
    "Paid by": ("Payment:", "Tender", "Paid with"),
}
"""Other wordings of a label, keyed by the wording the layouts print by default."""

NUMBER_STYLES = (("{int}.{frac}", ","), ("{int},{frac}", "."), ("{int},{frac}", " "), ("{int}.{frac}", ""))
"""(pattern, thousands separator): 1,234.56, 1.234,56, 1 234,56 and 1234.56 (the decimal mark is in the
pattern)."""
CURRENCIES = ("", "", "$", "€", "£", "EUR", "USD", "CHF")


def _group(digits: str, sep: str) -> str:
    if not sep:
        return digits
    head = len(digits) % 3 or 3
    return sep.join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])


class Vocabulary:
    """A page's wording of labels and amounts; ``rng`` None prints the layouts' defaults."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng
        self.labels: dict[str, str] = {}
        if rng is None:
            self.style, self.currency = None, ""
        else:
            self.style = rng.choice(NUMBER_STYLES)
            self.currency = rng.choice(CURRENCIES)

    def label(self, key: str) -> str:
        """The page's wording of ``key`` (the same every time it is asked on one page)."""
        if self.rng is None or key not in LABELS:
            return key
        if key not in self.labels:
            self.labels[key] = self.rng.choice((key, *LABELS[key]))
        return self.labels[key]

    def money(self, value: float, grouped: bool = True) -> str:
        """An amount as this page prints it: ``1,234.56`` by default (``1234.56`` when not ``grouped``)."""
        if self.style is None:
            return f"{value:,.2f}" if grouped else f"{value:.2f}"
        pattern, sep = self.style
        whole, frac = f"{abs(value):.2f}".split(".")
        sign = "-" if value < 0 else ""
        text = sign + pattern.format(int=_group(whole, sep if grouped else ""), frac=frac)
        if not self.currency:
            return text
        return f"{self.currency}{text}" if self.currency in "$£" else f"{text} {self.currency}"
