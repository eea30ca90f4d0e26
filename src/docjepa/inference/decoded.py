"""What the predictor hands to the answer policy: a page as it was encoded, and the decoder's output for one prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.frame import PageFrame
from ..data.record import Page


@dataclass(frozen=True)
class EncodedPage:
    """A page as :meth:`DocumentPredictor.set_page` encoded it: all an answer needs besides its prompt."""

    page: Page
    encoding: Any
    """The model's ``PageEncoding`` (fused image and text embeddings)."""
    word_index: torch.Tensor
    """(L,) the OCR word of each text token (−1: a special token)."""
    frame: PageFrame
    """Where the page lies in the model's square frame."""


@dataclass(frozen=True)
class Decoded:
    """The decoder's output for one prompt on one encoded page: what the answer functions read."""

    logits: torch.Tensor
    """(N, M, M) mask logits in the square frame."""
    scores: torch.Tensor
    """(N,) predicted IoU of each candidate."""
    token_logits: torch.Tensor | None = None
    """(L,) the word decoder's logit of each text token (None: the model has none)."""
    lexical_box: tuple[float, float, float, float] | None = None
    """The OCR matcher's box (page pixels) that was the mask prompt (None: none)."""
    clicks: tuple[np.ndarray, list[int], np.ndarray | None] | None = None
    """The prompt's points (P, 2) in page pixels, their labels and the mask they corrected (None: no points)."""
