"""``key_swap.py``: a key is the words left of its value on its line, exchanging two spans swaps their texts in
place, an answer is counted by the places it covers, and the docs' table is the committed results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import key_swap as ks  # noqa: E402

from docjepa.data.record import Page, Word  # noqa: E402

RESULTS = [ROOT / f"benchmarks/results/docjepa/key-swap/{name}.json" for name in ks.RUNS]


def page() -> Page:
    """Two columns: a party's heading on the left; on the right the invoice date's key and value, then the due
    date's, on the next line."""
    words = [
        ("Provider", (20, 100, 120, 120)),
        ("Date", (600, 100, 650, 120)),
        ("of", (656, 100, 676, 120)),
        ("issue:", (682, 100, 740, 120)),
        ("10.01.2024", (760, 100, 880, 120)),
        ("Due", (600, 140, 640, 160)),
        ("date:", (646, 140, 700, 160)),
        ("24.01.2024", (760, 140, 880, 160)),
    ]
    return Page("test", 0, 1000, 1400, b"", [Word(t, b) for t, b in words], "test")


def test_a_key_is_the_words_left_of_its_value_within_its_column():
    p = page()
    assert ks.key_words(p, [4]) == [1, 2, 3]  # "Provider", far left in the other column, is not part of it
    assert ks.key_words(p, [7]) == [5, 6]
    assert ks.key_words(p, [0]) == []  # nothing stands left of the heading


def test_exchanging_two_spans_swaps_their_texts_in_place():
    p = page()
    out = ks.exchanged(p, ([1, 2, 3], [5, 6]))
    assert [w.text for w in out.words] == ["Provider", "Due date:", "10.01.2024", "Date of issue:", "24.01.2024"]
    assert out.words[1].box == p.words[1].box and out.words[3].box == p.words[5].box
    assert [w.text for w in p.words][1:4] == ["Date", "of", "issue:"]  # the page itself is left as it was
    dates = ks.exchanged(p, ([4], [7]))
    assert [w.text for w in dates.words][4::3] == ["24.01.2024", "10.01.2024"]


def test_an_answer_is_counted_by_the_places_it_covers():
    own, other = {(1, 2, 3, 4)}, {(5, 6, 7, 8)}
    assert ks.which(own, own, other) == ks.OWN and ks.which(other, own, other) == ks.OTHER
    assert ks.which(own | other, own, other) == "both" and ks.which(set(), own, other) == "neither"


@pytest.mark.parametrize("path", RESULTS, ids=ks.RUNS)
def test_each_committed_result_counts_every_question_once(path):
    result = json.loads(path.read_text())
    for source in result["sources"].values():
        assert source["pages"] > 0 and source["questions"] == 2 * source["pages"]
        for arm in ks.ARMS:
            for state in ks.STATES:
                assert sum(source[arm][state].values()) == source["questions"], (arm, state)
            assert sum(source[arm]["same answer to both"].values()) <= len(ks.STATES) * source["pages"]


def test_the_docs_table_is_the_committed_results():
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    results = [json.loads(path.read_text()) for path in RESULTS]
    assert text.split(ks.START, 1)[1].split(ks.END, 1)[0].strip() == ks.markdown(results)
