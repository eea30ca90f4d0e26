"""Questions a PDF declares about itself: structural rules that turn a real document into labelled pages.

A typeset PDF says a lot about its own layout: its outline (bookmarks) points at section starts, its title page
sets the title in the largest type with the author, date and version under it, its pages carry running headers
and printed page numbers, a contents page lists the sections, captions start with "Figure 3" or "Table 2", and
form fields have names and widget boxes. Each rule here reads one of these and asks the question a person would,
with the answer region taken from the page's own words (or the widget's rectangle):

============  ===================================================  =========================================
kind          question                                             answer
============  ===================================================  =========================================
title         What is the title?                                   the title lines (largest type, page 1)
author        Who is the author?                                   the author line under the title
date          What is the date?                                    the date's words under the title
version       What is the version number?                          the version's word under the title
section       Where does section 'X' begin?                        the heading line the bookmark points at
contents      Where is the table of contents?                      "Contents" and the entries under it
page-number   What is the page number?                             the printed number in the top/bottom margin
header        Where is the running header?                         the header line repeated over pages
caption       Where is the caption of Table 2?                     the caption's lines
field         Where is the form field 'X'?                         the field's widget rectangle
============  ===================================================  =========================================

Rules are conservative: a page gets a question only when the rule's evidence is unambiguous (one match, within
the place it should be), since a wrong label teaches the wrong thing. Lines are rebuilt from the import's words
(same segmentation, so word ids agree) and font sizes come from the text layer.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from .kinds import STRUCTURE_KINDS, check_kind
from .record import Answer, Box, Question, Word, box_polygon, union_box

log = logging.getLogger("docjepa.structure")

KINDS = STRUCTURE_KINDS
"""The kinds these rules ask (``data.kinds``), in the order the real-page benchmark reports them."""
MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
DATE = re.compile(
    rf"(\b\d{{4}}[/-]\d{{1,2}}[/-]\d{{1,2}}\b"
    rf"|\b(?:\d{{1,2}}(?:st|nd|rd|th)?\.?\s+)?(?:{MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?\d{{4}}\b"
    rf"|\b\d{{1,2}}[./]\d{{1,2}}[./]\d{{4}}\b)",
    re.IGNORECASE,
)
VERSION = re.compile(r"(?:\bversion\s+|\brelease\s+|\bv\.?\s?|\brev\.?\s)(\d+(?:\.\d+)*[a-z]?)\b", re.IGNORECASE)
CAPTION = re.compile(r"^(Figure|Fig\.|Table|Listing)\s+(\d+(?:\.\d+)?)\s*[:.]", re.IGNORECASE)
CONTENTS = re.compile(r"^(table\s+of\s+)?contents$", re.IGNORECASE)
SUBTITLE = r"\b(package|class|bundle|documentation|manual|user|guide|for|the)\b"
"""Words that mark a line under the title as a subtitle rather than the author's name."""
ROMAN = re.compile(r"^[ivxlc]+$", re.IGNORECASE)


@dataclass
class Line:
    """Words of one text line (indices into the page's words), its box (page pixels) and font size (points)."""

    ids: list[int]
    box: Box
    size: float
    text: str

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass
class PageText:
    """What the rules read from one PDF page: words (as the import makes them), their font sizes, lines."""

    index: int
    width: float
    height: float
    words: list[Word]
    sizes: list[float]
    lines: list[Line] = field(default_factory=list)


def make_lines(words: list[Word], sizes: list[float]) -> list[Line]:
    """Group words into lines: consecutive words (reading order) whose vertical centres are within half a height."""
    lines: list[Line] = []
    cur: list[int] = []

    def flush() -> None:
        if cur:
            box = union_box([words[i].box for i in cur])
            text = " ".join(words[i].text for i in cur)
            lines.append(Line(list(cur), box, max(sizes[i] for i in cur), text))
            cur.clear()

    for i, w in enumerate(words):
        if cur:
            prev = words[cur[-1]]
            h = max(prev.box[3] - prev.box[1], w.box[3] - w.box[1], 1.0)
            same = abs((prev.box[1] + prev.box[3]) / 2 - (w.box[1] + w.box[3]) / 2) < 0.5 * h
            if not same or w.box[0] < prev.box[0] - 1:
                flush()
        cur.append(i)
    flush()
    return lines


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _answer(page: PageText, groups: list[list[int]], text: str) -> Answer:
    """An answer region per group of word ids (one box per line), with the text and word ids."""
    regions = [box_polygon(union_box([page.words[i].box for i in g])) for g in groups if g]
    return Answer(regions, text, sorted(i for g in groups for i in g))


