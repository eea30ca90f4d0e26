"""The predictor: candidate choice, page caching, prompts, snapping to words."""

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")


from docjepa.data.prompt import lexical_prior
from docjepa.data.record import Page, Word
from docjepa.data.shards import DocumentDataset
from docjepa.inference.predictor import DocumentPredictor, choose_mask
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation


def _page(words: list[tuple[str, tuple]]) -> list[Word]:
    return [Word(t, b) for t, b in words]


def _on_first_page(docs, tok) -> tuple[DocumentPredictor, Page]:
    """A predictor with an untrained tiny model (seed 0), the first synthetic page set."""
    torch.manual_seed(0)
    predictor = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    page = DocumentDataset(docs / "d")[0]
    predictor.set_page(page)
    return predictor, page


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
    monkeypatch.setattr(model, "encode_image", lambda *a, **kw: calls.append(1) or encode(*a, **kw))
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
    from docjepa.inference.predictor import snap_to_words, words_box

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
    from docjepa.inference.predictor import FULL_PAGE, Decoded, snap_to_words

    torch.manual_seed(0)
    model = DocJepaForSegmentation(build_config("tiny", len(tok)))
    page = DocumentDataset(docs / "d")[0]
    raw = DocumentPredictor(model, tok, device="cpu", snap=None, word_answers=False)
    snapping = DocumentPredictor(model, tok, device="cpu", snap=0.0, word_answers=False)
    for p in (raw, snapping):
        p.set_page(page)
    snapped = 0
    frame = raw.encoded.frame.frame
    region = raw.encoded.frame.region()
    assert region.any() and not region.all()  # the page is letterboxed in the square frame
    for q in page.questions[:4]:
        decoded = raw.decode(q.text)
        logits, scores = decoded.logits, decoded.scores
        chosen = (logits[choose_mask(logits, scores, region)] > 0).numpy() & region  # the padding is cut off
        if chosen.sum() >= FULL_PAGE * region.sum():
            chosen = np.zeros_like(chosen)  # every candidate covers the page: no answer
        mask, box = raw.read(decoded).answer_mask()
        assert box is None and np.array_equal(mask, chosen)
        mask, box = snapping.read(decoded).answer_mask()
        expected, expected_box = snap_to_words(chosen, page, frame, 0.0)
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
        mask, box = p.read(Decoded(everything, torch.tensor([0.5, 0.6, 0.7]))).answer_mask()
        assert box is None and mask.shape == (128, 128) and not mask.any()
    # A whole-page candidate is passed over for a smaller one even when it scores higher.
    part = everything.clone()
    part[1] = -1.0
    part[1, 10:14, 20:40] = 1.0
    mask, _ = raw.read(Decoded(part, torch.tensor([0.9, 0.2, 0.8]))).answer_mask()
    assert mask.sum() == 4 * 20 and mask[10:14, 20:40].all()


def test_word_logits_and_lines():
    from docjepa.inference.predictor import line_boxes, word_logits

    tokens = torch.tensor([5.0, -1.0, 2.0, 0.5, -3.0, 9.0])
    index = torch.tensor([-1, 0, 0, 1, 3, -1])  # specials at both ends; word 2 has no token (cut off)
    logits = word_logits(tokens, index, 4)
    assert logits.tolist() == [2.0, 0.5, float("-inf"), -3.0]  # each word's best token; specials ignored
    words = _page(
        [
            ("Total", (10, 40, 50, 52)),
            ("due:", (55, 41, 80, 52)),
            ("1,234.56", (120, 40, 170, 53)),
            ("EUR", (10, 60, 40, 72)),
            ("page", (10, 90, 40, 100)),
        ]
    )
    page = Page("x", 0, 200, 120, b"", words, "t")
    assert line_boxes(page, [3, 2, 0]) == [(10, 40, 170, 53), (10, 60, 40, 72)]  # two lines, top first
    assert line_boxes(page, [4]) == [(10, 90, 40, 100)]


