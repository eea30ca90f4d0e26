"""Importing real documents: PDFs with a text layer, corrupt files, OCR of images, show."""

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pypdfium2")
reportlab = pytest.importorskip("reportlab")

from PIL import Image, ImageDraw  # noqa: E402
from reportlab.lib.pagesizes import A4  # noqa: E402
from reportlab.pdfgen import canvas  # noqa: E402

from docjepa.data.import_folder import import_paths  # noqa: E402
from docjepa.data.shards import ShardOptions, ShardWriter, iter_pages  # noqa: E402
from docjepa.data.show import show  # noqa: E402
from docjepa.data.synth.canvas import load_font  # noqa: E402
from docjepa.data.synth.generate import generate  # noqa: E402
from tests.helpers import cli_error  # noqa: E402

HAS_TESSERACT = shutil.which("tesseract") is not None


def make_pdf(path):
    c = canvas.Canvas(str(path), pagesize=A4)  # 595 × 842 points
    c.setFont("Helvetica", 14)
    c.drawString(72, 800, "Invoice number INV-4242")
    c.drawString(300, 400, "Total 99.50")
    c.showPage()
    c.setFont("Helvetica", 12)
    c.drawString(100, 700, "Second page here")
    c.save()


def text_image(path, words="HELLO WORLD 2026"):
    img = Image.new("RGB", (900, 240), "white")
    ImageDraw.Draw(img).text((40, 80), words, fill="black", font=load_font("sans", 48))
    img.save(path)
    return img


def test_pdf_words_land_where_they_were_drawn(tmp_path):
    make_pdf(tmp_path / "doc.pdf")
    summary = import_paths([tmp_path / "doc.pdf"], tmp_path / "out", dpi=144, progress=False)
    assert summary.files == 1 and summary.pages == 2 and not summary.skipped and summary.ocr_pages == 0
    p0, p1 = list(iter_pages(tmp_path / "out"))
    assert abs(p0.width - A4[0] * 2) <= 1 and abs(p0.height - A4[1] * 2) <= 1
    assert [w.text for w in p0.words] == ["Invoice", "number", "INV-4242", "Total", "99.50"]
    assert [w.text for w in p1.words] == ["Second", "page", "here"]
    scale = 2.0  # 144 dpi / 72 points per inch
    x0, y0, x1, y1 = p0.words[0].box
    assert abs(x0 - 72 * scale) < 6 and x1 > x0
    baseline = (842 - 800) * scale
    assert y0 < baseline < y1 + 2 and y1 - y0 < 14 * scale * 1.3
    total = p0.words[3].box
    assert abs(total[0] - 300 * scale) < 6 and abs(total[3] - (842 - 400) * scale) < 8


def test_corrupt_empty_and_unknown_files_are_skipped_not_fatal(tmp_path, caplog):
    make_pdf(tmp_path / "good.pdf")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a pdf")
    (tmp_path / "empty.png").write_bytes(b"")
    summary = import_paths([tmp_path, tmp_path / "notes.docx"], tmp_path / "out", progress=False)
    skipped = {p.split("/")[-1]: reason for p, reason in summary.skipped}
    assert set(skipped) == {"broken.pdf", "empty.png", "notes.docx"}
    assert summary.files == 1 and summary.pages == 2
    assert any("broken.pdf" in r.message for r in caplog.records)


@pytest.mark.skipif(not HAS_TESSERACT, reason="tesseract is not installed")
def test_ocr_of_an_image_and_of_a_scanned_pdf(tmp_path):
    img = text_image(tmp_path / "scan.png")
    img.save(tmp_path / "scanned.pdf")  # an image-only PDF: no text layer
    summary = import_paths([tmp_path], tmp_path / "out", dpi=72, progress=False)
    assert summary.pages == 2 and summary.ocr_pages == 2 and not summary.skipped
    for page in iter_pages(tmp_path / "out"):
        texts = [w.text for w in page.words]
        assert "HELLO" in texts and "2026" in texts, texts
        hello = page.words[texts.index("HELLO")].box
        sx = page.width / 900
        assert abs(hello[0] - 40 * sx) < 15 * sx and hello[1] > 60 * sx and hello[3] < 160 * sx


@pytest.mark.skipif(HAS_TESSERACT, reason="tesseract is installed")
def test_missing_tesseract_is_a_clear_reason(tmp_path):
    text_image(tmp_path / "scan.png")
    summary = import_paths([tmp_path / "scan.png"], tmp_path / "out", progress=False)
    assert summary.pages == 0 and "tesseract is not installed" in summary.skipped[0][1]


