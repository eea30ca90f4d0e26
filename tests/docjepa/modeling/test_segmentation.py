"""The segmentation model: decoder shapes, SAM loss against float64, painting, the mask prompt, question towers."""

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")


from docjepa.data.collate import CollateConfig
from docjepa.data.prompt import QuestionPrompt
from docjepa.data.segment import SegmentCollator
from docjepa.data.shards import DocumentDataset
from docjepa.data.split import SplitConfig, question_pairs
from docjepa.modeling import build_config
from docjepa.modeling.mask_decoder import dice_loss, focal_loss, mask_iou, sam_loss, tokens_inside, word_cover
from docjepa.modeling.segmentation import (
    DocJepaForSegmentation,
    balanced_token_loss,
    neighbour_token_loss,
    token_bce,
    word_choice_loss,
)
from tests.helpers import seg_batch, tiny_bert_folder


def test_decoder_shapes_and_multimask(docs, tok):
    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok))).eval()
    b = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:2])
    with torch.no_grad():
        emb = model.encode_image(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"])
        assert emb.image.shape == (2, 128, 16, 16) and emb.words.shape == (2, 16, 128, 128)
        three = model.decode(emb, b["prompt"])
        assert three.masks.shape == (2, 3, 128, 128) and three.iou.shape == (2, 3)
        one = model.decode(emb, b["prompt"], multimask=False)
        assert one.masks.shape == (2, 1, 128, 128) and one.iou.shape == (2, 1)
        pts = torch.tensor([[[30.0, 40.0], [100.0, 120.0]]] * 2)
        boxes = torch.tensor([[10.0, 10.0, 80.0, 30.0]] * 2)
        geo = model.decode(emb, QuestionPrompt(points=pts, point_labels=torch.tensor([[1, 0]] * 2), boxes=boxes))
        assert geo.masks.shape == (2, 3, 128, 128)
        both = model.decode(emb, dataclasses.replace(b["prompt"], points=pts[:, :1], point_labels=torch.ones(2, 1)))
        assert not torch.allclose(both.masks, three.masks)  # the point changes the answer
        with pytest.raises(ValueError, match="question, points or a box"):
            model.decode(emb, QuestionPrompt())
    assert b["target"].shape == (2, 1, 128, 128) and b["target"].sum() > 0


def test_losses_against_float64_reference(gen):
    logits = torch.randn(3, 2, 8, 8, generator=gen, dtype=torch.float64)
    target = (torch.rand(3, 1, 8, 8, generator=gen) > 0.6).double()
    p = logits.sigmoid()
    t = target.expand_as(p)
    ce = -(t * p.log() + (1 - t) * (1 - p).log())
    pt = torch.where(t > 0, p, 1 - p)
    ref_focal = ((0.25 * t + 0.75 * (1 - t)) * ce * (1 - pt) ** 2).flatten(2).mean(-1)
    ref_dice = 1 - (2 * (p * t).flatten(2).sum(-1) + 1) / (p.flatten(2).sum(-1) + t.flatten(2).sum(-1) + 1)
    torch.testing.assert_close(focal_loss(logits, target), ref_focal)
    torch.testing.assert_close(dice_loss(logits, target), ref_dice)
    pred = logits > 0
    inter = (pred & (t > 0)).flatten(2).sum(-1).double()
    union = (pred | (t > 0)).flatten(2).sum(-1).double()
    torch.testing.assert_close(mask_iou(logits, target), (inter / union).float())


def test_word_choice_loss_against_float64_reference(gen):
    logits = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    labels = (torch.rand(4, 9, generator=gen) > 0.7).double()
    labels[:, -2:] = -1.0  # padding
    labels[1, :7] = 0.0  # a question whose answer holds no token: left out of the mean
    labels[0, :7] = torch.tensor([1.0, 0, 0, 1, 0, 0, 0], dtype=torch.float64)
    expected = []
    for row, lab in zip(logits, labels):
        real = lab >= 0
        if not (lab > 0.5).any():
            continue
        p = torch.exp(row[real]) / torch.exp(row[real]).sum()  # softmax over the page's real tokens
        expected.append(-torch.log(p[lab[real] > 0.5].sum()))
    got = word_choice_loss(logits, labels)
    torch.testing.assert_close(got, torch.stack(expected).mean().float())
    assert word_choice_loss(logits, torch.zeros_like(labels)) is None  # no answer tokens anywhere
    # Gradients raise the answer tokens' logits and lower the others'.
    x = logits.clone().float().requires_grad_(True)
    word_choice_loss(x, labels).backward()
    assert (x.grad[0, [0, 3]] < 0).all() and (x.grad[0, [1, 2, 4, 5, 6]] > 0).all()
    assert (x.grad[1] == 0).all() and (x.grad[:, -2:] == 0).all()


def test_balanced_token_loss_against_float64_reference(gen):
    logits = torch.randn(4, 11, generator=gen, dtype=torch.float64)
    labels = (torch.rand(4, 11, generator=gen) > 0.8).double()
    labels[:, -3:] = -1.0  # padding
    labels[1, :8] = 0.0  # no answer token: the plain mean over its tokens
    labels[0, :8] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0], dtype=torch.float64)
    expected = []
    for row, lab in zip(logits, labels):
        p = row.sigmoid()
        ce = -(lab * p.log() + (1 - lab) * (1 - p).log())
        pos, neg = lab == 1, lab == 0
        expected.append(0.5 * ce[pos].mean() + 0.5 * ce[neg].mean() if pos.any() else ce[pos | neg].mean())
    got = balanced_token_loss(logits, labels)
    torch.testing.assert_close(got, torch.stack(expected).mean().float())
    # One answer token among seven others weighs as much as all of them together; the plain mean weighs it 1/8.
    x = logits.clone().float().requires_grad_(True)
    balanced_token_loss(x[:1], labels[:1]).backward()
    g = x.grad[0]
    assert g[0] < 0 and (g[1:8] > 0).all() and (g[-3:] == 0).all()
    torch.testing.assert_close(g[0].abs() / (1 - logits[0, 0].sigmoid()).float(), torch.tensor(0.5))
    torch.testing.assert_close(token_bce(logits, labels, "balanced"), got)
    real = labels >= 0
    mean = torch.nn.functional.binary_cross_entropy_with_logits(logits[real], labels[real]).float()
    torch.testing.assert_close(token_bce(logits, labels), mean)
    assert not torch.allclose(mean, got)
    with pytest.raises(ValueError, match="unknown token loss 'sum'"):
        token_bce(logits, labels, "sum")


