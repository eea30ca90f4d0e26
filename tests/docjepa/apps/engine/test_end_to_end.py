"""From pages to a fine-tuned model through the engine: init, annotate over HTTP, export shards, fine-tune."""

import json

import pytest

from .conftest import PASSWORD, client_for, mask_png, word_mask


@pytest.mark.slow
def test_init_annotate_export_finetune(tmp_path, docs, tiny_model, capsys, monkeypatch):
    from docjepa.apps.engine.server import ServerConfig, create_app
    from docjepa.cli import main

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
            "model_version": prop["model_version"],
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


@pytest.mark.slow
def test_one_short_simulated_round(tmp_path, tiny_model, monkeypatch):
    from docjepa.apps.engine.simulate import SimConfig, simulate

    monkeypatch.chdir(tmp_path)  # the packaged fine-tuning config is found from any folder
    cfg = SimConfig(
        init=str(tiny_model),
        pool_pages=6,
        eval_pages=6,
        seed_pages=3,
        rounds=1,
        pages_per_round=2,
        steps=1,
        seed_steps=1,
        sample_pages=4,
        eval_limit=10,
        page_size=256,
        threads=1,
    )
    result = simulate(cfg, tmp_path / "sim", progress=False)
    for mode in ("assisted", "semi"):
        (row,) = result["stages"][mode]
        assert row["pages_annotated"] == 5 and row["masks"] > 0 and 0 <= row["accepted_as_is"] <= 1
        assert row["edits"] == round(row["edits_per_mask"] * row["masks"]) and 0 <= row["heldout"]["mIoU"] <= 1
        assert row["probe"]["masks"] == result["manual"]["probe"]["masks"] > 0  # the same probe pages every time
    semi = result["stages"]["semi"][0]["automatic"]
    assert semi["labels_considered"] > 0 and 0 <= semi["kept_fraction"] <= 1
    manual = result["manual"]
    assert manual["edits"] <= manual["edit_budget"] == result["stages"]["assisted"][0]["edits"]
    assert (tmp_path / "sim" / "engine_curve.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "sim" / "simulate.json").read_text())["manual"]["same_pages"]["pages_annotated"] == 5
