"""``docjepa show``: pages drawn with their word boxes and answer masks, as PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from .record import Page
from .shards import RecordError, iter_pages, log
from .synth.canvas import load_font

COLOURS = [
    (230, 25, 75),
    (60, 180, 75),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (128, 128, 0),
]


def render_page(page: Page, words: bool = True, masks: bool = True) -> Image.Image:
    """The page with word boxes (thin grey), each question's answer mask in its own colour, questions below
    (drawn at the page's size: a shrunk page's image is enlarged to it)."""
    img = page.pil()
    if img.size != (page.width, page.height):
        img = img.resize((page.width, page.height), Image.BILINEAR)
    img = np.asarray(img, dtype=np.float32)
    if masks:
        for qi, _ in enumerate(page.questions):
            m = page.answer_mask(qi)
            colour = np.array(COLOURS[qi % len(COLOURS)], dtype=np.float32)
            img[m] = 0.55 * img[m] + 0.45 * colour
    base = Image.fromarray(img.astype(np.uint8))
    draw = ImageDraw.Draw(base)
    if words:
        for w in page.words:
            draw.rectangle(w.box, outline=(120, 120, 120))
    font = load_font("sans", max(10, page.height // 70))
    line_h = font.size + 6
    legend = Image.new("RGB", (base.width, line_h * max(1, len(page.questions)) + 10), "white")
    ld = ImageDraw.Draw(legend)
    for qi, q in enumerate(page.questions):
        y = 5 + qi * line_h
        ld.rectangle((5, y + 2, 5 + font.size, y + 2 + font.size), fill=COLOURS[qi % len(COLOURS)])
        answers = " | ".join(a.text for a in q.answers if a.text)
        ld.text(
            (12 + font.size, y), f"[{q.kind}] {q.text}" + (f" → {answers}" if answers else ""), font=font, fill="black"
        )
    out = Image.new("RGB", (base.width, base.height + legend.height), "white")
    out.paste(base, (0, 0))
    out.paste(legend, (0, base.height))
    return out


def show(root: Path, out: Path, limit: int = 20, on_skip=None) -> list[Path]:
    """Write up to ``limit`` pages of a dataset as annotated PNGs into ``out``; unreadable records are logged
    (and passed to ``on_skip``) and left out."""
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def skip(err: RecordError) -> None:
        log.warning("skipping unreadable record %s", err)
        if on_skip is not None:
            on_skip(err)

    for i, page in enumerate(iter_pages(root, on_skip=skip)):
        if i >= limit:
            break
        path = out / f"{page.doc_id}-p{page.page}.png"
        render_page(page).save(path)
        written.append(path)
    return written
