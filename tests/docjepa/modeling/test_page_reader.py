"""The page reader: the question tower reads the page's words; at step 0 the model is the one without it."""

import pytest
import torch

pytest.importorskip("transformers")

from docjepa.data.reader import reader_batch
from docjepa.data.split import SplitConfig, question_pairs
from docjepa.modeling.page_reader import pool_words, spread
from tests.helpers import model_pair, seg_batch, tiny_bert_folder


def test_pooling_per_word_and_spreading_to_tokens_against_float64_loops(gen):
    states = torch.randn(2, 7, 5, generator=gen, dtype=torch.float64)
    word = torch.tensor([[-1, 0, 0, 1, 3, -1, -1], [-1, 2, 2, 2, 0, 1, -1]])
    pooled = pool_words(states, word, 4)
    for b in range(2):
        for w in range(4):
            rows = [r for r in range(7) if word[b, r] == w]
            expected = states[b, rows].mean(0) if rows else torch.zeros(5, dtype=torch.float64)
            torch.testing.assert_close(pooled[b, w], expected)
    index = torch.tensor([[0, 0, 3, -1, 2], [1, 2, 9, 0, -1]])  # 9: beyond the words read → zero
    out = spread(pooled, index)
    for b in range(2):
        for t in range(5):
            w = int(index[b, t])
            expected = pooled[b, w] if 0 <= w < 4 else torch.zeros(5, dtype=torch.float64)
            torch.testing.assert_close(out[b, t], expected)


def reader_models(tok, folder):
    """The same model without and with a page reader (its other weights copied), both with a frozen tower."""
    plain, read = model_pair(tok, folder, {"page_reader": True}, "page_reader")
    assert set(read.state_dict()) - set(plain.state_dict()) == {"page_reader.mix.weight", "page_reader.mix.bias"}
    return plain, read


def encode(model, batch):
    keys = ("pixel_values", "input_ids", "attention_mask", "bbox")
    return model.encode_image(*(batch[k] for k in keys), reader=reader_batch(batch))


def test_the_reader_starts_at_zero_then_adds_the_towers_reading(docs, tok, tmp_path, gen):
    plain, read = reader_models(tok, tiny_bert_folder(tok, tmp_path / "bert"))
    batch = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:3], page_reader=True)
    plain.eval(), read.eval()
    with torch.no_grad():
        torch.testing.assert_close(encode(read, batch).text, encode(plain, batch).text)  # step 0: nothing changes
        torch.testing.assert_close(encode(read, batch).words, encode(plain, batch).words)
        read.page_reader.mix.weight.normal_(generator=gen)
        changed = encode(read, batch).text - encode(plain, batch).text
    # What it adds is mix(proj(the tower's states averaged per word)), given to every token of that word. These pages
    # are longer than the tower's 64 positions: each row is read in windows of [CLS] + 62 tokens + [SEP], starting
    # every 31 tokens, and a word's state is the mean over every window that holds its tokens.
    enc, tower = read.question_encoder, read.question_encoder.clip
    size = tower.config.max_position_embeddings
    mix, proj = read.page_reader.mix, enc.proj
    windows = 0
    for b in range(3):
        n = int(batch["reader_mask"][b].sum())
        ids, pieces = batch["reader_ids"][b, :n], batch["reader_word"][b, :n]
        assert n > size
        seen: dict[int, list[torch.Tensor]] = {}
        for start in range(1, n - 1, (size - 2) // 2):
            stop = min(start + size - 2, n - 1)
            window = torch.cat([ids[:1], ids[start:stop], ids[n - 1 :]])[None]
            with torch.no_grad():
                states = tower(input_ids=window, attention_mask=torch.ones_like(window)).last_hidden_state[0, 1:-1]
            for j, w in enumerate(pieces[start:stop].tolist()):
                seen.setdefault(w, []).append(states[j].double())
            windows += 1
            if stop >= n - 1:
                break
        for t in range(batch["word_index"].shape[1]):
            w = int(batch["word_index"][b, t])
            if w < 0:  # special tokens, padding: nothing
                assert (changed[b, t] == 0).all()
                continue
            x = torch.stack(seen[w]).mean(0) @ proj.weight.double().T + proj.bias.double()
            expected = x @ mix.weight.double().T + mix.bias.double()
            torch.testing.assert_close(changed[b, t].double(), expected, rtol=1e-4, atol=1e-5)
    assert windows > 3 * 2  # every page needed more than one window
    with pytest.raises(ValueError, match="reader inputs"):
        read.encode_image(*(batch[k] for k in ("pixel_values", "input_ids", "attention_mask", "bbox")))


def test_a_frozen_tower_reads_each_page_once_in_training_and_the_mix_learns(docs, tok, tmp_path):
    _, read = reader_models(tok, tiny_bert_folder(tok, tmp_path / "bert"))
    pairs = question_pairs([docs / "d"], SplitConfig(), "all")
    other = next(p for p in pairs if p[0] != pairs[0][0])
    batch = seg_batch(docs, tok, [pairs[0], pairs[1], other], page_reader=True)  # two questions on one page
    assert pairs[1][0] == pairs[0][0]
    calls = []
    hook = lambda module, args, kwargs, out: calls.append(kwargs["input_ids"].shape[0])  # noqa: E731
    read.question_encoder.clip.register_forward_hook(hook, with_kwargs=True)
    read.train()
    first = read(batch, word_loss=1.0)
    first["loss"].backward()
    assert set(calls[:-1]) == {2} and calls[-1] == 3  # the two pages read once (in windows: they are long), kept;
    assert len(read.page_reader._cache) == 2  # then the three questions
    assert read.page_reader.mix.weight.grad.abs().sum() > 0  # zero at the start, but it learns
    assert all(p.grad is None for p in read.question_encoder.clip.parameters())
    calls.clear()
    reader, enc = reader_batch(batch), read.question_encoder
    with torch.no_grad():
        read.page_reader.mix.weight.normal_()
        again = read.page_reader(enc, reader, batch["word_index"])[0]
    assert calls == []  # the pages' readings came from the cache
    read.eval()  # evaluation reads afresh (a predictor keeps the page encoding instead)
    with torch.no_grad():
        fresh = read.page_reader(enc, reader, batch["word_index"])[0]
    assert fresh.abs().max() > 0.1
    torch.testing.assert_close(again, fresh, rtol=1e-2, atol=1e-2)  # the cache holds half precision
    assert calls and set(calls) == {3}  # each window of the three pages


def test_a_page_reader_model_saves_loads_and_predicts(docs, tok, tmp_path):
    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor

    _, read = reader_models(tok, tiny_bert_folder(tok, tmp_path / "bert"))
    torch.nn.init.normal_(read.page_reader.mix.weight, std=0.5)
    read.save_pretrained(tmp_path / "seg")
    tok.save_pretrained(tmp_path / "seg")
    predictor = DocumentPredictor.from_pretrained(tmp_path / "seg", device="cpu")
    assert predictor.model.page_reader is not None
    torch.testing.assert_close(predictor.model.page_reader.mix.weight, read.page_reader.mix.weight)
    page = DocumentDataset(docs / "d")[0]
    encoded = predictor.set_page(page)
    batch = predictor.collate([(page, None)])
    with torch.no_grad():
        expected = encode(read.eval(), batch).text
    torch.testing.assert_close(encoded.encoding.text, expected)
    answer = predictor.predict(page.questions[0].text)
    assert answer.masks.shape[-2:] == (page.height, page.width) and answer.answer.shape == (page.height, page.width)
