"""Promptable segmentation: decoder, SAM loss, metrics, baseline, split, predictor, CLIP tower, over-fitting."""

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast

from docjepa.data.collate import CollateConfig
from docjepa.data.lexical import content_words, word_matches
from docjepa.data.matcher import baseline_box
from docjepa.data.prompt import QuestionPrompt, lexical_prior
from docjepa.data.record import Answer, Page, Question, Word, box_polygon
from docjepa.data.segment import SegmentCollator
from docjepa.data.shards import DocumentDataset
from docjepa.data.split import SplitConfig, held_out, question_pairs
from docjepa.eval.evaluate import answer_masks
from docjepa.eval.scores import Scores, best_answer, iou_parts
from docjepa.modeling import build_config
from docjepa.modeling.mask_decoder import dice_loss, focal_loss, mask_iou, sam_loss, tokens_inside, word_cover
from docjepa.modeling.segmentation import DocJepaForSegmentation
from docjepa.predictor import DocumentPredictor, choose_mask
from docjepa.train.question_tower import ClipCollator, ClipPretrainer
from tests.helpers import tiny_bert_folder


@pytest.fixture
def tok(docs):
    return PreTrainedTokenizerFast.from_pretrained(str(docs / "tok"))


def seg_batch(docs, tok, pairs):
    ds = DocumentDataset(docs / "d")
    collate = SegmentCollator(tok, tok, CollateConfig(image_size=256, mask_size=128, max_tokens=128), seed=0)
    return collate([(i, (ds[p], q)) for i, (p, q) in enumerate(pairs)])


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


def test_metrics_on_hand_made_masks():
    a = np.zeros((4, 4), bool)
    a[:2, :2] = True  # 4 px
    b = np.zeros((4, 4), bool)
    b[:2, :3] = True  # 6 px, 4 shared
    assert iou_parts(a, b) == (4, 6)
    assert best_answer(a, [b, a]) == (4, 4)
    s = Scores()
    s.add("key", 4, 6, "What is the {l}?")  # 0.667
    s.add("key", 0, 10, "Give the {l}.")  # 0.0
    s.add("table", 3, 4, "What is the {l}?")  # 0.75
    out = s.summary()
    assert out["n"] == 3
    assert out["gIoU"] == pytest.approx((4 / 6 + 0 + 0.75) / 3)
    assert out["cIoU"] == pytest.approx(7 / 20)
    assert out["mIoU"] == pytest.approx(((4 / 6 + 0) / 2 + 0.75) / 2)
    assert out["per_type"]["table"] == {"n": 1, "gIoU": 0.75, "cIoU": 0.75}
    assert out["per_template"]["What is the {l}?"]["gIoU"] == pytest.approx((4 / 6 + 0.75) / 2)
    assert out["per_template"]["Give the {l}."] == {"n": 1, "gIoU": 0.0, "cIoU": 0.0}
    untemplated = Scores()
    untemplated.add("key", 1, 2)  # imported pages have no templates: no per-template table
    assert "per_template" not in untemplated.summary()


def _page(words: list[tuple[str, tuple]]) -> list[Word]:
    return [Word(t, b) for t, b in words]


def test_baseline_finds_the_value_next_to_the_key():
    words = _page(
        [
            ("Invoice", (10, 10, 60, 20)),
            ("no.:", (62, 10, 80, 20)),
            ("INV-4821", (300, 10, 360, 20)),
            ("Date:", (10, 40, 40, 50)),
            ("12", (45, 40, 57, 50)),
            ("May", (60, 40, 80, 50)),
            ("2024", (83, 40, 110, 50)),
            ("Billing", (10, 80, 50, 90)),
            ("address", (52, 80, 100, 90)),
            ("Jane", (10, 95, 40, 105)),
            ("Doe", (43, 95, 65, 105)),
        ]
    )
    assert content_words("What is the invoice number?") == ["invoice", "number"]
    assert baseline_box("What is the invoice number?", words) == (300, 10, 360, 20)  # far right, same line
    assert baseline_box("When is the date?", words) == (45, 40, 110, 50)
    assert baseline_box("Where is the billing address?", words) == (10, 95, 65, 105)  # nothing right: below
    assert baseline_box("Who signed it?", words) is None
    # The same normalisation gives the model's exact-match feature (word level, case and punctuation folded).
    assert word_matches("What is the invoice number?", [w.text for w in words])[:3] == [True, False, False]
    assert word_matches("Where is the billing address?", ["Billing", "address:", "the"]) == [True, True, False]


