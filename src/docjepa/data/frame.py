"""The one coordinate transform between a page and the model's square frame at inference (as segment-anything's
``ResizeLongestSide``): the page is fitted by its longest side into the ``image_size`` square at the top left; the
decoder's masks cover the same square at ``mask_size``.

The predictor, the evaluation, the clicks curve and the data engine all go through :class:`PageFrame`; training's
random placement of a page in the square is :class:`docjepa.data.collate.Placement`, whose ``zoom=1`` placement at
(0, 0) is this frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .record import Page

__all__ = ["PageFrame", "fit_scale"]


def fit_scale(width: float, height: float, side: float) -> float:
    """Page pixels → pixels of a square of ``side`` that the page fits by its longest side: the one formula of the
    page ↔ square mapping (inference's :class:`PageFrame`, training's ``Placement`` at zoom 1, the CLIP tower's
    region cells)."""
    return side / max(width, height)


@dataclass(frozen=True)
class PageFrame:
    """Where a ``width`` × ``height`` page lies in the model's square input (``image_size``) and mask grid
    (``mask_size``)."""

    width: int
    """The page's width in page pixels."""
    height: int
    """The page's height in page pixels."""
    image_size: int
    """Side of the model's square input image."""
    mask_size: int
    """Side of the decoder's square mask grid."""

    @classmethod
    def of(cls, page: Page, image_size: int, mask_size: int) -> PageFrame:
        return cls(page.width, page.height, image_size, mask_size)

    @property
    def scale(self) -> float:
        """Page pixels → pixels of the input image."""
        return fit_scale(self.width, self.height, self.image_size)

    @property
    def frame(self) -> float:
        """Page pixels → mask pixels."""
        return self.scale * self.mask_size / self.image_size

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns) of the mask grid the page covers (at least one of each)."""
        return max(1, round(self.height * self.frame)), max(1, round(self.width * self.frame))

    def region(self) -> np.ndarray:
        """(mask_size, mask_size) bool: where the page lies in the mask grid (the rest is letterbox padding)."""
        region = np.zeros((self.mask_size, self.mask_size), dtype=bool)
        h, w = self.shape
        region[:h, :w] = True
        return region

    def to_image(self, coords) -> torch.Tensor:
        """Points (…, 2) or boxes (…, 4) in page pixels → pixels of the input image (float32)."""
        return torch.as_tensor(coords, dtype=torch.float32) * self.scale

    def to_page_point(self, row: int, col: int) -> tuple[float, float]:
        """The centre of mask pixel (row, col) as an (x, y) point in page pixels."""
        return (col + 0.5) / self.frame, (row + 0.5) / self.frame

    def to_frame(self, mask: np.ndarray) -> np.ndarray:
        """A page-resolution (height, width) bool mask → the mask grid (mask_size, mask_size) bool: a mask pixel is
        set when any page pixel under it is (a word a few page pixels tall stays)."""
        m = self.mask_size
        h, w = min(m, self.shape[0]), min(m, self.shape[1])
        small = Image.fromarray(np.asarray(mask, dtype=bool).astype(np.uint8) * 255).resize(
            (w, h), Image.Resampling.BOX
        )
        out = np.zeros((m, m), dtype=bool)
        out[:h, :w] = np.asarray(small) > 0
        return out

    def to_page(self, small: np.ndarray) -> np.ndarray:
        """A mask-grid bool mask → the page's resolution (height, width), each page pixel taking its mask pixel's
        value."""
        ys = np.minimum((np.arange(self.height) * self.frame).astype(int), small.shape[0] - 1)
        xs = np.minimum((np.arange(self.width) * self.frame).astype(int), small.shape[1] - 1)
        return small[np.ix_(ys, xs)]

    def upsample(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, mask_size, mask_size) logits → (N, height, width): the page's part of the grid, bilinear."""
        h, w = self.shape
        crop = logits[:, :h, :w].unsqueeze(0)
        return F.interpolate(crop, size=(self.height, self.width), mode="bilinear", align_corners=False)[0]
