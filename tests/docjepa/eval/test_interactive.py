"""The clicks curve: where a simulated person clicks, and the curve's first point equals the plain evaluation."""

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from docjepa.data.split import SplitConfig
from docjepa.eval.evaluate import evaluate
from docjepa.eval.interactive import click_curve, next_click, word_ceiling
from docjepa.inference.predictor import DocumentPredictor
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation


def test_the_click_goes_to_the_middle_of_the_largest_error():
    truth = np.zeros((20, 20), dtype=bool)
    truth[2:9, 2:15] = True
    pred = np.zeros_like(truth)
    pred[2:9, 2:6] = True  # the right part missed: 7 × 9
    pred[15:17, 15:17] = True  # a small wrong blob: 2 × 2
    y, x, label = next_click(pred, truth)
    assert label == 1 and y == 5 and 9 <= x <= 11  # the missed part's middle, farthest from its edges
    wrong = truth.copy()
    wrong[10:19, 1:19] = True  # now a large wrongly marked part
    y, x, label = next_click(wrong, truth)
    assert label == 0 and 10 <= y < 19 and not truth[y, x]
    assert next_click(truth, truth) is None
    region = np.zeros_like(truth)
    region[:, :10] = True  # only the page counts: the missed columns beyond it are padding
    y, x, label = next_click(pred, truth, region)
    assert x < 10 and label == 1


def test_in_a_thin_line_the_click_goes_to_its_middle_not_its_first_pixel():
    truth = np.zeros((20, 40), dtype=bool)
    truth[5:7, 2:38] = True  # a line of text two mask pixels tall: every pixel is equally deep
    pred = np.zeros_like(truth)
    pred[5:7, 2:8] = True  # its first word found
    y, x, label = next_click(pred, truth)
    assert label == 1 and y in (5, 6) and 21 <= x <= 25  # the middle of the missed 30 pixels (8 … 37)


def test_the_curve_starts_at_the_plain_evaluation_and_counts_every_question(docs, tok):
    torch.manual_seed(0)
    predictor = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    curve = click_curve(predictor, [docs / "d"], SplitConfig(), "all", limit=12, clicks=(0, 1, 3), progress=False)
    plain = evaluate(predictor, [docs / "d"], SplitConfig(), part="all", limit=12, progress=False)
    assert curve["clicks"] == [0, 1, 3] and curve["questions"] == 12
    assert curve["curve"]["0"]["mIoU"] == pytest.approx(plain["model"]["mIoU"])
    for k in ("0", "1", "3"):
        assert curve["curve"][k]["n"] == 12 and 0.0 <= curve["curve"][k]["mIoU"] <= 1.0
    assert curve["curve"]["1"] != curve["curve"]["0"]  # a click changes the answers


def test_the_word_ceiling_scores_the_true_answers_own_words(docs):
    full = word_ceiling([docs / "d"], SplitConfig(), 128, "all", limit=20)
    assert full["questions"] == 20 and 0.5 < full["mIoU"] <= 1.0  # synthetic answers are mostly words' boxes
    coarse = word_ceiling([docs / "d"], SplitConfig(), 16, "all", limit=20)
    assert coarse["mIoU"] < full["mIoU"]  # at 16 mask pixels a side words are smaller than a pixel