def test_lexical_prior_is_the_baseline_box_in_the_mask_frame():
    words = _page([("Date:", (10, 40, 40, 50)), ("12", (45, 40, 57, 50)), ("May", (60, 40, 80, 50))])
    page = Page("x", 0, 400, 200, b"", words, "t")  # wider than tall: scale = 256 / 400 onto the square
    m = lexical_prior("When is the date?", page, 128)
    f = 256 / 400 * 128 / 256  # page pixels → mask pixels
    ys, xs = m.nonzero(as_tuple=True)
    assert m.shape == (128, 128) and set(m.unique().tolist()) == {0.0, 1.0}
    # the box of "12 May" padded by 2 page px, within the pixel a polygon fill may round to
    assert abs(xs.min() - (45 - 2) * f) <= 1 and abs(xs.max() + 1 - (80 + 2) * f) <= 1
    assert abs(ys.min() - (40 - 2) * f) <= 1 and abs(ys.max() + 1 - (50 + 2) * f) <= 1
    assert int(m.sum()) == (xs.max() - xs.min() + 1) * (ys.max() - ys.min() + 1)  # a filled rectangle
    drawn = Page(
        "x", 0, 400, 200, b"", words, "t", questions=[Question("q", "key", [Answer([box_polygon((43, 38, 82, 52))])])]
    )
    assert np.array_equal(m.numpy() > 0, answer_masks(drawn, 0, f, 128)[0])  # drawn as answers are (2 px padding)
    assert lexical_prior("Who signed it?", page, 128).sum() == 0  # no match: no prompt


def test_choose_mask_skips_empty_candidates(gen):
    logits = torch.randn(3, 16, 16, generator=gen)
    logits[1] = -torch.rand(16, 16, generator=gen) - 0.1  # nothing above 0: an empty mask
    scores = torch.tensor([0.2, 0.9, 0.5])
    assert choose_mask(logits, scores) == 2  # the empty one has the top score but is passed over
    assert choose_mask(logits, torch.tensor([0.6, 0.9, 0.5])) == 0
    assert choose_mask(-logits.abs() - 0.1, scores) == 1  # all empty: the highest score
    # A candidate covering (nearly) the whole page says nothing either; with a region, only the page counts.
    full = logits.clone()
    full[0] = 1.0
    assert choose_mask(full, torch.tensor([0.9, 0.1, 0.5])) == 2
    region = torch.zeros(16, 16, dtype=torch.bool)
    region[:8, :12] = True  # the page; the rest is letterbox padding
    padding_only = torch.full((3, 16, 16), -1.0)
    padding_only[0, 10:, :] = 1.0  # only on the padding: empty on the page
    padding_only[1, 2:4, 2:5] = 1.0
    padding_only[2, :8, :12] = 1.0  # the whole page
    assert choose_mask(padding_only, torch.tensor([0.9, 0.2, 0.8]), region) == 1
    assert choose_mask(padding_only, torch.tensor([0.9, 0.2, 0.8])) == 0  # without the region it is filled
    # Nothing informative: the top-scored non-empty candidate.
    assert choose_mask(torch.ones(3, 16, 16), torch.tensor([0.1, 0.7, 0.3])) == 1


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


def test_split_holds_out_layouts_and_templates(docs):
    cfg = SplitConfig()
    train, held, everything = (question_pairs([docs / "d"], cfg, part) for part in ("train", "heldout", "all"))
    assert train and held and sorted(train + held) == sorted(everything) and not set(train) & set(held)
    ds = DocumentDataset(docs / "d")
    for p, q in held:
        page = ds[p]
        assert held_out(page, page.questions[q], cfg)
    assert any(ds[p].layout != "receipt" for p, _ in held)  # held-out templates on seen layouts
    assert all(ds[p].layout != "receipt" for p, _ in train)
    page = Page("x", 0, 10, 10, b"", [], "t", layout="receipt")
    assert held_out(page, Question("q", "key", [], "What is {x}?"), cfg)
    assert not held_out(page, Question("q", "key", [], ""), SplitConfig(layouts=[]))
    with pytest.raises(ValueError, match="split part"):
        question_pairs([docs / "d"], cfg, "test")


def test_predictor_caches_the_page_and_takes_prompts(docs, tok, monkeypatch):
    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok)))
    predictor = DocumentPredictor(model, tok, device="cpu")
    with pytest.raises(RuntimeError, match="set_page"):
        predictor.predict("What is the total?")
    page = DocumentDataset(docs / "d")[0]
    calls = []
    encode = model.encode_image
    monkeypatch.setattr(model, "encode_image", lambda *a: calls.append(1) or encode(*a))
    predictor.set_page(page)
    first = predictor.predict(page.questions[0].text)
    second = predictor.predict(page.questions[1].text)
    assert len(calls) == 1  # one image encoding, two questions
    assert first.masks.shape == (3, page.height, page.width) and first.scores.shape == (3,)
    assert not np.array_equal(first.logits.numpy(), second.logits.numpy())
    box = predictor.predict(box=[20, 20, 200, 60])
    pts = predictor.predict(points=[[50, 50]], point_labels=[1])
    assert box.masks.shape == pts.masks.shape == first.masks.shape
    predictor.set_image(page.pil(), page.words)
    again = predictor.predict(page.questions[0].text)
    np.testing.assert_allclose(again.logits.numpy(), first.logits.numpy(), atol=1e-4)
    # A model fine-tuned with the lexical prior gets the OCR matcher's box as its mask prompt.
    q = next(q.text for q in page.questions if lexical_prior(q.text, page, 128).sum() > 0)
    plain = predictor.predict(q)
    model.config.lexical_prior = True
    prompted = predictor.predict(q)
    assert not np.allclose(prompted.logits.numpy(), plain.logits.numpy())


