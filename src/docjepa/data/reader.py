"""The page's words as the question tower reads them, for the page reader (``DocJepaConfig.page_reader``).

The page text encoder and the question tower have different vocabularies (a 4,000-piece WordPiece learnt on this
project's text, and the pre-trained tower's own). For the question and the page to meet in one language, the
page's words also go through the question tower: tokenised here by the tower's tokenizer as one sequence
(``[CLS] word word … [SEP]``), each sub-token keeping the index of its word so that the model can pool the tower's
states per word and give them to the page tokens of the same word.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

READER_KEYS = ("reader_ids", "reader_mask", "reader_word")
"""The batch entries :func:`reader_inputs` makes (with ``word_index``, what the page reader needs)."""


def reader_inputs(tokenizer, pages: Sequence[Sequence[str]], max_tokens: int = 8192) -> dict[str, torch.Tensor]:
    """Each page's words → ``reader_ids`` (B, R) the tower tokenizer's ids, ``reader_mask`` (B, R) 1 for real
    tokens, ``reader_word`` (B, R) the index of each token's word in the page's words (−1 for special tokens and
    padding). A page longer than the tower's positions is read in windows (``modeling.page_reader.windowed``);
    pages longer than ``max_tokens`` are cut, their last words then get no tower reading.
    The tokenizer must be a fast one (it maps sub-tokens to words)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("the page reader needs a fast tokenizer (one that maps sub-tokens back to words)")
    words = [list(p) or [""] for p in pages]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_tokens, padding=True)
    ids = torch.tensor(enc["input_ids"], dtype=torch.long)
    mask = torch.tensor(enc["attention_mask"], dtype=torch.long)
    word = torch.full_like(ids, -1)
    for i, page in enumerate(pages):
        if page:
            word[i] = torch.tensor([-1 if w is None else w for w in enc.word_ids(i)])
    return {"reader_ids": ids, "reader_mask": mask, "reader_word": word}


def reader_batch(batch: dict) -> dict | None:
    """The page reader's entries of a collated batch, with ``word_index`` (None when the collator made none)."""
    keys = (*READER_KEYS, "word_index")
    return {k: batch[k] for k in keys} if all(k in batch for k in keys) else None
