"""Configs that ship with docjepa are found by name from any working directory."""

import pytest

from docjepa.core.config import load_config, packaged_configs
from docjepa.train.finetune import FinetuneConfig
from docjepa.train.pretrain import PretrainConfig


def test_packaged_configs_load_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert {"pretrain/tiny", "pretrain/base", "finetune/tiny", "clip/tiny", "text_encoder/tiny"} <= set(
        packaged_configs()
    )
    short = load_config(FinetuneConfig, "finetune/tiny", ["--run.steps=7"])
    long = load_config(FinetuneConfig, "configs/finetune/tiny.yaml", ["--run.steps=7"])
    assert short == long and short.run.steps == 7
    assert short != load_config(FinetuneConfig, None, ["--run.steps=7"])  # the file's values were applied
    base = load_config(PretrainConfig, "pretrain/base")
    assert base != load_config(PretrainConfig, "pretrain/tiny")


def test_a_file_on_disk_wins_and_an_unknown_name_lists_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs" / "finetune").mkdir(parents=True)
    (tmp_path / "configs" / "finetune" / "tiny.yaml").write_text("run:\n  steps: 3\n")
    assert load_config(FinetuneConfig, "configs/finetune/tiny.yaml").run.steps == 3  # the user's file, not ours
    assert load_config(FinetuneConfig, "finetune/tiny").run.steps == 400
    with pytest.raises(FileNotFoundError, match=r"finetune/huge.*packaged configs: .*finetune/tiny"):
        load_config(FinetuneConfig, "finetune/huge")
    with pytest.raises(FileNotFoundError):
        load_config(FinetuneConfig, "../docjepa/configs/finetune/tiny.yaml")
