"""The text corpus of the text-encoder chain and the collate functions of its stages.

Items are lists of words, not strings: the distillation stage aligns teacher and student by word (their
tokenizers may differ), and OCR text comes as words anyway. Sources:

* OCR pages of the data issue's shards: each page is cut into visual lines (:func:`page_lines`), and
  consecutive lines are joined into windows of at most ``window_words`` words for the language-model stages;
  single lines are the "sentences" of SimCSE.
* Questions of those pages (optional), except those from held-out templates, which the evaluation uses.
* Plain text files (optional, e.g. WikiText), one paragraph per line, cut into windows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling

from ..data.record import Word
from ..data.shards import iter_pages
from ..data.split import SplitConfig, template_held_out

log = logging.getLogger("docjepa.textenc")


@dataclass
class CorpusConfig:
    """Where the chain's text comes from and how it is cut."""

    train: list[str] = field(default_factory=lambda: ["data/synth"])
    """Folders of Parquet shards whose OCR words (and questions) are the corpus."""
    texts: list[str] = field(default_factory=list)
    """Plain text files added to the corpus of the LLM and distillation stages (not to MLM, which is OCR only)."""
    questions: bool = True
    """Add the training pages' question texts (held-out templates are always left out)."""
    tokenizer: str = ""
    """Tokenizer folder for the student (and the tiny teacher); empty: a WordPiece trained on the corpus."""
    vocab_size: int = 6000
    """Vocabulary size when a tokenizer is trained here."""
    lowercase: bool = False
    """Lower-case text in a tokenizer trained here ("TOTAL" and "total" become one token)."""
    max_tokens: int = 64
    """Longest token sequence of any stage."""
    window_words: int = 40
    """Words per window of OCR or plain text."""
    max_text_words: int = 300_000
    """Words taken from the plain text files at most (in file order)."""


def page_lines(words: Sequence[Word]) -> list[list[int]]:
    """Word indices grouped into visual lines, following the reading order.

    A word starts a new line when it begins left of the previous word or its vertical centre lies outside the
    previous word's vertical extent.
    """
    lines: list[list[int]] = []
    for i, w in enumerate(words):
        if lines:
            prev = words[lines[-1][-1]].box
            centre = (w.box[1] + w.box[3]) / 2
            if w.box[0] >= prev[0] and prev[1] <= centre <= prev[3]:
                lines[-1].append(i)
                continue
        lines.append([i])
    return lines


def windows(lines: Sequence[list[str]], size: int) -> list[list[str]]:
    """Consecutive lines joined into word windows of at most ``size`` words (a longer line is split)."""
    out, cur = [], []
    for line in lines:
        for start in range(0, len(line), size):
            piece = line[start : start + size]
            if cur and len(cur) + len(piece) > size:
                out.append(cur)
                cur = []
            cur = cur + piece
    if cur:
        out.append(cur)
    return out


def _text_file_words(path: Path, budget: int) -> list[list[str]]:
    """Paragraphs (non-empty lines that are not WikiText headings) as word lists, up to ``budget`` words."""
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} not found")
    out, total = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.strip()
            if not line or (line.startswith("=") and line.endswith("=")):
                continue
            words = line.split()
            out.append(words)
            total += len(words)
            if total >= budget:
                break
    return out


@dataclass
class Corpus:
    """Word-list items of each kind."""

    ocr: list[list[str]]
    """OCR windows (MLM, and part of every other stage)."""
    lines: list[list[str]]
    """OCR lines of at least two words (SimCSE sentences)."""
    other: list[list[str]]
    """Questions and plain-text windows."""

    def sequences(self) -> list[list[str]]:
        """Items of the LLM and distillation stages."""
        return self.ocr + self.other

    def sentences(self) -> list[list[str]]:
        """Items of SimCSE: lines, questions and text windows."""
        return self.lines + self.other

    def texts(self) -> list[str]:
        return [" ".join(words) for words in self.sequences()]


