"""A WordPiece tokenizer trained on OCR text, and tokenisation that keeps each word's box.

Built with the ``tokenizers`` library and saved through ``PreTrainedTokenizerFast.save_pretrained``, so
``PreTrainedTokenizerFast.from_pretrained(dir)`` (and ``AutoTokenizer``) load it offline.

Training is not deterministic: ``tokenizers``' WordPiece trainer numbers its ``##`` pieces in hash-map order,
and those ids break ties between equally frequent merges (huggingface/tokenizers#1794), so two trainings on the
same text can give different vocabularies. Every run saves the tokenizer it used; pass that folder to repeat
a run exactly.
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


def train_tokenizer_on_texts(texts: Iterable[str], out: Path, vocab_size: int = 8000, lowercase: bool = False):
    """Train a BERT-style WordPiece tokenizer on ``texts``; save it to ``out`` and return it."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=False, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, min_frequency=2, show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() <= len(SPECIAL):
        raise ValueError("no text to train the tokenizer on")
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
