"""Clicks on an answer made of words: where a click lands, how the answer's words are drawn, and the rules that make
the model's new answer agree with a person's clicks (:func:`apply_clicks`, applied by the predictor).

On a document, a click on a word is a plain statement about that word. The model still finds the rest of the
answer; these rules keep what the person said and what they saw.
"""

from __future__ import annotations

import numpy as np

from ..data.prompt import box_mask
from ..data.record import Page, union_box, words_under

CLICK_REACH = 0.5
"""A click lands on a word when it is inside the word's box or within this many word heights of it."""

BLOCK_GAP = 1.0
"""Lines of words join one block when the gap between them is at most this many line heights (and they overlap
horizontally): an answer of several lines is one region, as answers are drawn."""


def line_groups(page: Page, words: list[int]) -> list[list[int]]:
    """``words`` grouped into lines, top first, each left to right: a word joins the line whose last word's box spans
    its vertical centre."""
    lines: list[list[int]] = []
    for i in sorted(words, key=lambda i: (page.words[i].box[1], page.words[i].box[0])):
        box = page.words[i].box
        cy = (box[1] + box[3]) / 2
        line = next((ln for ln in lines if page.words[ln[-1]].box[1] <= cy <= page.words[ln[-1]].box[3]), None)
        if line is None:
            lines.append([i])
        else:
            line.append(i)
    return [sorted(line, key=lambda i: page.words[i].box[0]) for line in lines]


def line_boxes(page: Page, words: list[int]) -> list[tuple[float, float, float, float]]:
    """The boxes (page pixels) of ``words`` grouped into lines (:func:`line_groups`). One box per line, so words
    picked on two lines do not cover the space between them."""
    return [union_box([page.words[i].box for i in line]) for line in line_groups(page, words)]


def clicked_word(page: Page, point: tuple[float, float], reach: float = CLICK_REACH) -> int | None:
    """The OCR word a click at ``point`` (page pixels) lands on: the nearest word whose box, grown by ``reach`` × its
    height, holds the point; None when the click is on no word."""
    x, y = point
    best, nearest = None, float("inf")
    for i, w in enumerate(page.words):
        x0, y0, x1, y1 = w.box
        d = float(np.hypot(max(x0 - x, 0.0, x - x1), max(y0 - y, 0.0, y - y1)))
        if d <= reach * max(1.0, y1 - y0) and d < nearest:
            best, nearest = i, d
    return best


def line_pieces(
    page: Page, words: list[int], cuts: list[tuple[float, float]] | tuple = ()
) -> list[tuple[float, float, float, float]]:
    """The boxes (page pixels) of ``words`` line by line (:func:`line_groups`), a line split where one of the
    ``cuts`` (page-pixel points) lies between two of its words."""
    pieces: list[tuple[float, float, float, float]] = []
    for line in line_groups(page, words):
        boxes = [page.words[i].box for i in line]
        start = 0
        for k in range(1, len(boxes) + 1):
            if k == len(boxes) or any(
                boxes[k - 1][2] <= x <= boxes[k][0] and min(boxes[k - 1][1], boxes[k][1]) <= y <= boxes[k][3]
                for x, y in cuts
            ):
                pieces.append(union_box(boxes[start:k]))
                start = k
    return pieces


def word_blocks(
    page: Page, words: list[int], cuts: list[tuple[float, float]] | tuple = (), gap: float = BLOCK_GAP
) -> list[tuple[float, float, float, float]]:
    """``words`` as blocks (page-pixel boxes): their lines, split at ``cuts`` (:func:`line_pieces`), a piece joined
    to the block above it when it overlaps it horizontally and the gap between them is at most ``gap`` line
    heights."""
    blocks: list[tuple[float, float, float, float]] = []
    for piece in line_pieces(page, words, cuts):
        height = piece[3] - piece[1]
        near = [
            i
            for i, b in enumerate(blocks)
            if piece[0] < b[2] and b[0] < piece[2] and piece[1] - b[3] <= gap * max(1.0, height)
        ]
        if near:
            i = near[-1]
            blocks[i] = union_box([blocks[i], piece])
        else:
            blocks.append(piece)
    return blocks


def stretch_to(
    blocks: list[tuple[float, float, float, float]], point: tuple[float, float], height: float
) -> list[tuple[float, float, float, float]]:
    """``blocks`` after a positive click on no word at ``point`` (page pixels): the nearest block in line with it
    (the point within its rows) or in its column (within its columns) stretched to reach it, as a click beyond a
    selection extends it; else a new square block one text line (``height``) a side around the point."""
    x, y = point
    in_line = [i for i, b in enumerate(blocks) if b[1] <= y <= b[3] or b[0] <= x <= b[2]]
    out = list(blocks)
    if in_line:
        i = min(in_line, key=lambda i: max(out[i][0] - x, 0, x - out[i][2]) + max(out[i][1] - y, 0, y - out[i][3]))
        b = out[i]
        out[i] = (min(b[0], x), min(b[1], y), max(b[2], x), max(b[3], y))
    else:
        out.append((x - height / 2, y - height / 2, x + height / 2, y + height / 2))
    return out


