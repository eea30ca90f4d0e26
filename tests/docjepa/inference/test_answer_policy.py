"""The answer policy: one reading per question, each quantity computed once, the answer's words and text."""

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from docjepa.data.record import union_box, words_under
from docjepa.data.shards import DocumentDataset
from docjepa.inference import answer_policy
from docjepa.inference.calibration import Calibration
from docjepa.inference.predictor import AnswerPolicy, Decoded, DocumentPredictor, word_span
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation


@pytest.fixture
def predictor(docs, tok):
    torch.manual_seed(0)
    p = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    p.set_page(DocumentDataset(docs / "d")[0])
    return p


def _counting(monkeypatch, name):
    calls = []
    real = getattr(answer_policy, name)
    monkeypatch.setattr(answer_policy, name, lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


def test_a_question_is_read_once(predictor, monkeypatch):
    """predict chooses the candidate, turns token logits into word logits and finds the word span once each, though
    the answer's path, mask, lines, words and confidence all use them."""
    predictor.policy.calibration = Calibration([0.0, 1.0], [0.0, 1.0], words_threshold=0.0)  # auto → words
    choices = _counting(monkeypatch, "choose_mask")
    logits = _counting(monkeypatch, "word_logits")
    spans = _counting(monkeypatch, "word_span")
    pred = predictor.predict(predictor.page.questions[0].text)
    assert pred.path == "words" and pred.answer.any()
    assert (len(choices), len(logits), len(spans)) == (1, 1, 1)


def test_the_answer_text_is_the_words_it_covers(predictor):
    """A word answer's words are those inside its lines (drawn 2 px around); a drawn mask's, those whose centre it
    covers; the text joins them in reading order; the box is around the lines, or the drawn mask, at page pixels."""
    page, frame = predictor.page, predictor.encoded.frame.frame
    kinds = set()
    for q in page.questions[:8]:
        reading = predictor.read(predictor.decode(q.text))
        small, lines = reading.answer_lines()
        answer = reading.answer()
        if lines:
            drawn = np.zeros((page.height, page.width), dtype=bool)
            for x0, y0, x1, y1 in lines:
                drawn[max(0, int(y0 - 2)) : int(y1 + 2) + 1, max(0, int(x0 - 2)) : int(x1 + 2) + 1] = True
            assert answer.words == words_under(page.word_boxes(), drawn)
            assert answer.box == union_box(lines)
            kinds.add("lines")
        else:
            assert answer.words == words_under(page.word_boxes(), small, frame)
            if small.any():
                ys, xs = np.nonzero(small)
                assert answer.box == pytest.approx(
                    (xs.min() / frame, ys.min() / frame, (xs.max() + 1) / frame, (ys.max() + 1) / frame)
                )
                kinds.add("drawn")
        assert answer.words == sorted(answer.words)
        assert answer.text == " ".join(page.words[i].text for i in answer.words)
        light = reading.answer(page_mask=False)
        assert light.mask is None and (light.words, light.box, light.text) == (answer.words, answer.box, answer.text)
        pred = predictor.predict(q.text)
        assert (pred.words, pred.text) == (answer.words, answer.text)
    assert "lines" in kinds  # the untrained decoder's answers cover words on this page


def test_reading_with_another_policy_changes_only_what_the_policy_says(predictor):
    """The same decoder output read under two policies: the candidate chosen is the same; snapping off keeps the
    decoder's mask as drawn."""
    decoded = predictor.decode(predictor.page.questions[0].text)
    snapping = predictor.read(decoded)
    raw = AnswerPolicy(snap=None, word_answers=False).read(predictor.encoded, decoded)
    assert raw.chosen == snapping.chosen
    mask, box = raw.answer_mask()
    assert box is None
    expected = (decoded.logits[raw.chosen] > 0).numpy() & predictor.encoded.frame.region()
    if expected.sum() < 0.9 * predictor.encoded.frame.region().sum():
        np.testing.assert_array_equal(mask, expected)


def test_the_word_span_grows_as_its_threshold_falls(predictor):
    """The span threshold in force is the policy's own, else the calibration's, else WORD_LOGIT; a lower one takes
    every word the higher one takes, and more."""
    from docjepa.inference.word_answer import WORD_LOGIT

    policy = predictor.policy
    assert policy.span_threshold == WORD_LOGIT
    policy.calibration = Calibration([0.0, 1.0], [0.0, 1.0], span_logit=-1.0)
    assert policy.span_threshold == -1.0
    decoded = predictor.decode(predictor.page.questions[0].text)
    logits = predictor.read(decoded).word_logits
    spans = {}
    for t in (1e9, float(logits.median()), -1e9):  # the best word alone; some; every word touching through others
        reading = AnswerPolicy(span_logit=t).read(predictor.encoded, decoded)
        assert reading.policy.span_threshold == t
        spans[t] = word_span(logits, predictor.page, t)
        assert reading.word_answer[1] == [union_box([predictor.page.words[i].box for i in spans[t]])]
    first, middle, every = (set(v) for v in spans.values())
    assert first == {int(logits.argmax())} and first <= middle <= every and len(every) > 1
    # The line-break bar in force is the policy's own, else the calibration's; a span under it is one within the
    # span without it.
    assert policy.line_threshold is None
    policy.calibration.line_logit = 2.0
    assert policy.line_threshold == 2.0 and AnswerPolicy(line_logit=3.0).line_threshold == 3.0
    barred = AnswerPolicy(span_logit=-1e9, line_logit=1e9).read(predictor.encoded, decoded).word_answer[1]
    words = word_span(logits, predictor.page, -1e9, 1e9)
    assert barred == [union_box([predictor.page.words[i].box for i in words])] and set(words) <= every
    # The line gap and its bar in force likewise: the policy's, the calibration's, else LINE_GAP and none; the span
    # is read under them.
    from docjepa.data.touching import LINE_GAP

    assert policy.line_spacing == LINE_GAP and policy.far_threshold is None
    policy.calibration.line_gap, policy.calibration.far_logit = 2.0, 3.0
    assert (policy.line_spacing, policy.far_threshold) == (2.0, 3.0)
    assert AnswerPolicy(line_gap=1.5, far_logit=4.0, calibration=policy.calibration).far_threshold == 4.0
    uncalibrated = Calibration([0.0, 1.0], [0.0, 1.0])
    far = AnswerPolicy(span_logit=-1e9, line_gap=1e9, far_logit=-1e9, calibration=uncalibrated)
    widest = word_span(logits, predictor.page, -1e9, None, 1e9, -1e9)
    assert far.read(predictor.encoded, decoded).word_answer[1] == [
        union_box([predictor.page.words[i].box for i in widest])
    ]
    assert every <= set(widest)


def test_an_uncalibrated_answer_has_no_confidence_and_a_calibrated_one_uses_the_map(predictor):
    everything = torch.ones(3, 128, 128)
    none = predictor.read(Decoded(everything, torch.tensor([0.5, 0.6, 0.7]))).answer()
    assert not none.mask.any() and none.text == "" and none.words == [] and none.expected_iou is None
    predictor.policy.calibration = Calibration([0.0, 1.0], [0.2, 0.4], threshold=0.3)
    decoded = predictor.decode(predictor.page.questions[1].text)
    answer = predictor.read(decoded).answer()
    score = min(max(float(decoded.scores[answer.best]), 0.0), 1.0)
    assert answer.expected_iou == pytest.approx(0.2 + 0.2 * score, abs=1e-5)
    assert answer.known == bool(answer.mask.any() and answer.expected_iou >= 0.3)
    with pytest.raises(ValueError, match="answer path"):
        AnswerPolicy(answer_path="span")


def test_the_path_features_measure_each_decoder_on_the_other_answer(predictor):
    """The path features' last two: the word decoder's mean probability over the words of the mask's answer, the
    mask decoder's mean probability over the span's pixels, each 0 when that answer is empty."""
    from docjepa.inference.path_choice import FEATURES

    page, frame = predictor.page, predictor.encoded.frame.frame
    seen = 0
    for q in page.questions[:6]:
        decoded = predictor.decode(q.text)
        reading = predictor.read(decoded)
        f = dict(zip(FEATURES, reading.path_features))
        mask, lines = reading.answer_lines(path="mask")
        words = answer_policy._answer_words(page, mask, lines, frame)
        probs = torch.sigmoid(reading.word_logits).numpy()
        assert f["mask_words_belief"] == pytest.approx(probs[words].mean() if words else 0.0, abs=1e-6)
        span, _ = reading.word_answer
        pixels = torch.sigmoid(decoded.logits[reading.chosen]).numpy()[span]
        assert f["span_mask_belief"] == pytest.approx(pixels.mean() if span.any() else 0.0, abs=1e-6)
        seen += bool(words) and span.any()
    assert seen  # the untrained decoders' answers cover words on this page
