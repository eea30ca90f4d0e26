"""``docjepa extract``: a folder of documents to a table, rows per document or page, resumable, unreadable files
reported in their rows."""

import csv
import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("reportlab")

from docjepa.apps.extract import ExtractConfig, Table, columns, extract
from docjepa.core.errors import UsageError
from docjepa.inference.predictor import DocumentPredictor
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation

QUESTIONS = ["What is the invoice number?", "What is the total?"]


def _invoice(path, number: str, total: str, pages: int = 1) -> None:
    from reportlab.lib.pagesizes import A5
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A5)
    for p in range(pages):
        c.setFont("Helvetica", 11)
        c.drawString(40, 540, f"Acme Supplies Ltd page {p + 1}")
        c.drawString(40, 500, f"Invoice number: {number}")
        c.drawString(40, 480, "Date: 3 March 2026")
        c.drawString(40, 300, f"Total due: {total} EUR")
        c.showPage()
    c.save()


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "docs"
    (root / "2026").mkdir(parents=True)
    _invoice(root / "a.pdf", "INV-0001", "4.11")
    _invoice(root / "2026" / "b.pdf", "INV-0002", "120.00", pages=2)
    _invoice(root / "c.pdf", "F-77", "9.99")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a PDF at all")
    (root / "notes.txt").write_text("not a document")  # not a PDF or an image: not looked at
    return root


@pytest.fixture
def predictor(docs, tok):
    torch.manual_seed(0)
    return DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")


def _csv(path):
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_folder_becomes_one_row_per_document(folder, tmp_path, predictor):
    out = tmp_path / "table.csv"
    config = ExtractConfig(QUESTIONS, dpi=72)
    summary = extract([folder], out, config, predictor, progress=False)
    assert summary["documents"] == 4 and summary["errors"] == 1 and summary["pages"] == 4
    rows = _csv(out)
    assert list(rows[0]) == columns(config)
    by_doc = {r["document"]: r for r in rows}
    assert sorted(by_doc) == ["2026/b.pdf", "a.pdf", "broken.pdf", "c.pdf"]
    assert by_doc["broken.pdf"]["error"].startswith("PdfiumError") and by_doc["broken.pdf"][QUESTIONS[0]] == ""
    assert by_doc["2026/b.pdf"]["pages"] == "2" and by_doc["a.pdf"]["pages"] == "1"
    words = {"Acme", "Supplies", "Ltd", "page", "1", "2", "Invoice", "number:", "Date:", "3", "March", "2026"}
    words |= {"Total", "due:", "EUR", "INV-0001", "INV-0002", "F-77", "4.11", "120.00", "9.99"}
    for doc in ("a.pdf", "2026/b.pdf", "c.pdf"):
        row = by_doc[doc]
        assert row["error"] == ""
        for q in QUESTIONS:
            assert set(row[q].split()) <= words  # an answer is made of the page's words
            assert 0.0 <= float(row[f"{q} confidence"]) <= 1.0
            assert row[f"{q} page"] in ({"1", "2"} if doc == "2026/b.pdf" else {"1"})
            if row[q]:
                x0, y0, x1, y1 = map(float, row[f"{q} box"].split())
                assert 0 <= x0 < x1 <= 420 and 0 <= y0 < y1 <= 596  # A5 at 72 dpi


def test_a_run_started_again_goes_on_where_it_stopped(folder, tmp_path, predictor):
    out = tmp_path / "table.csv"
    config = ExtractConfig(QUESTIONS, dpi=72)
    extract([folder], out, config, predictor, progress=False)
    whole = out.read_text()
    again = extract([folder], out, config, predictor, progress=False)
    assert again["already_done"] == 4 and again["pages"] == 0 and out.read_text() == whole
    out.write_text(whole[:-7])  # killed while writing its last row: the half row is dropped and made again
    last = whole.splitlines()[-1].split(",")[0]
    resumed = extract([folder], out, config, predictor, progress=False)
    assert resumed["already_done"] == 3
    rows = _csv(out)
    assert sorted(r["document"] for r in rows) == sorted(r["document"] for r in _csv_text(whole))
    assert [r for r in rows if r["document"] == last] == [r for r in _csv_text(whole) if r["document"] == last]
    with pytest.raises(UsageError, match="other questions"):
        extract([folder], out, ExtractConfig(["Who is the seller?"], dpi=72), predictor, progress=False)
    fresh = extract(
        [folder], out, ExtractConfig(["Who is the seller?"], dpi=72), predictor, progress=False, overwrite=True
    )
    assert fresh["already_done"] == 0 and list(_csv(out)[0])[2] == "Who is the seller?"


