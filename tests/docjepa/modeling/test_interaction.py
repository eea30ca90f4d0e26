"""Simulated interaction: clicks drawn from the error, subsets of a batch's prompts and word cover, training rounds."""

import pytest
import torch

pytest.importorskip("transformers")

from docjepa.data.split import SplitConfig, question_pairs
from docjepa.modeling import build_config
from docjepa.modeling.mask_decoder import word_cover
from docjepa.modeling.segmentation import DocJepaForSegmentation, sample_clicks
from tests.helpers import seg_batch


def test_clicks_fall_in_the_error_with_the_truths_label(gen):
    truth = torch.zeros(64, 16, 16, dtype=torch.bool)
    truth[:, 4:10, 4:10] = True
    answer = torch.zeros_like(truth)
    answer[:32, 6:12, 6:12] = True  # half the examples: partly right, partly wrong
    torch.manual_seed(0)
    points, labels = sample_clicks(answer, truth)
    x, y = (points[:, 0] - 0.5).long(), (points[:, 1] - 0.5).long()
    rows = torch.arange(64)
    assert (answer ^ truth)[rows, y, x].all()  # every click lies on an error pixel
    assert torch.equal(labels, truth[rows, y, x].long())  # positive exactly in the missed part
    assert labels[32:].eq(1).all() and set(labels[:32].tolist()) == {0, 1}  # empty answers: all missed
    perfect, perfect_labels = sample_clicks(truth, truth)  # nothing to fix: a positive click on the answer
    assert truth[rows, (perfect[:, 1] - 0.5).long(), (perfect[:, 0] - 0.5).long()].all() and perfect_labels.eq(1).all()


def test_a_batchs_prompts_and_word_cover_select_examples(docs, tok, gen):
    pairs = question_pairs([docs / "d"], SplitConfig(), "all")[:4]
    b = seg_batch(docs, tok, pairs)
    idx = torch.tensor([2, 0])
    sub = b["prompt"].select(idx)
    assert torch.equal(sub.question_ids, b["prompt"].question_ids[idx]) and torch.equal(
        sub.word_match, b["prompt"].word_match[idx]
    )
    cover = word_cover(b["bbox"], b["attention_mask"], 32)
    picked = cover.select(idx)
    direct = word_cover(b["bbox"][idx], b["attention_mask"][idx], 32)
    as_set = lambda c: sorted(zip(c.sample.tolist(), c.token.tolist(), c.pixel.tolist()))  # noqa: E731
    assert as_set(picked) == as_set(direct) and torch.equal(picked.count, direct.count)


def test_click_rounds_train_the_decoder_with_points_and_the_previous_answer(docs, tok, monkeypatch):
    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok))).eval()  # no dropout: two passes agree
    pairs = question_pairs([docs / "d"], SplitConfig(), "all")[:4]
    b = seg_batch(docs, tok, pairs)
    seen = []
    decode = model.decode
    monkeypatch.setattr(
        model, "decode", lambda page, prompt, multimask=True: seen.append(prompt) or decode(page, prompt, multimask)
    )
    plain = model(b)
    assert "clicks" not in plain and len(seen) == 1
    seen.clear()
    losses = model(b, clicks=2, click_share=1.0)
    assert len(seen) == 3 and torch.isfinite(losses["clicks"])
    first, second = seen[1], seen[2]
    assert first.points.shape == (4, 1, 2) and second.points.shape == (4, 2, 2)  # clicks accumulate
    assert torch.equal(second.points[:, 0], first.points[:, 0]) and first.mask_prompt.shape == (4, 1, 128, 128)
    assert ((first.points >= 0) & (first.points <= 256)).all()  # in pixels of the 256-px model input
    torch.testing.assert_close(losses["loss"], plain["loss"] + 0.5 * losses["clicks"])
    losses["loss"].backward()
    assert model.prompt_encoder.point_kind.weight.grad.abs().sum() > 0  # points now train the prompt encoder
    seen.clear()
    none = model(b, clicks=2, click_share=1e-12)  # no example draws clicks: the same passes (FSDP2), at weight 0
    assert len(seen) == 3 and none["clicks"].item() == 0.0
    torch.testing.assert_close(none["loss"], plain["loss"])


def test_clicks_mark_the_tokens_they_fall_on(docs, tok, gen):
    from docjepa.modeling.mask_decoder import tokens_clicked

    b = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:2])
    cover = word_cover(b["bbox"], b["attention_mask"], 64)
    length = b["bbox"].shape[1]
    # A click at the centre of token 3's box (sample 0, positive) and of token 5's (sample 1, negative).
    centre = lambda i, t: (b["bbox"][i, t, :2] + b["bbox"][i, t, 2:]).float() / 2000 * 256  # noqa: E731
    points = torch.stack([torch.stack([centre(0, 3)]), torch.stack([centre(1, 5)])])
    labels = torch.tensor([[1], [0]])
    marks = tokens_clicked(points, labels, cover, length, 256)
    assert marks[0, 3] == 2 and marks[1, 5] == 1
    # Against a loop over the boxes: a token is marked when the click's mask pixel lies in its box's pixels.
    for i in range(2):
        cx, cy = (points[i, 0] * 64 / 256).long().tolist()
        for t in range(length):
            x0, y0, x1, y1 = (b["bbox"][i, t].float() * 64 / 1000).tolist()
            real = b["attention_mask"][i, t] > 0 and x1 > x0 and y1 > y0
            inside = (
                real
                and int(x0) <= cx < max(int(-(-x1 // 1)), int(x0) + 1)
                and int(y0) <= cy < max(int(-(-y1 // 1)), int(y0) + 1)
            )
            assert int(marks[i, t]) == ((2 if labels[i, 0] else 1) if inside else 0), (i, t)


def test_a_model_folder_missing_a_weight_is_refused_naming_it(docs, tok, tmp_path):
    from safetensors.torch import load_file, save_file

    from docjepa.inference.predictor import DocumentPredictor

    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok)))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    DocumentPredictor.from_pretrained(tmp_path / "m")  # whole: loads
    weights = tmp_path / "m" / "model.safetensors"
    state = load_file(weights)
    del state["word_decoder.click.weight"]
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(Exception, match=r"lacks 1 weights of the model, e.g. word_decoder\.click\.weight"):
        DocumentPredictor.from_pretrained(tmp_path / "m")
