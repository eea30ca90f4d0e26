"""How far to trust an answer: the IoU head's score mapped to the IoU it achieves, and reliability diagrams.

The mask decoder predicts the IoU of each candidate with the true answer. On pages unlike its training pages that
prediction is over-confident; a monotone map fitted on labelled pages that were not trained on (isotonic
regression: the non-decreasing step function closest to the measured IoUs in squared error) turns it into an
estimate of the IoU to expect. ``docjepa calibrate`` fits it and stores ``calibration.json`` beside the model
weights; :class:`~docjepa.inference.predictor.DocumentPredictor` then reports ``confidence`` (that estimate) and
``known`` (confidence at least ``threshold``) for every answer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .path_choice import PathModel

FILE = "calibration.json"


def isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pool-adjacent-violators: (breakpoints, values) of the non-decreasing least-squares fit of ``y`` on ``x``."""
    order = np.argsort(x, kind="stable")
    xs, ys = np.asarray(x, float)[order], np.asarray(y, float)[order]
    blocks: list[list[float]] = []  # [sum, count, x_lo, x_hi]
    for xi, yi in zip(xs, ys):
        blocks.append([yi, 1.0, xi, xi])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c, _, hi = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
            blocks[-1][3] = hi
    knots, values = [], []
    for s, c, lo, hi in blocks:
        for v in (lo, hi) if hi > lo else (lo,):
            knots.append(v)
            values.append(s / c)
    return np.array(knots), np.array(values)


@dataclass
class Calibration:
    """A monotone map from the IoU head's score to expected IoU (linear between knots, flat outside)."""

    knots: list[float]
    values: list[float]
    threshold: float = 0.5
    """An answer is ``known`` when its calibrated IoU is at least this."""
    fitted_on: dict = field(default_factory=dict)
    """Where the map was fitted: data folders, number of questions."""
    words_threshold: float | None = None
    """The estimate of ``path_model`` (without one: the word decoder's confidence) from which a question is answered
    by its word span rather than by a mask (``DocumentPredictor(answer_path="auto")``), chosen on the same pages
    (``docjepa.eval.calibrate``); None: a calibration fitted without word answers, so every answer is the mask
    path's."""
    words_knots: list[float] = field(default_factory=list)
    """The map from that confidence to the IoU a word answer achieves (as ``knots`` / ``values``; empty: none)."""
    words_values: list[float] = field(default_factory=list)
    path_model: PathModel | None = None
    """How likely the word span is the better answer, from both answers' features
    (:class:`~docjepa.inference.path_choice.PathModel`); None: ``words_threshold`` applies to the word decoder's
    confidence alone."""
    span_logit: float | None = None
    """The word decoder's logit above which a word joins the model's word span
    (:func:`~docjepa.inference.word_answer.word_span`), chosen on the same pages before the path model; None: a
    calibration fitted without choosing it, so :data:`~docjepa.inference.word_answer.WORD_LOGIT`."""
    line_logit: float | None = None
    """The logit above which a word joins the word span across a line break, chosen with ``span_logit``; None: no
    bar beyond ``span_logit`` (a calibration fitted without choosing it)."""
    line_gap: float | None = None
    """How far apart, in word heights, two lines of a word span may stand when a word clears ``far_logit``, chosen
    with ``span_logit``; None: :data:`~docjepa.data.touching.LINE_GAP` (a calibration fitted without choosing it)."""
    far_logit: float | None = None
    """The logit above which a word joins the word span from a line further than
    :data:`~docjepa.data.touching.LINE_GAP` heights away (up to ``line_gap``); None: no word does."""

    def __call__(self, score: float | np.ndarray) -> float | np.ndarray:
        out = np.interp(score, self.knots, self.values)
        return float(out) if np.ndim(out) == 0 else out

    def words(self, confidence: float) -> float | None:
        """The IoU a word answer of this confidence can be expected to reach (None: no map for word answers)."""
        if not self.words_knots:
            return None
        return float(np.interp(confidence, self.words_knots, self.words_values))

    @classmethod
    def fit(cls, scores, ious, threshold: float = 0.5, **fitted_on) -> Calibration:
        scores, ious = np.asarray(scores, float), np.asarray(ious, float)
        if len(scores) < 2 or len(scores) != len(ious):
            raise ValueError(f"calibration needs at least 2 (score, IoU) pairs of equal length, got {len(scores)}")
        if not (np.isfinite(scores).all() and np.isfinite(ious).all()):
            raise ValueError("calibration scores and IoUs must be finite")
        knots, values = isotonic(scores, ious)
        return cls(
            [float(v) for v in knots], [float(v) for v in values], threshold, {"questions": len(scores), **fitted_on}
        )

    def save(self, folder: Path) -> Path:
        path = Path(folder) / FILE
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, folder: Path) -> Calibration | None:
        path = Path(folder) / FILE
        if not path.is_file():
            return None
        d = json.loads(path.read_text())
        return cls(
            d["knots"],
            d["values"],
            d.get("threshold", 0.5),
            d.get("fitted_on", {}),
            d.get("words_threshold"),
            d.get("words_knots", []),
            d.get("words_values", []),
            PathModel.from_dict(d["path_model"]) if d.get("path_model") else None,
            d.get("span_logit"),
            d.get("line_logit"),
            d.get("line_gap"),
            d.get("far_logit"),
        )


def reliability(scores, ious, bins: int = 10) -> dict:
    """Reliability diagram data: per bin of predicted IoU (equal width on [0, 1]) the count, mean predicted and mean
    measured IoU; ECE (count-weighted mean |predicted − measured|) and the mean signed gap (predicted − measured)."""
    scores = np.clip(np.asarray(scores, float), 0.0, 1.0)
    ious = np.asarray(ious, float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.minimum(np.digitize(scores, edges[1:-1]), bins - 1) if len(scores) else np.array([], int)
    rows, ece = [], 0.0
    for b in range(bins):
        sel = which == b
        n = int(sel.sum())
        if n:
            pred, meas = float(scores[sel].mean()), float(ious[sel].mean())
            ece += n * abs(pred - meas)
            rows.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "n": n, "predicted": pred, "measured": meas})
    n = len(scores)
    return {
        "n": n,
        "bins": rows,
        "ece": ece / n if n else None,
        "gap": float((scores - ious).mean()) if n else None,
    }


def curve_colours(panels: dict[str, dict]) -> dict[str, str]:
    """One matplotlib colour per curve name over all panels, in order of first appearance (a model missing from
    one panel does not shift the others' colours)."""
    names = list(dict.fromkeys(name for curves in panels.values() for name in curves))
    return {name: f"C{i % 10}" for i, name in enumerate(names)}


def plot_reliability(panels: dict[str, dict[str, dict]], path: Path) -> Path:
    """Reliability diagrams side by side: panel title → {curve name → :func:`reliability` result}; each bin's
    point is labelled with its count, and a curve's name has one colour in every panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 5), squeeze=False)
    colour = curve_colours(panels)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
        for name, rel in curves.items():
            xs = [b["predicted"] for b in rel["bins"]]
            ys = [b["measured"] for b in rel["bins"]]
            ax.plot(xs, ys, marker="o", color=colour[name], label=f"{name} (ECE {rel['ece']:.3f})")
            for b in rel["bins"]:
                ax.annotate(
                    str(b["n"]), (b["predicted"], b["measured"]), fontsize=6, xytext=(3, -8), textcoords="offset points"
                )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted IoU (mean in bin)")
        ax.set_ylabel("measured IoU (mean in bin)")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
