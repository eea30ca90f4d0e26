"""The page reader: the page's words read by the question tower, so that question and page share one language.

The page text encoder learns its vocabulary from this project's text alone; the question goes through a
pre-trained sentence encoder (all-MiniLM-L6-v2 by default). Without a reader, "Installation" in a question and
"Installation" on the page meet only through attention the decoder learns from a few thousand examples. With one,
the page's words also go through the question tower (the same module: no weights of its own), its token states
are averaged per word, projected by the question encoder's own projection, so that the page's words and the
question's tokens lie in one space, and added to every page token of that word after the layout-aware
backbone, through a linear map that starts at zero: at step 0 the model is exactly the one without a reader, and
layout never enters the pre-trained tower's input, which therefore reads what it was trained on.

The reading depends on the page's words only. A frozen tower reads each page once: in training, the readings of
the pages seen are kept (per page, in half precision) and reused whenever the page comes back; a predictor keeps
the whole page encoding anyway. With a joint reader (:mod:`~docjepa.modeling.joint_reader`) the same pass also
gives each word's states after the tower's lower layers, which that reader reads again with each question.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor, nn

from .prompt_encoder import QuestionEncoder


def pool_sums(states: Tensor, word: Tensor, words: int) -> tuple[Tensor, Tensor]:
    """Sum of the token states (B, R, H) of each word (``word`` (B, R): its index, −1 for none) → (B, words, H), and
    how many tokens each sum holds (B, words)."""
    b, _, h = states.shape
    if words == 0:
        return states.new_zeros(b, 0, h), states.new_zeros(b, 0)
    keep = ((word >= 0) & (word < words)).to(states.dtype)  # a weight, not a selection: no host synchronisation
    index = word.clamp(0, words - 1)
    total = states.new_zeros(b, words, h).scatter_add(
        1, index.unsqueeze(-1).expand(-1, -1, h), states * keep[..., None]
    )
    count = states.new_zeros(b, words).scatter_add(1, index, keep)
    return total, count


def pool_words(states: Tensor, word: Tensor, words: int) -> Tensor:
    """Mean of the token states (B, R, H) of each word (``word`` (B, R): its index, −1 for none) → (B, words, H);
    a word no token reaches is zero."""
    total, count = pool_sums(states, word, words)
    return total / count.clamp(min=1).unsqueeze(-1)


def windowed(run, ids: Tensor, mask: Tensor, word: Tensor, words: int, size: int | None) -> Tensor:
    """:func:`pool_words` of ``run(ids, mask)``'s states (B, R, H), a sequence longer than the tower's ``size``
    positions read in windows: each window is the first token ([CLS]), ``size`` − 2 tokens, and the row's last real
    token ([SEP]); windows overlap by half, and a word's state is the mean of its tokens' states over every window
    that holds them, so every word of a long page is read, with at least a quarter window of context either side."""
    length = ids.shape[1]
    if size is None or length <= size:
        return pool_words(run(ids, mask), word, words)
    body = size - 2
    first = ids[:, :1]
    last = ids.gather(1, (mask.sum(1, keepdim=True) - 1).clamp(min=0))
    one, none = torch.ones_like(mask[:, :1]), torch.full_like(word[:, :1], -1)
    total = count = None
    for start in range(1, length - 1, body // 2):
        span = slice(start, min(start + body, length - 1))
        states = run(torch.cat([first, ids[:, span], last], 1), torch.cat([one, mask[:, span], one], 1))
        sums, n = pool_sums(states, torch.cat([none, word[:, span], none], 1), words)
        total, count = (sums, n) if total is None else (total + sums, count + n)
        if span.stop >= length - 1:
            break
    return total / count.clamp(min=1).unsqueeze(-1)


def spread(per_word: Tensor, word_index: Tensor) -> Tensor:
    """Per-word features (B, W, H) → per page token (B, L, H) by each token's word (−1 or beyond W: zero)."""
    _, w, h = per_word.shape
    valid = (word_index >= 0) & (word_index < w)
    picked = per_word.gather(1, word_index.clamp(0, max(w - 1, 0)).unsqueeze(-1).expand(-1, -1, h))
    return picked * valid.unsqueeze(-1).to(picked.dtype)