def tighten_at(
    blocks: list[tuple[float, float, float, float]], point: tuple[float, float], page: Page
) -> list[tuple[float, float, float, float]]:
    """``blocks`` after a negative click on no word at ``point`` (page pixels): a block holding the point is drawn
    again tightly, as the boxes of its words line by line, a line split at the point (:func:`line_pieces`); a block
    with no word in it goes."""
    x, y = point
    out: list[tuple[float, float, float, float]] = []
    for b in blocks:
        if not (b[0] <= x <= b[2] and b[1] <= y <= b[3]):
            out.append(b)
            continue
        inside = [
            i
            for i, w in enumerate(page.words)
            if b[0] <= (w.box[0] + w.box[2]) / 2 <= b[2] and b[1] <= (w.box[1] + w.box[3]) / 2 <= b[3]
        ]
        out += line_pieces(page, inside, [point])
    return out


def apply_clicks(
    mask: np.ndarray,
    lines: list[tuple[float, float, float, float]] | None,
    page: Page,
    frame: float,
    points,
    labels,
    previous: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple[float, float, float, float]] | None]:
    """An answer (square-frame ``mask`` and its word ``lines``, None: a drawn mask) made to agree with a person's
    clicks (page pixels; label 1: on the answer, 0: off it) on the answer they saw (``previous``, square frame; None:
    none).

    A click on a word decides that word (:func:`clicked_word`; a negative click only inside the word's box), the
    later click on a word deciding: clicked positively it is in the answer, negatively it is not. The other words
    stay as they were in ``previous``, except on the lines of positively clicked words, where the model's new
    answer may add words (a click on "May" lets it complete "12 May 2024"): a correction never makes words appear
    elsewhere. A word answer (or no answer) becomes the blocks of its new words (:func:`word_blocks`, a line split
    where a word clicked off it lies); then each positive click on no word stretches a block in line with it or
    adds a small one there (:func:`stretch_to`), and each negative click on no word draws the block it falls in
    tightly around its words (:func:`tighten_at`). A drawn mask gains or loses the clicked words' boxes. Clicks the
    model's answer already agrees with change nothing: it stands."""
    verdict: dict[int, int] = {}
    stretches: list[tuple[float, float]] = []
    tightens: list[tuple[float, float]] = []
    for point, label in zip(points, labels, strict=True):
        point = (float(point[0]), float(point[1]))
        w = clicked_word(page, point, CLICK_REACH if label else 0.0)
        if w is not None:
            verdict[w] = int(label)
        else:
            (stretches if label else tightens).append(point)
    size = mask.shape[-1]
    if lines is None and mask.any():  # a drawn mask: add and cut the clicked words' boxes
        if not verdict:
            return mask, lines
        out = mask.copy()
        for w, label in verdict.items():
            word = box_mask(page.words[w].box, page, frame, size)
            out = out | word if label else out & ~word
        return out, None
    words = set(words_under(page.word_boxes(), mask, frame))
    model_words = set(words)
    if previous is not None:  # the clicks correct the answer the person saw
        positive = {w for w, label in verdict.items() if label}
        allowed = set()
        for line in line_groups(page, sorted(words | positive)):
            if positive & set(line):
                allowed |= set(line)
        words = set(words_under(page.word_boxes(), previous, frame)) | (words & allowed)
    new = {w for w in words if verdict.get(w, 1)} | {w for w, label in verdict.items() if label}
    if new == model_words:
        blocks = list(lines or [])
    else:
        off = [page.words[w].box for w, label in verdict.items() if not label]
        cuts = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for b in off]
        blocks = word_blocks(page, sorted(new), cuts)
    height = float(np.median([w.box[3] - w.box[1] for w in page.words])) if page.words else 12.0
    for point in stretches:
        blocks = stretch_to(blocks, point, height)
    for point in tightens:
        blocks = tighten_at(blocks, point, page)
    if blocks == list(lines or []):
        return mask, lines
    if not blocks:
        return np.zeros_like(mask), None
    return boxes_mask(blocks, page, frame, size), blocks


def boxes_mask(boxes: list[tuple[float, float, float, float]], page: Page, frame: float, size: int) -> np.ndarray:
    """Page-pixel boxes drawn as answers are drawn (``box_mask``) into one (size, size) bool mask."""
    mask = np.zeros((size, size), dtype=bool)
    for box in boxes:
        mask |= box_mask(box, page, frame, size)
    return mask
