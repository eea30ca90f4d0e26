"""Which of its two answers a question gets under ``answer_path="auto"``: a small model of when the word span beats
the mask, fitted on calibration pages.

A model with a word decoder has two answers to every question: the mask decoder's chosen candidate (snapped to the
words it covers) and the word decoder's span (:func:`~docjepa.inference.word_answer.word_span`). The span reads
values (a number, a date, an amount) better; the mask draws regions (a table, a paragraph, a party's block) better.
Which one a question wants shows in the two answers themselves: how sure the word decoder is, how far the two
agree, how many words each covers, how sure the mask decoder is. :class:`PathModel` is a logistic regression on
those :data:`FEATURES` that estimates how likely the span is the better answer; ``docjepa calibrate`` fits it
(:func:`fit_path_model`, each question weighted by how much the choice matters there: the difference between the
two answers' IoU) and then the threshold on its estimate from which the span answers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

FEATURES = ("words_confidence", "agreement", "span_words", "mask_words", "mask_score", "page_words")
"""What :func:`path_features` measures of one question's two answers: the probability of the word decoder's most
likely word; the IoU of the span's and the mask's answers in the decoder's frame; log(1 + words) of the span, of
the mask's answer and of the page; the mask decoder's predicted IoU of its chosen candidate."""


def path_features(
    words_confidence: float, agreement: float, span_words: int, mask_words: int, mask_score: float, page_words: int
) -> np.ndarray:
    """(len(FEATURES),) float64: one question's features, in the order of :data:`FEATURES`."""
    return np.array(
        [
            words_confidence,
            agreement,
            math.log1p(span_words),
            math.log1p(mask_words),
            min(max(mask_score, -1.0), 2.0) if math.isfinite(mask_score) else 0.0,
            math.log1p(page_words),
        ],
        dtype=np.float64,
    )


@dataclass
class PathModel:
    """P(the word span is the better answer) = sigmoid(weights · (features − mean) / scale + bias)."""

    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    features: tuple[str, ...] = FEATURES
    """The features' names, as they were when the model was fitted (a model fitted on others is refused)."""

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        if self.features != FEATURES:
            raise ValueError(f"this path model was fitted on features {self.features}, not {FEATURES}: re-calibrate")
        if not len(self.mean) == len(self.scale) == len(self.weights) == len(FEATURES):
            raise ValueError(f"a path model has {len(FEATURES)} means, scales and weights")

    def __call__(self, features: np.ndarray) -> np.ndarray | float:
        """The estimate for (len(FEATURES),) features, or for (N, len(FEATURES)) rows of them."""
        x = (np.asarray(features, float) - np.array(self.mean)) / np.array(self.scale)
        z = np.clip(x @ np.array(self.weights) + self.bias, -50.0, 50.0)
        out = 1.0 / (1.0 + np.exp(-z))
        return float(out) if np.ndim(out) == 0 else out

    def to_dict(self) -> dict:
        return asdict(self) | {"features": list(self.features)}

    @classmethod
    def from_dict(cls, d: dict) -> PathModel:
        return cls(d["mean"], d["scale"], d["weights"], float(d["bias"]), tuple(d.get("features", FEATURES)))


def fit_path_model(
    features: np.ndarray,
    words_iou: np.ndarray,
    mask_iou: np.ndarray,
    weight: np.ndarray | None = None,
    l2: float = 1.0,
    steps: int = 100,
) -> PathModel:
    """Logistic regression of "the span's IoU beats the mask's" on standardised ``features`` (N, len(FEATURES)),
    each question weighted by |words_iou − mask_iou| (a question both answer alike teaches nothing) times its
    ``weight`` (default 1), with an L2 penalty ``l2`` on the weights (not the bias), by Newton's method. ValueError
    when no question tells the two apart."""
    x = np.asarray(features, float)
    if x.ndim != 2 or x.shape[1] != len(FEATURES) or len(x) != len(words_iou) or len(x) != len(mask_iou):
        raise ValueError(f"features must be (N, {len(FEATURES)}) with one pair of IoUs per row, got {x.shape}")
    gain = np.asarray(words_iou, float) - np.asarray(mask_iou, float)
    weight = np.abs(gain) * (1.0 if weight is None else np.asarray(weight, float))
    if weight.sum() <= 0:
        raise ValueError("no calibration question is answered better by one path than by the other")
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    y = (gain > 0).astype(float)
    w = weight / weight.mean()
    theta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ theta, -50.0, 50.0)))
        grad = z.T @ (w * (p - y)) + penalty * theta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return PathModel(mean.tolist(), scale.tolist(), theta[:-1].tolist(), float(theta[-1]))
