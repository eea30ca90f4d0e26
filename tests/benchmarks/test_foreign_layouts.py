"""``foreign_layouts.py``: the docs table is what the committed run gives; what counts as an exact answer; each
generator's values are found where it printed them."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import foreign_layouts as fl  # noqa: E402

RESULT = ROOT / "benchmarks/results/docjepa/foreign/shipped.json"


def test_the_docs_table_is_the_committed_run():
    result = json.loads(RESULT.read_text())
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    section = text.split(fl.START, 1)[1].split(fl.END, 1)[0].strip()
    assert section == fl.markdown(result, result["command"])
    assert result["scores"]["unlocated"] == 0
    cells = result["scores"]["by_generator"]
    assert cells["all"]["all"]["questions"] == result["documents"] * len(fl.QUESTIONS)
    assert set(cells) == {"all", *fl.GENERATORS}


def test_an_exact_answer_reads_the_value_and_nothing_else():
    value = {"text": "€1,182.76", "boxes": [[10.0, 10.0, 60.0, 20.0]]}
    assert fl.judge("€1,182.76", [10, 10, 60, 20], value) == (True, 1.0)
    assert fl.judge("1,182.76 EUR", None, value)[0]  # the currency sign, not the amount, may differ
    assert not fl.judge("Total: €1,182.76", [0, 10, 60, 20], value)[0]  # the label taken with the value
    assert not fl.judge("€1,182.7", None, value)[0] and not fl.judge("", None, value)[0]
    assert fl.judge("x", [35, 10, 85, 20], value)[1] == pytest.approx(25 / 75)
    assert fl.normalise("Celkem s DPH: 13 813,32 Kč") == "celkem s dph 13 813,32"


def test_each_generator_prints_the_values_where_they_are_found(tmp_path):
    pytest.importorskip("InvoiceGenerator")
    pytest.importorskip("pyinvoice")
    truth = fl.render(tmp_path, 2, seed=3, dpi=72)
    assert len(truth) == 2 * len(fl.GENERATORS)
    for doc, entry in truth.items():
        assert set(entry["fields"]) == set(fl.QUESTIONS)
        for field, value in entry["fields"].items():
            assert value["boxes"], (doc, field, value["text"])  # the printed text stands on the page
            x0, y0, x1, y1 = value["boxes"][0]
            assert 0 <= x0 < x1 <= 612 and 0 <= y0 < y1 <= 842  # A4 / letter at 72 dpi
    cs = next(e for e in truth.values() if e["generator"] == "InvoiceGenerator cs")
    assert cs["fields"]["total"]["text"].endswith("Kč")  # amounts in the locale's format
    # The same seed draws the same invoices.
    again = fl.render(tmp_path / "again", 2, seed=3, dpi=72)
    assert [e["fields"]["number"]["text"] for e in again.values()] == [
        e["fields"]["number"]["text"] for e in truth.values()
    ]


def test_invoice_numbers_take_several_forms():
    rng = random.Random(0)
    forms = {fl.invoice_number(rng)[0].isdigit() for _ in range(50)} | {
        "INV" in fl.invoice_number(rng) for _ in range(50)
    }
    assert forms == {True, False}


def test_a_question_is_marked_by_how_the_grammar_training_meets_its_wording():
    assert fl.wording("What is the due date?") == "trained"
    assert fl.wording("What is the invoice date?") == "held out"  # a grammar wording the default split keeps out
    assert fl.wording("What is the tax amount?") == "new"
    assert {fl.wording(q) for q in fl.QUESTIONS.values()} == {"trained", "held out", "new"}