def _line_answer(page: PageText, lines: list[Line]) -> Answer:
    return _answer(page, [ln.ids for ln in lines], " ".join(ln.text for ln in lines))


def _span_ids(page: PageText, line: Line, start: int, end: int) -> list[int]:
    """Word ids of ``line`` whose characters overlap the character span [start, end) of ``line.text``."""
    out, pos = [], 0
    for i in line.ids:
        n = len(page.words[i].text)
        if pos < end and pos + n > start:
            out.append(i)
        pos += n + 1
    return out


def body_size(pages: list[PageText]) -> float:
    """The most common font size over the document's words (rounded to 0.5 pt): the body text size."""
    counts: dict[float, int] = {}
    for p in pages:
        for s in p.sizes:
            counts[round(s * 2) / 2] = counts.get(round(s * 2) / 2, 0) + 1
    return max(counts, key=counts.get) if counts else 10.0


def title_questions(page: PageText, body: float) -> list[Question]:
    """Title (largest type in the top 60 % of page 1, at least 1.3 × body), then author / date / version among the
    short lines under it (up to 8 lines, stopping at "Abstract", "Contents" or a long paragraph line)."""
    top = [
        ln
        for ln in page.lines
        if ln.box[1] < 0.6 * page.height
        and sum(c.isalpha() for c in ln.text) >= max(2, 0.6 * len(ln.text.replace(" ", "")))
        and len(ln.ids) <= 12
    ]
    if not top:
        return []
    biggest = max(ln.size for ln in top)
    if biggest < 1.3 * body:
        return []
    k = next(i for i, ln in enumerate(page.lines) if ln in top and ln.size >= biggest - 0.3)
    title = [page.lines[k]]
    for ln in page.lines[k + 1 :]:  # a title set on several lines: consecutive lines of the same size
        if abs(ln.size - biggest) < 0.3 and ln.box[1] - title[-1].box[3] < 1.0 * title[-1].height:
            title.append(ln)
        else:
            break
    out = [Question("What is the title?", "title", [_line_answer(page, title)])]
    rest = page.lines[k + len(title) : k + len(title) + 8]
    author: list[Line] = []
    date = version = None
    for ln in rest:
        if re.match(r"^(abstract|contents|table of contents|introduction|1\s)", ln.text, re.IGNORECASE):
            break
        if len(ln.ids) > 12 or ln.size > biggest - 0.3:
            break
        d = DATE.search(ln.text)
        v = VERSION.search(ln.text)
        if d and date is None:
            date = (ln, d.start(), d.end())
        if v and version is None:
            version = (ln, v.start(1), v.end(1))
        plain = not d and not v and "@" not in ln.text and sum(c.isalpha() for c in ln.text) >= 4
        if plain and not author and not re.search(SUBTITLE, ln.text, re.IGNORECASE):
            author = [ln]
    if author:
        out.append(Question("Who is the author?", "author", [_line_answer(page, author)]))
    for spec, text, kind in ((date, "What is the date?", "date"), (version, "What is the version number?", "version")):
        if spec:
            ln, s, e = spec
            ids = _span_ids(page, ln, s, e)
            if ids:
                out.append(Question(text, kind, [_answer(page, [ids], ln.text[s:e])]))
    return out


def section_questions(pages: list[PageText], outline: list[tuple[str, int, float | None]], scale: float) -> dict:
    """{page index: [questions]} from outline entries (title, page index, destination top in PDF points or None):
    the heading line on the target page whose text matches the entry (a leading section number allowed), nearest
    below the destination's top; an entry whose title matches no line, or two equally well, is left out."""
    out: dict[int, list[Question]] = {}
    seen: set[str] = set()
    for title, index, top in outline:
        key = _norm(title)
        if not key or key in seen or CONTENTS.match(key) or not 0 <= index < len(pages):
            continue
        seen.add(key)
        page = pages[index]
        best, best_score, ties = None, 0.0, 0
        for i, ln in enumerate(page.lines):
            text = _norm(ln.text)
            cand = [text, re.sub(r"^[0-9ivx]+(\s[0-9]+)*\s", "", text)]
            score = max(difflib.SequenceMatcher(None, key, c).ratio() for c in cand)
            if top is not None:
                y = page.height - top * scale  # destination top in pixels from the page top
                if ln.box[3] < y - 2 * max(ln.height, 1) or ln.box[1] > y + 200 * scale:
                    continue
            if score > best_score + 1e-9:
                best, best_score, ties = i, score, 0
            elif abs(score - best_score) < 1e-9:
                ties += 1
        if best is None or best_score < 0.9 or ties:
            continue
        ln = page.lines[best]
        q = Question(f"Where does section '{title.strip()}' begin?", "section", [_line_answer(page, [ln])])
        out.setdefault(index, []).append(q)
    return out


