"""``question_cache.py``: the docs' table is the committed run, both arms trained alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import question_cache as qc  # noqa: E402

RESULT = ROOT / "benchmarks/results/docjepa/business/question-cache.json"


def test_the_docs_table_is_the_committed_run():
    result = json.loads(RESULT.read_text())
    text = (ROOT / "docs/docjepa-training.md").read_text()
    assert text.split(qc.START, 1)[1].split(qc.END, 1)[0].strip() == qc.markdown(result)
    arms = result["arms"]
    assert set(arms) == set(qc.ARMS)
    logged = [[m["step"] for m in arms[a]["logged"]] for a in qc.ARMS]
    assert logged[0] == logged[1] and logged[0][-1] == result["steps"]
    assert 0 < result["questions"] < result["pairs"]


def test_the_table_reads_each_arm():
    def run(wall, first, second, loss):
        logged = [{"step": 5, "loss": 2.0, "step_s": first}, {"step": 10, "loss": loss, "step_s": second}]
        return {"wall_s": wall, "logged": logged}

    arm, slow = run(10.0, 1.0, 3.0, 1.5), run(20.0, 2.0, 4.0, 1.25)
    text = qc.markdown(
        {"command": "c", "pairs": 1000, "questions": 12, "threads": 2, "arms": {"cached": arm, "uncached": slow}}
    )
    assert "| | steps 1–5 | steps 6–10 | mean | run, wall-clock |" in text
    assert "| questions kept | 1.00 s | 3.00 s | 2.00 s | 10 s |" in text
    assert "| read at every step | 2.00 s | 4.00 s | 3.00 s | 20 s |" in text
    assert "last 5 steps: 1.5000 and 1.2500" in text and "1,000 training pairs asking 12 distinct" in text
