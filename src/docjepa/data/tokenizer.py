"""A WordPiece tokenizer trained on OCR text, and tokenisation that keeps each word's box.

Built with the ``tokenizers`` library and saved through ``PreTrainedTokenizerFast.save_pretrained``, so
``PreTrainedTokenizerFast.from_pretrained(dir)`` (and ``AutoTokenizer``) load it offline.

Training is deterministic: the same text gives the same vocabulary and ids in every process. ``tokenizers``'
own WordPiece trainer is not (it numbers its ``##`` pieces in hash-map order and those ids break ties between
equally frequent merges), so the vocabulary is learnt here by its BPE trainer, which breaks ties by the ids of an
alphabet sorted by code point, on words whose continuation characters are first moved to a private plane
(``h e l l o`` → ``h`` + four marked characters): merged pieces that start with a marked character are the
``##`` pieces of WordPiece, the others begin a word. Mapping the marks back gives the WordPiece vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .record import Box
from .shards import iter_pages

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _page_texts(roots: Sequence[Path]) -> Iterator[str]:
    for root in roots:
        for row in iter_pages(root, columns=["words"]):
            yield " ".join(w["text"] for w in row["words"])


def train_tokenizer(roots: Sequence[Path], out: Path, vocab_size: int = 8000, lowercase: bool = False):
    """Train a BERT-style WordPiece tokenizer on the words of the datasets in ``roots``; save it to ``out``."""
    texts = list(_page_texts(roots))
    if not texts:
        raise ValueError(f"no pages with words in {', '.join(map(str, roots))}")
    return train_tokenizer_on_texts(texts, out, vocab_size=vocab_size, lowercase=lowercase)


# Continuation characters are marked by moving them to the supplementary private-use planes (15 and 16).
_PLANE_BMP, _PLANE_1 = 0xF0000, 0x100000


def _mark(ch: str) -> str | None:
    c = ord(ch)
    if c < 0x10000:
        return chr(_PLANE_BMP + c)
    if c < 0x20000:
        return chr(_PLANE_1 + c - 0x10000)
    return None


def _unmark(piece: str) -> str:
    out = []
    for ch in piece:
        c = ord(ch)
        out.append(
            chr(c - _PLANE_BMP) if _PLANE_BMP <= c < _PLANE_1 else chr(c - _PLANE_1 + 0x10000) if c >= _PLANE_1 else ch
        )
    return "".join(out)


def _marked_words(text: str, normalizer, pre_tokenizer) -> str:
    """The pre-tokenised words of ``text`` with every character after the first marked, space-separated.
    Words with characters beyond plane 1 or already in the private planes are left out of training."""
    words = []
    for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
        rest = [_mark(ch) for ch in word[1:]]
        if ord(word[0]) < _PLANE_BMP and None not in rest and all(ord(ch) < _PLANE_BMP for ch in word):
            words.append(word[0] + "".join(rest))
    return " ".join(words)


def wordpiece_vocab(texts: Iterable[str], vocab_size: int, normalizer, pre_tokenizer, min_frequency: int = 2) -> dict:
    """A WordPiece vocabulary (token → id, special tokens first) learnt deterministically from ``texts``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=max(1, vocab_size - len(SPECIAL)), min_frequency=min_frequency, show_progress=False
    )
    bpe.train_from_iterator((_marked_words(t, normalizer, pre_tokenizer) for t in texts), trainer=trainer)
    vocab = {t: i for i, t in enumerate(SPECIAL)}
    for piece, _ in sorted(bpe.get_vocab().items(), key=lambda kv: kv[1]):
        first = ord(piece[0])
        token = "##" + _unmark(piece) if first >= _PLANE_BMP else _unmark(piece)
        vocab.setdefault(token, len(vocab))
    return vocab


def train_tokenizer_on_texts(texts: Iterable[str], out: Path, vocab_size: int = 8000, lowercase: bool = False):
    """Train a BERT-style WordPiece tokenizer on ``texts``; save it to ``out`` and return it."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if vocab_size <= len(SPECIAL):
        raise ValueError(f"vocab_size must be more than the {len(SPECIAL)} special tokens, got {vocab_size}")
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=False, clean_text=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    vocab = wordpiece_vocab(texts, vocab_size, normalizer, pre_tokenizer)
    if len(vocab) <= len(SPECIAL):
        raise ValueError("no text to train the tokenizer on")
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.WordPiece()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return fast


def normalise_box(box: Box, width: int, height: int) -> list[int]:
    """A pixel box as integers in 0…1000 of the page (the LayoutLM convention)."""
    x0, y0, x1, y1 = box
    clip = lambda v: max(0, min(1000, round(v)))  # noqa: E731
    return [clip(1000 * x0 / width), clip(1000 * y0 / height), clip(1000 * x1 / width), clip(1000 * y1 / height)]


def tokenize_words(tokenizer, words: Sequence[str], boxes: Sequence[Sequence[int]], max_length: int = 512) -> dict:
    """Sub-tokens of OCR words with each sub-token carrying its word's box; special tokens get zero boxes.

    Returns ``input_ids``, ``attention_mask``, ``bbox`` (one box per token) and ``word_ids`` (None for
    special tokens), truncated to ``max_length``.
    """
    enc = tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=max_length)
    word_ids = enc.word_ids()
    bbox = [list(boxes[w]) if w is not None else [0, 0, 0, 0] for w in word_ids]
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "bbox": bbox, "word_ids": word_ids}
