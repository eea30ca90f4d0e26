"""Key neighbours: each page word also reads the words where a key stands to it, so that a value carries its key.

A value is told from another value of its kind (the invoice date from the due date) by its key, which stands left
of it on its line ("Due date: 14.03.2025") or above it ("Due date" over a boxed field). In the word decoder a
value token finds its key only in two steps of attention (the key's words match the question; the value is the
word right of or below them), which a decoder trained on a few thousand key questions does not learn: it answers
both date questions with one date. Graph readers of forms (GraphIE, PICK) pass messages between layout
neighbours instead; here, before each of the word decoder's blocks, every word gets a learnt map of the states of
the words along a few fixed paths from it: by default (:data:`PATHS`) one, two and three words to its left on its
line, the word above it, and that word's left neighbour; a model's config (``key_paths``) may choose others, also
reaching to the first word of a run of words or the top of a column (:data:`STEPS`). The maps start at zero, so a
model with them answers at step 0 as one without.

Neighbours are found from the page words' boxes (0…1000 of the square input) in one batched pass on the device, once
per page (kept in its encoding, ``PageEncoding.key_paths``), without host synchronisation: the left neighbour is the
nearest word on the same line (centres within half a word height) that starts left of the word and ends at most
:data:`LEFT_REACH` before it; the word above is the nearest one whose line is above the word's, that overlaps it
horizontally and ends at most :data:`ABOVE_REACH` word heights above it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .page_reader import pool_words, spread

PATHS = ("l", "ll", "lll", "a", "al")
"""The default paths from a word to the neighbours it reads: ``l`` a step to the left on its line, ``a`` a step up."""
STEPS = {"l": "one word to the left on the line", "a": "the word above", "L": "the run's first word", "A": "the top"}
"""The letters a path is spelt with. ``L`` goes one step left and on left while the next word is at most
:data:`RUN_GAP` word heights away (to the first word of the run of words it stands in, not across a column gap: a
long key's first word, "Date" of "Date of exposure taxable invoice:"), ``A`` up while there is a word above (to the
top of the column: a table's header, an address block's heading); each at most :data:`FAR` steps, and at least one
(none where the first step leads nowhere)."""
FAR = 16
"""The most steps ``L`` and ``A`` take."""
LEFT_REACH = 350.0
"""The widest gap between a word and its left neighbour, in 0…1000 units of the square input."""
ABOVE_REACH = 2.5
"""The widest gap between a word and the word above it, in the word's heights."""
RUN_GAP = 2.5
"""The widest gap, in the word's heights, that ``L`` steps over after its first step: a word space or the space
after a key, not the gap between two columns."""


def _pairs(box: Tensor, valid: Tensor) -> tuple[Tensor, ...]:
    """Per pair (word i, candidate j): the coordinates broadcast as (B, W, 1) for i and (B, 1, W) for j, and the
    pairs that may be neighbours at all (both words read, not the same word)."""
    x0, y0, x1, y1 = box.float().unbind(-1)
    w = box.shape[1]
    eye = torch.eye(w, dtype=torch.bool, device=box.device)
    ok = valid[:, :, None] & valid[:, None, :] & ~eye
    return x0, y0, x1, y1, ok


def _nearest(score: Tensor, ok: Tensor) -> Tensor:
    """(B, W, W) scores of candidates j for each word i → the best candidate's index, −1 where none is ``ok``."""
    best = torch.where(ok, score, torch.full_like(score, float("inf"))).argmin(-1)
    return torch.where(ok.any(-1), best, torch.full_like(best, -1))


def left_neighbour(box: Tensor, valid: Tensor) -> Tensor:
    """(B, W, 4) word boxes and (B, W) which words are read → (B, W) each word's left neighbour on its line, −1."""
    x0, y0, x1, y1, ok = _pairs(box, valid)
    cy, h = (y0 + y1) / 2, (y1 - y0).clamp(min=1.0)
    same_line = (cy[:, :, None] - cy[:, None, :]).abs() < 0.5 * torch.maximum(h[:, :, None], h[:, None, :])
    gap = x0[:, :, None] - x1[:, None, :]
    ok = ok & same_line & (x0[:, None, :] < x0[:, :, None]) & (gap > -0.5 * h[:, :, None]) & (gap < LEFT_REACH)
    return _nearest(gap, ok)


