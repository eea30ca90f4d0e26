"""The page's words in the question tokenizer's pieces, each piece knowing its word (the page reader's input)."""

import pytest

pytest.importorskip("transformers")

from docjepa.data.reader import reader_batch, reader_inputs


def test_every_piece_knows_its_word_and_special_tokens_none(tok):
    pages = [["Installation", "Total:", "12.50"], ["Date"], []]
    out = reader_inputs(tok, pages)
    ids, mask, word = out["reader_ids"], out["reader_mask"], out["reader_word"]
    assert ids.shape == mask.shape == word.shape and ids.shape[0] == 3
    for i, words in enumerate(pages):
        n = int(mask[i].sum())
        assert (mask[i, n:] == 0).all() and (word[i, n:] == -1).all()  # padding belongs to no word
        assert word[i, 0] == -1 and word[i, n - 1] == -1  # [CLS] and [SEP]
        for w, text in enumerate(words):
            pieces = ids[i][word[i] == w].tolist()
            assert pieces == tok(text, add_special_tokens=False)["input_ids"]  # the word's own pieces, in order
        if not words:
            assert (word[i] == -1).all()
    # A long page is cut at max_tokens: its first words keep their pieces, the rest are not read.
    long = reader_inputs(tok, [["word"] * 50], max_tokens=12)
    assert long["reader_ids"].shape == (1, 12) and int(long["reader_word"].max()) < 50


def test_a_slow_tokenizer_is_refused_and_batches_without_reader_give_none(tok):
    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast tokenizer"):
        reader_inputs(Slow(), [["a"]])
    assert reader_batch({"input_ids": 1}) is None
    batch = {**reader_inputs(tok, [["a"]]), "word_index": 0, "other": 1}
    assert set(reader_batch(batch)) == {"reader_ids", "reader_mask", "reader_word", "word_index"}
