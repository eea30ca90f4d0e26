"""``answer_headroom.py``: each arm scored per question as the evaluation scores it, the bounds between arms, and
the docs' table made from the JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import answer_headroom  # noqa: E402


def test_rows_agree_with_the_evaluation_and_bound_each_other(docs, tok):
    from docjepa.data.split import SplitConfig
    from docjepa.eval.evaluate import evaluate
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    torch.manual_seed(0)
    predictor = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    rows = answer_headroom.question_rows(predictor, docs / "d", "all", limit=None)
    plain = evaluate(predictor, [docs / "d"], SplitConfig([], 0), part="all", progress=False)
    assert len(rows) == plain["questions"]
    summary = answer_headroom.summarise(rows)
    assert summary["mIoU"]["answer"] == pytest.approx(plain["model"]["mIoU"], abs=1e-4)  # the evaluation's answer
    assert summary["mIoU"]["words"] == pytest.approx(plain["paths"]["words"]["mIoU"], abs=1e-4)
    for r in rows:
        assert r["mask"] <= r["best candidate"] + 1e-9  # the chosen candidate is one of the candidates
        assert max(r["answer"], r["words"], r["best candidate"]) == r["best drawn"]
        assert all(0.0 <= r[a] <= 1.0 for a in answer_headroom.ARMS)
    assert summary["mIoU"]["ceiling"] > summary["mIoU"]["answer"]  # an untrained model is far from whole words
    assert summary["text_questions"] == plain["model"]["n_text"] > 0  # synthetic key-value answers are words
    assert summary["mANLS"]["answer"] == pytest.approx(plain["model"]["mANLS"], abs=1e-4)
    assert summary["mANLS"]["words"] == pytest.approx(plain["paths"]["words"]["mANLS"], abs=1e-4)
    for kind, v in summary["text_per_kind"].items():
        assert v["answer"] == pytest.approx(plain["model"]["per_type"][kind]["ANLS"], abs=1e-4)


def test_the_summary_is_the_mean_over_kinds_and_the_report_fills_the_docs(tmp_path, monkeypatch):
    arms = {a: 0.0 for a in answer_headroom.ARMS}
    text = {a: 0.0 for a in answer_headroom.TEXT_ARMS}
    rows = [
        {"kind": "date", **arms, "answer": 1.0, "text": {**text, "answer": 1.0}},
        {"kind": "date", **arms, "answer": 0.0, "text": {**text, "words": 0.5}},
        {"kind": "title", **arms, "answer": 0.25},
    ]
    s = answer_headroom.summarise(rows)
    assert s["questions"] == 3
    assert s["per_kind"]["date"] == {"n": 2, **arms, "answer": 0.5}
    assert s["mIoU"]["answer"] == pytest.approx((0.5 + 0.25) / 2)  # each kind counts once, as in the evaluation
    assert s["text_per_kind"] == {"date": {"n": 2, "answer": 0.5, "mask": 0.0, "words": 0.25}}  # titles: no text
    assert s["text_questions"] == 2 and s["mANLS"] == {"answer": 0.5, "mask": 0.0, "words": 0.25}
    result = tmp_path / "headroom.json"
    result.write_text(json.dumps({"command": "python run", "sets": {"real pages": s, "held-out synthetic": s}}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{answer_headroom.START}\nold\n{answer_headroom.END}\nafter\n")
    monkeypatch.setattr(sys, "argv", ["answer_headroom.py", "report", str(result), "--markdown", str(doc)])
    answer_headroom.main()
    text = doc.read_text()
    assert "old" not in text and text.startswith("before") and text.endswith("after\n")
    assert "| real pages, mIoU (3) | 0.375 |" in text and "| real: date (2) | 0.500 |" in text
    assert "| real pages, mean over kinds (2) | 0.500 | 0.000 | 0.250 |" in text
    assert "| real: date (2) | 0.500 | 0.000 | 0.250 |" in text
