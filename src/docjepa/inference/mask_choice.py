"""Which candidate mask answers a question, and how a mask becomes the OCR words it covers.

The decoder gives several candidate masks per question; :func:`choose_mask` picks the one to answer with, and
:func:`snap_to_words` redraws it as the box of its words when the two agree. The predictor, the evaluation and the
data engine all answer through these.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.prompt import box_mask
from ..data.record import Page, union_box, words_under

SNAP_AGREEMENT = 0.3
"""Default ``min_agreement`` of :func:`snap_to_words` (chosen on trained-kinds questions: docs/docjepa-results.md)."""


FULL_PAGE = 0.9
"""A candidate mask covering at least this fraction of the page is not an answer (see :func:`choose_mask`)."""


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two boolean masks of one shape (1 when both are empty)."""
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def coverage(logits: torch.Tensor, region: torch.Tensor | np.ndarray | None) -> torch.Tensor:
    """(N,) fraction of the page (``region`` of the frame, default all of it) that each candidate covers."""
    on = logits > 0
    if region is None:
        return on.flatten(1).sum(1).float().cpu() / on[0].numel()
    region = torch.as_tensor(region, dtype=torch.bool, device=on.device)
    return (on & region).flatten(1).sum(1).float().cpu() / max(1, int(region.sum()))


def choose_mask(logits: torch.Tensor, scores: torch.Tensor, region: torch.Tensor | np.ndarray | None = None) -> int:
    """Which of N candidate masks (N, H, W) logits to return: the highest predicted IoU among the informative ones.

    A question about a page always has an answer region, and it is a part of the page: a mask that is empty on the
    page, or that covers (nearly, :data:`FULL_PAGE`) all of it, says nothing. On unfamiliar pages the IoU head can
    rank such an output first (SAM filters its automatic masks on quality for the same reason). ``region``: (H, W)
    bool, where the page lies in the frame (default: everywhere). When no candidate is informative, the highest
    predicted IoU among the non-empty ones, and when every one is empty, the highest predicted IoU."""
    cover = coverage(logits, region)
    filled, informative = cover > 0, (cover > 0) & (cover < FULL_PAGE)
    s = torch.as_tensor(scores, dtype=torch.float32).detach().cpu().clone()
    keep = informative if informative.any() else filled
    if keep.any():
        s[~keep] = float("-inf")
    return int(s.argmax())


def words_box(mask: np.ndarray, page: Page, frame: float) -> tuple[float, float, float, float] | None:
    """The box (page pixels) around the OCR words whose centre lies inside ``mask`` (a boolean square-frame mask,
    page pixels × ``frame`` = mask pixels), or None when it covers none."""
    inside = words_under(page.word_boxes(), mask, frame)
    return union_box([page.words[i].box for i in inside], 0.0) if inside else None


def snap_to_words(
    mask: np.ndarray, page: Page, frame: float, min_agreement: float = SNAP_AGREEMENT
) -> tuple[np.ndarray, tuple[float, float, float, float] | None]:
    """Replace a mask by the box of the OCR words it covers, drawn as answers are drawn (``box_mask``), when that
    box agrees with it (IoU ≥ ``min_agreement``); otherwise keep it. Returns the mask and the box (None: kept).

    The decoder's masks are 4 page pixels a side at the tiny preset, coarse against a line of text two or three
    mask pixels tall, so a mask on the right words still misses part of their box; answers that are words are
    whole words. A mask that the words' box would change a lot (a signature area, a table column: regions that
    are not words) is kept as it is."""
    box = words_box(mask, page, frame)
    if box is None:
        return mask, None
    snapped = box_mask(box, page, frame, mask.shape[-1])
    union = int((snapped | mask).sum())
    if union == 0 or (snapped & mask).sum() / union < min_agreement:
        return mask, None
    return snapped, box
