"""The training collate path: pages (and questions) → model-ready tensors.

Each page is resized so its longer side is ``image_size`` and pasted at the top left of a white square
(letterboxing keeps the aspect ratio and lets one scale factor map page pixels to model pixels). Words
are tokenised with each sub-token keeping its word's box, in 0…1000 of the square. Answer masks are
rasterised at ``mask_size`` × ``mask_size`` in the same square frame, one per valid answer.

For training augmentation a :class:`Placement` can shrink a page further and put it elsewhere in the square;
image, word boxes and masks all move with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from .frame import fit_scale
from .reader import reader_inputs
from .record import Page, rasterize
from .tokenizer import normalise_box, tokenize_words


@dataclass
class CollateConfig:
    """Sizes of the tensors the model receives."""

    image_size: int = 512
    """Side of the square model input, in pixels."""
    mask_size: int = 128
    """Side of the square answer masks (the decoder's output resolution)."""
    max_tokens: int = 512
    """Longest token sequence (OCR words are truncated beyond it)."""
    max_answers: int = 3
    """Answers kept per question (ambiguous questions have several)."""
    min_answer: int = 0
    """An answer mask narrower or shorter than this many mask pixels grows to it around its centre (0: as drawn)."""


def grow(mask: np.ndarray, side: int) -> None:
    """In place: a non-empty mask whose bounding box is narrower or shorter than ``side`` pixels gets that box
    widened / heightened to ``side`` around its centre (clipped to the mask) and filled."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    if y1 - y0 >= side and x1 - x0 >= side:
        return
    m = mask.shape[0]
    if y1 - y0 < side:
        cy = (y0 + y1) // 2
        y0, y1 = max(0, cy - side // 2), min(m, cy - side // 2 + side)
    if x1 - x0 < side:
        cx = (x0 + x1) // 2
        x0, x1 = max(0, cx - side // 2), min(mask.shape[1], cx - side // 2 + side)
    mask[y0:y1, x0:x1] = 1


@dataclass(frozen=True)
class Placement:
    """Where a page lands in the square input: its fitted size times ``zoom`` (≤ 1), its top left corner at
    (``dx``, ``dy``) pixels of the mask grid (whole mask pixels, so masks move without resampling)."""

    zoom: float = 1.0
    dx: int = 0
    dy: int = 0

    def scale(self, page: Page, side: int) -> float:
        """Page pixels → pixels of a square of ``side`` (the image or the mask grid)."""
        return fit_scale(page.width, page.height, side) * self.zoom

    def offset(self, mask_size: int, side: int) -> tuple[float, float]:
        """The top left corner in pixels of a square of ``side``."""
        return self.dx * side / mask_size, self.dy * side / mask_size


def random_placement(page: Page, mask_size: int, jitter: float, gen: torch.Generator) -> Placement:
    """A zoom drawn uniformly from [1 − jitter, 1] and a uniformly drawn position where the page still fits."""
    zoom = 1.0 - jitter * float(torch.rand(1, generator=gen))
    s = Placement(zoom).scale(page, mask_size)
    free_x = max(0, mask_size - round(page.width * s))
    free_y = max(0, mask_size - round(page.height * s))
    dx = int(torch.randint(free_x + 1, (1,), generator=gen))
    dy = int(torch.randint(free_y + 1, (1,), generator=gen))
    return Placement(zoom, dx, dy)


def paste(canvas: np.ndarray, patch: np.ndarray, dx: int, dy: int) -> None:
    """Write ``patch`` into ``canvas`` with its top left corner at (dx, dy), clipped to the canvas."""
    h, w = min(patch.shape[0], canvas.shape[0] - dy), min(patch.shape[1], canvas.shape[1] - dx)
    if h > 0 and w > 0:
        canvas[dy : dy + h, dx : dx + w] = patch[:h, :w]


class DocumentCollator:
    """Callable for ``DataLoader(collate_fn=…)`` over items ``(page, question index or None)``.

    With a ``reader_tokenizer`` (the question tower's), the batch also holds the page's words as that tower reads
    them (:func:`~docjepa.data.reader.reader_inputs`), for a model with a page reader."""

    def __init__(self, tokenizer, config: CollateConfig | None = None, reader_tokenizer=None) -> None:
        self.tokenizer, self.cfg = tokenizer, config or CollateConfig()
        self.reader_tokenizer = reader_tokenizer

    def _image(self, page: Page, place: Placement) -> torch.Tensor:
        side = self.cfg.image_size
        s = place.scale(page, side)
        img = page.pil().resize((max(1, round(page.width * s)), max(1, round(page.height * s))), Image.BILINEAR)
        canvas = Image.new("RGB", (side, side), "white")
        ox, oy = place.offset(self.cfg.mask_size, side)
        canvas.paste(img, (round(ox), round(oy)))
        x = torch.from_numpy(np.asarray(canvas, dtype=np.float32) / 255.0).permute(2, 0, 1)  # (3, S, S)
        return (x - 0.5) / 0.5

    def _masks(self, page: Page, question: int, place: Placement) -> tuple[torch.Tensor, torch.Tensor]:
        m, n = self.cfg.mask_size, self.cfg.max_answers
        scale = place.scale(page, m)  # page pixels → mask pixels
        out = np.zeros((n, m, m), dtype=np.float32)
        valid = torch.zeros(n, dtype=torch.bool)
        for a, answer in enumerate(page.questions[question].answers[:n]):
            h, w = max(1, round(page.height * scale)), max(1, round(page.width * scale))
            paste(out[a], rasterize(answer.regions, (page.height, page.width), (h, w)), place.dx, place.dy)
            if self.cfg.min_answer:
                grow(out[a], self.cfg.min_answer)
            valid[a] = True
        return torch.from_numpy(out), valid

    def __call__(self, items: Sequence[tuple[Page, int | None]], placements: Sequence[Placement] | None = None) -> dict:
        """Items (page, question index or None) → a batch; ``placements`` (one per item) move the pages in the
        square input (default: fitted at the top left)."""
        images, ids, boxes, word_ids, masks, valid, questions, kinds = [], [], [], [], [], [], [], []
        for k, (page, question) in enumerate(items):
            place = placements[k] if placements is not None else Placement()
            images.append(self._image(page, place))
            side = self.cfg.image_size
            s, (ox, oy) = place.scale(page, side), place.offset(self.cfg.mask_size, side)
            word_boxes = [
                normalise_box((w.box[0] * s + ox, w.box[1] * s + oy, w.box[2] * s + ox, w.box[3] * s + oy), side, side)
                for w in page.words
            ]
            enc = tokenize_words(
                self.tokenizer, [w.text for w in page.words] or [""], word_boxes or [[0, 0, 0, 0]], self.cfg.max_tokens
            )
            ids.append(enc["input_ids"])
            boxes.append(enc["bbox"])
            word_ids.append([-1 if w is None or not page.words else w for w in enc["word_ids"]])
            if question is None:
                masks.append(torch.zeros(self.cfg.max_answers, self.cfg.mask_size, self.cfg.mask_size))
                valid.append(torch.zeros(self.cfg.max_answers, dtype=torch.bool))
                questions.append("")
                kinds.append("")
            else:
                mk, vd = self._masks(page, question, place)
                masks.append(mk)
                valid.append(vd)
                questions.append(page.questions[question].text)
                kinds.append(page.questions[question].kind)
        length = max(len(t) for t in ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(items), length), pad, dtype=torch.long)
        attention = torch.zeros((len(items), length), dtype=torch.long)
        bbox = torch.zeros((len(items), length, 4), dtype=torch.long)
        word_index = torch.full((len(items), length), -1, dtype=torch.long)
        for i, (t, b, w) in enumerate(zip(ids, boxes, word_ids)):
            input_ids[i, : len(t)] = torch.tensor(t)
            attention[i, : len(t)] = 1
            bbox[i, : len(t)] = torch.tensor(b)
            word_index[i, : len(t)] = torch.tensor(w)
        batch = {
            "pixel_values": torch.stack(images),  # (B, 3, S, S)
            "input_ids": input_ids,  # (B, L)
            "attention_mask": attention,  # (B, L)
            "bbox": bbox,  # (B, L, 4), 0…1000 of the square input
            "word_index": word_index,  # (B, L) index of each token's word in page.words, −1 for special tokens
            "masks": torch.stack(masks),  # (B, A, M, M)
            "answer_valid": torch.stack(valid),  # (B, A)
            "questions": questions,
            "question_kinds": kinds,
        }
        if self.reader_tokenizer is not None:  # only the words the page tokens reach; the rest would go unused
            reached = [max((i for i in w if i is not None and i >= 0), default=-1) + 1 for w in word_ids]
            pages = [[w.text for w in page.words[:n]] for (page, _), n in zip(items, reached)]
            batch.update(reader_inputs(self.reader_tokenizer, pages))
        return batch
