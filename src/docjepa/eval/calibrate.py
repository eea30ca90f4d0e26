"""``docjepa calibrate``: fit the map from the IoU head's score to measured IoU on labelled pages, store it with
the model (see :mod:`docjepa.inference.calibration`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..data.split import SplitConfig
from ..inference.calibration import Calibration, isotonic, reliability
from .evaluate import evaluate

WORDS_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)
"""Word-decoder confidences tried as the threshold of ``answer_path="auto"`` (0: always words; above 1: never)."""


def per_kind_miou(rows: list[dict], pick) -> float:
    """The mean over question kinds of the mean IoU ``pick(row)`` of each kind's rows."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(pick(r))
    return float(np.mean([np.mean(v) for v in by_kind.values()]))


def auto_iou(threshold: float):
    """A row's IoU under ``answer_path="auto"`` at ``threshold`` (rows as ``evaluate(keep_rows=True)`` gives them)."""
    return lambda r: r["paths"]["words"] if r["words_confidence"] >= threshold else r["paths"]["mask"]


def miou_by_set(rows: list[dict]) -> dict[str, dict[float, float]]:
    """Per calibration set (a row's ``set``; "" when untagged), the per-kind mIoU at each threshold of
    :data:`WORDS_GRID`."""
    sets: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        sets[r.get("set", "")].append(r)
    return {name: {t: per_kind_miou(rs, auto_iou(t)) for t in WORDS_GRID} for name, rs in sets.items()}


def fit_words_threshold(rows: list[dict]) -> tuple[float, dict[float, float]]:
    """The threshold of :data:`WORDS_GRID` whose ``auto`` answers score the best per-kind mIoU on ``rows`` (ties: the
    lower threshold) among those that score no worse than the mask alone on any calibration set (rows tagged with
    their ``set``, as :func:`calibration_rows` gives them): a word span that helps on one kind of document (forms)
    and hurts on another (manuals) is not taken for both. Returns it and the mIoU at each threshold."""
    by = {t: per_kind_miou(rows, auto_iou(t)) for t in WORDS_GRID}
    never = WORDS_GRID[-1]
    sets = miou_by_set(rows).values()
    allowed = [t for t in WORDS_GRID if all(m[t] >= m[never] - 1e-9 for m in sets)]
    best = max(allowed, key=lambda t: (round(by[t], 6), -t))
    return best, by


def calibration_rows(predictor, data: list[Path], progress: bool = True) -> list[dict]:
    """Every question of each folder of ``data``, scored by ``predictor`` with both answer paths
    (``evaluate(keep_rows=True)``), each row tagged with its folder as ``set``."""
    rows: list[dict] = []
    for folder in data:
        res = evaluate(predictor, [folder], SplitConfig([], 0), part="all", progress=progress, keep_rows=True)
        rows += [r | {"set": str(folder)} for r in res["rows"]]
    return rows


def calibrate(
    checkpoint: Path, data: list[Path], threshold: float = 0.5, progress: bool = True, write: bool = True
) -> dict:
    """Score every question of ``data`` (pages the model was not trained on), fit an isotonic map from the chosen
    candidate's predicted IoU to its measured IoU, and, for a model with a word decoder, the confidence from which
    its word span answers (:func:`fit_words_threshold`) with a map from that confidence to the word answer's IoU;
    write ``calibration.json`` beside the model's weights (unless ``write`` is False), and return the maps with the
    reliability of the scores before and after on that data."""
    from ..inference.predictor import DocumentPredictor
    from ..modeling.files import SEGMENTATION, require_model

    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    predictor = DocumentPredictor.from_pretrained(checkpoint)
    predictor.policy.calibration = None  # fit on raw scores, whatever the model holds now
    rows = calibration_rows(predictor, data, progress)
    scores = np.array([r["score"] for r in rows])
    ious = np.array([r["iou"] for r in rows])
    cal = Calibration.fit(scores, ious, threshold, data=[str(d) for d in data])
    words = np.array([r["words_confidence"] for r in rows])
    out = {
        "questions": len(scores),
        "raw": reliability(scores, ious),
        "calibrated_in_sample": reliability(cal(scores), ious),
        "calibration": {"knots": cal.knots, "values": cal.values, "threshold": threshold},
    }
    if words.any():  # the model has a word decoder: fit when its span answers, and what IoU it reaches then
        cal.words_threshold, by = fit_words_threshold(rows)
        knots, values = isotonic(words, np.array([r["paths"]["words"] for r in rows]))
        cal.words_knots, cal.words_values = [float(v) for v in knots], [float(v) for v in values]
        out["answer_paths"] = {
            "words_threshold": cal.words_threshold,
            "mIoU_by_threshold": by,
            "mIoU_by_set": miou_by_set(rows),
            "mask_mIoU": per_kind_miou(rows, lambda r: r["paths"]["mask"]),
            "words_mIoU": per_kind_miou(rows, lambda r: r["paths"]["words"]),
            "words_share": float((words >= cal.words_threshold).mean()),
        }
    if write:
        out["file"] = str(cal.save(require_model(checkpoint, (SEGMENTATION,), "calibration")))
    return out
