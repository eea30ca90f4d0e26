"""``step_replay.py`` and ``rerun_check.py``: the docs tables they fill are what the committed JSON gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import rerun_check  # noqa: E402
import step_replay  # noqa: E402


def section(doc: str, start: str, end: str) -> str:
    return (ROOT / doc).read_text().split(start, 1)[1].split(end, 1)[0].strip()


def test_the_replay_table_is_what_its_json_gives():
    data = json.loads((ROOT / "benchmarks/results/rsngd/scale/replay.json").read_text())
    assert section("docs/rsngd.md", step_replay.START, step_replay.END) == step_replay.table(data)
    labels = {(r["shape"], r["label"]) for r in data["arms"]}
    assert {("llama-1b", "rsngd"), ("llama-7b", "rsngd per_layer"), ("llama-7b", "muon")} <= labels


def test_the_rerun_table_is_what_the_committed_runs_give():
    rows = rerun_check.check(ROOT / "benchmarks/results/rsngd")
    assert section("docs/benchmark.md", rerun_check.START, rerun_check.END) == rerun_check.table(rows)
    assert json.loads((ROOT / "benchmarks/results/rsngd/rerun/check.json").read_text()) == json.loads(json.dumps(rows))
    for r in rows:  # each row compares the same seeds of the same recipe and corpus
        assert r["seeds"] and set(r["committed"]) == set(r["rerun"]) == set(r["seeds"])
        assert r["worse_beyond_spread"] == (r["mean_difference"] > r["committed_std"])
