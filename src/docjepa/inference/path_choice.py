"""Which of its two answers a question gets under ``answer_path="auto"``: a small model of when the word span beats
the mask, fitted on calibration pages.

A model with a word decoder has two answers to every question: the mask decoder's chosen candidate (snapped to the
words it covers) and the word decoder's span (:func:`~docjepa.inference.word_answer.word_span`). The span reads
values (a number, a date, an amount) better; the mask draws regions (a table, a paragraph, a party's block) better.
Which one a question wants shows in the two answers themselves: how sure the word decoder is, how far the two
agree, how many words each covers, how sure the mask decoder is, how far each decoder believes in the other's
answer. :class:`PathModel` is a logistic regression on those :data:`FEATURES` and their pairwise products that
estimates how likely the span is the better answer; ``docjepa calibrate`` fits it (:func:`fit_path_model`, each
question weighted by how much the choice matters there: the difference between the two answers' IoU) and then the
threshold on its estimate from which the span answers. The products let one feature's meaning depend on another:
a span the mask disagrees with is the better answer on a short page of keyed values and the worse one on a long
page of headings and paragraphs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

FEATURES = (
    "words_confidence",
    "agreement",
    "span_words",
    "mask_words",
    "mask_score",
    "page_words",
    "mask_words_belief",
    "span_mask_belief",
)
"""What :func:`path_features` measures of one question's two answers: the probability of the word decoder's most
likely word; the IoU of the span's and the mask's answers in the decoder's frame; log(1 + words) of the span, of
the mask's answer and of the page; the mask decoder's predicted IoU of its chosen candidate; the word decoder's
mean probability over the mask's words (0: the mask covers none); the mask decoder's mean probability over the
span (0: no span)."""


def path_features(
    words_confidence: float,
    agreement: float,
    span_words: int,
    mask_words: int,
    mask_score: float,
    page_words: int,
    mask_words_belief: float,
    span_mask_belief: float,
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
            mask_words_belief,
            span_mask_belief,
        ],
        dtype=np.float64,
    )


def pair_products(z: np.ndarray) -> np.ndarray:
    """(N, F(F+1)/2) the products zᵢzⱼ (i ≤ j, in the order of ``numpy.triu_indices``) of (N, F) features."""
    i, j = np.triu_indices(z.shape[1])
    return z[:, i] * z[:, j]


@dataclass
class PathModel:
    """P(the word span is the better answer) = sigmoid(weights · z + pairs · (zᵢzⱼ)ᵢ≤ⱼ + bias), z the features the
    model was fitted on, standardised: (features − mean) / scale."""

    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    features: tuple[str, ...] = FEATURES
    """The features' names, as they were when the model was fitted: names of :data:`FEATURES` (a calibration
    written before a feature was added reads the ones it was fitted on; an unknown name is refused)."""
    pairs: list[float] | None = None
    """The weights of the features' pairwise products (:func:`pair_products`); None: a linear model, as
    calibrations were written before them."""

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(
                f"this path model was fitted on features {unknown} this version does not measure: re-calibrate"
            )
        n = len(self.features)
        if not len(self.mean) == len(self.scale) == len(self.weights) == n:
            raise ValueError(f"a path model on {n} features has {n} means, scales and weights")
        if self.pairs is not None and len(self.pairs) != n * (n + 1) // 2:
            raise ValueError(f"a path model on {n} features has {n * (n + 1) // 2} pair weights")

    def __call__(self, features: np.ndarray) -> np.ndarray | float:
        """The estimate for (len(FEATURES),) features, or for (N, len(FEATURES)) rows of them (as
        :func:`path_features` measures them; the model reads the ones it was fitted on)."""
        x = np.asarray(features, float)
        rows = np.atleast_2d(x)[:, [FEATURES.index(f) for f in self.features]]
        z = (rows - np.array(self.mean)) / np.array(self.scale)
        logit = z @ np.array(self.weights) + self.bias
        if self.pairs is not None:
            logit = logit + pair_products(z) @ np.array(self.pairs)
        out = 1.0 / (1.0 + np.exp(-np.clip(logit, -50.0, 50.0)))
        return float(out[0]) if x.ndim == 1 else out

    def to_dict(self) -> dict:
        return asdict(self) | {"features": list(self.features)}

    @classmethod
    def from_dict(cls, d: dict) -> PathModel:
        features = tuple(d.get("features", FEATURES[:6]))
        return cls(d["mean"], d["scale"], d["weights"], float(d["bias"]), features, d.get("pairs"))


def fit_path_model(
    features: np.ndarray,
    words_iou: np.ndarray,
    mask_iou: np.ndarray,
    weight: np.ndarray | None = None,
    l2: float = 1.0,
    steps: int = 100,
    pairs: bool = True,
    names: tuple[str, ...] = FEATURES,
) -> PathModel:
    """Logistic regression of "the span's IoU beats the mask's" on standardised ``features`` (N, len(FEATURES))
    and, with ``pairs``, their pairwise products, each question weighted by |words_iou − mask_iou| (a question both
    answer alike teaches nothing) times its ``weight`` (default 1), with an L2 penalty ``l2`` on the weights (not
    the bias), by Newton's method; on the features ``names`` of :data:`FEATURES` alone (default: all). ValueError
    when no question tells the two apart."""
    x = np.asarray(features, float)
    if x.ndim != 2 or x.shape[1] != len(FEATURES) or len(x) != len(words_iou) or len(x) != len(mask_iou):
        raise ValueError(f"features must be (N, {len(FEATURES)}) with one pair of IoUs per row, got {x.shape}")
    x = x[:, [FEATURES.index(f) for f in names]]
    gain = np.asarray(words_iou, float) - np.asarray(mask_iou, float)
    weight = np.abs(gain) * (1.0 if weight is None else np.asarray(weight, float))
    if weight.sum() <= 0:
        raise ValueError("no calibration question is answered better by one path than by the other")
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = (x - mean) / scale
    terms = np.hstack([z, pair_products(z)] if pairs else [z])
    theta = _newton(
        np.hstack([terms, np.ones((len(x), 1))]), (gain > 0).astype(float), weight / weight.mean(), l2, steps
    )
    n = x.shape[1]
    return PathModel(
        mean.tolist(),
        scale.tolist(),
        theta[:n].tolist(),
        float(theta[-1]),
        tuple(names),
        theta[n:-1].tolist() if pairs else None,
    )


def _newton(z: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, steps: int) -> np.ndarray:
    """The weighted, L2-penalised (all but the last column, the bias) logistic regression of ``y`` on ``z``, by
    Newton's method with each step halved until the penalised loss falls enough (Armijo): a full Newton step can
    overshoot where the products of features make the loss steep, and then the fit runs away."""
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0

    def loss(theta: np.ndarray) -> float:
        logit = z @ theta
        return float(w @ (np.logaddexp(0.0, logit) - y * logit) + 0.5 * penalty @ theta**2)

    theta = np.zeros(z.shape[1])
    current = loss(theta)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ theta, -50.0, 50.0)))
        grad = z.T @ (w * (p - y)) + penalty * theta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        t, slope = 1.0, float(grad @ step)
        while t > 1e-9 and loss(theta - t * step) > current - 1e-4 * t * slope:
            t /= 2
        theta = theta - t * step
        previous, current = current, loss(theta)
        if np.abs(t * step).max() < 1e-10 or previous - current < 1e-12 * max(1.0, abs(current)):
            break
    return theta
