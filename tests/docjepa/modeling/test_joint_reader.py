"""The joint reader: the tower's top layers read the question with the page's words; at step 0 nothing changes."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers import BertConfig

from docjepa.data.reader import reader_batch
from docjepa.data.split import SplitConfig, question_pairs
from docjepa.modeling import build_config
from docjepa.modeling.joint_reader import JointReader, word_boxes
from docjepa.modeling.segmentation import DocJepaForSegmentation
from tests.helpers import model_pair, seg_batch, tiny_bert_folder

KEYS = ("pixel_values", "input_ids", "attention_mask", "bbox")


def models(tok, folder, joint: int = 1):
    """The same page-reader model without and with a joint reader over the tower's top ``joint`` layers."""
    plain, joint_model = model_pair(tok, folder, {"joint_layers": joint}, "joint_reader", page_reader=True)
    joint_model.joint_reader.begin(joint_model.question_encoder.clip)
    return plain.eval(), joint_model.eval()


def batch_of(docs, tok, n=3):
    return seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:n], page_reader=True)


def run(model, batch):
    page = model.encode_image(*(batch[k] for k in KEYS), reader=reader_batch(batch))
    return page, model.decode(page, batch["prompt"])


def test_word_boxes_take_each_words_token_box(gen):
    bbox = torch.randint(0, 1000, (2, 5, 4), generator=gen)
    index = torch.tensor([[0, 0, 2, -1, 1], [1, -1, 0, 0, 7]])  # 7: beyond the words asked for
    boxes = word_boxes(bbox, index, 3)
    for b in range(2):
        for w in range(3):
            tokens = [t for t in range(5) if index[b, t] == w]
            expected = bbox[b, tokens[-1]] if tokens else torch.zeros(4, dtype=bbox.dtype)
            assert torch.equal(boxes[b, w], expected)


def test_at_step_0_the_model_answers_as_without_it(docs, tok, tmp_path):
    plain, joint = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2))
    batch = batch_of(docs, tok)
    with torch.no_grad():
        _, before = run(plain, batch)
        page, after = run(joint, batch)
    torch.testing.assert_close(after.masks, before.masks)
    torch.testing.assert_close(after.token_logits, before.token_logits)
    assert page.reading is not None and page.reading.abs().amax() > 0
    tower = joint.question_encoder.clip.encoder.layer
    for mine, theirs in zip(joint.joint_reader.layers, tower[joint.joint_reader.start :]):
        for a, b in zip(mine.parameters(), theirs.parameters()):
            assert torch.equal(a, b)  # the tower's own top layer, copied


def reference(reader: JointReader, tower, q_ids, q_mask, words, boxes):
    """float64: the copied top layers over [question tokens; the page's words + layout], by the tower's own
    layers run on the concatenation with padding masked."""
    import copy

    start = reader.start
    with torch.no_grad():
        q = tower(input_ids=q_ids, attention_mask=q_mask, output_hidden_states=True).hidden_states[start]
    layers = copy.deepcopy(tower.encoder.layer[start:]).double()
    valid = words.abs().amax(-1) > 0
    page = (words.double() + copy.deepcopy(reader.layout).double()(boxes)) * valid.unsqueeze(-1)
    x = torch.cat([q.double(), page], 1)
    keep = torch.cat([q_mask > 0, valid], 1)
    bias = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, torch.finfo(torch.float64).min)
    for layer in layers:
        x = layer(x, attention_mask=bias[:, None, None, :])
    out = copy.deepcopy(reader.out).double()
    return out(x[:, q.shape[1] :]) * valid.unsqueeze(-1)


