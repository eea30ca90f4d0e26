"""``path_model_ablation.py``: the docs table is the committed run, whose path model with pairs is the one ``docjepa
calibrate`` chose for the same model, and the ablation's variants fit what they say on rows made up here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import path_model_ablation as pma  # noqa: E402

RESULTS = ROOT / "benchmarks/results/docjepa/business"


def test_the_docs_table_is_the_committed_run_and_calibrate_chose_its_last_column():
    result = json.loads((RESULTS / "path-model-ablation.json").read_text())
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(pma.START, 1)[1].split(pma.END, 1)[0].strip() == pma.table(result)
    chosen = result["variants"]["eight features, pairs (calibrate's)"]
    calibration = json.loads((RESULTS / "alike-2000-rerun-pairs-calibration.json").read_text())["answer_paths"]
    assert chosen["words_threshold"] == calibration["words_threshold"]
    assert calibration["path_model"]["pairs"] is not None and len(calibration["path_model"]["features"]) == 8
    by_set = calibration["mIoU_by_set"]
    for folder, miou in chosen["calibration_mIoU"].items():
        assert abs(miou - by_set[folder][str(chosen["words_threshold"])]) < 1e-9
    scored = json.loads((RESULTS / "alike-2000-rerun-pairs.json").read_text())["scores"]
    for group in ("kind: key", "kind: field", "all"):  # predict's answers, scored by business_pages.py
        assert abs(chosen["business_mIoU"][group] - scored[group]["model mIoU"]) < 1e-3


def _rows(rng: np.random.Generator, n: int, folder: str) -> list[dict]:
    from docjepa.inference.path_choice import FEATURES

    rows = []
    for _ in range(n):
        value = rng.random() < 0.5
        x = rng.uniform(0.0, 1.0, len(FEATURES))
        x[FEATURES.index("words_confidence")] = rng.uniform(0.6, 1.0) if value else rng.uniform(0.0, 0.7)
        words, mask = (0.9, 0.2) if value else (0.2, 0.9)
        rows.append({"kind": "key" if value else "section", "set": folder, "layout": "business/right/en"})
        rows[-1] |= {
            "paths": {"words": words, "mask": mask},
            "path_features": x.tolist(),
            "template": "",
            "words_confidence": x[0],
        }
    return rows


def test_each_variant_fits_the_features_it_names_and_beats_either_path_alone():
    rng = np.random.default_rng(0)
    rows, val = _rows(rng, 300, "a") + _rows(rng, 300, "b"), _rows(rng, 200, "val")
    for name, (count, pairs) in pma.VARIANTS.items():
        out = pma.variant(rows, val, count, pairs)
        assert len(out["features"]) == count and out["pairs"] == pairs, name
        assert out["words_threshold"] <= 1.0, name  # the span helps on every folder: some threshold takes it
        best = np.mean([max(r["paths"].values()) for r in val])
        assert out["business_mIoU"]["all"] > 0.9 * best, name
    alone = pma.alone(rows, val, "mask")["business_mIoU"]["all"]
    assert alone == np.mean([r["paths"]["mask"] for r in val])
