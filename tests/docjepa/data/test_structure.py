"""Structural rules: each kind of question a PDF declares about itself, on a manual made here with reportlab."""

import pytest

pytest.importorskip("pypdfium2")
pytest.importorskip("reportlab")

from reportlab.pdfgen import canvas

from docjepa.data import structure as st
from docjepa.data.import_folder import import_paths
from docjepa.data.importer import ImportSummary, import_pdf
from docjepa.data.record import Word

W, H = 595, 842  # A4 in points; imported at 72 dpi, one pixel per point, y from the top = H - y
BODY = [
    "The widget reads its settings when it starts and keeps them for the",
    "whole run. Each setting has a default that suits most machines and",
    "can be changed on the command line or in the configuration file.",
    "Settings that are not known are reported and the run does not start.",
]


def body(c, y):
    c.setFont("Times-Roman", 10)
    for k, line in enumerate(BODY):
        c.drawString(72, y - 12 * k, line)


def page_number(c, n):
    c.setFont("Times-Roman", 10)
    c.drawString(W / 2, 40, str(n))


def header(c):
    c.setFont("Times-Italic", 9)
    c.drawString(72, 812, "Widget Manual Guide")


def section(c, key, title, y):
    """A 14 pt heading at ``y`` with an outline entry pointing 20 points above it, and body text under it."""
    c.bookmarkPage(key, fit="XYZ", top=y + 20, left=0)
    c.addOutlineEntry(title, key, level=0)
    c.setFont("Times-Bold", 14)
    c.drawString(72, y, title)
    body(c, y - 25)


def make_manual(path, title="The Widget Manual", author="Jane Doe", date="March 3, 2024", version="2.5"):
    """Four pages: a title page, a contents page, two pages of sections (outline entries point at their headings),
    a two-line table caption, a form field with a tooltip, running headers and page numbers."""
    c = canvas.Canvas(str(path), pagesize=(W, H))
    c.setFont("Times-Bold", 24)
    c.drawString(150, 700, title)
    c.setFont("Times-Roman", 12)
    c.drawString(150, 670, author)
    c.drawString(150, 650, date)
    c.drawString(150, 630, f"Version {version}")
    body(c, 580)
    body(c, 520)
    page_number(c, 1)
    c.showPage()
    header(c)
    c.setFont("Times-Bold", 14)
    c.drawString(72, 740, "Contents")
    c.setFont("Times-Roman", 10)
    for k, (entry, pg) in enumerate((("1 Getting started", 3), ("2 Configuration", 3), ("3 Reference", 4))):
        c.drawString(72, 715 - 15 * k, entry)
        c.drawString(500, 715 - 15 * k, str(pg))
    body(c, 600)
    page_number(c, 2)
    c.showPage()
    header(c)
    section(c, "s1", "1 Getting started", 740)
    section(c, "s2", "2 Configuration", 500)
    c.setFont("Times-Roman", 10)
    c.drawString(72, 300, "Table 2: Options of the widget with")
    c.drawString(72, 288, "their default values.")
    c.drawString(72, 200, "See Table 2 for the options; Figure 9 is elsewhere.")
    page_number(c, 3)
    c.showPage()
    header(c)
    section(c, "s3", "3 Reference", 740)
    c.setFont("Times-Roman", 10)
    c.drawString(140, 405, "Email:")
    c.acroForm.textfield(name="email", tooltip="Email address", x=200, y=400, width=150, height=18)
    page_number(c, 4)
    c.showPage()
    c.save()
    return path


def box(answer):
    xs, ys = answer.regions[0][0::2], answer.regions[0][1::2]
    return min(xs), min(ys), max(xs), max(ys)


def questions(tmp_path, **kw):
    pages = import_pdf(make_manual(tmp_path / "manual.pdf", **kw), 72, ImportSummary(), "eng", structure=True)
    return pages, {(p.page, q.kind, q.text): q for p in pages for q in p.questions}


def test_title_page_gives_title_author_date_and_version(tmp_path):
    _, qs = questions(tmp_path)
    title = qs[(0, "title", "What is the title?")].answers[0]
    assert title.text == "The Widget Manual"
    x0, y0, _, y1 = box(title)
    assert abs(x0 - 150) < 3 and y0 < H - 700 < y1 and y1 - y0 < 30
    author = qs[(0, "author", "Who is the author?")].answers[0]
    assert author.text == "Jane Doe" and box(author)[1] < H - 670 < box(author)[3]
    date = qs[(0, "date", "What is the date?")].answers[0]
    assert date.text == "March 3, 2024" and box(date)[1] < H - 650 < box(date)[3]
    version = qs[(0, "version", "What is the version number?")].answers[0]
    assert version.text == "2.5"
    vx0 = box(version)[0]
    assert vx0 > 150 + 30  # the number only, not the word "Version" before it
    # Page 1 has no other kind of question but its page number.
    assert {k[1] for k in qs if k[0] == 0} == {"title", "author", "date", "version", "page-number"}


