"""Generated sections of markdown files: the text between a ``<!-- name:start -->`` and a ``<!-- name:end -->``
marker is replaced by a freshly generated table, and the rest of the file is left as it is.

Both ``rsngd`` (benchmark reports) and ``docjepa`` (results, the real-page benchmark, the engine curve) write their
tables into the docs this way; this package depends on neither.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["fill_section"]


def fill_section(path: Path, start: str, end: str, body: str) -> None:
    """Replace what lies between the ``start`` and ``end`` markers of a markdown file with ``body``."""
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} section to fill")
    head, rest = text.split(start, 1)
    path.write_text(head + start + "\n" + body.strip() + "\n" + end + rest.split(end, 1)[1])
