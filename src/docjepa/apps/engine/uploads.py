"""Files uploaded through the service: size-limited, typed by their content (never by their name), stored under
generated names in the media folder, decoded in full before anything is registered.

A file is kept only when the import path reads every page of it (pypdfium2 for PDFs, Pillow + Tesseract for
images); pages are re-rendered to PNG, so the service never sends an uploaded file's bytes back to a browser (a
polyglot, e.g. a PDF that is also HTML, is stored but never served).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

from ...data.importer import OCRUnavailable, read_file
from ...data.record import Page

MAX_UPLOAD_BYTES = 64 * 2**20
"""Default largest upload."""

SIGNATURES = [
    (b"%PDF-", "pdf", ".pdf"),
    (b"\x89PNG\r\n\x1a\n", "png", ".png"),
    (b"\xff\xd8\xff", "jpeg", ".jpg"),
    (b"II*\x00", "tiff", ".tif"),
    (b"MM\x00*", "tiff", ".tif"),
]


class UploadError(ValueError):
    """An upload that is refused (HTTP 400 / 413 / 415), with a message for the person who sent it."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def sniff(head: bytes) -> tuple[str, str]:
    """(kind, suffix) from a file's first bytes; UploadError for anything else."""
    if not head:
        raise UploadError("the file is empty (0 bytes)")
    for magic, kind, suffix in SIGNATURES:
        if head.startswith(magic):
            return kind, suffix
    raise UploadError("unsupported file type: the content is not a PDF, PNG, JPEG or TIFF", status=415)


def safe_display_name(name: str | None) -> str:
    """The name to show for an upload: its last path part, printable, at most 255 characters (never used on disk)."""
    base = (name or "upload").replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in base if c.isprintable()).strip() or "upload"
    return base[:255]


def store(data: bytes, media: Path, max_bytes: int = MAX_UPLOAD_BYTES) -> tuple[Path, str, str]:
    """Write ``data`` under a generated name in ``media``; (path, kind, sha256). Nothing is written if refused."""
    if len(data) > max_bytes:
        raise UploadError(f"the file is {len(data)} bytes, the limit {max_bytes}", status=413)
    kind, suffix = sniff(data[:16])
    media.mkdir(parents=True, exist_ok=True)
    path = media / f"{uuid.uuid4().hex}{suffix}"
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path, kind, hashlib.sha256(data).hexdigest()


def read_pages(path: Path, kind: str, doc_id: str, dpi: int = 150, lang: str = "eng") -> list[Page]:
    """Every page of a stored upload with its words (text layer, or OCR); UploadError when it cannot be read."""
    try:
        pages = read_file(path, dpi, lang, doc_id, kind="pdf" if kind == "pdf" else "image")
    except OCRUnavailable as err:
        raise UploadError(f"this image needs OCR and {err}", status=422) from None
    except Exception as err:
        raise UploadError(f"the {kind.upper()} file cannot be read: {type(err).__name__}: {err}".strip(), 422) from None
    for p in pages:
        p.source = f"upload:{path.name}"
    return pages
