"""Bad records never stop a run, resumes refuse what they cannot honour, thread limits cannot deadlock."""

import json
import logging
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

pytest.importorskip("transformers")

from docjepa.core.errors import ConfigError, UsageError
from docjepa.data.shards import DocumentDataset, RecordError, iter_pages
from docjepa.data.show import show
from docjepa.data.split import SplitConfig, question_pairs
from docjepa.train.metrics_log import read_metrics
from docjepa.train.pretrain import pretrain
from docjepa.train.trainer import Trainer
from tests.docjepa.train.test_pretrain import small_config
from tests.docjepa.train.test_trainer import RegressionTask, trainer

BAD_ROW = 3


@pytest.fixture(scope="module")
def damaged(docs, tmp_path_factory):
    """The ``docs`` pages as three shards: the first with undecodable image bytes in row 3, a second intact,
    and a third cut short (its footer lost)."""
    root = tmp_path_factory.mktemp("damaged")
    table = pq.read_table(next((docs / "d").glob("shard-*.parquet")))
    images = table.column("image").to_pylist()
    images[BAD_ROW] = b"\x89PNG\r\n\x1a\n not an image"
    table = table.set_column(table.schema.get_field_index("image"), "image", [images])
    pq.write_table(table.slice(0, 8), root / "shard-00000.parquet", row_group_size=4)
    pq.write_table(table.slice(8, 8), root / "shard-00001.parquet", row_group_size=4)
    pq.write_table(table.slice(16), root / "shard-00002.parquet", row_group_size=4)
    data = (root / "shard-00002.parquet").read_bytes()
    (root / "shard-00002.parquet").write_bytes(data[: len(data) // 2])
    return root


def test_readers_name_and_skip_bad_records(damaged, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="docjepa.data"):
        pages = DocumentDataset(damaged)
    assert len(pages) == 16 and "shard-00002.parquet" in caplog.text  # the truncated shard, named and left out
    with pytest.raises(RecordError, match=rf"shard-00000.parquet row {BAD_ROW}: "):
        pages[BAD_ROW]
    assert pages[BAD_ROW + 1].pil().size[0] > 0
    skipped = []
    assert len(list(iter_pages(damaged, on_skip=skipped.append))) == 15 and skipped[0].row == BAD_ROW
    assert len(show(damaged, tmp_path / "show", limit=50)) == 15
    # (page, question) pairs index the same pages whichever reader found them.
    pairs = question_pairs([damaged], SplitConfig(), "all")
    assert all(pages[p].questions[q] for p, q in pairs if p != BAD_ROW)


def test_training_runs_past_an_undecodable_image(docs, damaged, tmp_path, caplog):
    cfg = small_config(docs, steps=8)  # 8 steps × 2 pages: every one of the 16 readable-shard pages at least once
    cfg.data.train = [str(damaged)]
    with caplog.at_level(logging.WARNING):
        pretrain(cfg, tmp_path / "run", progress=False)
    assert f"shard-00000.parquet row {BAD_ROW}" in caplog.text
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(metrics) == 8 and metrics[-1]["skipped_records"] == 1


def test_resume_refuses_a_changed_config_and_tolerates_a_torn_metrics_line(tmp_path):
    out = tmp_path / "run"
    trainer(out).fit(RegressionTask(), stop_after=3)
    changed = trainer(out, resume=True)
    changed.config = {"note": 2}
    with pytest.raises(ConfigError, match=r"note: 1 → 2"):
        changed.fit(RegressionTask())
    assert yaml.safe_load((out / "config.yaml").read_text()) == {"note": 1}  # not rewritten
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "loss": 0.')  # a kill in the middle of a line
    longer = trainer(out, resume=True)
    longer.run.steps, longer.run.log_every = 8, 2  # run length and logging may change
    last = longer.fit(RegressionTask())
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4, 6, 8]
    # Resuming a finished run changes nothing and reports its last metrics.
    again = trainer(out, resume=True)
    again.run.steps = 8
    assert again.fit(RegressionTask()) == last == json.loads((out / "last_metrics.json").read_text())


def test_a_run_killed_before_its_first_checkpoint_restarts(tmp_path):
    out = tmp_path / "run"
    trainer(out).fit(RegressionTask(), stop_after=2)
    ckpts = out / "checkpoints"
    (ckpts / "step-0000002").rename(ckpts / ".tmp-step-0000002")  # as if killed while writing it
    (ckpts / "latest").unlink()
    assert Trainer.checkpoint_step(out) is None
    trainer(out).fit(RegressionTask())  # a fresh start is accepted …
    assert Trainer.checkpoint_step(out) == 6
    other = tmp_path / "other"
    trainer(other).fit(RegressionTask(), stop_after=2)
    for p in (other / "checkpoints").iterdir():
        p.unlink() if p.is_file() else p.rename(p.with_name(".tmp-" + p.name))
    trainer(other, resume=True).fit(RegressionTask())  # … and so is --resume, from step 0
    assert [m["step"] for m in read_metrics(other / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_preflight_refuses_a_full_disk_before_the_first_step(tmp_path, monkeypatch):
    import shutil

    from docjepa.train import machine

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(machine.shutil, "disk_usage", lambda p: usage._replace(free=100))
    with pytest.raises(UsageError, match="MiB free"):
        trainer(tmp_path / "run").fit(RegressionTask())
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_thread_limit_below_run_threads_completes_a_step(docs, tmp_path):
    """OMP_THREAD_LIMIT=1 with run.threads=2 used to hang in oneDNN's convolution backward."""
    argv = [
        sys.executable, "-m", "docjepa.apps.cli", "pretrain", "--config", "pretrain/tiny",
        "--out", str(tmp_path / "run"), "--no-progress", f"--data.train=[{docs / 'd'}]",
        f"--data.tokenizer={docs / 'tok'}", "--data.max_tokens=64", "--run.steps=1", "--run.batch_size=2",
        "--run.threads=2",
    ]  # fmt: skip
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["loss"] > 0 and "OMP_THREAD_LIMIT=1" in done.stderr
