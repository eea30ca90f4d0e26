"""A non-learned baseline: match the question's words against the OCR, return the nearest value region.

1. The question's content words (stop words such as "what", "is", "the", "where" removed) are compared with
   every OCR word (case-folded; equal, or sharing a prefix of at least 4 letters, or difflib ratio ≥ 0.8).
2. The key is the run of up to 4 consecutive words on one line with the highest total match.
3. The label runs on over close words to one that ends with ":" ("Invoice no.: INV-1"); where no close word
   after the key ends with ":", the key alone is the label ("Version 2.8": 2.8 is the value). The answer is the
   value next to it: the nearest word to its right on the same line and those following it (up to a gap wider
   than three word heights); if there are none, the words of the next line below that overlap it
   horizontally. Its box is the union of those words.

A question that asks for the page number ("What is the page number?", "What page is this?") is answered by page
convention, not by matching "page" in the text: the number (digits or a roman numeral) in the page's first or
last line that stands alone there, follows "Page", or begins or ends that line set apart from its other words (a
running header "2.1 Options      17"; not a heading "3 Usage"). The last line's number comes before the first's,
and one alone or after "Page" before one at a line's edge. Where neither line has one, the question is matched
as any other.

A question that quotes text ("Where does section 'Installation' begin?", "Find “Total due”") asks where that
text is: the answer is then the run of words that best matches the quoted text itself (steps 1 and 2 with the
quote's words, a run as long as the quote), not the value next to it.
"""

from __future__ import annotations

import difflib
import functools
import re

from .lexical import content_words, normalise
from .record import Word, union_box


@functools.lru_cache(maxsize=1 << 16)  # pure; a page's words meet the same question terms again and again
def _similar(a: str, b: str) -> float:
    if a == b:
        return 1.0
    if len(a) >= 4 and len(b) >= 4 and a[:4] == b[:4]:
        return 0.9
    m = difflib.SequenceMatcher(None, a, b)
    if m.real_quick_ratio() < 0.8 or m.quick_ratio() < 0.8:  # upper bounds of ratio(): same result, less work
        return 0.0
    r = m.ratio()
    return r if r >= 0.8 else 0.0


def _same_line(a: Word, b: Word) -> bool:
    ca, cb = (a.box[1] + a.box[3]) / 2, (b.box[1] + b.box[3]) / 2
    h = max(a.box[3] - a.box[1], b.box[3] - b.box[1], 1.0)
    return abs(ca - cb) < 0.5 * h


QUOTED = re.compile(r"(?:^|(?<=\s))[\'\"\u2018\u201c](.+?)[\'\"\u2019\u201d](?=$|[\s?.,!:;)])")
"""A quoted span: an opening quote at the start or after a space, its closing quote before a space, punctuation
or the end (so the apostrophes of "company's" and "What's" quote nothing)."""


def quoted(question: str) -> str | None:
    """The first text the question quotes, or None."""
    m = QUOTED.search(question)
    return m.group(1).strip() or None if m else None


PAGE_TERMS = frozenset({"page", "pg", "number", "no", "num", "nr", "#"})
"""The words a question that asks only for the page number is made of (stop words aside)."""
_PAGE_NUMBER = re.compile(r"^(\d{1,4}|[ivxlcdm]{1,7})$")
_PAGE_LABEL = frozenset({"page", "p", "pg", "pag", "seite"})


def asks_page_number(question: str) -> bool:
    """Does the question ask only for the page's number ("What is the page number?", "Which page is this?")?"""
    terms = {normalise(t) for t in content_words(question)} - {""}
    return bool(terms) and terms <= PAGE_TERMS and bool(terms & {"page", "pg"})


def _apart(left: Word, right: Word) -> bool:
    """Is there a gap of more than two word heights between two words of one line?"""
    return right.box[0] - left.box[2] > 2 * max(left.box[3] - left.box[1], right.box[3] - right.box[1], 1.0)


