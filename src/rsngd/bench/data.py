"""Benchmark text: corpora, a cached BPE tokenizer, and identical batches for every optimizer."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

SHARED = Path("../shared/data")
CORPORA = {
    "shakespeare": "tinyshakespeare/input.txt",
    "wikitext2": "wikitext-2",
    "gcide": "",  # not in the shared folder: see GCIDE
}
GCIDE = Path("/usr/share/dictd/gcide.dict.dz")
"""The GNU Collaborative International Dictionary of English as Debian's dict-gcide package installs it: 40 MB
of text, 11 M training tokens with the ``cpu`` preset's BPE, so even ``cpu-long`` (4.1 M) makes under half a pass."""


@dataclass
class Corpus:
    """Token ids for training and evaluation, and how they were split."""

    name: str
    train: torch.Tensor  # (n_train,) int64
    val: torch.Tensor  # (n_val,) int64
    note: str
    vocab_size: int


def read_corpus(spec: str, shared: Path = SHARED) -> tuple[str, str, str]:
    """Return (train text, validation text, a note on the split) for a corpus name, ``c4:FOLDER`` or a file list."""
    if spec.startswith("c4:"):
        return read_c4(Path(spec[3:]))
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
    if spec == "gcide":
        # Debian's installed file, else a copy beside the other corpora (a machine without apt, e.g. a lent GPU).
        path = GCIDE if GCIDE.is_file() else shared / GCIDE.name
        if not path.is_file():
            raise SystemExit(
                f"gcide: no {GCIDE} nor {shared / GCIDE.name}; install it with `apt-get install dict-gcide` "
                "(Debian/Ubuntu)"
            )
        text = _read(path)
        cut = int(0.9 * len(text))
        return text[:cut], text[cut:], f"{path}: first 90 % train (entries A to Ti), last 10 % validation (Ti to Z)"
    paths = [Path(p) for p in spec.split(",")]
    text = "\n".join(_read(p) for p in paths)
    cut = int(0.9 * len(text))
    return text[:cut], text[cut:], f"{', '.join(map(str, paths))}: first 90 % train, last 10 % validation"


C4_TRAIN = "*train*.json*"
C4_VAL = "*validation*.json*"


def read_c4(folder: Path) -> tuple[str, str, str]:
    """C4 as GaLore trains on it, from shards the user has (``c4-train.00000-of-01024.json.gz`` …, one JSON document
    with a ``text`` field per line, gzipped or not): training text from the train shards, validation text from the
    validation shards, documents separated by newlines."""
    train, val = sorted(folder.glob(C4_TRAIN)), sorted(folder.glob(C4_VAL))
    if not train or not val:
        raise SystemExit(f"c4: need train shards ({C4_TRAIN}) and validation shards ({C4_VAL}) in {folder}")
    note = f"{folder}: C4, {len(train)} train shard(s) {train[0].name}…, {len(val)} validation shard(s)"
    return _read_jsonl(train), _read_jsonl(val), note


def _read_jsonl(paths: list[Path]) -> str:
    import gzip
    import json

    docs = []
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        docs.append(json.loads(line)["text"])
                    except (ValueError, KeyError, TypeError) as e:
                        raise SystemExit(f"{path}:{n}: not a JSON document with a 'text' field ({e})") from None
    return "\n".join(docs)


def _read(path: Path) -> str:
    """A text file's text; gzip-compressed files (``.gz``, and dictzip's ``.dz``) are decompressed."""
    import gzip

    if not path.is_file():
        raise SystemExit(f"no text file at {path} (corpora are read from {SHARED}/, or pass file paths)")
    if path.suffix in (".gz", ".dz"):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            return f.read()
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
    tmp = _private_tmp(path)
    tok.save(str(tmp))
    tmp.replace(path)
    return tok


def _chunks(text: str, size: int = 1 << 16):
    for i in range(0, len(text), size):
        yield text[i : i + size]


