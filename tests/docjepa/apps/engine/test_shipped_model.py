"""The engine serves the model shipped in the package (``--checkpoint shipped``) and retrains from it."""

import json

import pytest

from tests.docjepa.modeling.test_shipped import needs_tower


@needs_tower
def test_the_engine_proposes_with_the_shipped_model_and_fine_tunes_a_successor(tmp_path, docs, capsys):
    from docjepa.apps.cli import main
    from docjepa.apps.engine import store
    from docjepa.apps.engine.db import Database
    from docjepa.apps.engine.model import EngineModel
    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.modeling.shipped import shipped_dir

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    capsys.readouterr()
    main(["engine", "init", "--db", url, "--data", str(docs / "d"), "--limit", "2", "--checkpoint", "shipped"])
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"] == str(shipped_dir().resolve()) == store.serving_model(Database(url))
    model = EngineModel(result["checkpoint"], device="cpu").load()
    assert model.version.startswith("shipped:")
    page = DocumentDataset(docs / "d")[0]
    proposal = model.propose(page, page.questions[0].text)
    # The same answer as the shipped model loaded with no path (what `docjepa predict` uses).
    direct = DocumentPredictor.from_pretrained(device="cpu")
    direct.set_page(page)
    assert proposal.best == direct.read(direct.decode(page.questions[0].text)).chosen
    successor = model.fine_tune(docs / "d", tmp_path / "ft", steps=2, threads=1)
    again = EngineModel(successor, device="cpu")
    assert again.version.startswith("ft:") and again.propose(page, page.questions[0].text).masks


def test_shipped_is_refused_where_the_package_has_no_model(tmp_path, docs, monkeypatch, capsys):
    from docjepa.apps.cli import main
    from docjepa.modeling import shipped

    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path / "empty")
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["engine", "init", "--db", url, "--data", str(docs / "d"), "--checkpoint", "shipped"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("docjepa engine init: this installation has no shipped model")
