"""The one Trainer on a tiny task: a run, exact resume, refusal of an occupied folder, is_finished; configs
written before keys were renamed or moved."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from docjepa.core.config import load_config, updated
from docjepa.train.finetune import FinetuneConfig
from docjepa.train.optim import OptimConfig
from docjepa.train.trainer import RunConfig, Task, Trainer


class Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Linear(6, 3)  # "mlp": projected by RS-SNGD
        self.bias = nn.Parameter(torch.zeros(3))

    def forward(self, batch: dict) -> dict:
        err = self.mlp(batch["x"]) + self.bias - batch["y"]
        return {"loss": err.pow(2).mean(), "abs": err.abs().mean()}

    def save_pretrained(self, path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))


class RegressionTask(Task):
    name = "regress"

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.items = [(torch.randn(6, generator=gen), torch.randn(3, generator=gen)) for _ in range(10)]
        self.saved: list[str] = []

    def build(self, out, checkpoint):
        model = Regressor()
        if checkpoint is not None:
            model.load_state_dict(load_file(str(checkpoint / "model.safetensors")))
        return model

    def dataset(self):
        from docjepa.train.data import EpochDataset

        return EpochDataset(self.items, seed=3)

    def collate(self, model):
        def stack(items):
            return {"x": torch.stack([x for _, (x, _) in items]), "y": torch.stack([y for _, (_, y) in items])}

        return stack

    def save_extra(self, model_dir) -> None:
        (model_dir / "extra.txt").write_text("tokenizer stand-in")
        self.saved.append(model_dir.parent.name)


def trainer(out, resume=False) -> Trainer:
    run = RunConfig(steps=6, batch_size=4, log_every=1, checkpoint_every=2, threads=1)
    return Trainer(out, run, OptimConfig(name="rsngd", lr=0.05, rank=2, history=3), {"note": 1}, resume, False)


def weights(out) -> dict:
    step = sorted((out / "checkpoints").glob("step-*"))[-1]
    return load_file(str(step / "model" / "model.safetensors"))


def test_a_run_resumes_exactly_and_reports_when_it_is_finished(tmp_path):
    task = RegressionTask()
    last = trainer(tmp_path / "full").fit(task)
    assert set(last) >= {"loss", "abs", "lr", "grad_norm", "step_s"} and last["loss"] < 10
    assert Trainer.is_finished(tmp_path / "full", 6) and not Trainer.is_finished(tmp_path / "full", 7)
    assert Trainer.checkpoint_step(tmp_path / "full") == 6 and Trainer.checkpoint_step(tmp_path / "none") is None
    assert (tmp_path / "full" / "config.yaml").read_text().strip() == "note: 1"
    assert task.saved == [".tmp-step-0000002", ".tmp-step-0000004", ".tmp-step-0000006"]  # written, then renamed
    assert (tmp_path / "full" / "checkpoints" / "step-0000006" / "model" / "extra.txt").is_file()

    trainer(tmp_path / "cut").fit(RegressionTask(), stop_after=3)  # as if killed after step 3's checkpoint
    assert Trainer.checkpoint_step(tmp_path / "cut") == 3 and not Trainer.is_finished(tmp_path / "cut", 6)
    with pytest.raises(FileExistsError, match="--resume"):
        trainer(tmp_path / "cut").fit(RegressionTask())
    trainer(tmp_path / "cut", resume=True).fit(RegressionTask())
    full, cut = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all(torch.equal(full[k], cut[k]) for k in full)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        trainer(tmp_path / "empty", resume=True).fit(RegressionTask())


def test_configs_are_checked_and_built_from_python_values(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  clip: packaged\n")
    with pytest.raises(ValueError, match=r"unknown config key\(s\) model\.clip; known: .*model\.question_tower"):
        load_config(FinetuneConfig, old)
    from docjepa.core.config import save_config

    odd = tmp_path / "a,b [c]"  # a comma and brackets: one path, not a list
    cfg = updated(load_config(FinetuneConfig, "finetune/tiny"), {"data": {"train": [odd]}, "run": {"steps": 7}})
    assert cfg.data.train == [str(odd)] and cfg.run.steps == 7
    assert load_config(FinetuneConfig, save_config(cfg, tmp_path / "c.yaml")) == cfg
    with pytest.raises(ValueError, match=r"run\.stepz"):
        updated(cfg, {"run": {"stepz": 7}})
    with pytest.raises(ValueError, match=r"run\.steps: expected int"):
        updated(cfg, {"run": {"steps": "many"}})
    with pytest.raises(ValueError, match=r"optim\.name: expected one of 'rsngd', 'adamw'"):
        load_config(FinetuneConfig, None, ["--optim.name=sgd"])


def test_a_page_reader_needs_a_pretrained_question_tower(tok):
    from docjepa.train.finetune import build_segmentation_model

    cfg = load_config(FinetuneConfig, None, ["--model.page_reader=true"])
    assert cfg.model.page_reader and not cfg.model.question_tower
    with pytest.raises(ValueError, match=r"model\.page_reader reads the page with a pre-trained tower"):
        build_segmentation_model(cfg, tok)


def test_a_prompt_gate_weighs_the_mask_prompt_only_where_there_is_one(tok):
    from docjepa.train.finetune import build_segmentation_model

    cfg = load_config(
        FinetuneConfig,
        "finetune/tiny",
        ["--model.question_tower=", "--model.page_reader=false", "--model.freeze_question_tower=false"],
    )
    assert cfg.model.prompt_gate  # on in the tiny config
    model = build_segmentation_model(cfg, tok)
    assert model.prompt_gate is not None and model.config.prompt_gate
    cfg = updated(cfg, {"model": {"lexical_prior": False}})
    model = build_segmentation_model(cfg, tok)  # no prompt added to the logits: nothing to weigh
    assert model.prompt_gate is None and not model.config.prompt_gate


def test_the_relative_layout_bias_is_built_with_its_gain_and_needs_the_joint_reader(tok, tmp_path):
    from docjepa.train.finetune import build_segmentation_model
    from tests.helpers import tiny_bert_folder

    folder = tiny_bert_folder(tok, tmp_path / "bert", layers=2)
    args = [f"--model.question_tower={folder}", "--model.page_reader=true", "--model.joint_relative=true"]
    with pytest.raises(ValueError, match=r"model\.joint_relative .* set model\.joint_layers"):
        build_segmentation_model(load_config(FinetuneConfig, "finetune/tiny", args), tok)
    cfg = load_config(FinetuneConfig, "finetune/tiny", [*args, "--model.joint_layers=1", "--model.relative_gain=4"])
    model = build_segmentation_model(cfg, tok)
    assert model.config.joint_relative and model.config.relative_gain == 4.0
    assert model.joint_reader.relative.gain == 4.0 and model.joint_reader.relative.tables.abs().sum() == 0


def test_a_joint_reader_starts_from_the_towers_top_layers_and_keeps_its_own_when_it_has_them(tok, tmp_path):
    from safetensors.torch import load_file

    from docjepa.train.finetune import build_segmentation_model
    from tests.helpers import tiny_bert_folder

    folder = tiny_bert_folder(tok, tmp_path / "bert", layers=3)
    args = [f"--model.question_tower={folder}", "--model.page_reader=true", "--model.freeze_question_tower=true"]
    alone = load_config(
        FinetuneConfig, "finetune/tiny", [args[0], "--model.page_reader=false", "--model.joint_layers=1"]
    )
    with pytest.raises(ValueError, match=r"model\.joint_layers reads the page's words"):
        build_segmentation_model(alone, tok)
    cfg = load_config(FinetuneConfig, "finetune/tiny", [*args, "--model.joint_layers=2"])
    model = build_segmentation_model(cfg, tok)
    tower = load_file(str(folder / "model.safetensors"))
    reader = model.joint_reader
    assert reader.start == 1 and model.config.joint_layers == 2
    for i, layer in enumerate(reader.layers):  # the tower's layers 1 and 2, as saved
        theirs = tower[f"encoder.layer.{1 + i}.attention.self.query.weight"]
        assert torch.equal(layer.attention.self.query.weight, theirs)
    assert reader.out.weight.abs().sum() == 0 and reader.layout.x.weight.abs().sum() == 0
    with torch.no_grad():
        reader.out.weight.normal_()
        reader.layers[0].attention.self.query.weight.add_(1.0)
    model.save_pretrained(tmp_path / "joint")
    again = build_segmentation_model(updated(cfg, {"model": {"init": str(tmp_path / "joint")}}), tok)
    torch.testing.assert_close(again.joint_reader.out.weight, reader.out.weight)  # its own, not the tower's again
    mine = again.joint_reader.layers[0].attention.self.query.weight
    torch.testing.assert_close(mine, reader.layers[0].attention.self.query.weight)
