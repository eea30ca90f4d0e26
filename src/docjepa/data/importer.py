"""``docjepa import``: real PDFs and images → page records with words and boxes.

PDF pages are rendered with pypdfium2 and their words taken from the text layer (characters grouped
at whitespace, boxes converted from PDF points to pixels); a page without a text layer falls back to
OCR. Images (PNG, JPEG, TIFF, multi-page TIFF) are read with Tesseract (``tesseract … tsv``, run with
``OMP_THREAD_LIMIT=1``). A file that cannot be read (corrupt, encrypted, empty) is skipped with a
warning naming it. A document's id is its path relative to the folder given (or its file name, for a file given
directly), so ``a/report.pdf`` and ``b/report.pdf`` stay two documents; bytes of a file name that are not UTF-8 are
kept as ``\\xNN`` escapes. Files and folders into shards: :mod:`docjepa.data.import_folder`.
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

from ..core.errors import UsageError
from .kinds import row_kind
from .record import Answer, Page, Question, Word, box_polygon
from .shards import shard_paths

log = logging.getLogger("docjepa.import")
PDF_SUFFIXES = {".pdf"}
# pdfium reports a hyphen that splits a word at a line end as U+FFFE (U+00AD and U+0002 in some files).
SOFT_HYPHENS = {"\ufffe", "\u00ad", "\x02"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}


class OCRUnavailable(RuntimeError):
    """Tesseract is not installed."""


class PageOutOfRange(UsageError):
    """A page number the file does not have (reported as one line, as every wrong input)."""


@dataclass
class ImportSummary:
    files: int = 0
    pages: int = 0
    words: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    ocr_pages: int = 0
    already: int = 0
    """Files passed over on ``resume`` because the shards already hold them."""
    excluded: int = 0
    """Files passed over because their digest is in ``exclude``."""

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "already_imported": self.already,
            "excluded": self.excluded,
            "pages": self.pages,
            "words": self.words,
            "ocr_pages": self.ocr_pages,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }


def path_text(path: Path | str) -> str:
    """A path as valid UTF-8 text: bytes of the name that are not UTF-8 become ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_inputs(paths: list[Path]) -> list[tuple[Path, str]]:
    """(file, document id) to import: the given files (id: the file name), and every PDF or image below the given
    folders (id: the path relative to the folder), sorted within each folder."""
    out = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in PDF_SUFFIXES | IMAGE_SUFFIXES)
            out += [(f, path_text(f.relative_to(p).as_posix())) for f in found]
        else:
            out.append((p, path_text(p.name)))
    return out


