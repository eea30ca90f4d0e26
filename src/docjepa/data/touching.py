"""Which words sit beside one another on a page: the one rule by which a word answer grows
(:func:`docjepa.inference.word_answer.word_span`) and by which the word decoder's training finds the words an answer
could run into (:func:`docjepa.modeling.segmentation.neighbour_token_loss`)."""

from __future__ import annotations

import torch
from torch import Tensor

ROW_GAP = 3.0
"""Two words on one line touch when the gap between them is at most this many word heights."""
LINE_GAP = 1.0
"""Two words on adjacent lines touch when they overlap horizontally and the gap between the lines is at most this
many line heights."""


def touching(boxes: Tensor, row_gap: float = ROW_GAP, line_gap: float = LINE_GAP) -> Tensor:
    """(..., K, K) bool: whether two words (``boxes`` (..., K, 4) as ``(x0, y0, x1, y1)``, in one unit for both axes)
    sit beside each other. On one line (their vertical extents overlap by half the smaller height): at most
    ``row_gap`` heights apart. On two lines: they overlap horizontally and the lines are at most ``line_gap`` × the
    taller word's height apart."""
    b = boxes.to(torch.float64)
    x0, y0, x1, y1 = b.unbind(-1)
    h = y1 - y0
    hi, hj = h.unsqueeze(-1), h.unsqueeze(-2)
    small = torch.minimum(hi, hj).clamp(min=1.0)
    gap = torch.maximum(x0.unsqueeze(-2) - x1.unsqueeze(-1), x0.unsqueeze(-1) - x1.unsqueeze(-2))
    same_line = one_line(b)
    vgap = torch.maximum(y0.unsqueeze(-2) - y1.unsqueeze(-1), y0.unsqueeze(-1) - y1.unsqueeze(-2))
    over = torch.minimum(x1.unsqueeze(-1), x1.unsqueeze(-2)) - torch.maximum(x0.unsqueeze(-1), x0.unsqueeze(-2))
    stacked = (vgap >= 0) & (vgap <= line_gap * torch.maximum(hi, hj)) & (over > 0)
    return torch.where(same_line, gap <= row_gap * small, stacked)


def one_line(boxes: Tensor) -> Tensor:
    """(..., K, K) bool: whether two words (``boxes`` (..., K, 4) as ``(x0, y0, x1, y1)``) stand on one line: their
    vertical extents overlap by at least half the smaller height."""
    b = boxes.to(torch.float64)
    _, y0, _, y1 = b.unbind(-1)
    h = y1 - y0
    small = torch.minimum(h.unsqueeze(-1), h.unsqueeze(-2)).clamp(min=1.0)
    overlap = torch.minimum(y1.unsqueeze(-1), y1.unsqueeze(-2)) - torch.maximum(y0.unsqueeze(-1), y0.unsqueeze(-2))
    return overlap >= 0.5 * small