class PageReader(nn.Module):
    """The question tower's reading of the page's words → (B, L, D) to add to the fused page tokens."""

    def __init__(self, dim: int, cache_pages: int = 8192) -> None:
        super().__init__()
        self.mix = nn.Linear(dim, dim)
        self._zero_init()
        self.cache_pages = cache_pages
        self._cache: OrderedDict[bytes, Tensor] = OrderedDict()

    def _zero_init(self) -> None:
        """Called by the model's weight initialisation, which would otherwise draw ``mix`` at random."""
        nn.init.zeros_(self.mix.weight)
        nn.init.zeros_(self.mix.bias)

    def read(
        self, encoder: QuestionEncoder, ids: Tensor, mask: Tensor, word: Tensor, words: int, depth: int | None = None
    ) -> Tensor:
        """The tower's states averaged per word (B, words, H); with ``depth``, also its states after its first
        ``depth`` layers (B, words, 2H: last, then those). Cached per page while training a frozen tower."""

        cut = getattr(encoder.clip.config, "max_position_embeddings", None)  # longer pages: read in windows

        def states(ids: Tensor, mask: Tensor) -> Tensor:
            out = encoder.clip(input_ids=ids, attention_mask=mask, output_hidden_states=depth is not None)
            last = out.last_hidden_state
            return last if depth is None else torch.cat([last, out.hidden_states[depth]], dim=-1)

        cached = self.training and encoder.frozen and self.cache_pages > 0
        if not cached:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not encoder.frozen):
                return windowed(states, ids, mask, word, words, cut)
        keys = [ids[i, : int(mask[i].sum())].cpu().numpy().tobytes() for i in range(len(ids))]
        missing = list({k: i for i, k in reversed(list(enumerate(keys))) if k not in self._cache}.values())
        if missing:
            sub = torch.tensor(missing, device=ids.device)
            length = int(mask[sub].sum(1).max())
            with torch.no_grad():
                pooled = windowed(states, ids[sub, :length], mask[sub, :length], word[sub, :length], words, cut).float()
            for j, i in enumerate(missing):
                n = int(word[i].max()) + 1
                self._cache[keys[i]] = pooled[j, :n].to(torch.float16)
        width = encoder.clip.config.hidden_size * (1 if depth is None else 2)
        out = torch.zeros(len(ids), words, width, device=ids.device)
        for i, k in enumerate(keys):
            self._cache.move_to_end(k)
            got = self._cache[k][:words]
            out[i, : len(got)] = got.float()
        while len(self._cache) > self.cache_pages:
            self._cache.popitem(last=False)
        return out

    def forward(
        self, encoder: QuestionEncoder, reader: dict[str, Tensor], word_index: Tensor, depth: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``reader``: ``reader_ids``, ``reader_mask``, ``reader_word`` (:func:`~docjepa.data.reader.reader_inputs`);
        ``word_index`` (B, L): each page token's word → (B, L, D) to add to the page tokens, and with ``depth`` the
        tower's states of each word after its first ``depth`` layers (B, W, H), for the joint reader (else None).
        Pages longer than the tower's positions are read in overlapping windows (:func:`windowed`)."""
        words = max(int(word_index.max()) + 1, 1)
        ids, mask, word = (reader[k] for k in ("reader_ids", "reader_mask", "reader_word"))
        per_word = self.read(encoder, ids, mask, word, words, depth)
        hidden = encoder.clip.config.hidden_size
        lower = None if depth is None else per_word[..., hidden:]
        per_token = spread(per_word[..., :hidden], word_index).to(encoder.proj.weight.dtype)
        read = (per_token != 0).any(-1, keepdim=True)  # special tokens and padding: nothing
        return self.mix(encoder.proj(per_token)) * read, lower
