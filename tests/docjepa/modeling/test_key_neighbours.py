"""Key neighbours: each word reads the words left of it and above it; at step 0 nothing changes."""

import pytest
import torch

pytest.importorskip("transformers")


from docjepa.data.reader import reader_batch
from docjepa.data.split import SplitConfig, question_pairs
from docjepa.modeling import DocJepaConfig, build_config
from docjepa.modeling.key_neighbours import PATHS, KeyNeighbours, check_paths, neighbour_paths
from docjepa.modeling.segmentation import DocJepaForSegmentation
from tests.helpers import model_pair, seg_batch, tiny_bert_folder

KEYS = ("pixel_values", "input_ids", "attention_mask", "bbox")

# Two lines of keys and values, and far right of them a heading over a boxed field whose key stands above its
# value (0…1000 boxes, words 20 high):
#   0 "Invoice" 1 "date:" 2 "01.02.2025"
#                                              6 "Total"
#   3 "Due"     4 "date:" 5 "03.03.2025"
#                                              7 "Amount" 8 "due"
#                                                 9 "9.99"
WORDS = [
    (100, 100, 180, 120), (190, 100, 240, 120), (250, 100, 350, 120),
    (100, 140, 150, 160), (160, 140, 210, 160), (250, 140, 350, 160),
    (760, 125, 820, 145), (760, 180, 840, 200), (850, 180, 890, 200),
    (800, 215, 860, 235),
]  # fmt: skip


def paths_of(boxes, valid=None, paths=PATHS):
    box = torch.tensor([boxes], dtype=torch.float32)
    valid = torch.ones(1, len(boxes), dtype=torch.bool) if valid is None else valid
    return {path: neighbour_paths(box, valid, paths)[0, :, i].tolist() for i, path in enumerate(paths)}


def test_paths_lead_from_a_value_to_its_key():
    p = paths_of(WORDS)
    assert p["l"] == [-1, 0, 1, -1, 3, 4, -1, -1, 7, -1]
    assert p["ll"][2] == 0 and p["ll"][5] == 3 and p["lll"][5] == -1  # "Due" is two left of the due date
    assert p["a"][5] == 2 and p["a"][4] == 1  # the line above, overlapping
    assert p["a"][9] == 7 and p["al"][9] == -1  # the boxed value reads "Amount" above it
    assert p["a"][0] == -1 and p["a"][7] == 6 and p["a"][8] == -1  # "Total" over "Amount", not over "due"
    assert p["al"][5] == 1 and p["al"][4] == 0


def test_far_paths_lead_to_the_first_word_of_a_line_and_the_top_of_a_column():
    p = paths_of(WORDS, paths=("L", "A", "aa", "Al", "lL"))
    assert p["L"] == [-1, 0, 0, -1, 3, 3, -1, -1, 7, -1]  # the due date reads "Due", not only "date:"
    assert p["A"][9] == 6 and p["aa"][9] == 6  # the boxed value reads its heading "Total" two lines up
    assert p["A"][5] == 2 and p["A"][4] == 1 and p["A"][0] == -1  # as far as there are words above, not further
    assert p["Al"][5] == 1 and p["lL"][2] == 0 and p["lL"][1] == -1
    column = [(100, 100 + 30 * i, 160, 120 + 30 * i) for i in range(20)]  # 20 rows: A stops after 16 steps
    assert paths_of(column, paths=("A",))["A"] == [-1] + [0] * 16 + [1, 2, 3]


def test_the_first_word_of_a_run_is_not_in_the_column_beside():
    # "Chang" in a left column, then far right of it "Due date: 14.03." (words 20 high; word spaces 10, 0.5 heights)
    line = [(100, 100, 200, 120), (500, 100, 550, 120), (560, 100, 610, 120), (620, 100, 700, 120)]
    p = paths_of(line, paths=("l", "L", "lll"))
    assert p["lll"][3] == 0 and p["l"][1] == 0  # one step reaches across the column gap (400, 20 heights)
    assert p["L"] == [-1, 0, 1, 1]  # on left only through word spaces: the date reads "Due", not "Chang"
    total = [(100, 300, 160, 320), (170, 300, 220, 320), (400, 300, 460, 320)]  # "Total due" … "9.99", 180 apart
    assert paths_of(total, paths=("L",))["L"] == [-1, 0, 0]  # the first step may be long, the next are short


def test_paths_are_spelt_in_known_steps():
    assert check_paths(["l", "A", "aal"]) == ("l", "A", "aal")
    for bad in (["x"], [""], ["l", "l"], [], [1]):
        with pytest.raises(ValueError, match="letters"):
            check_paths(bad)


def test_words_not_read_are_nobodys_neighbours_and_far_words_are_none():
    valid = torch.ones(1, len(WORDS), dtype=torch.bool)
    valid[0, 1] = False  # "date:" of the first line not read: the value's left neighbour is "Invoice"
    p = paths_of(WORDS, valid)
    assert p["l"][2] == 0 and 1 not in p["l"] and 1 not in p["a"]
    far = [(0, 100, 50, 120), (600, 100, 650, 120), (0, 400, 50, 420)]  # 550 apart on a line; 280 below
    p = paths_of(far)
    assert p["l"] == [-1, -1, -1] and p["a"] == [-1, -1, -1]


