"""docs/docjepa-extract.md's tables of runs are the committed runs, each table's runs scored alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import runs_table as rt  # noqa: E402

RES = ROOT / "benchmarks/results/docjepa"


@pytest.mark.parametrize("name", sorted(rt.SECTIONS))
def test_the_docs_table_is_the_committed_runs(name):
    section = rt.SECTIONS[name]
    start, end = section.markers
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(start, 1)[1].split(end, 1)[0].strip() == rt.table(RES, section)


@pytest.mark.parametrize("name", sorted(rt.SECTIONS))
def test_a_tables_runs_are_scored_by_the_same_commands_but_for_the_model(name):
    """Same pages, same answer settings; only the checkpoint differs, and the cost file timed them together."""
    section = rt.SECTIONS[name]
    runs = section.runs
    names = [n for n, _ in runs.values()]
    parts = [("business", ""), ("foreign", "")] + ([("business", f"-{section.also[0]}")] if section.also else [])
    for part in parts:
        folder, suffix = part
        results = [json.loads((RES / f"{folder}/{n}{suffix}.json").read_text()) for n in names]
        checkpoints = [r["model"] for r in results]
        assert len(set(checkpoints)) == len(checkpoints), part
        commands = [r["command"].replace(c, "MODEL").replace(n, "NAME") for r, c, n in zip(results, checkpoints, names)]
        assert len(set(commands)) == 1, part
        settings = ("drop_keys",) if section.calibrated else ("drop_keys", "span_logit", "line_logit")
        for key in settings:  # calibrated runs: each its own thresholds, chosen alike
            assert len({json.dumps(r.get(key)) for r in results}) == 1, (part, key)
    if section.cost is not None:
        cost = json.loads((RES / section.cost).read_text())
        assert {timed for _, timed in runs.values()} == set(cost["question_ms"])
