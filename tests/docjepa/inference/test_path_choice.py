"""The path model: when the word span beats the mask, learnt from both answers' features
(``docjepa.inference.path_choice``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from docjepa.inference.calibration import Calibration
from docjepa.inference.mask_choice import mask_iou
from docjepa.inference.path_choice import FEATURES, PathModel, fit_path_model, path_features
from docjepa.inference.word_answer import choose_path


def _questions(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values (a short span, a sure word decoder) that the span answers better, and regions (many words under the
    mask) that the mask answers better, with every feature noisy."""
    value = rng.random(n) < 0.5
    x = np.column_stack(
        [
            np.where(value, rng.uniform(0.5, 1.0, n), rng.uniform(0.0, 0.7, n)),  # words_confidence
            rng.uniform(0.0, 1.0, n),  # agreement: tells nothing here
            np.log1p(np.where(value, rng.integers(1, 4, n), rng.integers(1, 30, n))),  # span words
            np.log1p(np.where(value, rng.integers(1, 6, n), rng.integers(8, 80, n))),  # mask words
            rng.uniform(0.2, 0.9, n),  # mask score: tells nothing here
            np.log1p(rng.integers(50, 400, n)),
        ]
    )
    good, bad = rng.uniform(0.7, 1.0, n), rng.uniform(0.0, 0.4, n)
    return x, np.where(value, good, bad), np.where(value, bad, good)


def test_the_fitted_model_picks_the_better_answer_on_new_questions():
    rng = np.random.default_rng(0)
    model = fit_path_model(*_questions(rng, 400))
    x, words, mask = _questions(rng, 400)  # questions it was not fitted on
    chosen = np.where(model(x) >= 0.5, words, mask)
    best = np.maximum(words, mask)
    assert chosen.mean() > 0.95 * best.mean()
    assert chosen.mean() > max(words.mean(), mask.mean()) + 0.2  # far above either path alone
    # It reads the features that carry the signal: more words under the mask → less likely the span.
    assert model.weights[FEATURES.index("mask_words")] < 0


def test_questions_both_answer_alike_weigh_nothing():
    rng = np.random.default_rng(1)
    x, words, mask = _questions(rng, 200)
    ties = rng.uniform(0.0, 1.0, (200, len(FEATURES)))
    model = fit_path_model(
        np.vstack([x, ties]), np.concatenate([words, [0.5] * 200]), np.concatenate([mask, [0.5] * 200])
    )
    alone = fit_path_model(x, words, mask)
    np.testing.assert_allclose(model(x) >= 0.5, alone(x) >= 0.5)
    with pytest.raises(ValueError, match="no calibration question"):
        fit_path_model(ties, np.full(200, 0.5), np.full(200, 0.5))
    with pytest.raises(ValueError, match="features must be"):
        fit_path_model(ties[:, :3], np.ones(200), np.zeros(200))


def test_the_model_is_stored_with_the_calibration(tmp_path):
    rng = np.random.default_rng(2)
    x, words, mask = _questions(rng, 100)
    cal = Calibration([0.0, 1.0], [0.1, 0.9], words_threshold=0.6, path_model=fit_path_model(x, words, mask))
    loaded = Calibration.load(cal.save(tmp_path).parent)
    assert loaded.path_model is not None and loaded.words_threshold == 0.6
    np.testing.assert_allclose(loaded.path_model(x), cal.path_model(x), rtol=0, atol=1e-12)
    old = Calibration([0.0, 1.0], [0.0, 1.0], words_threshold=0.6)  # a calibration without a path model
    (tmp_path / "old").mkdir()
    assert Calibration.load(old.save(tmp_path / "old").parent).path_model is None
    with pytest.raises(ValueError, match="fitted on features"):
        PathModel.from_dict(cal.path_model.to_dict() | {"features": ["words_confidence"]})


def test_auto_thresholds_the_path_score_when_given():
    likely = torch.tensor([3.0, -2.0])  # confidence sigmoid(3) = 0.95
    assert choose_path("auto", likely, 0.5) == "words"
    assert choose_path("auto", likely, 0.5, score=0.2) == "mask"  # the path model says the mask
    assert choose_path("auto", likely, 0.5, score=0.7) == "words"
    assert choose_path("auto", likely, None, score=0.9) == "mask"  # no threshold fitted: the mask
    assert choose_path("words", likely, 0.5, score=0.0) == "words" and choose_path("mask", likely, 0.0, 1.0) == "mask"


def test_features():
    f = path_features(0.8, 0.25, 3, 0, 0.7, 120)
    assert f.shape == (len(FEATURES),) and f.dtype == np.float64
    np.testing.assert_allclose(f, [0.8, 0.25, np.log(4), 0.0, 0.7, np.log(121)])
    assert path_features(0.8, 0.25, 3, 0, float("nan"), 120)[4] == 0.0
    a = np.zeros((4, 4), bool)
    b = a.copy()
    a[0, :2], b[0, 1:3] = True, True
    assert mask_iou(a, b) == pytest.approx(1 / 3) and mask_iou(a & False, b & False) == 1.0