def test_a_word_gets_the_map_of_its_neighbours_states(gen):
    module = KeyNeighbours(4, 2).double()
    tokens = torch.randn(1, 11, 4, generator=gen, dtype=torch.float64)
    index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1]])
    paths = neighbour_paths(torch.tensor([WORDS], dtype=torch.float32), torch.ones(1, 10, dtype=torch.bool))
    assert module(tokens, index, paths, 1).abs().amax() == 0  # zero at the start
    with torch.no_grad():
        for m in module.maps:
            m.weight.normal_(generator=gen)
            m.bias.normal_(generator=gen)
    got = module(tokens, index, paths, 1)
    m = module.maps[1]
    for t in range(10):
        parts = [tokens[0, j] if j >= 0 else torch.zeros(4, dtype=torch.float64) for j in paths[0, t].tolist()]
        torch.testing.assert_close(got[0, t], m.weight @ torch.cat(parts) + m.bias)
    assert got[0, 10].abs().amax() == 0  # a token of no word gets nothing


def models(tok, folder, paths=PATHS):
    """The same joint-reader model without and with key neighbours (along ``paths``)."""
    added = {"key_neighbours": True, "key_paths": list(paths)}
    plain, with_keys = model_pair(tok, folder, added, "key_neighbours", page_reader=True, joint_layers=1)
    return plain.eval(), with_keys.eval()


def run(model, docs, tok):
    batch = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:3], page_reader=True)
    page = model.encode_image(*(batch[k] for k in KEYS), reader=reader_batch(batch))
    return model.decode(page, batch["prompt"]), batch


@pytest.mark.parametrize("paths", [PATHS, ("L", "A", "aal")])
def test_at_step_0_the_model_answers_as_without_them_and_then_they_learn(docs, tok, tmp_path, gen, paths):
    plain, with_keys = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2), paths)
    assert all(m.in_features == len(paths) * m.out_features for m in with_keys.key_neighbours.maps)
    with torch.no_grad():
        before, _ = run(plain, docs, tok)
        after, _ = run(with_keys, docs, tok)
    torch.testing.assert_close(after.token_logits, before.token_logits)
    torch.testing.assert_close(after.masks, before.masks)
    with_keys.train()
    _, batch = run(with_keys, docs, tok)
    with_keys(batch)["loss"].backward()
    assert all(m.weight.grad.abs().sum() > 0 for m in with_keys.key_neighbours.maps)
    with torch.no_grad():
        for m in with_keys.key_neighbours.maps:
            m.weight.normal_(std=0.1, generator=gen)
        moved, _ = run(with_keys.eval(), docs, tok)
    assert (moved.token_logits - before.token_logits).abs().amax() > 1e-3


def test_the_paths_are_found_once_per_page_and_answer_as_found_per_question(docs, tok, tmp_path, gen):
    _, model = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2), ("l", "L", "aa"))
    with torch.no_grad():
        for m in model.key_neighbours.maps:
            m.weight.normal_(std=0.1, generator=gen)
    batch = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:3], page_reader=True)
    with torch.no_grad():
        page = model.encode_image(*(batch[k] for k in KEYS), reader=reader_batch(batch))
        valid = page.word_box[..., 2] > page.word_box[..., 0]
        assert torch.equal(page.key_paths, neighbour_paths(page.word_box, valid, ("l", "L", "aa")))
        assert (page.key_paths >= 0).any()
        assert torch.equal(page.select(torch.tensor([1])).key_paths, page.key_paths[1:2])
        kept = model.decode(page, batch["prompt"])
        found = page.key_paths
        page.key_paths = torch.full_like(found, -1)  # the decoder reads the page's paths, not its own
        nowhere = model.decode(page, batch["prompt"])
        page.key_paths = None  # found again from the word boxes
        again = model.decode(page, batch["prompt"])
    torch.testing.assert_close(kept.token_logits, again.token_logits, rtol=0, atol=0)
    assert (kept.token_logits - nowhere.token_logits).abs().amax() > 1e-4


def test_a_saved_model_keeps_its_paths_and_one_saved_before_them_reads_the_default(tok, tmp_path):
    config = build_config("tiny", len(tok))
    config.key_paths = ["A", "L"]
    config.save_pretrained(tmp_path)
    assert DocJepaConfig.from_pretrained(tmp_path).key_paths == ["A", "L"]
    older = {k: v for k, v in config.to_dict().items() if k != "key_paths"}
    assert DocJepaConfig.from_dict(older).key_paths == list(PATHS)


def test_it_needs_the_joint_reader(tok):
    config = build_config("tiny", len(tok))
    config.key_neighbours = True
    with pytest.raises(ValueError, match="joint_layers"):
        DocJepaForSegmentation(config)