def test_user_questions_are_attached(tmp_path):
    make_pdf(tmp_path / "doc.pdf")
    spec = {"doc": {"0": [{"question": "What is the total?", "answers": [[590, 860, 760, 890]]}]}}  # by stem
    (tmp_path / "q.json").write_text(json.dumps(spec))
    import_paths([tmp_path / "doc.pdf"], tmp_path / "out", dpi=144, questions=tmp_path / "q.json", progress=False)
    p0, p1 = list(iter_pages(tmp_path / "out"))
    assert [q.text for q in p0.questions] == ["What is the total?"] and not p1.questions
    mask = p0.answer_mask(0)
    total = p0.words[3].box
    assert mask[int((total[1] + total[3]) / 2), int((total[0] + total[2]) / 2)]


def test_output_folder_is_not_silently_appended(tmp_path, capsys):
    make_pdf(tmp_path / "doc.pdf")
    import_paths([tmp_path / "doc.pdf"], tmp_path / "out", progress=False)
    with pytest.raises(FileExistsError, match="--append"):
        ShardWriter(tmp_path / "out")
    import_paths([tmp_path / "doc.pdf"], tmp_path / "out", progress=False, shards=ShardOptions(append=True))
    assert len(list(iter_pages(tmp_path / "out"))) == 4
    assert "already holds" in cli_error(
        ["import", str(tmp_path / "doc.pdf"), "--out", str(tmp_path / "out"), "--no-progress"], capsys
    )


def test_show_draws_pages(tmp_path):
    generate(3, tmp_path / "d", seed=2, size=384, workers=1, progress=False)
    paths = show(tmp_path / "d", tmp_path / "png", limit=2)
    assert len(paths) == 2
    for p in paths:
        img = Image.open(p)
        assert img.width == 272 and img.height > 384  # the page plus the list of questions below it


def _shard_bytes(root):
    return {p.name: p.read_bytes() for p in sorted(root.glob("shard-*.parquet"))}


def test_an_interrupted_import_keeps_whole_shards_and_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    from docjepa.data import importer

    docs = tmp_path / "in"
    for i in range(5):
        (docs / f"d{i}").mkdir(parents=True)
        make_pdf(docs / f"d{i}" / "report.pdf")  # five documents with the same file name, two pages each
    full = import_paths([docs], tmp_path / "full", dpi=36, shards=ShardOptions(3), progress=False)
    assert full.files == 5 and full.pages == 10 and not full.skipped
    assert sorted({p.doc_id for p in iter_pages(tmp_path / "full")}) == [f"d{i}/report.pdf" for i in range(5)]

    real, calls = importer.import_pdf, []

    def killed_at_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # as a kill would, between two files
        return real(*args, **kwargs)

    monkeypatch.setattr(importer, "import_pdf", killed_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):  # read in this process, as the kill comes to the process writing
        import_paths([docs], tmp_path / "cut", dpi=36, shards=ShardOptions(3), progress=False, workers=1)
    monkeypatch.setattr(importer, "import_pdf", real)
    cut = _shard_bytes(tmp_path / "cut")
    assert list(cut) == ["shard-00000.parquet"] and not list((tmp_path / "cut").glob("*.tmp"))
    assert len(list(iter_pages(tmp_path / "cut"))) == 4  # two whole documents, none split
    again = import_paths([docs], tmp_path / "cut", dpi=36, shards=ShardOptions(3, resume=True), progress=False)
    assert again.already == 2 and again.files == 3
    assert _shard_bytes(tmp_path / "cut") == _shard_bytes(tmp_path / "full")


def test_worker_processes_write_the_same_shards_and_report_bad_files_in_order(tmp_path):
    """Files are read by a pool of processes and written in the order found: the shards are byte for byte those of
    one process, and an unreadable file, a second copy and a missing one are reported where one process would."""
    docs = tmp_path / "in"
    for i in range(5):
        (docs / f"d{i}").mkdir(parents=True)
        make_pdf(docs / f"d{i}" / "report.pdf")
    (docs / "d2" / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    given = [docs, docs / "d3" / "report.pdf", docs / "d3" / "report.pdf", tmp_path / "gone.pdf"]
    runs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}"
        summary = import_paths(given, out, dpi=36, shards=ShardOptions(3), progress=False, workers=workers)
        runs[workers] = (summary.to_dict(), _shard_bytes(out))
    assert runs[1] == runs[2] == runs[3]
    summary, shards = runs[1]
    assert summary["files"] == 6 and summary["pages"] == 12 and len(shards) == 3  # the folder's five, the file once
    assert [Path(s["path"]).name for s in summary["skipped"]] == ["broken.pdf", "report.pdf", "gone.pdf"]
    assert "second file" in summary["skipped"][1]["reason"] and "no such file" in summary["skipped"][2]["reason"]
    with pytest.raises(ValueError, match="workers must be at least 1"):
        import_paths([docs], tmp_path / "none", progress=False, workers=-1)