def test_predictor_answers_with_the_word_decoders_words_when_the_mask_misses(docs, tok):
    from docjepa.inference.predictor import Decoded, boxes_mask, line_boxes

    predictor, page = _on_first_page(docs, tok)
    tokens = predictor.decode(page.questions[0].text).token_logits
    word_index = predictor.encoded.word_index
    assert tokens is not None and tokens.shape == word_index.shape
    frame = predictor.encoded.frame.frame
    region = predictor.encoded.frame.region()
    ys, xs = np.nonzero(region)
    # A speck on the page where no word lies: the mask decoder's answer covers no word centre.
    centres = {(int((w.box[1] + w.box[3]) / 2 * frame), int((w.box[0] + w.box[2]) / 2 * frame)) for w in page.words}
    spot = next((y, x) for y, x in zip(ys, xs) if all(abs(y - cy) > 2 or abs(x - cx) > 2 for cy, cx in centres))
    logits = torch.full((3, 128, 128), -5.0)
    logits[0, spot[0], spot[1]] = 5.0
    scores = torch.tensor([0.9, 0.1, 0.2])
    wanted = sorted({int(i) for i in word_index[word_index >= 0][:3]})  # the first three words
    fake = torch.full_like(tokens, -4.0)
    fake[torch.isin(word_index, torch.tensor(wanted))] = 3.0
    decoded = Decoded(logits, scores, token_logits=fake)
    mask, box = predictor.read(decoded).answer_mask()
    lines = line_boxes(page, wanted)
    np.testing.assert_array_equal(mask, boxes_mask(lines, page, frame, 128))
    assert box == (
        min(b[0] for b in lines),
        min(b[1] for b in lines),
        max(b[2] for b in lines),
        max(b[3] for b in lines),
    )
    full, got = predictor.read(decoded).page_answer(0)
    assert got == lines and full.shape == (page.height, page.width) and full.sum() > mask.sum()
    # Another candidate than the chosen one keeps its own mask; so does a predictor told not to use words.
    other, none = predictor.read(decoded).answer_mask(best=1)
    assert none is None and not other.any()
    predictor.policy.word_answers = False
    kept, none = predictor.read(decoded).answer_mask()
    assert none is None and kept.sum() == 1
    # A mask on the words is snapped to them, whatever the word decoder says.
    predictor.policy.word_answers = True
    w = page.words[-1]
    on = torch.full((3, 128, 128), -5.0)
    y0, y1 = int(w.box[1] * frame), int(w.box[3] * frame) + 1
    x0, x1 = int(w.box[0] * frame), int(w.box[2] * frame) + 1
    on[0, y0:y1, x0:x1] = 5.0
    _, snapped = predictor.read(Decoded(on, scores, token_logits=fake)).answer_mask()
    assert snapped is not None and snapped[0] <= w.box[0] and snapped[2] >= w.box[2]
    assert snapped != box


def test_a_page_resolution_mask_to_refine_keeps_small_words(docs, tok):
    from docjepa.core.errors import UsageError

    predictor, page = _on_first_page(docs, tok)
    mask = np.zeros((page.height, page.width), dtype=bool)
    x0, y0, _, y1 = (round(v) for v in page.words[0].box)
    mask[y0:y1, x0 : x0 + 2] = True  # two page pixels wide: less than one mask pixel
    small = predictor.frame_mask(mask)
    frame = predictor.encoded.frame.frame
    assert small.shape == (128, 128) and small.any() and small.sum() <= 4 * (y1 - y0)
    ys, xs = np.nonzero(small)
    assert abs(xs.min() - x0 * frame) <= 1 and abs(ys.min() - y0 * frame) <= 1
    assert not small[:, round(page.width * frame) + 1 :].any()  # nothing in the letterbox padding
    prompt = predictor.prompt(page.questions[0].text, mask=small)
    assert prompt.mask_prompt.sum() == small.sum() and prompt.lexical_boxes is None
    with pytest.raises(UsageError, match="the mask is"):
        predictor.frame_mask(mask[:10])
    with pytest.raises(UsageError, match="mask prompt is 128 x 128"):
        predictor.decode(page.questions[0].text, mask=small[:64])