def test_the_reading_depends_on_the_question_and_matches_a_float64_reference(docs, tok, tmp_path, gen):
    _, joint = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2))
    batch = batch_of(docs, tok)
    reader = joint.joint_reader
    with torch.no_grad():
        for table in (reader.layout.x, reader.layout.y, reader.layout.w, reader.layout.h):
            table.weight.normal_(std=0.05, generator=gen)
        reader.out.weight.normal_(generator=gen)
        page, _ = run(joint, batch)
    prompt, clip = batch["prompt"], joint.question_encoder.clip
    with torch.no_grad():
        q = reader.question(joint.question_encoder, prompt.question_ids, prompt.question_mask)
        got = reader(q, prompt.question_mask, page.reading, page.word_box)
    expected = reference(reader, clip, prompt.question_ids, prompt.question_mask, page.reading, page.word_box)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)
    assert got.abs().amax() > 0.1
    # padding words and padding question tokens change nothing
    pad_words = torch.cat([page.reading, torch.zeros_like(page.reading[:, :3])], 1)
    pad_boxes = torch.cat([page.word_box, torch.randint_like(page.word_box[:, :3], 0, 1000)], 1)
    pad_ids = torch.cat([prompt.question_ids, torch.zeros_like(prompt.question_ids[:, :2])], 1)
    pad_mask = torch.cat([prompt.question_mask, torch.zeros_like(prompt.question_mask[:, :2])], 1)
    with torch.no_grad():
        padded = reader(reader.question(joint.question_encoder, pad_ids, pad_mask), pad_mask, pad_words, pad_boxes)
    torch.testing.assert_close(padded[:, : got.shape[1]], got, rtol=1e-4, atol=1e-5)
    assert (padded[:, got.shape[1] :] == 0).all()
    # the same page asked two different questions reads differently
    one = page.select(torch.tensor([0, 0]))
    ids = torch.stack([prompt.question_ids[0], prompt.question_ids[1]])
    mask = torch.stack([prompt.question_mask[0], prompt.question_mask[1]])
    assert not torch.equal(ids, ids.flip(0))
    with torch.no_grad():
        two = reader(reader.question(joint.question_encoder, ids, mask), mask, one.reading, one.word_box)
    assert (two[0] - two[1]).abs().amax() > 1e-3


def test_it_trains_the_copied_layers_not_the_tower(docs, tok, tmp_path, gen):
    _, joint = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2))
    joint.train()
    loss = joint(batch_of(docs, tok))["loss"]
    loss.backward()
    reader = joint.joint_reader
    assert reader.out.weight.grad.abs().sum() > 0  # zero at the start, but it learns
    assert all(p.grad is None for p in joint.question_encoder.clip.parameters())
    with torch.no_grad():
        reader.out.weight.normal_(generator=gen)
    joint.zero_grad()
    joint(batch_of(docs, tok))["loss"].backward()
    assert reader.layers[0].attention.self.query.weight.grad.abs().sum() > 0
    assert reader.layout.x.weight.grad.abs().sum() > 0


def test_settings_it_refuses(tok, tmp_path):
    config = build_config("tiny", len(tok))
    config.joint_layers = 1
    with pytest.raises(ValueError, match="page_reader"):
        DocJepaForSegmentation(config)
    config.page_reader = True
    with pytest.raises(ValueError, match="BERT layers"):  # the preset's CLIP tower
        DocJepaForSegmentation(config)
    config.question_tower = BertConfig.from_pretrained(tiny_bert_folder(tok, tmp_path / "b", layers=2)).to_dict()
    config.joint_layers = 3
    with pytest.raises(ValueError, match="1…2"):
        DocJepaForSegmentation(config)


def test_a_joint_model_saves_loads_and_a_further_question_reads_no_page_again(docs, tok, tmp_path, gen):
    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor

    _, joint = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2))
    with torch.no_grad():
        joint.joint_reader.out.weight.normal_(generator=gen)
    joint.save_pretrained(tmp_path / "seg")
    tok.save_pretrained(tmp_path / "seg")
    predictor = DocumentPredictor.from_pretrained(tmp_path / "seg", device="cpu")
    assert predictor.model.joint_reader is not None
    for a, b in zip(predictor.model.joint_reader.parameters(), joint.joint_reader.parameters()):
        torch.testing.assert_close(a, b)
    page = DocumentDataset(docs / "d")[0]
    predictor.set_page(page)
    lengths = []
    hook = lambda module, args, kwargs, out: lengths.append(kwargs["input_ids"].shape[1])  # noqa: E731
    predictor.model.question_encoder.clip.register_forward_hook(hook, with_kwargs=True)
    first = predictor.predict(page.questions[0].text)
    second = predictor.predict(page.questions[1].text)
    assert lengths and max(lengths) <= 32  # questions only: the page's words were read when it was encoded
    assert first.masks.shape[-2:] == (page.height, page.width)
    assert not torch.equal(torch.as_tensor(first.masks), torch.as_tensor(second.masks))
