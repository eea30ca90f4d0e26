"""``docjepa extract``: documents (a folder of PDFs and images, or files) → a table with one row per document (or per
page) and one column per question: each answer's text, how far to trust it, where it is.

Each page is read once (the PDF's text layer, OCR where there is none), encoded once, and the questions decoded
together (:func:`~docjepa.inference.batched.decode_many`; the question tower's states are kept from the first page,
as the questions are the same on every page). The next file is read while the model works on this one. Per
document, a question's answer is the one from the page where the model trusts its answer most (an empty answer
counts as not found). Rows are written as each document is done, so an interrupted run keeps what it had: run the
same command again and the documents already in the table are passed over. A file that cannot be read (corrupt,
encrypted, not a document) gets a row with the reason in ``error``, and the run goes on.

Columns, for each question Q: ``Q`` (the answer's text), ``Q confidence`` (the IoU the answer can be expected to
reach, from the model's calibration; the IoU head's score for a model without one), ``Q box`` (x0 y0 x1 y1 in
page pixels at ``--dpi``) and, per document, ``Q page`` (from 1); then ``document`` (the path below the folder
given), ``page`` (per page, from 1) or ``pages`` (per document: how many were read) and ``error``. JSONL rows nest the
answers under ``answers``; CSV and Parquet have the flat columns.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..data.importer import find_inputs, path_text, read_file

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
"""The table formats, by the output's suffix."""


@dataclass
class ExtractConfig:
    """What to ask and how to read the documents."""

    questions: list[str]
    """The questions, one column each, in this order."""
    per_page: bool = False
    """One row per page instead of one per document."""
    dpi: int = 150
    """Resolution at which PDF pages are rendered (boxes are in these pixels)."""
    lang: str = "eng"
    """Tesseract language(s) for pages without a text layer."""
    max_pages: int | None = None
    """At most this many pages of each document, spread over it, the first and the last among them (None: all)."""
    answer_path: str = "words"
    """How questions are answered (see :class:`~docjepa.inference.answer_policy.AnswerPolicy`): by default the word
    decoder's span, which reads values (numbers, dates, amounts, names, a party's block) better than the snapped mask
    on business pages and other generators' invoices (docs/docjepa-extract.md); ``auto`` as ``docjepa predict``."""

    def __post_init__(self) -> None:
        self.questions = [q.strip() for q in self.questions]
        if not self.questions or any(not q for q in self.questions):
            raise UsageError("give at least one question, none of them empty")
        if len(set(self.questions)) != len(self.questions):
            raise UsageError("a question is given twice")


def columns(config: ExtractConfig) -> list[str]:
    """The flat table's columns, in order."""
    out = ["document", "page" if config.per_page else "pages"]
    for q in config.questions:
        out += [q, f"{q} confidence"] + ([] if config.per_page else [f"{q} page"]) + [f"{q} box"]
    return [*out, "error"]


def table_format(out: Path) -> str:
    """``csv``, ``jsonl`` or ``parquet``, from the output's suffix."""
    fmt = FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        raise UsageError(f"the table's name must end in {', '.join(FORMATS)}: {out}")
    return fmt


def _cell(answer, page_number: int, confidence: float | None) -> dict:
    box = answer.box
    return {
        "text": answer.text,
        "confidence": None if confidence is None else round(confidence, 4),
        "known": answer.known,
        "page": page_number,
        "box": None if box is None else [round(float(v), 1) for v in box],
    }


def answer_page(predictor, page, questions: list[str], states=None) -> dict[str, dict]:
    """Each question's answer on one page: text, confidence, known, page (from 1), box."""
    from ..inference.answer_policy import trust
    from ..inference.batched import decode_many

    predictor.set_page(page)
    out = {}
    for q, decoded in zip(questions, decode_many(predictor, questions, states)):
        answer = predictor.read(decoded).answer(page_mask=False)
        out[q] = _cell(answer, page.page + 1, trust(answer.expected_iou, float(decoded.scores[answer.best])))
    return out


