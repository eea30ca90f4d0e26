"""The path model: when the word span beats the mask, learnt from both answers' features
(``docjepa.inference.path_choice``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from docjepa.inference.calibration import Calibration
from docjepa.inference.mask_choice import mask_iou
from docjepa.inference.path_choice import FEATURES, PathModel, fit_path_model, pair_products, path_features
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
            rng.uniform(0.0, 1.0, n),  # the word decoder's belief in the mask's words: tells nothing here
            rng.uniform(0.0, 1.0, n),  # the mask decoder's belief in the span: tells nothing here
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


def test_the_pairs_tell_what_one_feature_means_by_another():
    """Where the span disagrees with the mask it is the better answer on short pages (keyed values) and the worse
    one on long pages (headings, paragraphs): no weight of either feature alone tells them apart, their product
    does."""
    rng = np.random.default_rng(3)

    def questions(n: int):
        x = rng.uniform(0.0, 1.0, (n, len(FEATURES)))
        agree, long = rng.random(n) < 0.5, rng.random(n) < 0.5
        x[:, FEATURES.index("agreement")] = np.where(agree, rng.uniform(0.7, 1.0, n), rng.uniform(0.0, 0.3, n))
        x[:, FEATURES.index("page_words")] = np.log1p(
            np.where(long, rng.integers(300, 900, n), rng.integers(40, 150, n))
        )
        span_better = agree != long
        good, bad = rng.uniform(0.7, 1.0, n), rng.uniform(0.0, 0.4, n)
        return x, np.where(span_better, good, bad), np.where(span_better, bad, good)

    x, words, mask = questions(600)
    linear, paired = fit_path_model(x, words, mask, pairs=False), fit_path_model(x, words, mask)
    assert linear.pairs is None and len(paired.pairs) == len(FEATURES) * (len(FEATURES) + 1) // 2
    x, words, mask = questions(600)  # questions neither was fitted on
    best = np.maximum(words, mask).mean()
    assert np.where(paired(x) >= 0.5, words, mask).mean() > 0.95 * best
    assert np.where(linear(x) >= 0.5, words, mask).mean() < 0.8 * best


def test_a_model_fitted_on_fewer_features_reads_its_own():
    """A calibration written before features were added (linear, on the first six) reads the ones it was fitted
    on, as it did then."""
    rng = np.random.default_rng(4)
    x, words, mask = _questions(rng, 200)
    old = fit_path_model(x, words, mask, pairs=False, names=FEATURES[:6])
    assert old.features == FEATURES[:6] and len(old.weights) == 6
    stored = old.to_dict()
    del stored["pairs"]  # as such a calibration was written
    loaded = PathModel.from_dict(stored)
    z = (x[:, :6] - np.array(old.mean)) / np.array(old.scale)
    want = 1.0 / (1.0 + np.exp(-(z @ np.array(old.weights) + old.bias)))
    np.testing.assert_allclose(loaded(x), want, rtol=0, atol=1e-12)
    assert loaded(x[0]) == pytest.approx(want[0], abs=1e-12)
    changed = x.copy()
    changed[:, 6:] = rng.uniform(0.0, 1.0, (200, 2))  # the features it was not fitted on change nothing
    np.testing.assert_allclose(loaded(changed), want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="pair weights"):
        PathModel(old.mean, old.scale, old.weights, old.bias, FEATURES[:6], [0.0] * 3)


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
    with pytest.raises(ValueError, match="does not measure"):
        PathModel.from_dict(cal.path_model.to_dict() | {"features": ["words_confidence", "the moon's phase"]})


def test_auto_thresholds_the_path_score_when_given():
    likely = torch.tensor([3.0, -2.0])  # confidence sigmoid(3) = 0.95
    assert choose_path("auto", likely, 0.5) == "words"
    assert choose_path("auto", likely, 0.5, score=0.2) == "mask"  # the path model says the mask
    assert choose_path("auto", likely, 0.5, score=0.7) == "words"
    assert choose_path("auto", likely, None, score=0.9) == "mask"  # no threshold fitted: the mask
    assert choose_path("words", likely, 0.5, score=0.0) == "words" and choose_path("mask", likely, 0.0, 1.0) == "mask"


def test_features():
    f = path_features(0.8, 0.25, 3, 0, 0.7, 120, 0.0, 0.6)
    assert f.shape == (len(FEATURES),) and f.dtype == np.float64
    np.testing.assert_allclose(f, [0.8, 0.25, np.log(4), 0.0, 0.7, np.log(121), 0.0, 0.6])
    assert path_features(0.8, 0.25, 3, 0, float("nan"), 120, 0.0, 0.6)[4] == 0.0
    a = np.zeros((4, 4), bool)
    b = a.copy()
    a[0, :2], b[0, 1:3] = True, True
    assert mask_iou(a, b) == pytest.approx(1 / 3) and mask_iou(a & False, b & False) == 1.0


def test_the_fit_does_not_run_away_where_a_full_newton_step_overshoots():
    """Calibration questions (features, both answers' IoU, each question's weight; rounded) of a model on which
    full Newton steps raised the penalised loss from the fifth step on, and the weights ran to 1e11: the fit halves
    a step until the loss falls, and ends at the penalised loss's minimum (its gradient zero)."""
    from pathlib import Path

    d = json.loads((Path(__file__).parent / "path_model_runaway.json").read_text())
    x, words, mask, weight = (np.array(d[k]) for k in ("features", "words_iou", "mask_iou", "weight"))
    model = fit_path_model(x, words, mask, weight)
    assert max(abs(v) for v in [*model.weights, *model.pairs, model.bias]) < 10
    z = (x - np.array(model.mean)) / np.array(model.scale)
    terms = np.hstack([z, pair_products(z), np.ones((len(z), 1))])
    theta = np.array([*model.weights, *model.pairs, model.bias])
    gain = words - mask
    w = np.abs(gain) * weight
    w = w / w.mean()
    p = 1.0 / (1.0 + np.exp(-(terms @ theta)))
    penalty = np.ones(len(theta))
    penalty[-1] = 0.0
    grad = terms.T @ (w * (p - (gain > 0))) + penalty * theta
    assert np.abs(grad).max() < 1e-6