def page_number_word(words: list[Word]) -> Word | None:
    """The page's printed number by convention (see the module's docstring), or None when its first and last
    lines show none."""
    if not words:
        return None
    top, bottom = min(words, key=lambda w: w.box[1]), max(words, key=lambda w: w.box[3])
    best, found = 0, None
    for footer, edge in ((1, bottom), (0, top)):
        line = sorted((w for w in words if _same_line(edge, w)), key=lambda w: w.box[0])
        for k, w in enumerate(line):
            if not _PAGE_NUMBER.match(normalise(w.text).strip("-")):
                continue
            if len(line) == 1 or (k > 0 and normalise(line[k - 1].text) in _PAGE_LABEL):
                score = 2
            elif (k == 0 and _apart(w, line[1])) or (k == len(line) - 1 and _apart(line[k - 1], w)):
                score = 1  # set apart at the line's start or end ("12  Chapter", "Usage  17"), not "3 Usage"
            else:
                continue
            score = 2 * score + footer
            if score > best:
                best, found = score, w
    return found


def _best_run(terms: list[str], words: list[Word], longest: int) -> tuple[int, int] | None:
    """The run of up to ``longest`` consecutive words on one line whose words best match ``terms`` (step 2),
    beginning and ending on a matching word."""
    norm = [normalise(w.text) for w in words]
    score = [max((_similar(n, t) for t in terms), default=0.0) if n else 0.0 for n in norm]
    best, key = 0.0, None
    for i in range(len(words)):
        if score[i] == 0:
            continue
        total = 0.0
        for j in range(i, min(i + longest, len(words))):
            if j > i and not _same_line(words[j - 1], words[j]):
                break
            total += score[j]
            if score[j] > 0 and total > best:
                best, key = total, (i, j)
    return key


def baseline_box(question: str, words: list[Word]) -> tuple[float, float, float, float] | None:
    """The baseline's answer box in page pixels, or None when nothing in the question matches the page."""
    if not words:
        return None
    if asks_page_number(question):
        number = page_number_word(words)
        if number is not None:
            return tuple(number.box)
    phrase = quoted(question)
    if phrase is not None:
        terms = content_words(phrase) or [normalise(t) for t in phrase.split() if normalise(t)]
        key = _best_run(terms, words, max(4, len(phrase.split()))) if terms else None
        if key is not None:
            return union_box([w.box for w in words[key[0] : key[1] + 1]])
    terms = content_words(question)
    if not terms:
        return None
    norm = [normalise(w.text) for w in words]
    score = [max((_similar(n, t) for t in terms), default=0.0) if n else 0.0 for n in norm]
    best, key = 0.0, None
    for i in range(len(words)):
        total = 0.0
        for j in range(i, min(i + 4, len(words))):
            if j > i and not _same_line(words[j - 1], words[j]):
                break
            total += score[j]
            if score[j] > 0 and total > best:
                best, key = total, (i, j)
    if key is None:
        return None
    i, j = key
    anchor = words[j]
    height = max(anchor.box[3] - anchor.box[1], 1.0)
    right = sorted(
        (w for w in words if _same_line(anchor, w) and w.box[0] >= anchor.box[2] - 1), key=lambda w: w.box[0]
    )
    # The label goes on over close words to one that ends with ':' ("Invoice no.: INV-1" → "no.:" is label);
    # with no such word in the close run, the key alone is the label ("Version 2.8" → "2.8" is the value).
    k, edge = 0, anchor.box[2]
    if not anchor.text.endswith(":"):
        for n, w in enumerate(right):
            if w.box[0] - edge >= 0.8 * height:
                break
            if w.text.endswith(":"):
                anchor, k = w, n + 1
                break
            edge = w.box[2]
    value, edge = [], anchor.box[2]
    for w in right[k:]:
        if value and w.box[0] - edge > 3 * height:  # the first word right of the label is taken however far
            break
        value.append(w)
        edge = w.box[2]
    if not value:
        x0, x1 = min(w.box[0] for w in words[i : j + 1]), anchor.box[2]
        below = [w for w in words if w.box[1] > anchor.box[3] - 1 and w.box[0] < x1 + 3 * height and w.box[2] > x0]
        if below:
            top = min(w.box[1] for w in below)
            value = [w for w in below if w.box[1] < top + height]
    if not value:
        return None
    return union_box([w.box for w in value])
