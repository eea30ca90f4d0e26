"""The document record: one page with its words, boxes and questions.

A page is an image, the words on it with pixel boxes ``(x0, y0, x1, y1)`` in reading order, its
size and source, and zero or more questions. A question has one or more valid answers (ambiguity
is kept, not flattened); an answer is one or more regions, each a polygon given as a flat list
``[x0, y0, x1, y1, x2, y2, …]`` in page pixels (a box is a 4-corner polygon), so it rasterises to
a mask at any resolution.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from .kinds import row_kind

Box = tuple[float, float, float, float]


@dataclass
class Word:
    """One OCR word and its pixel box."""

    text: str
    box: Box


@dataclass
class Answer:
    """One valid answer: its regions (polygons in page pixels), its text and the words it covers."""

    regions: list[list[float]]
    text: str = ""
    word_ids: list[int] = field(default_factory=list)


@dataclass
class Question:
    """A question about the page, of a named kind (``data.kinds``: what it asks for, scored per kind), with its
    answers."""

    text: str
    kind: str
    answers: list[Answer]
    template: str = ""
    """The unformatted template the text came from (synthetic data), for held-out-template evaluation."""


@dataclass
class Page:
    """One document page."""

    doc_id: str
    page: int
    width: int
    height: int
    image: bytes  # PNG (or JPEG) bytes
    words: list[Word]
    source: str
    layout: str = ""
    questions: list[Question] = field(default_factory=list)
    _rgb: Image.Image | None = field(default=None, init=False, repr=False, compare=False)

    def word_boxes(self) -> list[Box]:
        """The OCR words' boxes (page pixels), in the words' order."""
        return [w.box for w in self.words]

    def pil(self) -> Image.Image:
        """The page image as RGB, decoded once and cached (treat it as read-only)."""
        if self._rgb is None:
            with Image.open(io.BytesIO(self.image)) as img:
                self._rgb = img.convert("RGB")
        return self._rgb

    def answer_mask(self, question: int, size: tuple[int, int] | None = None, answer: int | None = None) -> np.ndarray:
        """Boolean mask (H, W) of one answer of a question, or of the union of all its answers.

        ``size`` is (height, width) of the mask; regions are scaled from page pixels to it.
        """
        q = self.questions[question]
        answers = q.answers if answer is None else [q.answers[answer]]
        return rasterize([r for a in answers for r in a.regions], (self.height, self.width), size)

    def to_row(self) -> dict[str, Any]:
        """A flat dict for a Parquet row."""
        return {
            "doc_id": self.doc_id,
            "page": self.page,
            "width": self.width,
            "height": self.height,
            "image": self.image,
            "source": self.source,
            "layout": self.layout,
            "words": [{"text": w.text, "box": list(w.box)} for w in self.words],
            "questions": [
                {
                    "text": q.text,
                    "kind": q.kind,
                    "template": q.template,
                    "answers": [{"regions": a.regions, "text": a.text, "word_ids": a.word_ids} for a in q.answers],
                }
                for q in self.questions
            ],
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Page:
        return cls(
            doc_id=row["doc_id"],
            page=int(row["page"]),
            width=int(row["width"]),
            height=int(row["height"]),
            image=row["image"],
            source=row["source"],
            layout=row.get("layout") or "",
            words=[Word(w["text"], tuple(w["box"])) for w in row["words"]],
            questions=[
                Question(
                    q["text"],
                    row_kind(q),
                    [Answer([list(r) for r in a["regions"]], a["text"], list(a["word_ids"])) for a in q["answers"]],
                    q.get("template") or "",
                )
                for q in row["questions"]
            ],
        )


def box_polygon(box: Box) -> list[float]:
    """A box as a 4-corner polygon (clockwise from the top left)."""
    x0, y0, x1, y1 = box
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def union_box(boxes: list[Box], pad: float = 0.0) -> Box:
    """The smallest box around ``boxes``, grown by ``pad`` pixels."""
    if not boxes:
        raise ValueError("union_box of no boxes")
    return (
        min(b[0] for b in boxes) - pad,
        min(b[1] for b in boxes) - pad,
        max(b[2] for b in boxes) + pad,
        max(b[3] for b in boxes) + pad,
    )


def words_under(boxes: Iterable[Box], mask: np.ndarray, frame: float = 1.0) -> list[int]:
    """Indices of the word boxes (page pixels) whose centre lies inside ``mask`` (page pixels × ``frame`` = mask
    pixels; 1 for a mask at the page's resolution): the one meaning of "the words a mask covers"."""
    rows, cols = mask.shape[-2:]
    out = []
    for i, b in enumerate(boxes):
        cx, cy = int((b[0] + b[2]) / 2 * frame), int((b[1] + b[3]) / 2 * frame)
        if 0 <= cx < cols and 0 <= cy < rows and mask[cy, cx]:
            out.append(i)
    return out


def rasterize(
    regions: list[list[float]], page_size: tuple[int, int], size: tuple[int, int] | None = None
) -> np.ndarray:
    """Fill polygons given in page pixels into a boolean (H, W) mask of ``size`` (default: the page size)."""
    ph, pw = page_size
    h, w = size or page_size
    sx, sy = w / pw, h / ph
    mask = Image.new("1", (w, h), 0)
    draw = ImageDraw.Draw(mask)
    for poly in regions:
        if len(poly) < 6 or len(poly) % 2:
            raise ValueError(f"a region needs at least 3 (x, y) points, got {len(poly) // 2}")
        draw.polygon([(poly[i] * sx, poly[i + 1] * sy) for i in range(0, len(poly), 2)], fill=1)
    return np.array(mask, dtype=bool)