def test_neighbour_token_loss_against_float64_reference(gen):
    # One line of eight one-token words 10 units high, 5 apart, then a ninth word two lines down, and two pads.
    x0 = torch.tensor([0, 15, 30, 45, 60, 75, 90, 105, 0, 0, 0], dtype=torch.float64)
    boxes = torch.stack([x0, torch.zeros(11), x0 + 10, torch.full((11,), 10.0)], -1).double()
    boxes[8] = torch.tensor([0, 40, 10, 50])
    boxes[9:] = 0
    bbox = boxes.expand(3, -1, -1).clone()
    logits = torch.randn(3, 11, generator=gen, dtype=torch.float64)
    labels = torch.zeros(3, 11, dtype=torch.float64)
    labels[:, 9:] = -1.0
    labels[0, 3] = 1.0  # answer word 3: words 1, 2, 4, 5 within 3 heights on its line; 0, 6, 7, 8 not
    labels[1, 8] = 1.0  # the lone word: no neighbour, so half and half as the balanced loss
    expected = []
    for row, lab, near in zip(logits, labels, ([1, 2, 4, 5], [], [])):
        ce = -(lab * row.sigmoid().log() + (1 - lab) * (1 - row.sigmoid()).log())
        pos = lab == 1
        far = [i for i in range(9) if i not in near and not pos[i]]
        groups = [ce[pos], ce[near], ce[far]]
        expected.append(torch.stack([g.mean() for g in groups if len(g)]).mean())
    got = neighbour_token_loss(logits, labels, bbox)
    torch.testing.assert_close(got, torch.stack(expected).mean().float())
    torch.testing.assert_close(token_bce(logits, labels, "neighbours", bbox), got)
    # Without neighbours (rows 1 and 2) it is the balanced loss; with them it is not.
    torch.testing.assert_close(
        neighbour_token_loss(logits[1:], labels[1:], bbox[1:]), balanced_token_loss(logits[1:], labels[1:])
    )
    assert not torch.allclose(
        neighbour_token_loss(logits[:1], labels[:1], bbox[:1]), balanced_token_loss(logits[:1], labels[:1])
    )
    # A neighbour of the answer weighs a third over four of them; each far word a third over four.
    x = logits[:1].clone().float().requires_grad_(True)
    neighbour_token_loss(x, labels[:1], bbox[:1]).backward()
    g = x.grad[0]
    assert g[3] < 0 and (g[[0, 1, 2, 4, 5, 6, 7, 8]] > 0).all() and (g[9:] == 0).all()
    torch.testing.assert_close(g[1] / logits[0, 1].sigmoid().float(), torch.tensor(1 / 12))
    torch.testing.assert_close(g[7] / logits[0, 7].sigmoid().float(), torch.tensor(1 / 12))
    with pytest.raises(ValueError, match="needs the tokens' boxes"):
        token_bce(logits, labels, "neighbours")


