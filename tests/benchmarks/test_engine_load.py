"""``engine_load.py``: the table of docs/engine.md is what the committed runs give, and the runs show what the
engine promises a team (no 5xx but the bounded 503s, nothing lost, no double lease, a sound database)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import engine_load  # noqa: E402

RUNS = [
    Path(f"benchmarks/results/docjepa/engine/{n}.json")
    for n in ("load-before", "load", "load-one-worker", "load-postgresql")
]


def test_the_load_table_is_what_the_committed_runs_give():
    text = (ROOT / "docs/engine.md").read_text()
    section = text.split(engine_load.START, 1)[1].split(engine_load.END, 1)[0].strip()
    assert section == engine_load.table(RUNS, [Path("docs/engine.md")], ROOT)


def test_no_run_lost_a_save_or_gave_a_task_twice():
    for path in RUNS:
        for s in json.loads((ROOT / path).read_text())["scenarios"]:
            assert s["server_errors_5xx"] == s["lost_saves"] == s["double_leases"] == 0, path
            assert s["tasks_annotated_twice"] == 0 and s["integrity_problems"] == [], path
            assert s["saves"] == s["save"]["n"] > 0 and s["statuses"].get("login 200") == s["annotators"], path
