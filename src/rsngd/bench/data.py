"""Benchmark text: corpora, a cached BPE tokenizer, and identical batches for every optimizer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

SHARED = Path("../shared/data")
CORPORA = {
    "shakespeare": "tinyshakespeare/input.txt",
    "wikitext2": "wikitext-2",
}


@dataclass
class Corpus:
    """Token ids for training and evaluation, and how they were split."""

    name: str
    train: torch.Tensor  # (n_train,) int64
    val: torch.Tensor  # (n_val,) int64
    note: str
    vocab_size: int


def read_corpus(spec: str, shared: Path = SHARED) -> tuple[str, str, str]:
    """Return (train text, validation text, a note on the split) for a corpus name or a file list."""
    if spec == "shakespeare":
        path = shared / CORPORA["shakespeare"]
        text = _read(path)
        cut = int(0.9 * len(text))
        return text[:cut], text[cut:], f"{path}: first 90 % train, last 10 % validation"
    if spec == "wikitext2":
        root = shared / CORPORA["wikitext2"]
        note = (
            f"{root}: WikiText-2's training split is not available here, so train on valid.txt and evaluate on test.txt"
        )
        return _read(root / "valid.txt"), _read(root / "test.txt"), note
    paths = [Path(p) for p in spec.split(",")]
    text = "\n".join(_read(p) for p in paths)
    cut = int(0.9 * len(text))
    return text[:cut], text[cut:], f"{', '.join(map(str, paths))}: first 90 % train, last 10 % validation"


def _read(path: Path) -> str:
    if not path.is_file():
        raise SystemExit(f"no text file at {path} (corpora are read from {SHARED}/, or pass file paths)")
    return path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(text: str, vocab_size: int, cache: Path):
    """A byte-level BPE tokenizer trained on ``text``, cached by content and size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    key = hashlib.sha256(f"{vocab_size}\0{text}".encode()).hexdigest()[:16]
    path = cache / f"bpe-{key}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(_chunks(text), trainer=trainer)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.replace(path)
    return tok


def _chunks(text: str, size: int = 1 << 16):
    for i in range(0, len(text), size):
        yield text[i : i + size]


def load_corpus(spec: str, vocab_size: int, cache: Path = Path("runs/cache"), shared: Path = SHARED) -> Corpus:
    """Read, tokenize (with a tokenizer trained on the training text only) and cache a corpus."""
    train_text, val_text, note = read_corpus(spec, shared)
    tok = train_tokenizer(train_text, vocab_size, cache)
    key = hashlib.sha256(f"{vocab_size}\0{train_text}\0{val_text}".encode()).hexdigest()[:16]
    path = cache / f"tokens-{key}.pt"
    if path.is_file():
        ids = torch.load(path, weights_only=True)
    else:
        ids = {
            name: torch.tensor(_encode(tok, text), dtype=torch.int64)
            for name, text in (("train", train_text), ("val", val_text))
        }
        cache.mkdir(parents=True, exist_ok=True)
        torch.save(ids, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    name = spec if spec in CORPORA else "files"
    return Corpus(name, ids["train"], ids["val"], note, tok.get_vocab_size())


def _encode(tok, text: str) -> list[int]:
    out: list[int] = []
    for enc in tok.encode_batch(list(_chunks(text))):
        out.extend(enc.ids)
    return out


def train_batches(tokens: torch.Tensor, seq: int, micro_batch: int, seed: int):
    """Endless (micro_batch, seq) windows at random offsets; the same seed gives the same order."""
    if len(tokens) <= seq + 1:
        raise SystemExit(f"training text has {len(tokens)} tokens, fewer than one sequence of {seq}")
    gen = torch.Generator().manual_seed(seed)
    while True:
        ix = torch.randint(len(tokens) - seq, (micro_batch,), generator=gen)
        yield torch.stack([tokens[i : i + seq] for i in ix])


def val_batches(tokens: torch.Tensor, seq: int, micro_batch: int, count: int) -> list[torch.Tensor]:
    """A fixed set of validation windows, evenly spaced through the held-out text."""
    n = count * micro_batch
    if len(tokens) <= seq:
        raise SystemExit(f"validation text has {len(tokens)} tokens, fewer than one sequence of {seq}")
    starts = torch.linspace(0, len(tokens) - seq, n).long()
    windows = torch.stack([tokens[s : s + seq] for s in starts])
    return list(windows.split(micro_batch))
