"""RS-SNGD inside the usual training tools: HF Trainer, the CLI demo."""

import pytest
import torch

import rsngd
from rsngd.cli import main as cli_main

from .test_optimizer import tiny_llama


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_hf_trainer_with_rsngd(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    model = tiny_llama()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = rsngd.RSNGD(rsngd.param_groups(model, rank=8), lr=1e-2)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(32, 16, 64), optimizers=(opt, None))
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert trainer.optimizer.optimizer is opt or trainer.optimizer is opt  # accelerate may wrap it
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed and "model.norm.weight" in changed
    assert all(opt.state[p]["step"] == 6 for p in opt.param_groups[0]["params"])


@pytest.mark.slow
def test_cli_demo_runs_briefly(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question. " * 400)
    cli_main(["demo", "--data", str(text), "--steps", "3", "--rank", "8", "--threads", "1"])
    out = capsys.readouterr().out
    assert "adamw" in out and "rsngd" in out and "val loss" in out


def test_cli_unknown_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["nope"])
    assert exit_.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # the benchmark's subcommands are argparse's too
        cli_main(["bench", "tune", "--shard", "x"])
    assert exit_.value.code == 2 and "--shard must be i/n" in capsys.readouterr().err