def above_neighbour(box: Tensor, valid: Tensor) -> Tensor:
    """(B, W, 4) word boxes and (B, W) which words are read → (B, W) the word above each word, −1 for none."""
    x0, y0, x1, y1, ok = _pairs(box, valid)
    cy, h = (y0 + y1) / 2, (y1 - y0).clamp(min=1.0)
    overlap = torch.minimum(x1[:, :, None], x1[:, None, :]) - torch.maximum(x0[:, :, None], x0[:, None, :])
    gap = y0[:, :, None] - y1[:, None, :]
    higher = cy[:, None, :] < cy[:, :, None] - 0.5 * h[:, :, None]
    ok = ok & higher & (overlap > 0) & (gap < ABOVE_REACH * h[:, :, None])
    return _nearest(gap + 0.01 * (x0[:, :, None] - x0[:, None, :]).abs(), ok)


def follow(index: Tensor, step: Tensor) -> Tensor:
    """Indices (B, W) → the neighbours ``step`` (B, W) gives them, −1 where ``index`` is −1 or has none."""
    nxt = step.gather(1, index.clamp(min=0))
    return torch.where(index >= 0, nxt, torch.full_like(nxt, -1))


def run_neighbour(box: Tensor, left: Tensor) -> Tensor:
    """(B, W, 4) word boxes and (B, W) their left neighbours → the left neighbours at most :data:`RUN_GAP` of the
    word's heights away, −1 for the others: the next word of the same run of words, not of the column beside."""
    x0, y0, _, y1 = box.float().unbind(-1)
    gap = x0 - box[..., 2].float().gather(1, left.clamp(min=0))
    return torch.where((left >= 0) & (gap <= RUN_GAP * (y1 - y0).clamp(min=1.0)), left, torch.full_like(left, -1))


def follow_far(index: Tensor, first: Tensor, then: Tensor) -> Tensor:
    """Indices (B, W) → where ``first`` leads them in one step and ``then`` on from there while it leads anywhere
    (at most :data:`FAR` steps in all); −1 where the first step leads nowhere. A fixed number of gathers: no host
    synchronisation."""
    index = follow(index, first)
    for _ in range(FAR - 1):
        nxt = follow(index, then)
        index = torch.where(nxt >= 0, nxt, index)
    return index


def check_paths(paths) -> tuple[str, ...]:
    """``paths`` as a tuple, refused with one line unless each is a non-empty string of the letters of
    :data:`STEPS` and none repeats."""
    paths = tuple(paths)
    bad = [p for p in paths if not isinstance(p, str) or not p or set(p) - set(STEPS)]
    if bad or not paths or len(set(paths)) < len(paths):
        spelt = ", ".join(f"{k}: {v}" for k, v in STEPS.items())
        raise ValueError(f"key paths must be distinct non-empty strings of the letters ({spelt}); got {list(paths)}")
    return paths


def neighbour_paths(box: Tensor, valid: Tensor, paths: tuple[str, ...] = PATHS) -> Tensor:
    """(B, W, 4) word boxes and (B, W) which words are read → (B, W, len(paths)) the word at the end of each of
    ``paths`` (:data:`STEPS`) from each word, −1 where a path leads nowhere."""
    left, above = left_neighbour(box, valid), above_neighbour(box, valid)
    near, far = {"l": left, "a": above}, {"L": (left, run_neighbour(box, left)), "A": (above, above)}
    start = torch.arange(box.shape[1], device=box.device).expand(box.shape[0], -1)
    out = []
    for path in check_paths(paths):
        index = start
        for step in path:
            index = follow(index, near[step]) if step in near else follow_far(index, *far[step])
        out.append(index)
    return torch.stack(out, dim=-1)


class KeyNeighbours(nn.Module):
    """One learnt map per word-decoder block from the states of a word's neighbours along ``paths`` to what is
    added to the word's tokens; the maps start at zero."""

    def __init__(self, dim: int, rounds: int, paths: tuple[str, ...] = PATHS) -> None:
        super().__init__()
        self.paths = check_paths(paths)
        self.maps = nn.ModuleList(nn.Linear(len(self.paths) * dim, dim) for _ in range(rounds))
        self._zero_init()

    def _zero_init(self) -> None:
        for m in self.maps:
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, tokens: Tensor, word_index: Tensor, paths: Tensor, block: int) -> Tensor:
        """Page tokens (B, L, D), each token's word (B, L), the paths' words (B, W, P) → (B, L, D) to add to the
        tokens before block ``block``."""
        b, w, p = paths.shape
        words = pool_words(tokens, word_index, w)
        d = words.shape[-1]
        picked = words.gather(1, paths.clamp(min=0).reshape(b, w * p, 1).expand(-1, -1, d)).view(b, w, p, d)
        picked = picked * (paths >= 0).unsqueeze(-1).to(picked.dtype)
        out = self.maps[block](picked.flatten(2).to(self.maps[block].weight.dtype))
        return spread(out.to(tokens.dtype), word_index)