def test_predictor_answers_agree_with_the_clicks_it_was_given(docs, tok):
    from docjepa.data.record import words_under

    predictor, page = _on_first_page(docs, tok)
    frame = predictor.encoded.frame.frame
    question = page.questions[0].text
    plain, _ = predictor.read(predictor.decode(question)).answer_mask()
    chosen = set(words_under(page.word_boxes(), plain, frame))
    off = next(i for i in range(len(page.words)) if i not in chosen)
    w = page.words[off]
    centre = ((w.box[0] + w.box[2]) / 2, (w.box[1] + w.box[3]) / 2)
    decoded = predictor.decode(question, points=[centre], point_labels=[1])
    assert off in words_under(page.word_boxes(), predictor.read(decoded).answer_mask()[0], frame)
    decoded = predictor.decode(question, points=[centre], point_labels=[0])
    assert off not in words_under(page.word_boxes(), predictor.read(decoded).answer_mask()[0], frame)
    for k in range(decoded.logits.shape[0]):  # every candidate the engine offers agrees with the click
        full, _ = predictor.read(decoded).page_answer(k)
        y, x = int(centre[1]), int(centre[0])
        assert not full[y, x]
    assert predictor.decode(question).clicks is None  # a question alone: no clicks remembered from before


def test_an_answer_depends_only_on_the_page_encoding_and_the_call(docs, tok):
    """Nothing of one call steers the next: the same question gives the same answer before and after other
    questions, clicks and mask prompts; an encoding kept and restored answers as when it was made."""
    predictor, page = _on_first_page(docs, tok)
    kept = predictor.encoded
    question = page.questions[0].text
    first = predictor.predict(question)
    w = page.words[0]
    centre = ((w.box[0] + w.box[2]) / 2, (w.box[1] + w.box[3]) / 2)
    predictor.predict(question, points=[centre], point_labels=[0], mask=predictor.frame_mask(first.answer))
    predictor.predict(page.questions[1].text)
    predictor.set_image(page.pil().transpose(0), page.words)  # another page
    predictor.set_encoded(kept)
    again = predictor.predict(question)
    assert np.array_equal(again.answer, first.answer) and again.answer_lines == first.answer_lines
    assert torch.equal(again.logits, first.logits) and again.best == first.best


def test_answer_path_words_auto_and_mask(docs, tok):
    from docjepa.inference.calibration import Calibration
    from docjepa.inference.predictor import Decoded, boxes_mask, line_boxes, word_logits, word_span

    predictor, page = _on_first_page(docs, tok)
    tokens = predictor.decode(page.questions[0].text).token_logits
    word_index = predictor.encoded.word_index
    frame = predictor.encoded.frame.frame
    # The mask decoder points at the last word; the word decoder is sure of the first word.
    w = page.words[-1]
    on = torch.full((3, 128, 128), -5.0)
    on[0, int(w.box[1] * frame) : int(w.box[3] * frame) + 1, int(w.box[0] * frame) : int(w.box[2] * frame) + 1] = 5.0
    fake = torch.full_like(tokens, -4.0)
    fake[word_index == 0] = 3.0
    decoded = Decoded(on, torch.tensor([0.9, 0.1, 0.2]), token_logits=fake)
    span = word_span(word_logits(fake, word_index, len(page.words)), page)
    assert span == [0]
    as_words = boxes_mask(line_boxes(page, span), page, frame, 128)
    np.testing.assert_array_equal(predictor.read(decoded).answer_mask(path="words")[0], as_words)
    masked, box = predictor.read(decoded).answer_mask(path="mask")
    assert box is not None and box[0] <= w.box[0] and not (masked & as_words).all()
    # auto: words only with a fitted threshold the word decoder's confidence (sigmoid(3) = 0.95) reaches.
    assert predictor.policy.answer_path == "auto"
    assert predictor.read(decoded).path() == "mask"  # no calibration: the mask
    predictor.policy.calibration = Calibration([0.0, 1.0], [0.0, 1.0], words_threshold=0.9)
    assert predictor.read(decoded).path() == "words"
    np.testing.assert_array_equal(predictor.read(decoded).answer_mask()[0], as_words)
    predictor.policy.calibration.words_threshold = 0.99
    assert predictor.read(decoded).path() == "mask"
    # Another candidate than the chosen one is that candidate, whatever the path.
    assert not predictor.read(decoded).answer_mask(best=1, path="words")[0].any()
    with pytest.raises(ValueError, match="answer path"):
        DocumentPredictor(predictor.model, tok, device="cpu", answer_path="span")
