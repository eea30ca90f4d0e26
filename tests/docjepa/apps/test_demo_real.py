"""The demo's real pages when they cannot be fetched: a message, not a failure."""

from docjepa.apps import demo_real
from docjepa.data.debian import FetchError


def test_a_machine_without_the_packages_gets_a_message(tmp_path, monkeypatch):
    def refuse(out):
        raise FetchError("apt-get download failed (100): E: Unable to locate package texlive-humanities-doc")

    monkeypatch.setattr(demo_real, "fetch", refuse)
    found = demo_real.real_pages("debian", tmp_path, max_pages=2, progress=False)
    assert isinstance(found, str) and "Unable to locate package" in found and "apt-get update" in found
    assert "synthetic pages only" in found


def test_a_finished_stage_trained_on_other_data_is_not_reused(tmp_path, monkeypatch):
    import pytest

    from docjepa.apps import demo
    from docjepa.core.config import load_config
    from docjepa.train.finetune import FinetuneConfig

    run = tmp_path / "finetune"
    run.mkdir()
    (run / "config.yaml").write_text("data:\n  train:\n  - runs/demo/data/train\n")
    monkeypatch.setattr(demo.Trainer, "is_finished", staticmethod(lambda out, steps: True))
    same = load_config(FinetuneConfig, None, ["--data.train=[runs/demo/data/train]"])
    demo._stage("finetune", run, 10, None, same, False)  # complete, same data: skipped
    more = load_config(FinetuneConfig, None, ["--data.train=[runs/demo/data/train,runs/demo/data/real-train]"])
    with pytest.raises(ValueError, match="was trained on"):
        demo._stage("finetune", run, 10, None, more, False)