def contents_question(page: PageText) -> Question | None:
    """A "Contents" heading line and the entries under it (lines ending in a page number, gaps of up to two other
    lines), when there are at least three entries."""
    for k, ln in enumerate(page.lines):
        if not CONTENTS.match(_norm(ln.text)):
            continue
        entries, misses = [], 0
        for nxt in page.lines[k + 1 :]:
            last = page.words[nxt.ids[-1]].text.strip(".")
            if last.isdigit() or ROMAN.match(last):
                entries.append(nxt)
                misses = 0
            else:
                misses += 1
                if misses > 2:
                    break
        if len(entries) >= 3:
            box = union_box([ln.box] + [e.box for e in entries])
            ids = [i for i, w in enumerate(page.words) if _inside(w.box, box)]
            return Question("Where is the table of contents?", "contents", [Answer([box_polygon(box)], ln.text, ids)])
    return None


def _inside(b: Box, outer: Box) -> bool:
    cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    return outer[0] <= cx <= outer[2] and outer[1] <= cy <= outer[3]


def margin_questions(pages: list[PageText]) -> dict:
    """Page numbers (a number on the topmost or bottommost line, in the outer 12 % of the page, whose value minus the
    page index is the same on at least three pages) and running headers (the topmost line, numbers removed,
    repeated on at least three pages)."""
    numbers: dict[int, tuple[int, int]] = {}  # page index → (line index, offset)
    heads: dict[int, list[tuple[int, str]]] = {}
    for p in pages:
        if not p.lines:
            continue
        ys = [ln.box[1] for ln in p.lines]
        first, last = ys.index(min(ys)), ys.index(max(ys))
        for li, ln in enumerate(p.lines):  # the topmost and bottommost lines, in the outer 12 % of the page
            in_top = li == first and ln.box[3] < 0.12 * p.height
            in_bottom = li == last and ln.box[1] > 0.88 * p.height
            if not (in_top or in_bottom) or len(ln.ids) > 12:
                continue
            for i in ln.ids:
                if p.words[i].text.isdigit():
                    numbers.setdefault(p.index, (li, int(p.words[i].text) - p.index))
            if in_top:
                key = _norm(re.sub(r"\d+", "", ln.text))
                if len(key) >= 4:
                    heads.setdefault(p.index, []).append((li, key))
    offsets: dict[int, int] = {}
    for _, off in numbers.values():
        offsets[off] = offsets.get(off, 0) + 1
    out: dict[int, list[Question]] = {}
    for idx, (li, off) in numbers.items():
        if offsets[off] < 3:
            continue
        p = pages[idx]
        ids = [i for i in p.lines[li].ids if p.words[i].text == str(idx + off)]
        if len(ids) == 1:
            out.setdefault(idx, []).append(
                Question("What is the page number?", "page-number", [_answer(p, [ids], p.words[ids[0]].text)])
            )
    counts: dict[str, int] = {}
    for items in heads.values():
        for _, key in items:
            counts[key] = counts.get(key, 0) + 1
    for idx, items in heads.items():
        good = [(li, key) for li, key in items if counts[key] >= 3]
        if len(good) != 1:
            continue
        p = pages[idx]
        ln = p.lines[good[0][0]]
        ids = [i for i in ln.ids if not p.words[i].text.isdigit()]
        if ids:
            q = Question(
                "Where is the running header?", "header", [_answer(p, [ids], " ".join(p.words[i].text for i in ids))]
            )
            out.setdefault(idx, []).append(q)
    return out


def caption_questions(page: PageText) -> list[Question]:
    """'Where is the caption of Table 2?' for each caption label that appears once on the page; the answer is the
    caption's line and the lines that continue it (same size, close below, up to four lines)."""
    found: dict[str, list[int]] = {}
    for k, ln in enumerate(page.lines):
        m = CAPTION.match(ln.text)
        if m:
            kind = "Figure" if m.group(1).lower().startswith("fig") else m.group(1).capitalize()
            found.setdefault(f"{kind} {m.group(2)}", []).append(k)
    out = []
    for label, ks in found.items():
        if len(ks) != 1:
            continue
        lines = [page.lines[ks[0]]]
        for ln in page.lines[ks[0] + 1 : ks[0] + 4]:
            prev = lines[-1]
            if (
                abs(ln.size - prev.size) > 0.3
                or ln.box[1] - prev.box[3] > 0.6 * max(prev.height, 1)
                or CAPTION.match(ln.text)
            ):
                break
            lines.append(ln)
        out.append(Question(f"Where is the caption of {label}?", "caption", [_line_answer(page, lines)]))
    return out


