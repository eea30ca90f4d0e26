"""From pages to a fine-tuned model through the engine: init, annotate over HTTP, export shards, fine-tune."""

import json

import pytest

from .conftest import PASSWORD, client_for, mask_png, word_mask


@pytest.mark.slow
def test_init_annotate_export_finetune(tmp_path, docs, tiny_model, capsys, monkeypatch):
    from docjepa.apps.cli import main
    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    main(
        [
            "engine",
            "init",
            "--db",
            url,
            "--data",
            str(docs / "d"),
            "--limit",
            "8",
            "--checkpoint",
            str(tiny_model),
            "--no-progress",
        ]
    )
    monkeypatch.setenv("PW", PASSWORD)
    main(["engine", "user", "add", "ann", "--role", "annotator", "--db", url, "--password-env", "PW"])
    app = create_app(ServerConfig(db=url, checkpoint=str(tiny_model)))
    ann = client_for(app, "ann")
    for i in range(24):  # accept the best proposal, or (every third task) correct it to two words
        task = ann.post("/api/tasks/next").json()
        prop = ann.post(f"/api/tasks/{task['id']}/propose", json={"question": task["question"]}).json()
        words = [i % 5, i % 5 + 1] if i % 3 == 0 else prop["candidates"][prop["best"]]["word_ids"][:3] or [0]
        body = {
            "question": task["question"],
            "mask_png": mask_png(word_mask(task["page"], words)),
            "seconds": 2.0,
            "edits": 2 if i % 3 == 0 else 0,
            "proposal_id": prop["proposal_id"],
            "candidate": prop["best"],
        }
        assert ann.post(f"/api/tasks/{task['id']}/annotation", json=body).status_code == 200
    capsys.readouterr()
    main(["engine", "export", "--db", url, "--format", "shards", "--out", str(tmp_path / "x"), "--val-fraction", "0.3"])
    export = json.loads(capsys.readouterr().out)
    assert export["train"]["questions"] + export["val"]["questions"] == 24 and export["val"]["pages"] >= 1
    main(
        [
            "finetune",
            "--config",
            "finetune/tiny",
            "--out",
            str(tmp_path / "ft"),
            f"--model.init={tiny_model}",
            f"--data.train=[{tmp_path / 'x' / 'train'}]",
            "--data.split.layouts=[]",
            "--data.split.template_modulus=0",
            "--run.steps=2",
            "--run.batch_size=2",
            "--run.log_every=1",
        ]
    )
    metrics = [json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m][-1] == 2 and all(
        m.get("skipped_records", 0) == 0 for m in metrics
    )
    main(["engine", "check", "--db", url])
