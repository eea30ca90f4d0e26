"""``docjepa pretrain`` under torchrun: 2 gloo processes, DDP and FSDP2, checkpoints and an exact resume."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from safetensors.torch import load_file

from docjepa.train.distributed import World, rank_positions


def test_processes_share_each_micro_batch():
    one = list(zip(range(12), rank_positions(0, 4, World())))
    assert [p for _, p in one] == list(range(12))
    parts = [rank_positions(8, 4, World(rank=r, size=2)) for r in range(2)]
    first = [[next(it) for _ in range(4)] for it in parts]  # two micro-batches of 2 per process
    assert first == [[8, 9, 12, 13], [10, 11, 14, 15]]


def _mean_on_rank() -> dict:
    """On a spawned rank: rank 0 measured a loss term rank 1's batches never gave."""
    import torch.distributed as dist

    from docjepa.train.distributed import mean_over_ranks

    rank = dist.get_rank()
    return mean_over_ranks({"loss": 1.0, "words": 4.0} if rank == 0 else {"loss": 3.0}, World(rank=rank, size=2))


def test_metrics_are_averaged_over_the_processes_that_have_them():
    from ...rsngd.dist_cases import spawn

    assert spawn(2, _mean_on_rank) == [{"loss": 2.0, "words": 4.0}] * 2


def pretrain_argv(docs, out, steps, strategy, processes):
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    return [
        *launcher, "-m", "docjepa.apps.cli", "pretrain", "--config", "pretrain/tiny", "--out", str(out),
        "--no-progress", f"--data.train=[{docs / 'd'}]", f"--data.tokenizer={docs / 'tok'}",
        "--data.max_tokens=64", f"--run.steps={steps}", "--run.batch_size=2", "--run.log_every=1",
        "--run.checkpoint_every=2", "--run.threads=1", "--optim.rank=8", f"--dist.strategy={strategy}",
    ]  # fmt: skip


def run(argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow  # end to end: the real torchrun command lines, 4-5 launches of 2 processes each
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_pretrain_on_two_processes_checkpoints_and_resumes_exactly(docs, tmp_path, strategy):
    out = tmp_path / "run"
    stdout = run(pretrain_argv(docs, out, 3, strategy, 2))
    result = json.loads(stdout)  # printed once, by rank 0
    assert result["loss"] > 0 and result["skipped_records"] == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3]
    final = out / "checkpoints" / "step-0000003"
    weights = load_file(final / "model" / "model.safetensors")
    assert not any("_fsdp" in k or k.startswith("module.") for k in weights)  # the one-process format
    assert len(torch.load(final / "state.pt", weights_only=False)["rng_ranks"]) == 2
    # Lose the last checkpoint, as a kill would; resuming on 2 processes gives it back bit for bit.
    again = tmp_path / "again"
    shutil.copytree(out, again)
    shutil.rmtree(again / "checkpoints" / "step-0000003")
    (again / "checkpoints" / "latest").write_text("step-0000002\n")
    run([*pretrain_argv(docs, again, 3, strategy, 2), "--resume"])
    resumed = load_file(again / "checkpoints" / "step-0000003" / "model" / "model.safetensors")
    for key, value in weights.items():
        assert torch.equal(resumed[key], value), key
    opt_a = torch.load(final / "optimizer.pt", weights_only=True)
    opt_b = torch.load(again / "checkpoints" / "step-0000003" / "optimizer.pt", weights_only=True)
    for i, state in opt_a["state"].items():
        for key, value in state.items():
            assert (
                torch.equal(opt_b["state"][i][key], value)
                if torch.is_tensor(value)
                else opt_b["state"][i][key] == value
            )
    # A run saved by 2 processes continues in one.
    single = tmp_path / "single"
    shutil.copytree(out, single)
    stdout = run([*pretrain_argv(docs, single, 4, strategy, 1), "--resume"])
    assert json.loads(stdout)["loss"] > 0
    if strategy == "fsdp2":  # fine-tuning from it on 2 processes too (its 0-d prior gain stays unsharded)
        argv = pretrain_argv(docs, tmp_path / "ft", 2, strategy, 2)
        cmd = argv.index("pretrain")
        argv[cmd : cmd + 3] = ["finetune", "--config", "finetune/tiny", f"--model.init={out}"]
        argv = [a for a in argv if not a.startswith("--data.tokenizer")]
        assert json.loads(run(argv))["loss"] > 0