def field_questions(path: Path, scale: float, heights: list[float]) -> dict:
    """{page index: [questions]} for AcroForm widgets with a visible rectangle: the field's alternate name (/TU)
    or its name (/T) → the widget box. Needs pypdf; without it, or on a PDF it cannot read, no questions."""
    try:
        import pypdf
    except ImportError:  # pragma: no cover - pypdf is a dependency of the docjepa extra
        return {}
    out: dict[int, list[Question]] = {}
    try:
        reader = pypdf.PdfReader(str(path))
        if "/AcroForm" not in reader.trailer["/Root"]:
            return {}
        for index, pg in enumerate(reader.pages):
            seen: dict[str, int] = {}
            widgets = []
            for ref in pg.get("/Annots") or []:
                a = ref.get_object()
                if a.get("/Subtype") != "/Widget":
                    continue
                node, name = a, None
                while node is not None and name is None:
                    name = node.get("/TU") or node.get("/T")
                    node = node.get("/Parent").get_object() if node.get("/Parent") is not None else None
                rect = [float(v) for v in a.get("/Rect", [0, 0, 0, 0])]
                x0, x1 = sorted((rect[0], rect[2]))
                y0, y1 = sorted((rect[1], rect[3]))
                if not name or x1 - x0 < 2 or y1 - y0 < 2 or int(a.get("/F", 0)) & 2:  # hidden
                    continue
                name = str(name).strip()
                seen[name] = seen.get(name, 0) + 1
                h = heights[index]
                widgets.append((name, (x0 * scale, h - y1 * scale, x1 * scale, h - y0 * scale)))
            for name, box in widgets:
                if seen[name] == 1 and index < len(heights):
                    q = Question(f"Where is the form field '{name}'?", "field", [Answer([box_polygon(box)], name)])
                    out.setdefault(index, []).append(q)
    except Exception as err:  # a malformed form must not stop the import
        log.warning("form fields of %s not read: %s", path, err)
    return out


PER_DOCUMENT = {"section": 8, "page-number": 4, "header": 4, "caption": 8, "field": 12}
"""At most this many questions of a kind per document (spread evenly over it), so that a long manual does not
outweigh the rest."""


def _spread(items: list, n: int) -> list:
    if len(items) <= n:
        return items
    return [items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)] if n > 1 else items[:1]


def document_questions(
    pages: list[PageText], outline: list[tuple[str, int, float | None]], scale: float, fields: dict | None = None
) -> dict[int, list[Question]]:
    """Every rule over one document: {page index: [questions]}, at most :data:`PER_DOCUMENT` of a kind."""
    found: dict[int, list[Question]] = {}

    def add(idx: int, qs: list[Question]) -> None:
        if qs:
            found.setdefault(idx, []).extend(qs)

    if pages:
        add(0, title_questions(pages[0], body_size(pages)))
    for idx, qs in section_questions(pages, outline, scale).items():
        add(idx, qs)
    for p in pages[:8]:
        q = contents_question(p)
        if q:
            add(p.index, [q])
            break
    for idx, qs in margin_questions(pages).items():
        add(idx, qs)
    for p in pages:
        add(p.index, caption_questions(p))
    for idx, qs in (fields or {}).items():
        add(idx, qs)
    out: dict[int, list[Question]] = {}
    for q in (q for qs in found.values() for q in qs):
        check_kind(q.kind, "structure")  # a rule asking a kind the registry does not give it would go unscored
    for kind in KINDS:
        items = [(idx, q) for idx in sorted(found) for q in found[idx] if q.kind == kind]
        for idx, q in _spread(items, PER_DOCUMENT.get(kind, len(items))):
            out.setdefault(idx, []).append(q)
    return out


def read_outline(doc, max_level: int = 3) -> list[tuple[str, int, float | None]]:
    """(title, page index, destination top in PDF points or None) of a pypdfium2 document's outline entries down
    to nesting level ``max_level`` (1: chapters or sections only)."""
    out = []
    try:
        for item in doc.get_toc():
            if item.level >= max_level:
                continue
            dest = item.get_dest()
            if dest is None:
                continue
            index = dest.get_index()
            if index is None:
                continue
            mode, pos = dest.get_view()
            top = float(pos[1]) if mode == 1 and len(pos) > 1 and pos[1] else None  # XYZ: left, top, zoom
            out.append((item.get_title() or "", int(index), top))
    except Exception as err:  # a broken outline: the other rules still run
        log.warning("outline not read: %s", err)
    return out
