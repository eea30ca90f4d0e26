"""Answer masks in the engine: COCO run-length encoding (pycocotools), PNGs from the browser, and the exact
rectangle cover that turns any mask into the polygons of the project's page records."""

from __future__ import annotations

import base64
import binascii
import io
import math

import numpy as np
from PIL import Image

from ...data.record import Word, box_polygon, words_under

MAX_MASK_BYTES = 8 * 2**20
"""Largest mask PNG accepted from a browser (a page-sized 1-bit mask is a few kB; a colour one a few hundred)."""


class MaskError(ValueError):
    """A mask that cannot be read or does not fit the page."""


def encode(mask: np.ndarray) -> dict:
    """COCO compressed RLE ``{"size": [h, w], "counts": str}`` of a boolean (H, W) mask."""
    from pycocotools import mask as coco

    rle = coco.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def decode(rle: dict) -> np.ndarray:
    """The boolean (H, W) mask of a COCO RLE (compressed or not)."""
    from pycocotools import mask as coco

    counts = rle["counts"]
    if isinstance(counts, list):
        rle = coco.frPyObjects(rle, *rle["size"])
    else:
        rle = {"size": rle["size"], "counts": counts.encode("ascii") if isinstance(counts, str) else counts}
    return coco.decode(rle).astype(bool)


def area(rle: dict) -> int:
    from pycocotools import mask as coco

    return int(coco.area({"size": rle["size"], "counts": rle["counts"].encode("ascii")}))


def bbox(rle: dict) -> list[float]:
    """[x, y, width, height] of a COCO RLE."""
    from pycocotools import mask as coco

    return [float(v) for v in coco.toBbox({"size": rle["size"], "counts": rle["counts"].encode("ascii")})]


def from_png(data: str | bytes, height: int, width: int) -> np.ndarray:
    """A mask drawn in the browser: a PNG (bytes, base64 text or a ``data:image/png;base64,`` URL) of the page's size
    whose painted pixels (alpha above one half, or, without alpha, non-black) are the mask."""
    if isinstance(data, str):
        text = data.split(",", 1)[1] if data.startswith("data:") else data
        if len(text) > MAX_MASK_BYTES * 4 // 3 + 4:
            raise MaskError(f"mask image larger than {MAX_MASK_BYTES} bytes")
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise MaskError("mask is not valid base64") from None
    if len(data) > MAX_MASK_BYTES:
        raise MaskError(f"mask image larger than {MAX_MASK_BYTES} bytes")
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise MaskError("mask is not a PNG image")
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.size != (width, height):
                raise MaskError(f"mask is {img.width}×{img.height}, the page {width}×{height}")
            img.load()
            if "A" in img.getbands() or "transparency" in img.info or img.mode in ("LA", "PA", "RGBA"):
                arr = np.asarray(img.convert("RGBA"))[..., 3] > 127
            else:
                arr = np.asarray(img.convert("L")) > 127
    except MaskError:
        raise
    except Exception as err:
        raise MaskError(f"mask image cannot be read: {err}") from None
    return arr


def to_png(mask: np.ndarray, colour: tuple[int, int, int] = (230, 40, 40)) -> bytes:
    """A PNG: ``colour`` where the mask is, transparent elsewhere (what the page shows as an overlay). Two palette
    entries, the first transparent: about a tenth of the time and of the bytes of an RGBA image."""
    h, w = mask.shape
    img = Image.frombytes("P", (w, h), np.ascontiguousarray(mask, dtype=np.uint8).tobytes())
    img.putpalette([0, 0, 0, *colour])
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=False, compress_level=6, transparency=bytes([0, 255]))
    return buf.getvalue()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def to_boxes(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Rectangles ``(x0, y0, x1, y1)`` (pixel edges, exclusive ends) whose union is exactly the mask: each row's runs,
    merged downwards with identical runs of the rows below. A box-shaped answer gives one rectangle."""
    mask = np.asarray(mask, dtype=bool)
    open_runs: dict[tuple[int, int], int] = {}  # (x0, x1) → first row
    boxes = []
    for y in range(mask.shape[0] + 1):
        runs = set()
        if y < mask.shape[0]:
            row = np.concatenate([[0], mask[y].astype(np.int8), [0]])
            edges = np.flatnonzero(np.diff(row))
            runs = {(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])}
        for run in [r for r in open_runs if r not in runs]:
            boxes.append((run[0], open_runs.pop(run), run[1], y))
        for run in runs:
            open_runs.setdefault(run, y)
    return sorted(boxes, key=lambda b: (b[1], b[0]))


def to_polygons(mask: np.ndarray) -> list[list[float]]:
    """The mask as page-record regions: one 4-corner polygon per rectangle of :func:`to_boxes`, with corners on the
    first and last pixel centres' integer coordinates (the project's rasteriser fills a polygon's edges too), so
    ``rasterize(to_polygons(m), m.shape)`` is ``m`` exactly."""
    return [box_polygon((x0, y0, x1 - 1, y1 - 1)) for x0, y0, x1, y1 in to_boxes(mask)]


def word_box(word: Word | dict) -> tuple[float, float, float, float]:
    """A word's box (page pixels), of a ``Word`` or of a word as the API sends it (a dict with ``box``)."""
    return tuple(word["box"] if isinstance(word, dict) else word.box)


def words_inside(words: list[Word] | list[dict], mask: np.ndarray) -> list[int]:
    """Indices of the words whose box centre lies in the (page-resolution) mask (``record.words_under``)."""
    return words_under([word_box(w) for w in words], mask)


def pixel_box(box) -> tuple[int, int, int, int]:
    """A word box in whole pixels, rounded half up as the page (JavaScript's ``Math.round``) rounds it, so a word
    the page adds or removes covers exactly these pixels."""
    return tuple(math.floor(float(v) + 0.5) for v in box)


def words_mask(words: list[Word] | list[dict], ids: list[int], height: int, width: int) -> np.ndarray:
    """The union of some words' boxes (in :func:`pixel_box` pixels), clipped to the page."""
    out = np.zeros((height, width), dtype=bool)
    for i in ids:
        x0, y0, x1, y1 = pixel_box(word_box(words[i]))
        out[max(0, y0) : max(0, min(height, y1)), max(0, x0) : max(0, min(width, x1))] = True
    return out


def whole_words(
    words: list[Word] | list[dict], mask: np.ndarray, keep_at: list | tuple = ()
) -> tuple[np.ndarray, list[int]]:
    """A candidate as the page edits it: the boxes of the words whose centre it covers, each whole (not the one box
    ``docjepa.inference.predictor.snap_to_words`` draws around them), so clicking a word out removes every pixel of
    it; a mask over no word stays as it is. ``keep_at``: points (page pixels) of positive clicks; a part of the mask
    that holds one that is on no word is kept as the click rules drew it (the square on blank page, a block
    stretched to the click), not snapped away."""
    ids = words_inside(words, mask)
    if not ids:
        return mask, ids
    snapped = words_mask(words, ids, *mask.shape)
    blank = [(x, y) for x, y in keep_at if not any(_inside(w, x, y) for w in words)]
    if blank and mask.any():
        from scipy import ndimage

        parts, _ = ndimage.label(mask)
        h, w = mask.shape
        for x, y in blank:
            part = parts[min(max(int(y), 0), h - 1), min(max(int(x), 0), w - 1)]
            if part:
                snapped |= parts == part
    return snapped, ids


def _inside(word, x: float, y: float) -> bool:
    x0, y0, x1, y1 = word_box(word)
    return x0 <= x <= x1 and y0 <= y <= y1