def load_questions(path: Path) -> dict:
    """The ``--questions`` JSON, checked entry by entry before any work: an error names the entry."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"--questions {path}: {err}") from None
    if not isinstance(spec, dict):
        raise UsageError(f"--questions {path}: expected {{doc_id: {{page: [questions]}}}} at the top level")
    for doc, pages in spec.items():
        if not isinstance(pages, dict):
            raise UsageError(f"--questions {path}: {doc!r} must map page numbers to lists of questions")
        for page, entries in pages.items():
            if not str(page).isdigit() or not isinstance(entries, list):
                raise UsageError(f"--questions {path}: {doc!r} page {page!r} must be a page number with a list")
            for k, q in enumerate(entries):
                where = f"--questions {path}: {doc!r} page {page} entry {k}"
                if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
                    raise UsageError(f'{where}: needs a non-empty "question"')
                answers = q.get("answers")
                if not isinstance(answers, list) or not answers:
                    raise UsageError(f'{where}: needs "answers", a list of boxes [x0, y0, x1, y1]')
                for ans in answers:
                    boxes = ans if ans and isinstance(ans[0], (list, tuple)) else [ans]
                    for b in boxes:
                        ok = isinstance(b, (list, tuple)) and len(b) == 4
                        if not ok or not all(isinstance(v, (int, float)) for v in b) or b[2] <= b[0] or b[3] <= b[1]:
                            raise UsageError(f"{where}: answer box {b!r} is not [x0, y0, x1, y1] with x1 > x0, y1 > y0")
    return spec


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


class _Chars:
    """The box and font size of a text page's characters through pdfium's own calls, their buffers made once: an
    import reads every character of every page (pypdfium2's ``get_charbox`` makes four new buffers a call)."""

    def __init__(self, tp) -> None:
        import ctypes

        import pypdfium2.raw as raw

        self.raw, self.tp = raw, tp.raw
        self.values = [ctypes.c_double() for _ in range(4)]  # left, right, bottom, top: pdfium's order
        self.refs = [ctypes.byref(v) for v in self.values]
        self.matrix = raw.FS_MATRIX()
        self.matrix_ref = ctypes.byref(self.matrix)

    def box(self, i: int) -> tuple[float, float, float, float]:
        """(left, bottom, right, top) of character ``i`` in points."""
        if not self.raw.FPDFText_GetCharBox(self.tp, i, *self.refs):
            raise ValueError(f"pdfium gave no box for character {i}")
        left, right, bottom, top = (v.value for v in self.values)
        return left, bottom, right, top

    def font_size(self, i: int) -> float:
        """Font size in points of character ``i`` as set on the page (the font size times the text matrix's
        scale)."""
        size = self.raw.FPDFText_GetFontSize(self.tp, i)
        if self.raw.FPDFText_GetMatrix(self.tp, i, self.matrix_ref):
            m = self.matrix
            size *= abs(m.a * m.d - m.b * m.c) ** 0.5
        return float(size)


def _pdf_words(page, scale: float, height_pt: float, sizes: list[float] | None = None) -> list[Word]:
    """Words from a PDF page's text layer, boxes in pixels at ``scale`` px per point. With ``sizes`` (a list), the
    font size of each word (its largest character, points) is appended to it."""
    tp = page.get_textpage()
    try:
        n = tp.count_chars()
        text = tp.get_text_range(0, n)
        if len(text) != n:  # rare: fall back to one character at a time to keep indices aligned
            text = "".join(tp.get_text_range(i, 1) or " " for i in range(n))
        words, chars, boxes, size = [], [], [], [0.0]
        read = _Chars(tp)

        def flush() -> None:
            if chars:
                if sizes is not None:
                    sizes.append(size[0])
                    size[0] = 0.0
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
            left, bottom, right, top = read.box(i)
            if ch in SOFT_HYPHENS:  # a word hyphenated at a line end: its first part ends here, with a hyphen
                if right > left or top > bottom:
                    chars.append("-")
                    boxes.append((left, bottom, right, top))
                flush()
                continue
            if right <= left and top <= bottom:  # generated characters have no box
                flush()
                continue
            chars.append(ch)
            boxes.append((left, bottom, right, top))
            if sizes is not None:
                size[0] = max(size[0], read.font_size(i))
        flush()
        return words
    finally:
        tp.close()


def _encode(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _pick_pages(n: int, questions: dict, max_pages: int | None) -> list[int]:
    """Which of ``n`` pages to keep: all, or up to ``max_pages``: pages with structural questions first (the most
    questions first), then pages spread evenly over the rest; in page order."""
    if not max_pages or n <= max_pages:
        return list(range(n))
    ranked = sorted(questions, key=lambda i: (-len(questions[i]), i))[:max_pages]
    rest = [i for i in range(n) if i not in ranked]
    need = max_pages - len(ranked)
    if need and rest:
        ranked += [rest[round(k * (len(rest) - 1) / max(1, need - 1))] for k in range(min(need, len(rest)))]
    return sorted(set(ranked))


def import_pdf(
    path: Path,
    dpi: int,
    summary: ImportSummary,
    lang: str,
    doc_id: str | None = None,
    structure: bool = False,
    max_pages: int | None = None,
    only: int | None = None,
) -> list[Page]:
    """The pages of a PDF. ``structure``: with the questions the document declares about itself
    (:mod:`docjepa.data.structure`); ``max_pages``: at most this many pages (those with such questions first);
    ``only``: just this page (from 0), the others neither rendered nor read."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))  # raises PdfiumError for corrupt or encrypted files
    try:
        if len(doc) == 0:
            raise ValueError("the PDF has no pages")
        _check_page(only, len(doc))
        scale = dpi / 72
        questions: dict = {}
        if structure:
            from . import structure as st

            texts = []
            for i in range(len(doc)):
                page = doc[i]
                width_pt, height_pt = page.get_size()
                sizes: list[float] = []
                words = _pdf_words(page, scale, height_pt, sizes)
                texts.append(
                    st.PageText(i, width_pt * scale, height_pt * scale, words, sizes, st.make_lines(words, sizes))
                )
                page.close()
            fields = st.field_questions(path, scale, [t.height for t in texts])
            questions = st.document_questions(texts, st.read_outline(doc), scale, fields)
        pages = []
        for i in [only] if only is not None else _pick_pages(len(doc), questions, max_pages):
            page = doc[i]
            _width_pt, height_pt = page.get_size()
            image = page.render(scale=scale).to_pil().convert("RGB")
            words = texts[i].words if structure else _pdf_words(page, scale, height_pt)  # read once
            if not words:  # a scanned page: no text layer
                words = ocr_words(image, lang)
                summary.ocr_pages += 1
            pages.append(
                Page(
                    doc_id=doc_id or path_text(path.name),
                    page=i,
                    width=image.width,
                    height=image.height,
                    image=_encode(image),
                    words=words,
                    source=f"pdf:{path_text(path)}",
                    questions=list(questions.get(i, [])),
                )
            )
            page.close()
        return pages
    finally:
        doc.close()


def _check_page(only: int | None, count: int) -> None:
    if only is not None and not 0 <= only < count:
        raise PageOutOfRange(f"page {only + 1} out of range: the file has {count} page(s)")


def import_image(
    path: Path, summary: ImportSummary, lang: str, doc_id: str | None = None, only: int | None = None
) -> list[Page]:
    """The frames of an image (one page each) with their words by OCR; ``only``: just this frame (from 0)."""
    pages = []
    with Image.open(path) as img:
        _check_page(only, getattr(img, "n_frames", 1))
        for i, frame in enumerate(ImageSequence.Iterator(img)):
            if only is not None and i != only:
                continue
            image = frame.convert("RGB")
            words = ocr_words(image, lang)
            summary.ocr_pages += 1
            pages.append(
                Page(
                    doc_id=doc_id or path_text(path.name),
                    page=i,
                    width=image.width,
                    height=image.height,
                    image=_encode(image),
                    words=words,
                    source=f"image:{path_text(path)}",
                )
            )
    if not pages:
        raise ValueError("the image has no frames")
    return pages


def read_file(
    path: Path,
    dpi: int = 150,
    lang: str = "eng",
    doc_id: str | None = None,
    summary: ImportSummary | None = None,
    kind: str | None = None,
    structure: bool = False,
    max_pages: int | None = None,
    only: int | None = None,
) -> list[Page]:
    """Every page of a PDF or an image with its words: the PDF's text layer (OCR where a page has none), or OCR of
    the image's frames. ``kind`` ("pdf" or "image") overrides the file's suffix; ``structure`` and ``max_pages`` are
    :func:`import_pdf`'s; ``only``: just this page or frame (from 0), the others not read. The one reader of a
    user's file: import, the engine's registration and uploads, predict."""
    summary = summary if summary is not None else ImportSummary()
    suffix = path.suffix.lower()
    kind = kind or ("pdf" if suffix in PDF_SUFFIXES else "image" if suffix in IMAGE_SUFFIXES else None)
    if kind == "pdf":
        return import_pdf(path, dpi, summary, lang, doc_id, structure, max_pages, only)
    if kind == "image":
        return import_image(path, summary, lang, doc_id, only)
    raise ValueError(f"unsupported file type {suffix or '(none)'}")


def iter_pages(paths: list[Path], dpi: int = 150, lang: str = "eng", limit: int | None = None, progress: bool = True):
    """Pages of shard folders (with their questions), then of every PDF and image given or below a folder given
    (text layer or OCR, no questions); at most ``limit``. A file or record that cannot be read is skipped with a
    warning naming it."""
    from tqdm.auto import tqdm

    from .shards import DocumentDataset, RecordError

    count, files = 0, []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {path}")
        if path.is_dir() and shard_paths(path):
            ds = DocumentDataset(path)
            for i in tqdm(range(len(ds)), desc=f"pages of {path}", disable=not progress):
                if limit is not None and count >= limit:
                    return
                try:
                    page = ds[i]
                except RecordError as err:
                    log.warning("skipped: %s", err)
                    continue
                count += 1
                yield page
        else:
            files += find_inputs([path])
    summary = ImportSummary()
    for path, doc_id in tqdm(files, desc="files", disable=not progress or not files):
        try:
            pages = read_file(path, dpi, lang, doc_id, summary)
        except Exception as err:
            log.warning("skipped %s: %s: %s", path_text(path), type(err).__name__, err)
            continue
        for page in pages:
            if limit is not None and count >= limit:
                return
            count += 1
            yield page


def attach_questions(pages: list[Page], spec: dict, stems: dict[str, str] | None = None) -> None:
    """Questions from a JSON spec (checked by :func:`load_questions`):
    ``{doc_id: {page: [{"question", "kind"?, "answers": [[x0, y0, x1, y1], …]}]}}``.

    Each answer is a box in page pixels, or a list of boxes for a multi-region answer. A document is found by
    its id, or by its file stem when ``stems`` (stem → id) says that stem belongs to one document only.
    """
    stems = stems or {}
    for page in pages:
        by_stem = [k for k, v in stems.items() if v == page.doc_id]
        entries = spec.get(page.doc_id) or (spec.get(by_stem[0]) if by_stem else None) or {}
        for q in entries.get(str(page.page), []):
            answers = []
            for ans in q["answers"]:
                boxes = ans if isinstance(ans[0], (list, tuple)) else [ans]
                answers.append(Answer([box_polygon(tuple(map(float, b))) for b in boxes]))
            page.questions.append(Question(q["question"], row_kind(q), answers))
