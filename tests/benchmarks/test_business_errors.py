"""``business_errors.py``: how an answer's text differs from the truth's, and the docs' table is the committed run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import business_errors as be  # noqa: E402


def test_answers_are_sorted_by_how_they_differ_from_the_truth():
    assert be.sort_answer("5.291,83 EUR", ["5.291,83 EUR"]) == "exact"
    assert be.sort_answer("5.291,83", ["5.291,83 EUR"]) == "cut short"
    assert be.sort_answer("Turnbull Ltd 347 Evans Manor", ["Turnbull Ltd"]) == "runs on"
    assert be.sort_answer("Ltd 347", ["Turnbull Ltd"]) == "another"  # overlaps, but neither holds the other
    assert be.sort_answer("", ["Turnbull Ltd"]) == "another"
    assert be.sort_answer("11 mars", ["2 avril 2026", "11 mars 2026"]) == "cut short"  # any valid answer counts
    assert be.sort_answer("EUR 2.304,55 EUR 12.779,77", ["EUR 12.779,77"]) == "runs on"


def test_counts_per_field_and_examples():
    rows = [
        {"field": "value: total", "truth": "1 EUR", "answer": "1", "sort": "cut short"},
        {"field": "value: total", "truth": "2 EUR", "answer": "2 EUR", "sort": "exact"},
        {"field": "name: buyer", "truth": "A B", "answer": "C", "sort": "another"},
    ]
    s = be.summarise(rows)
    assert list(s) == ["all", "name: buyer", "value: total"]
    assert s["all"]["questions"] == 3 and s["all"]["exact"] == 1 and s["all"]["examples"] == {}
    assert s["value: total"]["cut short"] == 1 and s["value: total"]["examples"] == {
        "cut short": [{"truth": "1 EUR", "answer": "1"}]
    }
    assert "| value: total | 2 | 50 % | 0 % | 50 % | 0 % |" in be.markdown(
        {"command": "c", "model": "m", "pages": 1, "fields": s}
    )


def test_the_docs_table_is_the_committed_run():
    result = json.loads((ROOT / "benchmarks/results/docjepa/business/wider-2000c-errors.json").read_text())
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(be.START, 1)[1].split(be.END, 1)[0].strip() == be.markdown(result)
    fields = result["fields"]
    assert fields["all"]["questions"] == sum(c["questions"] for k, c in fields.items() if k != "all")
    assert all(sum(c[s] for s in be.SORTS) == c["questions"] for c in fields.values())
