"""``prompt_gate.py``: the weight a gated model gives each question's mask prompt, per kind, and its docs table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import prompt_gate  # noqa: E402


def test_weights_are_the_models_own_per_question(docs, tok):
    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    config = build_config("tiny", len(tok))
    config.lexical_prior, config.prior_gain, config.prompt_gate = True, 2.0, True
    torch.manual_seed(0)
    model = DocJepaForSegmentation(config)
    with torch.no_grad():
        model.prompt_gate.weight.normal_(std=0.5)
    predictor = DocumentPredictor(model, tok, device="cpu")
    weights = prompt_gate.weights_by_kind(predictor, docs / "d", "all")
    asked = sum(len(DocumentDataset([docs / "d"])[i].questions) for i in range(24))
    assert sum(len(v) for v in weights.values()) == asked  # every question with a prompt weighed once
    values = [w for v in weights.values() for w in v]
    assert all(0.0 < w < 4.0 for w in values) and max(values) - min(values) > 0.01  # 2 × 2σ(·): its own each
    assert not model.prompt_gate._forward_hooks  # the hook is gone afterwards
    page = DocumentDataset([docs / "d"])[0]
    predictor.set_page(page)
    prompt = predictor.prompt(page.questions[0].text)
    with torch.no_grad():
        q = model.question_encoder(prompt.question_ids, prompt.question_mask)[:, 0]
        expected = 2.0 * 2 * torch.sigmoid(model.prompt_gate(q)).item()
    assert min(abs(w - expected) for w in values) < 1e-4  # the first question's weight, as the model computes it


def test_an_ungated_model_is_refused(docs, tok):
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    predictor = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    with pytest.raises(SystemExit, match="no prompt gate"):
        prompt_gate.weights_by_kind(predictor, docs / "d", "all")


def test_summary_and_table():
    s = prompt_gate.summarise({"title": [0.5, 1.5], "date": [3.0]})
    assert s == {
        "date": {"n": 1, "mean": 3.0, "min": 3.0, "max": 3.0},
        "title": {"n": 2, "mean": 1.0, "min": 0.5, "max": 1.5},
    }
    result = {"arms": {"0": {"prior_gain": 2.0, "sets": {"real": s}}, "1": {"prior_gain": 2.1, "sets": {"real": {}}}}}
    text = prompt_gate.table(result, ["python", "x"])
    assert "| `prior_gain` (every question) | 2.00 | 2.10 |" in text
    assert "| real: title | 1.00 (0.50–1.50) | – |" in text
    assert json.dumps(result)  # the JSON written is plain
