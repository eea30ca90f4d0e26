"""The fine-tuning collator and the held-out split."""

import pytest
import torch

pytest.importorskip("transformers")


from docjepa.data.collate import CollateConfig
from docjepa.data.prompt import lexical_prior
from docjepa.data.record import Page, Question
from docjepa.data.segment import SegmentCollator
from docjepa.data.shards import DocumentDataset
from docjepa.data.split import SplitConfig, held_out, question_pairs


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


def test_min_answer_grows_tiny_targets_only(docs, tok):
    import numpy as np

    from docjepa.data.collate import DocumentCollator, Placement, grow
    from docjepa.data.record import Answer, box_polygon

    m = np.zeros((12, 12), dtype=np.float32)
    m[6, 7] = 1
    grow(m, 3)
    assert m.sum() == 9 and m[5:8, 6:9].all()
    big = np.zeros((12, 12), dtype=np.float32)
    big[2:6, 1:9] = 1
    before = big.copy()
    grow(big, 3)
    assert (big == before).all()
    page = DocumentDataset(docs / "d")[0]
    w, h = page.width, page.height
    tiny = box_polygon((w / 2, h / 2, w / 2 + 2, h / 2 + 2))  # far under one mask pixel
    page.questions = [Question("What is the page number?", "page-number", [Answer([tiny])])]
    for side, pixels in ((0, 1), (3, 9)):
        coll = DocumentCollator(tok, CollateConfig(image_size=64, mask_size=16, min_answer=side))
        masks, valid = coll._masks(page, 0, Placement())
        assert valid[0] and int(masks[0].sum()) == pixels