def best_of(pages: list[dict[str, dict]], questions: list[str]) -> dict[str, dict]:
    """Per question, the answer of the page where it is trusted most (a found answer before an empty one)."""
    return {q: max((p[q] for p in pages), key=lambda c: (bool(c["text"]), c["confidence"] or 0.0)) for q in questions}


def flat(row: dict, config: ExtractConfig) -> dict:
    """A nested row (``answers``) → the flat columns of :func:`columns`."""
    count = "page" if config.per_page else "pages"
    out = {"document": row["document"], count: row[count], "error": row["error"] or ""}
    for q in config.questions:
        cell = row["answers"].get(q) or {}
        out[q] = cell.get("text", "")
        out[f"{q} confidence"] = cell.get("confidence")
        if not config.per_page:
            out[f"{q} page"] = cell.get("page")
        box = cell.get("box")
        out[f"{q} box"] = " ".join(f"{v:g}" for v in box) if box else ""
    return out


class Table:
    """The output table, written a document at a time; the documents it already holds are read back first, so that a
    run started again goes on where it stopped. Parquet, which cannot be appended to, is written at :meth:`close`
    from the rows kept in ``OUT.partial.jsonl`` meanwhile."""

    def __init__(self, out: Path, config: ExtractConfig, overwrite: bool = False) -> None:
        self.out, self.fmt, self.config = Path(out), table_format(out), config
        self.columns = columns(config)
        self.journal = self.out.with_name(self.out.name + ".partial.jsonl") if self.fmt == "parquet" else self.out
        self.kept: list[dict] = []  # parquet: the rows of the table read back
        self.done: set[str] = set()
        if overwrite:
            for p in {self.out, self.journal}:
                p.unlink(missing_ok=True)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._read_back()

    def _refuse(self, found) -> None:
        raise UsageError(
            f"{self.out} holds a table made with other questions or rows ({', '.join(map(str, found))[:200]}); give "
            "--overwrite to start it again, or another --out"
        )

    def _read_back(self) -> None:
        if self.fmt == "parquet" and self.out.is_file():
            import pyarrow.parquet as pq

            table = pq.read_table(self.out)
            if table.column_names != self.columns:
                self._refuse(table.column_names)
            self.kept = table.to_pylist()
            self.done |= {r["document"] for r in self.kept}
        if not self.journal.is_file():
            return
        _cut_partial_line(self.journal)
        if self.fmt == "csv":
            with self.journal.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                if reader.fieldnames is not None and reader.fieldnames != self.columns:
                    self._refuse(reader.fieldnames)
                self.done |= {r["document"] for r in reader}
            return
        for line in self.journal.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if self.fmt == "parquet":
                if list(row) != self.columns:
                    self._refuse(list(row))
                self.kept.append(row)
            elif list(row.get("answers", {})) != self.config.questions or ("page" in row) != self.config.per_page:
                self._refuse(list(row.get("answers", row)))
            self.done.add(row["document"])

    def add(self, rows: list[dict]) -> None:
        """One document's rows (nested, as :func:`document_rows` makes them), written and flushed at once."""
        if self.fmt == "csv":
            buf = io.StringIO()
            writer = csv.DictWriter(buf, self.columns, lineterminator="\n")
            if not self.journal.is_file() or self.journal.stat().st_size == 0:
                writer.writeheader()
            writer.writerows(flat(r, self.config) for r in rows)
            text = buf.getvalue()
        else:
            lines = [flat(r, self.config) if self.fmt == "parquet" else r for r in rows]
            self.kept += lines if self.fmt == "parquet" else []
            text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        with self.journal.open("a", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self.done.update(r["document"] for r in rows)

    def close(self) -> None:
        """Parquet: the whole table written (atomically), its journal removed."""
        if self.fmt != "parquet":
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {c: pa.float64() if c.endswith(" confidence") else pa.string() for c in self.columns}
        types |= {c: pa.int64() for c in self.columns if c in ("page", "pages") or c.endswith(" page")}
        schema = pa.schema([(c, types[c]) for c in self.columns])
        tmp = self.out.with_name(self.out.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(self.kept, schema=schema), tmp)
        os.replace(tmp, self.out)
        self.journal.unlink(missing_ok=True)


def _cut_partial_line(path: Path) -> None:
    """Drop a last line left unfinished by a killed run."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def read_document(path: Path, doc: str, config: ExtractConfig) -> tuple[list, str | None]:
    """A document's pages, or the reason it cannot be read."""
    try:
        return read_file(path, config.dpi, config.lang, doc, max_pages=config.max_pages), None
    except Exception as err:  # corrupt, encrypted, not a document, no OCR: reported in its row
        return [], f"{type(err).__name__}: {err}".strip()


def document_rows(predictor, doc: str, pages: list, error: str | None, config: ExtractConfig, states=None) -> list:
    """One document's rows (one, or one per page with ``per_page``), its answers nested under ``answers``."""
    empty = {q: None for q in config.questions}
    answers = []
    if error is None:
        try:
            answers = [answer_page(predictor, page, config.questions, states) for page in pages]
        except Exception as err:  # a page the model cannot take: reported, the run goes on
            error, answers = f"{type(err).__name__}: {err}".strip(), []
    if config.per_page:
        if not answers:
            return [{"document": doc, "page": None, "answers": empty, "error": error}]
        return [{"document": doc, "page": p.page + 1, "answers": a, "error": None} for p, a in zip(pages, answers)]
    found = best_of(answers, config.questions) if answers else empty
    return [{"document": doc, "pages": len(answers), "answers": found, "error": error}]


def extract(paths: list[Path], out: Path, config: ExtractConfig, predictor=None, **options) -> dict:
    """Answer ``config.questions`` on every PDF and image in ``paths`` into the table ``out`` (:class:`Table`);
    returns a summary. ``predictor``: a :class:`~docjepa.inference.predictor.DocumentPredictor` (default: the shipped
    model); ``options``: ``overwrite`` (start the table again), ``progress`` (a progress bar, default True)."""
    from tqdm.auto import tqdm

    from ..inference.batched import QuestionStates

    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"no such file or folder: {p}")
    files = find_inputs([Path(p) for p in paths])
    if not files:
        raise UsageError(f"no PDF or image in {', '.join(map(str, paths))}")
    table = Table(out, config, bool(options.get("overwrite")))
    todo = [(f, doc) for f, doc in files if doc not in table.done]
    if predictor is None:
        from ..inference.predictor import DocumentPredictor

        predictor = DocumentPredictor.from_pretrained(None, answer_path=config.answer_path)
    states, pages_read, errors, start = QuestionStates(), 0, 0, time.perf_counter()
    bar = tqdm(total=len(todo), unit="doc", desc="extract", disable=not options.get("progress", True))
    with ThreadPoolExecutor(1) as reader:  # the next file is read while the model answers on this one
        ahead = reader.submit(read_document, *todo[0], config) if todo else None
        for k, (_, doc) in enumerate(todo):
            pages, error = ahead.result()
            if k + 1 < len(todo):
                ahead = reader.submit(read_document, *todo[k + 1], config)
            rows = document_rows(predictor, doc, pages, error, config, states)
            table.add(rows)
            errors += any(r["error"] for r in rows)
            pages_read += len(pages) if not rows[0]["error"] else 0
            bar.set_postfix(pages_per_s=f"{pages_read / (time.perf_counter() - start):.2f}", refresh=False)
            bar.update()
    bar.close()
    table.close()
    seconds = time.perf_counter() - start
    return {
        "out": path_text(out),
        "documents": len(files),
        "already_done": len(files) - len(todo),
        "pages": pages_read,
        "errors": errors,
        "seconds": round(seconds, 2),
        "pages_per_second": round(pages_read / seconds, 3) if seconds and pages_read else None,
    }
