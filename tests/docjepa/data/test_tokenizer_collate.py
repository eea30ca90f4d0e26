"""Tokenizer training and round trip, sub-token box alignment, and the training collate path."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("faker")

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from docjepa.data.collate import CollateConfig, DocumentCollator
from docjepa.data.shards import DocumentDataset
from docjepa.data.tokenizer import tokenize_words


@pytest.fixture
def data(docs):
    return docs


def test_tokenizer_loads_with_transformers_and_round_trips(data):
    tok = PreTrainedTokenizerFast.from_pretrained(str(data / "tok"))
    auto = AutoTokenizer.from_pretrained(str(data / "tok"))
    assert 100 < tok.vocab_size <= 600 and auto.vocab_size == tok.vocab_size
    page = DocumentDataset(data / "d")[0]
    text = " ".join(w.text for w in page.words[:40])
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == text.replace(" ", "")
    assert tok.unk_token_id not in ids[1:-1]
    assert auto(text)["input_ids"] == ids


def test_every_sub_token_keeps_its_words_box(data):
    tok = PreTrainedTokenizerFast.from_pretrained(str(data / "tok"))
    words = ["Invoice", "INV-48213", "Zahlungsbedingungen", "99.50"]
    boxes = [[10, 10, 50, 20], [60, 10, 120, 20], [10, 40, 200, 50], [300, 40, 340, 50]]
    enc = tokenize_words(tok, words, boxes)
    assert len(enc["input_ids"]) > len(words) + 2  # some words split into several sub-tokens
    for token_box, w in zip(enc["bbox"], enc["word_ids"]):
        assert token_box == (boxes[w] if w is not None else [0, 0, 0, 0])
    assert enc["word_ids"][0] is None and enc["word_ids"][-1] is None


def test_collate_shapes_boxes_and_masks(data):
    tok = PreTrainedTokenizerFast.from_pretrained(str(data / "tok"))
    ds = DocumentDataset(data / "d")
    cfg = CollateConfig(image_size=256, mask_size=64, max_tokens=128, max_answers=3)
    items = [(ds[i], 0) for i in range(4)] + [(ds[4], None)]
    batch = DocumentCollator(tok, cfg)(items)
    B = len(items)
    assert batch["pixel_values"].shape == (B, 3, 256, 256)
    L = batch["input_ids"].shape[1]
    assert L <= 128 and batch["bbox"].shape == (B, L, 4) and batch["attention_mask"].shape == (B, L)
    assert batch["masks"].shape == (B, 3, 64, 64) and batch["answer_valid"].shape == (B, 3)
    assert batch["bbox"].max() <= 1000 and batch["bbox"].min() >= 0
    # Padding: attention 0 exactly where the pad id is.
    assert torch.equal(batch["attention_mask"] == 0, batch["input_ids"] == tok.pad_token_id)
    # Pages are taller than wide: the letterboxed image is white (1.0 after normalisation) on the right.
    assert torch.allclose(batch["pixel_values"][0, :, :, -10:], torch.ones(3, 256, 10))
    for i, (page, q) in enumerate(items[:4]):
        assert batch["questions"][i] == page.questions[q].text and batch["answer_valid"][i, 0]
        mask = batch["masks"][i, 0]
        assert mask.any()
        # The answer's first word sits under the mask, in the square frame shared with the image.
        a = page.questions[q].answers[0]
        if a.word_ids:
            s = 64 / max(page.width, page.height)
            x0, y0, x1, y1 = page.words[a.word_ids[0]].box
            assert mask[int((y0 + y1) / 2 * s), int((x0 + x1) / 2 * s)]
    assert not batch["answer_valid"][4].any() and batch["questions"][4] == ""