def _csv_text(text):
    return list(csv.DictReader(text.splitlines()))


def test_per_page_jsonl_and_parquet(folder, tmp_path, predictor):
    import pyarrow.parquet as pq

    config = ExtractConfig(QUESTIONS, per_page=True, dpi=72)
    out = tmp_path / "pages.jsonl"
    extract([folder / "2026", folder / "broken.pdf"], out, config, predictor, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["document"], r["page"]) for r in rows] == [("b.pdf", 1), ("b.pdf", 2), ("broken.pdf", None)]
    assert list(rows[0]["answers"]) == QUESTIONS and rows[0]["answers"][QUESTIONS[1]]["page"] == 1
    assert rows[2]["error"] and rows[2]["answers"] == {q: None for q in QUESTIONS}
    with pytest.raises(UsageError, match="other questions"):  # a per-document run cannot go on in this table
        Table(out, ExtractConfig(QUESTIONS, dpi=72))

    table = tmp_path / "t.parquet"
    per_doc = ExtractConfig(QUESTIONS, dpi=72)
    extract([folder / "a.pdf"], table, per_doc, predictor, progress=False)
    extract([folder / "a.pdf", folder / "c.pdf"], table, per_doc, predictor, progress=False)  # one more document
    got = pq.read_table(table)
    assert got.column_names == columns(per_doc) and got.column("document").to_pylist() == ["a.pdf", "c.pdf"]
    assert str(got.schema.field(f"{QUESTIONS[0]} confidence").type) == "double"
    assert not (tmp_path / "t.parquet.partial.jsonl").exists()


def test_bad_arguments_are_one_line_errors(folder, tmp_path, predictor):
    with pytest.raises(UsageError, match="end in"):
        extract([folder], tmp_path / "t.xlsx", ExtractConfig(QUESTIONS), predictor, progress=False)
    with pytest.raises(UsageError, match="none of them empty"):
        ExtractConfig(["Total", " "])
    with pytest.raises(UsageError, match="twice"):
        ExtractConfig(["Total", "Total "])
    with pytest.raises(FileNotFoundError):
        extract([tmp_path / "nowhere"], tmp_path / "t.csv", ExtractConfig(QUESTIONS), predictor, progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no PDF or image"):
        extract([tmp_path / "empty"], tmp_path / "t.csv", ExtractConfig(QUESTIONS), predictor, progress=False)


def test_the_command_line_with_the_shipped_model(folder, tmp_path, capsys):
    from docjepa.apps.cli import main

    out = tmp_path / "t.csv"
    main(
        [
            "extract",
            str(folder / "a.pdf"),
            "--question",
            "Total",
            "--question",
            "Invoice number",
            "--out",
            str(out),
            "--dpi",
            "100",
            "--no-progress",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["documents"] == 1 and summary["pages"] == 1 and summary["errors"] == 0
    row = _csv(out)[0]
    assert row["document"] == "a.pdf" and row["Total confidence"] and row["Invoice number confidence"]


def test_answers_are_word_spans_by_default(folder, tmp_path, predictor, monkeypatch):
    """The command line and ExtractConfig share one default answer path (the word span), and the predictor extract
    makes for itself answers by it."""
    from docjepa.apps.cli import build_parser

    args = build_parser().parse_args(["extract", str(folder), "--question", "Total", "--out", "t.csv"])
    assert args.answer_path == ExtractConfig(["Total"]).answer_path == "words"
    made = []

    def from_pretrained(checkpoint, device=None, **options):
        made.append(options)
        return predictor

    monkeypatch.setattr(DocumentPredictor, "from_pretrained", staticmethod(from_pretrained))
    extract([folder / "a.pdf"], tmp_path / "t.csv", ExtractConfig(["Total"], dpi=100), progress=False)
    assert made == [{"answer_path": "words"}]
