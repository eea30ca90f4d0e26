"""``docjepa import``: real PDFs and images → page records with words and boxes.

PDF pages are rendered with pypdfium2 and their words taken from the text layer (characters grouped
at whitespace, boxes converted from PDF points to pixels); a page without a text layer falls back to
OCR. Images (PNG, JPEG, TIFF, multi-page TIFF) are read with Tesseract (``tesseract … tsv``, run with
``OMP_THREAD_LIMIT=1``). A file that cannot be read (corrupt, encrypted, empty) is skipped with a
warning naming it; the batch never aborts, and a summary is returned at the end.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageSequence

from .record import Answer, Page, Question, Word, box_polygon
from .shards import ShardWriter

log = logging.getLogger("docjepa.import")
PDF_SUFFIXES = {".pdf"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}


class OCRUnavailable(RuntimeError):
    """Tesseract is not installed."""


@dataclass
class ImportSummary:
    files: int = 0
    pages: int = 0
    words: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    ocr_pages: int = 0

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "pages": self.pages,
            "words": self.words,
            "ocr_pages": self.ocr_pages,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }


def find_inputs(paths: list[Path]) -> list[Path]:
    """Files to import: the given files, and every PDF or image below the given folders (sorted)."""
    out = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in PDF_SUFFIXES | IMAGE_SUFFIXES)
        else:
            out.append(p)
    return out


def ocr_words(image: Image.Image, lang: str = "eng") -> list[Word]:
    """Words and pixel boxes of an image by Tesseract, in its reading order."""
    exe = shutil.which("tesseract")
    if exe is None:
        raise OCRUnavailable("tesseract is not installed (Debian: apt-get install tesseract-ocr); needed for OCR")
    buf = io.BytesIO()
    image.convert("RGB").save(buf, "PNG")
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    res = subprocess.run(
        [exe, "stdin", "stdout", "-l", lang, "tsv"], input=buf.getvalue(), capture_output=True, env=env, check=False
    )
    if res.returncode != 0:
        raise RuntimeError(f"tesseract failed: {res.stderr.decode(errors='replace').strip()[:300]}")
    words = []
    for row in csv.DictReader(io.StringIO(res.stdout.decode(errors="replace")), delimiter="\t", quoting=csv.QUOTE_NONE):
        text = (row.get("text") or "").strip()
        if row.get("level") == "5" and text and float(row.get("conf") or -1) >= 0:
            x, y, w, h = (float(row[k]) for k in ("left", "top", "width", "height"))
            words.append(Word(text, (x, y, x + w, y + h)))
    return words


def _pdf_words(page, scale: float, height_pt: float) -> list[Word]:
    """Words from a PDF page's text layer, boxes in pixels at ``scale`` px per point."""
    tp = page.get_textpage()
    try:
        n = tp.count_chars()
        text = tp.get_text_range(0, n)
        if len(text) != n:  # rare: fall back to one character at a time to keep indices aligned
            text = "".join(tp.get_text_range(i, 1) or " " for i in range(n))
        words, chars, boxes = [], [], []

        def flush() -> None:
            if chars:
                x0 = min(b[0] for b in boxes) * scale
                x1 = max(b[2] for b in boxes) * scale
                y0 = (height_pt - max(b[3] for b in boxes)) * scale
                y1 = (height_pt - min(b[1] for b in boxes)) * scale
                words.append(Word("".join(chars), (x0, y0, x1, y1)))
                chars.clear()
                boxes.clear()

        for i, ch in enumerate(text):
            if ch.isspace() or ch == "\x00":
                flush()
                continue
            left, bottom, right, top = tp.get_charbox(i)
            if right <= left and top <= bottom:  # generated characters have no box
                flush()
                continue
            chars.append(ch)
            boxes.append((left, bottom, right, top))
        flush()
        return words
    finally:
        tp.close()


def _encode(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def import_pdf(path: Path, dpi: int, summary: ImportSummary, lang: str) -> list[Page]:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))  # raises PdfiumError for corrupt or encrypted files
    try:
        if len(doc) == 0:
            raise ValueError("the PDF has no pages")
        pages = []
        for i in range(len(doc)):
            page = doc[i]
            _width_pt, height_pt = page.get_size()
            scale = dpi / 72
            image = page.render(scale=scale).to_pil().convert("RGB")
            words = _pdf_words(page, scale, height_pt)
            if not words:  # a scanned page: no text layer
                words = ocr_words(image, lang)
                summary.ocr_pages += 1
            pages.append(
                Page(
                    doc_id=path.stem,
                    page=i,
                    width=image.width,
                    height=image.height,
                    image=_encode(image),
                    words=words,
                    source=f"pdf:{path}",
                )
            )
            page.close()
        return pages
    finally:
        doc.close()


def import_image(path: Path, summary: ImportSummary, lang: str) -> list[Page]:
    pages = []
    with Image.open(path) as img:
        for i, frame in enumerate(ImageSequence.Iterator(img)):
            image = frame.convert("RGB")
            words = ocr_words(image, lang)
            summary.ocr_pages += 1
            pages.append(
                Page(
                    doc_id=path.stem,
                    page=i,
                    width=image.width,
                    height=image.height,
                    image=_encode(image),
                    words=words,
                    source=f"image:{path}",
                )
            )
    if not pages:
        raise ValueError("the image has no frames")
    return pages


def attach_questions(pages: list[Page], spec: dict) -> None:
    """Questions from a JSON spec: ``{doc_id: {page: [{"question", "qtype"?, "answers": [[x0, y0, x1, y1], …]}]}}``.

    Each answer is a box in page pixels, or a list of boxes for a multi-region answer.
    """
    for page in pages:
        for q in spec.get(page.doc_id, {}).get(str(page.page), []):
            answers = []
            for ans in q["answers"]:
                boxes = ans if isinstance(ans[0], (list, tuple)) else [ans]
                answers.append(Answer([box_polygon(tuple(map(float, b))) for b in boxes]))
            page.questions.append(Question(q["question"], q.get("qtype", "user"), answers))


def import_paths(
    paths: list[Path],
    out: Path,
    dpi: int = 150,
    lang: str = "eng",
    questions: Path | None = None,
    pages_per_shard: int = 256,
    progress: bool = True,
    append: bool = False,
) -> ImportSummary:
    """Import every PDF and image under ``paths`` into shards in ``out``; never aborts on a bad file."""
    from tqdm.auto import tqdm

    spec = json.loads(questions.read_text()) if questions else {}
    summary = ImportSummary()
    files = find_inputs(paths)
    with ShardWriter(out, pages_per_shard, append=append) as writer:
        for path in tqdm(files, desc="files", disable=not progress):
            try:
                if not path.is_file():
                    raise FileNotFoundError("no such file")
                suffix = path.suffix.lower()
                if suffix in PDF_SUFFIXES:
                    pages = import_pdf(path, dpi, summary, lang)
                elif suffix in IMAGE_SUFFIXES:
                    pages = import_image(path, summary, lang)
                else:
                    raise ValueError(f"unsupported file type {suffix or '(none)'}")
            except Exception as err:
                reason = f"{type(err).__name__}: {err}".strip()
                log.warning("skipped %s (%s)", path, reason)
                summary.skipped.append((str(path), reason))
                continue
            attach_questions(pages, spec)
            for page in pages:
                writer.add(page)
                summary.pages += 1
                summary.words += len(page.words)
            summary.files += 1
    return summary