def test_a_worker_killed_by_a_file_stops_the_import_with_whole_shards(tmp_path, monkeypatch):
    """A reader that kills its process (a crash inside a PDF library) ends the import with an error, never a wait
    for a file that will not come, and the shards written before it are whole and resumable."""
    from concurrent.futures.process import BrokenProcessPool

    from docjepa.data import import_folder

    docs = tmp_path / "in"
    for i in range(6):
        (docs / f"d{i}").mkdir(parents=True)
        make_pdf(docs / f"d{i}" / "report.pdf")
    real = import_folder.read_file

    def crashing(path, *args, **kwargs):
        if path.parent.name == "d4":
            os._exit(1)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(import_folder, "read_file", crashing)
    with pytest.raises(BrokenProcessPool):
        import_paths([docs], tmp_path / "out", dpi=36, shards=ShardOptions(2), progress=False, workers=2)
    monkeypatch.setattr(import_folder, "read_file", real)
    again = import_paths([docs], tmp_path / "out", dpi=36, shards=ShardOptions(2, resume=True), progress=False)
    assert again.files + again.already == 6 and not again.skipped
    assert sorted({p.doc_id for p in iter_pages(tmp_path / "out")}) == [f"d{i}/report.pdf" for i in range(6)]


def test_a_non_utf8_file_name_is_imported_with_escapes(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9.pdf")
    make_pdf(folder / name)
    summary = import_paths([folder], tmp_path / "out", dpi=36, progress=False)
    assert summary.files == 1 and not summary.skipped
    page = next(iter_pages(tmp_path / "out"))
    assert page.doc_id == "caf\\xe9.pdf" and page.source.endswith("caf\\xe9.pdf")


def test_questions_are_checked_before_any_work(tmp_path, capsys):
    make_pdf(tmp_path / "doc.pdf")
    (tmp_path / "q.json").write_text(json.dumps({"doc.pdf": {"0": [{"question": "Total?"}]}}))
    argv = [
        "import",
        str(tmp_path / "doc.pdf"),
        "--out",
        str(tmp_path / "out"),
        "--questions",
        str(tmp_path / "q.json"),
    ]
    assert "'doc.pdf' page 0 entry 0: needs \"answers\"" in cli_error(argv, capsys)
    assert not (tmp_path / "out").exists()


def test_a_word_hyphenated_at_a_line_end_is_two_words_on_their_lines(tmp_path):
    c = canvas.Canvas(str(tmp_path / "h.pdf"), pagesize=A4)
    c.setFont("Helvetica", 14)
    c.drawString(72, 700, "The inter-")
    c.drawString(72, 680, "national office")
    c.save()
    import_paths([tmp_path / "h.pdf"], tmp_path / "out", dpi=72, progress=False)
    words = next(iter_pages(tmp_path / "out")).words
    assert [w.text for w in words] == ["The", "inter-", "national", "office"]
    inter, national = words[1].box, words[2].box
    assert inter[3] - inter[1] < 20 and national[1] > inter[3]  # each on its own line


def test_reading_one_page_renders_only_that_page(tmp_path, monkeypatch, capsys):
    """``read_file(only=i)`` (what ``docjepa predict --page`` reads) gives page i as a full read gives it, and
    renders no other page; a page the file lacks is named in the error."""
    from docjepa.data import importer
    from docjepa.data.importer import PageOutOfRange, read_file

    make_pdf(tmp_path / "doc.pdf")
    full = read_file(tmp_path / "doc.pdf", dpi=72)
    rendered = []
    real = importer._encode
    monkeypatch.setattr(importer, "_encode", lambda image: rendered.append(1) or real(image))
    (second,) = read_file(tmp_path / "doc.pdf", dpi=72, only=1)
    assert len(rendered) == 1 and second.page == 1
    assert [w.text for w in second.words] == [w.text for w in full[1].words] == ["Second", "page", "here"]
    assert second.image == full[1].image
    with pytest.raises(PageOutOfRange, match="page 3 out of range: the file has 2 page"):
        read_file(tmp_path / "doc.pdf", only=2)
    assert "page 3 out of range" in cli_error(
        ["predict", "--pdf", str(tmp_path / "doc.pdf"), "--page", "3", "--question", "Total?"], capsys
    )  # one line from the command, no traceback
    text_image(tmp_path / "one.png")
    with pytest.raises(PageOutOfRange, match="page 2 out of range: the file has 1 page"):
        read_file(tmp_path / "one.png", only=1)