def test_clip_tower_learns_region_text_pairs_and_loads_user_checkpoints(docs, tok, tmp_path):
    torch.manual_seed(0)
    seg = DocJepaForSegmentation(build_config("tiny", len(tok)))
    tower = CLIPTextModel(seg.question_encoder.clip.config)
    model = ClipPretrainer(seg.backbone, tower, dim=64)
    ds = DocumentDataset(docs / "d")
    batch = ClipCollator(tok, 256, per_page=6, max_tokens=16, seed=0)([(i, ds[i]) for i in range(4)])
    assert batch["cells"].shape[1:] == (16, 16) and (batch["cells"].flatten(1).sum(1) > 0).all()
    assert len(batch["owner"]) == len(batch["text_ids"]) > 8
    opt = torch.optim.AdamW([p for _, p in model.trainable_named_parameters()], lr=2e-3)
    model.train()
    losses = []
    for _ in range(50):
        out = model(batch)
        losses.append(float(out["loss"].detach()))
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0], losses[::5]
    assert all(not p.requires_grad for p in model.image_encoder.parameters())
    model.save_pretrained(tmp_path / "clip")
    assert CLIPTextModel.from_pretrained(tmp_path / "clip").config.hidden_size == tower.config.hidden_size
    # A user's CLIP with another width: the projection adapts.
    other = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
            eos_token_id=tok.sep_token_id,
            pad_token_id=0,
        )
    )
    other.save_pretrained(tmp_path / "user_clip")
    seg.question_encoder.load_clip(tmp_path / "user_clip")
    ids = tok(["Where is the total?"], return_tensors="pt")
    n = ids["input_ids"].shape[1]
    assert seg.question_encoder(ids["input_ids"], ids["attention_mask"]).shape == (1, 1 + n, 128)


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
    seg.question_encoder.load_clip(tiny_bert_folder(tok, tmp_path / "bert", dropout=0.5))
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
        enc.load_clip(tmp_path / "missing")


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