def test_forward_averages_the_token_loss_as_asked(docs, tok):
    from docjepa.core.errors import ConfigError
    from docjepa.modeling.segmentation import token_targets
    from docjepa.train.finetune import FinetuneConfig

    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok))).eval()
    b = seg_batch(docs, tok, question_pairs([docs / "d"], SplitConfig(), "all")[:3])
    with torch.no_grad():
        mean, balanced, near = (model(b, token_loss=how) for how in ("mean", "balanced", "neighbours"))
        out = model.decode(
            model.encode_image(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"]), b["prompt"]
        )
    labels = token_targets(b["target"], b["bbox"], b["attention_mask"])
    torch.testing.assert_close(balanced["tokens"], balanced_token_loss(out.token_logits, labels))
    torch.testing.assert_close(mean["tokens"], token_bce(out.token_logits, labels))
    torch.testing.assert_close(near["tokens"], neighbour_token_loss(out.token_logits, labels, b["bbox"]))
    assert not torch.allclose(mean["tokens"], balanced["tokens"])
    torch.testing.assert_close(mean["loss"] - mean["tokens"], balanced["loss"] - balanced["tokens"])
    assert FinetuneConfig(token_loss="balanced").token_loss == "balanced"
    with pytest.raises(ConfigError, match="token_loss must be one of mean, balanced, neighbours"):
        FinetuneConfig(token_loss="sum")


def test_sam_loss_trains_only_the_best_mask(gen):
    target = (torch.rand(2, 1, 16, 16, generator=gen) > 0.5).float()
    logits = torch.randn(2, 3, 16, 16, generator=gen)
    logits[0, 2] = (target[0, 0] * 2 - 1) * 6  # output 2 fits sample 0, output 0 fits sample 1
    logits[1, 0] = (target[1, 0] * 2 - 1) * 6
    logits.requires_grad_(True)
    iou_pred = torch.full((2, 3), 0.5, requires_grad=True)
    out = sam_loss(logits, iou_pred, target)
    assert out["best"].tolist() == [2, 0]
    out["loss"].backward()
    assert logits.grad[0, 2].abs().sum() > 0 and logits.grad[0, :2].abs().sum() == 0
    assert logits.grad[1, 0].abs().sum() > 0 and logits.grad[1, 1:].abs().sum() == 0
    # IoU head: every output's estimate against that output's true IoU (the fitting ones have IoU 1).
    true = mask_iou(logits.detach(), target)
    assert true[0, 2] == 1 and true[1, 0] == 1
    torch.testing.assert_close(out["iou"], ((0.5 - true) ** 2).mean())
    assert (iou_pred.grad != 0).all()


def test_painting_words_matches_a_dense_float64_reference(gen):
    from docjepa.modeling.mask_decoder import paint, word_cover

    B, L, S, C = 2, 9, 32, 3
    lo = torch.randint(0, 800, (B, L, 2), generator=gen)
    bbox = torch.cat([lo, lo + torch.randint(1, 200, (B, L, 2), generator=gen)], -1).clamp(max=1000)
    att = torch.ones(B, L, dtype=torch.long)
    att[1, -2:] = 0
    feats = torch.randn(B, L, C, generator=gen, dtype=torch.float64)
    dense = torch.zeros(B, L, S, S, dtype=torch.float64)
    for b in range(B):
        for t in range(L):
            x0, y0 = (int(v) * S // 1000 for v in bbox[b, t, :2])
            x1, y1 = (max(-(-int(v) * S // 1000), lo_ + 1) for v, lo_ in zip(bbox[b, t, 2:], (x0, y0)))
            if att[b, t]:
                dense[b, t, y0:y1, x0:x1] = 1
    ref = torch.einsum("blhw,blc->bchw", dense, feats) / dense.sum(1).clamp(min=1).unsqueeze(1)
    torch.testing.assert_close(paint(feats, word_cover(bbox, att, S)), ref)


def test_padded_prompt_tokens_change_no_mask(gen):
    """Prompt tokens marked as padding (random values, at the end of a question) leave the masks and IoU estimates
    of the real tokens as they are without them (float64), while the same tokens unmasked change them."""
    from docjepa.modeling.mask_decoder import MaskDecoder

    torch.manual_seed(0)
    dec = MaskDecoder(dim=32, heads=2, mlp_dim=64).double().eval()
    b, g, n, pad = 2, 4, 5, 3
    image = torch.randn(b, 32, g, g, generator=gen, dtype=torch.float64)
    pos, dense = (torch.randn(b, 32, g, g, generator=gen, dtype=torch.float64) for _ in range(2))
    real = torch.randn(b, n, 32, generator=gen, dtype=torch.float64)
    padded = torch.cat([real, 10 * torch.randn(b, pad, 32, generator=gen, dtype=torch.float64)], 1)
    keep = torch.cat([torch.ones(b, n, dtype=torch.bool), torch.zeros(b, pad, dtype=torch.bool)], 1)
    with torch.no_grad():
        masks, iou = dec(image, pos, real, dense)
        masked, masked_iou = dec(image, pos, padded, dense, sparse_mask=keep)
        seen, _ = dec(image, pos, padded, dense)
    torch.testing.assert_close(masked, masks)
    torch.testing.assert_close(masked_iou, iou)
    assert (seen - masks).abs().max() > 1e-3


def test_mask_prompt_reaches_the_decoder(docs, tok, gen):
    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok))).eval()
    pairs = question_pairs([docs / "d"], SplitConfig(), "all")[:3]
    ds = DocumentDataset(docs / "d")
    collate = SegmentCollator(
        tok, tok, CollateConfig(image_size=256, mask_size=128, max_tokens=128), seed=0, lexical_prior=True
    )
    b = collate([(i, (ds[p], q)) for i, (p, q) in enumerate(pairs)])
    assert b["prompt"].mask_prompt.shape == (3, 1, 128, 128) and b["prompt"].mask_prompt.sum() > 0
    # Which tokens lie in a mask: against a loop over each token's box.
    mask = (torch.rand(3, 1, 128, 128, generator=gen) > 0.7).float()
    cover = word_cover(b["bbox"], b["attention_mask"], 128)
    inside = tokens_inside(mask, cover, b["bbox"].shape[1])
    for i in range(3):
        for t in range(b["bbox"].shape[1]):
            x0, y0, x1, y1 = (b["bbox"][i, t].float() * 128 / 1000).tolist()
            real = b["attention_mask"][i, t] > 0 and x1 > x0 and y1 > y0
            lo_x, lo_y = int(np.floor(x0)), int(np.floor(y0))
            hi_x, hi_y = max(int(np.ceil(x1)), lo_x + 1), max(int(np.ceil(y1)), lo_y + 1)
            expected = bool(real and mask[i, 0, lo_y:hi_y, lo_x:hi_x].sum() > 0)
            assert bool(inside[i, t]) == expected
    with torch.no_grad():
        emb = model.encode_image(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"])
        plain = model.decode(emb, dataclasses.replace(b["prompt"], mask_prompt=None))
        prompted = model.decode(emb, dataclasses.replace(b["prompt"], mask_prompt=mask))
        assert not torch.allclose(plain.masks, prompted.masks)
        empty = model.decode(emb, dataclasses.replace(b["prompt"], mask_prompt=torch.zeros_like(mask)))
        torch.testing.assert_close(empty.masks, plain.masks)  # an all-zero prompt means "no prompt"
        dense = model.prompt_encoder.dense(torch.cat([mask[:1], torch.zeros_like(mask[:1])]), 2, 16)
        torch.testing.assert_close(dense[1], model.prompt_encoder.no_mask.weight.view(-1, 1, 1).expand(-1, 16, 16))
        with pytest.raises(ValueError, match="mask prompt"):
            model.decode(emb, dataclasses.replace(b["prompt"], mask_prompt=mask[..., :64, :64]))


def test_the_prompt_gate_starts_as_the_ungated_model_and_weighs_each_questions_prompt(docs, tok, gen):
    config = build_config("tiny", len(tok))
    config.lexical_prior, config.prior_gain = True, 2.0
    torch.manual_seed(0)
    plain = DocJepaForSegmentation(config).eval()
    config.prompt_gate = True
    gated = DocJepaForSegmentation(config).eval()
    missing, unexpected = gated.load_state_dict(plain.state_dict(), strict=False)
    assert set(missing) == {"prompt_gate.weight", "prompt_gate.bias"} and not unexpected
    pairs = question_pairs([docs / "d"], SplitConfig(), "all")[:3]
    ds = DocumentDataset(docs / "d")
    collate = SegmentCollator(
        tok, tok, CollateConfig(image_size=256, mask_size=128, max_tokens=128), seed=0, lexical_prior=True
    )
    b = collate([(i, (ds[p], q)) for i, (p, q) in enumerate(pairs)])
    mask = (torch.rand(3, 1, 128, 128, generator=gen) > 0.7).float()
    prompt = dataclasses.replace(b["prompt"], mask_prompt=mask)
    with torch.no_grad():
        emb = plain.encode_image(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"])
        torch.testing.assert_close(gated.decode(emb, prompt).masks, plain.decode(emb, prompt).masks)  # ×1 at first
        unprompted = plain.decode(emb, dataclasses.replace(prompt, mask_prompt=None)).masks
        gated.prompt_gate.weight.normal_(generator=gen)
        q = gated.question_encoder(prompt.question_ids, prompt.question_mask)[:, 0]
        scale = 2 * torch.sigmoid(gated.prompt_gate(q).double()).view(-1, 1, 1, 1)
        assert scale.std() > 0.01  # each question its own weight
        # The residual is the only thing the gate touches: masks = decoder(prompt) + 2 · scale · (2 · prompt − 1).
        undecorated = plain.decode(emb, prompt).masks.double() - 2.0 * (2 * mask.double() - 1)
        torch.testing.assert_close(
            gated.decode(emb, prompt).masks.double(), undecorated + 2.0 * scale * (2 * mask.double() - 1)
        )
        assert not torch.allclose(unprompted, undecorated.float())  # the prompt also reaches the decoder itself
        clicked = dataclasses.replace(prompt, points=torch.full((3, 1, 2), 100.0), point_labels=torch.ones(3, 1))
        torch.testing.assert_close(gated.decode(emb, clicked).masks, plain.decode(emb, clicked).masks)  # refining


@pytest.mark.slow
def test_tiny_model_overfits_a_few_documents(docs, tok):
    torch.manual_seed(0)
    every = question_pairs([docs / "d"], SplitConfig(layouts=[], template_modulus=0), "all")
    pairs = [next(pq for pq in every if pq[0] == page) for page in (0, 5, 10, 15)]  # one question per page
    b = seg_batch(docs, tok, pairs)
    model = DocJepaForSegmentation(build_config("tiny", len(tok)))
    with torch.no_grad():
        before = (
            mask_iou(
                model.decode(
                    model.encode_image(*(b[k] for k in ("pixel_values", "input_ids", "attention_mask", "bbox"))),
                    b["prompt"],
                ).masks,
                b["target"],
            )
            .max(1)
            .values
        )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(60):
        out = model(b)
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    with torch.no_grad():
        emb = model.encode_image(b["pixel_values"], b["input_ids"], b["attention_mask"], b["bbox"])
        pred = model.decode(emb, b["prompt"])
    best = pred.iou.argmax(1)
    iou = mask_iou(pred.masks, b["target"])[torch.arange(len(best)), best]
    # Answers are one line of text, 2–4 px tall at 128×128: the right line is found on every page; the
    # boundary rows are what is left after 60 steps (observed IoU 0.46–0.77).
    assert float(before.mean()) < 0.1  # untrained: not even the best of the 3 masks overlaps
    assert float(iou.mean()) > 0.5 and float(iou.min()) > 0.3, iou


def test_pretrained_text_encoder_as_a_frozen_question_tower(docs, tok, tmp_path):
    from transformers import BertModel

    from docjepa.modeling.prompt_encoder import tower_spec

    torch.manual_seed(0)
    config = build_config("tiny", len(tok))
    config.freeze_question_tower = True
    seg = DocJepaForSegmentation(config)
    seg.question_encoder.load_pretrained_tower(tiny_bert_folder(tok, tmp_path / "bert", dropout=0.5))
    seg.config.question_tower = tower_spec(seg.question_encoder.clip)
    enc = seg.question_encoder
    assert isinstance(enc.clip, BertModel) and enc.proj.in_features == 48
    ids = tok(["Where is the total?", "What is the invoice date of this page?"], padding=True, return_tensors="pt")
    seg.train()
    assert not enc.clip.training  # frozen: dropout off while the rest trains
    out = enc(ids["input_ids"], ids["attention_mask"])
    # The pooled prompt token is the projected mean of the real tokens' states (padding left out).
    states = enc.clip(**ids).last_hidden_state
    for i in range(2):
        n = int(ids["attention_mask"][i].sum())
        mean = states[i, :n].double().mean(0)
        w, bias = enc.proj.weight.detach().double(), enc.proj.bias.detach().double()
        expected = mean @ w.T + bias + enc.pooled_kind.detach().double()
        torch.testing.assert_close(out[i, 0].detach().double(), expected, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert all(p.grad is None for p in enc.clip.parameters()) and enc.proj.weight.grad is not None
    # Saved and reloaded, the model rebuilds the BERT tower from its configuration.
    seg.save_pretrained(tmp_path / "seg")
    again = DocJepaForSegmentation.from_pretrained(tmp_path / "seg").eval()
    assert isinstance(again.question_encoder.clip, BertModel) and again.question_encoder.frozen
    with torch.no_grad():
        torch.testing.assert_close(again.question_encoder(**ids), seg.eval().question_encoder(**ids))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        enc.load_pretrained_tower(tmp_path / "missing")


def test_packaged_sentence_encoder_is_checked_against_the_published_hash(tmp_path, monkeypatch, gen):
    import hashlib
    import importlib.util
    from types import SimpleNamespace

    from docjepa.modeling import sentence_encoder as se

    real = se.packaged_sentence_encoder()  # the lang extra, when installed: the published weights
    if real is not None:
        from transformers import AutoConfig

        assert AutoConfig.from_pretrained(real).hidden_size == 384 and (real / "tokenizer.json").is_file()
    blob = tmp_path / "pkg" / "model" / "model.safetensors"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(torch.randint(0, 256, (5000,), generator=gen, dtype=torch.uint8).numpy().tobytes())
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    assert se.file_sha256(blob, chunk=7) == digest
    find = importlib.util.find_spec
    fake = SimpleNamespace(submodule_search_locations=[str(tmp_path / "pkg")])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: fake if name == se.PACKAGE else find(name, *a))
    monkeypatch.setattr(se, "SHA256", digest)
    assert se.packaged_sentence_encoder() == blob.parent
    blob.write_bytes(b"tampered")
    with pytest.raises(ValueError, match="SHA-256"):
        se.packaged_sentence_encoder()
    blob.unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        se.packaged_sentence_encoder()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == se.PACKAGE else find(name, *a))
    assert se.packaged_sentence_encoder() is None
