"""docs/docjepa-extract.md's relative-layout table is the committed runs, both scored alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import relative_layout_table as rl  # noqa: E402

RES = ROOT / "benchmarks/results/docjepa"


def test_the_docs_table_is_the_committed_runs():
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(rl.START, 1)[1].split(rl.END, 1)[0].strip() == rl.table(RES)


def test_both_runs_are_scored_by_the_same_commands_but_for_the_model():
    """Same pages, same answer settings; only the checkpoint differs, and the cost file timed them together."""
    names = [name for name, _ in rl.RUNS.values()]
    for part in ("business", "foreign"):
        results = [json.loads((RES / f"{part}/{name}.json").read_text()) for name in names]
        checkpoints = [r["model"] for r in results]
        assert len(set(checkpoints)) == len(checkpoints), part
        commands = [r["command"].replace(c, "MODEL").replace(n, "NAME") for r, c, n in zip(results, checkpoints, names)]
        assert len(set(commands)) == 1, part
        for key in ("drop_keys", "span_logit", "line_logit"):
            assert len({json.dumps(r.get(key)) for r in results}) == 1, (part, key)
    cost = json.loads((RES / "business/relative-cost.json").read_text())
    assert {timed for _, timed in rl.RUNS.values()} == set(cost["question_ms"])