def test_scale_jitter_moves_image_words_targets_and_prompt_together(docs, tok):
    ds = DocumentDataset(docs / "d")
    pairs = [
        (p, q)
        for p, q in question_pairs([docs / "d"], SplitConfig(layouts=[], template_modulus=0), "all")
        if ds[p].questions[q].answers[0].word_ids and lexical_prior(ds[p].questions[q].text, ds[p], 128).any()
    ][:8]
    items = [(i, (ds[p], q)) for i, (p, q) in enumerate(pairs)]
    cfg = CollateConfig(image_size=256, mask_size=128, max_tokens=256)
    plain = SegmentCollator(tok, tok, cfg, seed=0, lexical_prior=True)(items)
    make = lambda j: SegmentCollator(tok, tok, cfg, seed=0, lexical_prior=True, jitter=j)  # noqa: E731
    torch.testing.assert_close(make(0.0)(items)["pixel_values"], plain["pixel_values"])
    moved = make(0.6)(items)
    torch.testing.assert_close(moved["target"], make(0.6)(items)["target"])  # drawn per position: repeatable
    assert not torch.equal(moved["target"], plain["target"])
    for i, (p, q) in enumerate(pairs):
        page, answer = ds[p], ds[p].questions[q].answers[0]
        target, prior = moved["target"][i, 0] > 0, moved["prompt"].mask_prompt[i, 0] > 0
        # Every token of an answer word has its box centre inside the moved target.
        tokens = [t for t, w in enumerate(moved["word_index"][i].tolist()) if w in answer.word_ids]
        assert tokens
        for t in tokens:
            x0, y0, x1, y1 = moved["bbox"][i, t].tolist()
            cx, cy = int((x0 + x1) / 2000 * 128), int((y0 + y1) / 2000 * 128)
            assert target[cy, cx], (page.questions[q].text, t)

        # The prompt moved with the page: it overlaps the moved target as much as before (up to resampling).
        def iou(a, b):
            return float((a & b).sum()) / max(1, float((a | b).sum()))

        assert abs(iou(prior, target) - iou(plain["prompt"].mask_prompt[i, 0] > 0, plain["target"][i, 0] > 0)) < 0.25
        # The image moved with the words: there is ink under every answer token's box, and not on blank paper.
        image = moved["pixel_values"][i].min(0).values  # (256, 256), −1 black … 1 white
        for t in tokens:
            x0, y0, x1, y1 = (v * 256 // 1000 for v in moved["bbox"][i, t].tolist())
            assert float(image[y0 : y1 + 1, x0 : x1 + 1].min()) < 0.8  # paper is ≥ 0.95
    with pytest.raises(ValueError, match="jitter"):
        make(1.0)


def test_answers_snap_to_the_box_of_the_ocr_words_they_cover():
    from docjepa.data.prompt import box_mask
    from docjepa.predictor import snap_to_words, words_box

    words = _page([("12", (45, 40, 57, 50)), ("May", (60, 40, 80, 50)), ("2024", (83, 40, 110, 50))])
    page = Page("x", 0, 200, 100, b"", words, "t")
    frame = 0.5  # page pixels → mask pixels: a 100×100 mask for a 200×100 page
    rough = np.zeros((100, 100), dtype=bool)
    rough[21:25, 26:50] = True  # word centres at mask columns 25 ("12": outside), 35 and 48, row 22
    assert words_box(rough, page, frame) == (60, 40, 110, 50)  # "May" and "2024" only
    snapped, box = snap_to_words(rough, page, frame)
    assert box == (60, 40, 110, 50)
    np.testing.assert_array_equal(snapped, box_mask(box, page, frame, 100))  # drawn as answers are drawn
    # A region much larger than the words it covers (a table column, a signature area) is kept as drawn.
    big = np.zeros((100, 100), dtype=bool)
    big[10:90, 25:60] = True
    kept, none = snap_to_words(big, page, frame)
    assert none is None and kept is big
    # With min_agreement 0 it snaps whatever the overlap; a mask on no word centre is kept.
    assert snap_to_words(big, page, frame, min_agreement=0.0)[1] == (45, 40, 110, 50)
    empty = np.zeros((100, 100), dtype=bool)
    empty[80:90, 80:90] = True
    assert snap_to_words(empty, page, frame)[1] is None


def test_predictor_answer_is_the_chosen_mask_snapped_to_words(docs, tok):
    from docjepa.predictor import FULL_PAGE, page_region, snap_to_words

    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok)))
    page = DocumentDataset(docs / "d")[0]
    raw = DocumentPredictor(model, tok, device="cpu", snap=None)
    snapping = DocumentPredictor(model, tok, device="cpu", snap=0.0)
    for p in (raw, snapping):
        p.set_page(page)
    snapped = 0
    region = page_region(page, raw.scale * 128 / 256, 128)
    assert region.any() and not region.all()  # the page is letterboxed in the square frame
    for q in page.questions[:4]:
        logits, scores = raw.predict_logits(q.text)
        chosen = (logits[choose_mask(logits, scores, region)] > 0).numpy() & region  # the padding is cut off
        if chosen.sum() >= FULL_PAGE * region.sum():
            chosen = np.zeros_like(chosen)  # every candidate covers the page: no answer
        mask, box = raw.answer_mask(logits, scores)
        assert box is None and np.array_equal(mask, chosen)
        mask, box = snapping.answer_mask(logits, scores)
        expected, expected_box = snap_to_words(chosen, page, raw.scale * 128 / 256, 0.0)
        assert box == expected_box and np.array_equal(mask, expected)
        pred = snapping.predict(q.text)
        assert pred.answer.shape == (page.height, page.width) and pred.answer_box == box
        if box is not None:  # at page resolution: the words' box grown by the answers' 2-pixel margin
            snapped += 1
            ys, xs = np.nonzero(pred.answer)
            assert abs(xs.min() - (box[0] - 2)) <= 1 and abs(xs.max() + 1 - (box[2] + 2)) <= 1
            assert abs(ys.min() - (box[1] - 2)) <= 1 and abs(ys.max() + 1 - (box[3] + 2)) <= 1
        elif chosen.any():
            np.testing.assert_array_equal(pred.answer, pred.masks[pred.best])
        else:
            assert not pred.answer.any()
    assert snapped  # the untrained decoder's masks cover words: both branches are exercised
    # Every candidate covering the whole page: no answer (an empty mask, nothing snapped).
    everything = torch.ones(3, 128, 128)
    for p in (raw, snapping):
        mask, box = p.answer_mask(everything, torch.tensor([0.5, 0.6, 0.7]))
        assert box is None and mask.shape == (128, 128) and not mask.any()
    # A whole-page candidate is passed over for a smaller one even when it scores higher.
    part = everything.clone()
    part[1] = -1.0
    part[1, 10:14, 20:40] = 1.0
    mask, _ = raw.answer_mask(part, torch.tensor([0.9, 0.2, 0.8]))
    assert mask.sum() == 4 * 20 and mask[10:14, 20:40].all()
