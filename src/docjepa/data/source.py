"""What a training run reads: the data folders, and the tokenizer that goes with them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .tokenizer import train_tokenizer

log = logging.getLogger("docjepa.data")


@dataclass
class DataConfig:
    """Training data."""

    train: list[str] = field(default_factory=lambda: ["data/synth"])
    """Folders of Parquet shards (``docjepa generate`` / ``docjepa import``)."""
    tokenizer: str = ""
    """Tokenizer directory; empty: the text encoder's (or the initial model's), else one trained on ``train`` and
    saved in the run."""
    vocab_size: int = 8000
    """Vocabulary size when a tokenizer is trained here."""
    max_tokens: int = 256
    """Longest OCR token sequence."""
    workers: int = 0
    """DataLoader worker processes."""


def load_tokenizer(data: DataConfig, out: Path, *fallbacks: str | Path | None):
    """The tokenizer ``data.tokenizer`` names, else the first of ``fallbacks`` (model folders: a text encoder, the
    model a run starts from) that holds one, else one trained on ``data.train`` and cached in ``out/tokenizer``.

    A named tokenizer folder must hold ``tokenizer.json``; a fallback without one is passed over."""
    from transformers import PreTrainedTokenizerFast

    if data.tokenizer:
        if not (Path(data.tokenizer) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"no tokenizer.json in {data.tokenizer}")
        return PreTrainedTokenizerFast.from_pretrained(data.tokenizer)
    for candidate in fallbacks:
        if candidate and (Path(candidate) / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(candidate)
    own = out / "tokenizer"
    if not (own / "tokenizer.json").is_file():
        log.info("training a %d-token WordPiece tokenizer on %s", data.vocab_size, ", ".join(data.train))
        train_tokenizer([Path(p) for p in data.train], own, vocab_size=data.vocab_size)
    return PreTrainedTokenizerFast.from_pretrained(own)