def test_outline_entries_point_at_their_headings(tmp_path):
    _, qs = questions(tmp_path)
    for page, title, y in ((2, "1 Getting started", 740), (2, "2 Configuration", 500), (3, "3 Reference", 740)):
        q = qs[(page, "section", f"Where does section '{title}' begin?")]
        assert q.answers[0].text == title
        x0, y0, _, y1 = box(q.answers[0])
        assert abs(x0 - 72) < 3 and y0 < H - y < y1  # the heading, not the body under it


def test_contents_page_numbers_headers_captions_and_fields(tmp_path):
    pages, qs = questions(tmp_path)
    toc = qs[(1, "contents", "Where is the table of contents?")].answers[0]
    x0, y0, x1, y1 = box(toc)
    assert y0 < H - 740 and y1 > H - 685 and x1 > 500  # heading to the last entry, page numbers included
    assert y1 < H - 600 + 5  # the body text under it is not
    numbers = {k[0]: q.answers[0].text for k, q in qs.items() if k[1] == "page-number"}
    assert numbers == {0: "1", 1: "2", 2: "3", 3: "4"}
    assert all(box(qs[(p, "page-number", "What is the page number?")].answers[0])[1] > H - 55 for p in numbers)
    headers = [k[0] for k in qs if k[1] == "header"]
    assert headers == [1, 2, 3]
    assert qs[(2, "header", "Where is the running header?")].answers[0].text == "Widget Manual Guide"
    caption = qs[(2, "caption", "Where is the caption of Table 2?")].answers[0]
    assert caption.text == "Table 2: Options of the widget with their default values."
    assert len(caption.regions) == 2  # one box per line
    assert not any("Figure 9" in k[2] for k in qs)  # "See Table 2 …" does not start a caption
    field = qs[(3, "field", "Where is the form field 'Email address'?")].answers[0]
    x0, y0, x1, y1 = box(field)
    assert (abs(x0 - 200), abs(y0 - (H - 418)), abs(x1 - 350), abs(y1 - (H - 400))) < (2, 2, 2, 2)
    # Word ids of the answers point at the page's own words.
    page3 = pages[2]
    assert " ".join(page3.words[i].text for i in caption.word_ids).startswith("Table 2:")


def test_rules_stay_silent_without_evidence():
    # A page whose largest type is body size has no title; a caption label twice on a page gives no question.
    words = [Word(t, (72 + 40 * i, 100, 100 + 40 * i, 110)) for i, t in enumerate(["Plain", "text", "only", "here"])]
    page = st.PageText(0, 595, 842, words, [10.0] * 4, st.make_lines(words, [10.0] * 4))
    assert st.title_questions(page, body=10.0) == []
    twice = [Word("Table", (72, 200, 100, 210)), Word("1:", (102, 200, 110, 210)), Word("A", (112, 200, 120, 210))]
    twice += [Word("Table", (72, 400, 100, 410)), Word("1:", (102, 400, 110, 410)), Word("B", (112, 400, 120, 410))]
    page = st.PageText(0, 595, 842, twice, [10.0] * 6, st.make_lines(twice, [10.0] * 6))
    assert st.caption_questions(page) == []
    # Numbers in the margin that do not follow the pages (1, 7, 3) are not page numbers.
    pages = []
    for i, n in enumerate(["1", "7", "3"]):
        ws = [Word("Body", (72, 300, 120, 310)), Word(n, (290, 820, 300, 830))]
        pages.append(st.PageText(i, 595, 842, ws, [10.0, 10.0], st.make_lines(ws, [10.0, 10.0])))
    assert st.margin_questions(pages) == {}
    # An outline entry whose title is on no line of its page gives no question.
    assert st.section_questions(pages, [("Nowhere to be found", 0, None)], 1.0) == {}


def test_import_with_structure_and_page_cap(tmp_path):
    (tmp_path / "pdfs").mkdir()
    make_manual(tmp_path / "pdfs" / "manual.pdf")
    summary = import_paths([tmp_path / "pdfs"], tmp_path / "out", dpi=72, structure=True, max_pages=2, progress=False)
    assert summary.pages == 2 and summary.files == 1
    from docjepa.data.shards import iter_pages

    pages = list(iter_pages(tmp_path / "out"))
    # The two pages with the most questions: the title page (5) and the sections page (2 sections, header,
    # caption, page number).
    assert [p.page for p in pages] == [0, 2]
    assert all(p.questions for p in pages)
