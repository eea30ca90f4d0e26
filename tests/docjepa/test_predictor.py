"""The predictor: candidate choice, page caching, prompts, snapping to words."""

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")


from docjepa.data.prompt import lexical_prior
from docjepa.data.record import Page, Word
from docjepa.data.shards import DocumentDataset
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation
from docjepa.predictor import DocumentPredictor, choose_mask


def _page(words: list[tuple[str, tuple]]) -> list[Word]:
    return [Word(t, b) for t, b in words]


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
