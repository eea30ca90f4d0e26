"""``docjepa calibrate``: fit the map from the IoU head's score to measured IoU on labelled pages, store it with
the model (see :mod:`docjepa.inference.calibration`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..data.split import SplitConfig
from ..inference.calibration import Calibration, reliability
from .evaluate import evaluate


def calibrate(
    checkpoint: Path, data: list[Path], threshold: float = 0.5, progress: bool = True, write: bool = True
) -> dict:
    """Score every question of ``data`` (pages the model was not trained on), fit an isotonic map from the chosen
    candidate's predicted IoU to its measured IoU, write ``calibration.json`` beside the model's weights (unless
    ``write`` is False), and return the map with the reliability of the scores before and after it on that data."""
    from ..inference.predictor import DocumentPredictor
    from ..modeling.files import SEGMENTATION, require_model

    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    predictor = DocumentPredictor.from_pretrained(checkpoint)
    predictor.calibration = None  # fit on raw scores, whatever the model holds now
    res = evaluate(predictor, data, SplitConfig([], 0), part="all", progress=progress, keep_rows=True)
    scores = np.array([r["score"] for r in res["rows"]])
    ious = np.array([r["iou"] for r in res["rows"]])
    cal = Calibration.fit(scores, ious, threshold, data=[str(d) for d in data])
    out = {
        "questions": len(scores),
        "raw": reliability(scores, ious),
        "calibrated_in_sample": reliability(cal(scores), ious),
        "calibration": {"knots": cal.knots, "values": cal.values, "threshold": threshold},
    }
    if write:
        out["file"] = str(cal.save(require_model(checkpoint, (SEGMENTATION,), "calibration")))
    return out