def load_tokenizer(path: Path):
    """A user's tokenizer: a ``tokenizer.json`` file or a folder holding one (e.g. a local copy of T5's, as GaLore
    uses)."""
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"--tokenizer: no tokenizer.json at {path}")
    return Tokenizer.from_file(str(file))


def load_corpus(
    spec: str,
    vocab_size: int,
    cache: Path = Path("runs/cache"),
    shared: Path = SHARED,
    tokenizer: Path | None = None,
) -> Corpus:
    """Read, tokenize (with ``tokenizer``, or one trained on the training text only) and cache a corpus."""
    train_text, val_text, note = read_corpus(spec, shared)
    if tokenizer is not None:
        tok = load_tokenizer(tokenizer)
        tag = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
        note += f"; tokenizer {tokenizer}"
    else:
        tok = train_tokenizer(train_text, vocab_size, cache)
        tag = str(vocab_size)
    key = hashlib.sha256(f"{tag}\0{train_text}\0{val_text}".encode()).hexdigest()[:16]
    path = cache / f"tokens-{key}.pt"
    if path.is_file():
        ids = torch.load(path, weights_only=True)
    else:
        # int32 halves the cache and the memory of a large corpus (C4 for llama-60m: ~1.3 B tokens).
        ids = {name: _encode(tok, text) for name, text in (("train", train_text), ("val", val_text))}
        cache.mkdir(parents=True, exist_ok=True)
        tmp = _private_tmp(path)
        torch.save(ids, tmp)
        tmp.replace(path)
    # Text files are named by their stems: "notes" for notes.txt.gz, "a+b" for a.txt,b.txt.
    name = spec if spec in CORPORA else "c4" if spec.startswith("c4:") else "+".join(_stem(p) for p in spec.split(","))
    return Corpus(name, ids["train"], ids["val"], note, tok.get_vocab_size())


def _private_tmp(path: Path) -> Path:
    """A temporary name beside ``path`` that no other process writes: runs started together on one cache each write
    their own file and rename it into place (the last rename wins; both wrote the same content)."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


def _stem(path: str) -> str:
    return Path(path).name.split(".")[0] or "files"


def _encode(tok, text: str, batch: int = 64) -> torch.Tensor:
    """Token ids of ``text`` (int32), encoded 64 KiB chunks at a time with a progress bar for large corpora."""
    from tqdm.auto import tqdm

    chunks = list(_chunks(text))
    parts = []
    for i in tqdm(range(0, len(chunks), batch), desc="tokenizing", disable=len(chunks) < 50 * batch, leave=False):
        ids = [t for enc in tok.encode_batch(chunks[i : i + batch]) for t in enc.ids]
        parts.append(torch.tensor(ids, dtype=torch.int32))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int32)


def train_batches(tokens: torch.Tensor, seq: int, micro_batch: int, seed: int):
    """Endless (micro_batch, seq) windows at random offsets; the same seed gives the same order."""
    if len(tokens) <= seq + 1:
        raise SystemExit(f"training text has {len(tokens)} tokens, fewer than one sequence of {seq}")
    gen = torch.Generator().manual_seed(seed)
    while True:
        ix = torch.randint(len(tokens) - seq, (micro_batch,), generator=gen)
        yield torch.stack([tokens[i : i + seq] for i in ix]).long()


def val_batches(tokens: torch.Tensor, seq: int, micro_batch: int, count: int) -> list[torch.Tensor]:
    """A fixed set of validation windows, evenly spaced through the held-out text."""
    n = count * micro_batch
    if len(tokens) <= seq:
        raise SystemExit(f"validation text has {len(tokens)} tokens, fewer than one sequence of {seq}")
    starts = torch.linspace(0, len(tokens) - seq, n).long()
    windows = torch.stack([tokens[s : s + seq] for s in starts]).long()
    return list(windows.split(micro_batch))