def build_corpus(cfg: CorpusConfig, split: SplitConfig | None = None) -> Corpus:
    """Read the shards and text files named in ``cfg``."""
    split = split or SplitConfig()
    ocr, lines, other = [], [], []
    for root in cfg.train:
        for row in iter_pages(Path(root), columns=["words", "questions"]):
            words = [Word(w["text"], tuple(w["box"])) for w in row["words"]]
            page = [[words[i].text for i in line] for line in page_lines(words)]
            ocr.extend(windows(page, cfg.window_words))
            lines.extend(line for line in page if len(line) >= 2)
            if cfg.questions:
                for q in row["questions"]:
                    if not template_held_out(q.get("template") or "", split):
                        other.append(q["text"].split())
    budget = cfg.max_text_words
    for name in cfg.texts:
        paragraphs = _text_file_words(Path(name), budget)
        budget -= sum(map(len, paragraphs))
        other.extend(windows(paragraphs, cfg.window_words))
    if not ocr:
        raise ValueError(f"no OCR words in {', '.join(cfg.train)}")
    log.info("corpus: %d OCR windows, %d lines, %d question/text items", len(ocr), len(lines), len(other))
    return Corpus(ocr, lines, other)


def ensure_special_tokens(tokenizer) -> None:
    """Give a causal LM's tokenizer a padding and a mask token from its own vocabulary if it lacks them.

    As LLM2Vec does for LLaMA, the mask token is ``_`` when the vocabulary has it (else the unknown token), so
    the embedding table is never resized.
    """
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.mask_token is None:
        vocab = tokenizer.get_vocab()
        tokenizer.mask_token = "_" if "_" in vocab else (tokenizer.unk_token or tokenizer.pad_token)


def encode_words(tokenizer, items: Sequence[list[str]], max_tokens: int) -> dict[str, torch.Tensor]:
    """Pre-split words → padded ``input_ids``, ``attention_mask``, and ``word_index`` (B, L): the word each
    token belongs to, -1 for special and padding tokens."""
    enc = tokenizer(
        [list(w) for w in items],
        is_split_into_words=True,
        truncation=True,
        max_length=max_tokens,
        padding=True,
        return_tensors="pt",
    )
    word_index = torch.full_like(enc["input_ids"], -1)
    for b in range(len(items)):
        ids = enc.word_ids(b)
        word_index[b] = torch.tensor([-1 if w is None else w for w in ids])
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "word_index": word_index}


class WordsCollator:
    """Items ``(position, words)`` → tokens (plus ``labels`` for a causal LM, or MLM/MNTP masking).

    ``mask_probability`` > 0 masks tokens as BERT does (80 % mask token / 10 % random / 10 % kept, through
    transformers' ``DataCollatorForLanguageModeling``), with a generator seeded by (seed, position of the
    batch's first item), so a resumed run masks exactly as an uninterrupted one. Otherwise ``labels`` are the
    inputs with padding ignored (causal LM).
    """

    def __init__(
        self, tokenizer, max_tokens: int, mask_probability: float = 0.0, seed: int = 0, prefix: str = ""
    ) -> None:
        self.tok, self.max_tokens, self.seed, self.prefix = tokenizer, max_tokens, seed, prefix
        self.mlm = None
        if mask_probability > 0:
            ensure_special_tokens(tokenizer)
            self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=mask_probability)

    def encode(self, items: Sequence[tuple[int, list[str] | None]]) -> dict | None:
        good = [(p, w) for p, w in items if w]
        if not good:
            return None
        batch = encode_words(self.tok, [w for _, w in good], self.max_tokens)
        if self.mlm is None:
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        else:
            special = (batch["word_index"] < 0).long()  # special tokens and padding are never masked
            self.mlm.generator = torch.Generator().manual_seed(self.seed * 1_000_003 + good[0][0])
            batch["input_ids"], batch["labels"] = self.mlm.torch_mask_tokens(batch["input_ids"].clone(), special)
        return batch

    def __call__(self, items: Sequence[tuple[int, list[str] | None]]) -> dict | None:
        batch = self.encode(items)
        return None if batch is None else {self.prefix + k: v for k, v in batch.items()}


class PairCollator:
    """The same words tokenised for the student (``s_*``) and the teacher (``t_*``), for distillation."""

    def __init__(self, student_tokenizer, teacher_tokenizer, max_tokens: int) -> None:
        ensure_special_tokens(teacher_tokenizer)
        self.student = WordsCollator(student_tokenizer, max_tokens, prefix="s_")
        self.teacher = WordsCollator(teacher_tokenizer, max_tokens, prefix="t_")

    def __call__(self, items: Sequence[tuple[int, list[str] | None]]) -> dict | None:
        s, t = self.student(items), self.teacher(items)
        return None if s is None else {**s, **t}
