"""Calibration of the IoU head: isotonic fit, reliability diagrams, and the predictor's confidence and 'known'."""

import itertools

import numpy as np
import pytest

from docjepa.inference.calibration import Calibration, curve_colours, isotonic, reliability


def brute_force_monotone(y: np.ndarray, levels: np.ndarray) -> float:
    """The least squared error of any non-decreasing sequence with values from ``levels`` (small inputs only)."""
    best = float("inf")
    for combo in itertools.combinations_with_replacement(levels, len(y)):
        best = min(best, float(((np.array(combo) - y) ** 2).sum()))
    return best


def test_isotonic_is_the_best_monotone_fit():
    rng = np.random.default_rng(0)
    x = rng.random(7)
    y = rng.random(7)
    knots, values = isotonic(x, y)
    assert np.all(np.diff(knots) >= 0) and np.all(np.diff(values) >= -1e-12)
    fit = np.interp(np.sort(x), knots, values)
    err = float(((fit - y[np.argsort(x)]) ** 2).sum())
    # Pool-adjacent-violators gives block means; a brute-force search over a fine grid cannot do better.
    grid = np.linspace(0, 1, 21)
    assert err <= brute_force_monotone(y[np.argsort(x)], grid) + 1e-9
    # Already increasing: the fit is the data; decreasing: one block at the mean.
    k, v = isotonic(np.array([0.1, 0.2, 0.3]), np.array([0.2, 0.5, 0.9]))
    assert np.allclose(v, [0.2, 0.5, 0.9])
    k, v = isotonic(np.array([0.1, 0.2, 0.3]), np.array([0.9, 0.5, 0.1]))
    assert np.allclose(v, 0.5) and k[0] == 0.1 and k[-1] == 0.3


def test_reliability_on_hand_made_scores():
    scores = [0.05, 0.15, 0.12, 0.95, 0.85, 0.99]
    ious = [0.0, 0.2, 0.0, 0.5, 0.9, 0.7]
    rel = reliability(scores, ious, bins=10)
    bins = {(round(b["lo"], 1), b["n"]) for b in rel["bins"]}
    assert bins == {(0.0, 1), (0.1, 2), (0.8, 1), (0.9, 2)}
    b9 = next(b for b in rel["bins"] if round(b["lo"], 1) == 0.9)
    assert b9["predicted"] == pytest.approx(0.97) and b9["measured"] == pytest.approx(0.6)
    # ECE by hand: (1·0.05 + 2·|0.135 − 0.1| + 1·|0.85 − 0.9| + 2·|0.97 − 0.6|) / 6
    assert rel["ece"] == pytest.approx((0.05 + 2 * 0.035 + 0.05 + 2 * 0.37) / 6)
    assert rel["gap"] == pytest.approx(np.mean(np.array(scores) - np.array(ious)))
    assert reliability([], [])["ece"] is None


def test_calibration_fit_save_load_and_errors(tmp_path):
    rng = np.random.default_rng(1)
    scores = rng.random(200)
    ious = np.clip(0.5 * scores + 0.1 * rng.standard_normal(200), 0, 1)  # over-confident head
    cal = Calibration.fit(scores, ious, threshold=0.3, data=["x"])
    assert np.abs(reliability(cal(scores), ious)["ece"]) < reliability(scores, ious)["ece"]
    assert cal(0.0) <= cal(0.5) <= cal(1.0)
    cal.save(tmp_path)
    back = Calibration.load(tmp_path)
    assert back.knots == cal.knots and back.threshold == 0.3 and back.fitted_on["questions"] == 200
    assert back.span_logit is None and back.line_gap is None and back.far_logit is None  # the span's defaults
    cal.span_logit, cal.line_gap, cal.far_logit = -1.0, 1.5, 4.0
    cal.save(tmp_path)
    back = Calibration.load(tmp_path)
    assert (back.span_logit, back.line_gap, back.far_logit) == (-1.0, 1.5, 4.0)
    assert Calibration.load(tmp_path / "none") is None
    with pytest.raises(ValueError, match="at least 2"):
        Calibration.fit([0.5], [0.5])
    with pytest.raises(ValueError, match="finite"):
        Calibration.fit([0.5, float("nan")], [0.5, 0.2])


def test_a_model_has_one_colour_in_every_reliability_panel():
    rel = {"bins": [], "ece": 0.1}
    colours = curve_colours({"raw": {"a": rel, "b": rel, "c": rel}, "calibrated": {"b": rel, "c": rel}})
    assert colours == {"a": "C0", "b": "C1", "c": "C2"}
