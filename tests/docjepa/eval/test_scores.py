"""Segmentation metrics on hand-made masks."""

import numpy as np
import pytest

pytest.importorskip("transformers")


from docjepa.eval.scores import Scores, anls, best_answer, iou_parts, levenshtein


def test_metrics_on_hand_made_masks():
    a = np.zeros((4, 4), bool)
    a[:2, :2] = True  # 4 px
    b = np.zeros((4, 4), bool)
    b[:2, :3] = True  # 6 px, 4 shared
    assert iou_parts(a, b) == (4, 6)
    assert best_answer(a, [b, a]) == (4, 4)
    s = Scores()
    s.add("key", 4, 6, "What is the {l}?")  # 0.667
    s.add("key", 0, 10, "Give the {l}.")  # 0.0
    s.add("table", 3, 4, "What is the {l}?")  # 0.75
    out = s.summary()
    assert out["n"] == 3
    assert out["gIoU"] == pytest.approx((4 / 6 + 0 + 0.75) / 3)
    assert out["cIoU"] == pytest.approx(7 / 20)
    assert out["mIoU"] == pytest.approx(((4 / 6 + 0) / 2 + 0.75) / 2)
    assert out["per_type"]["table"] == {"n": 1, "gIoU": 0.75, "cIoU": 0.75}
    assert out["per_template"]["What is the {l}?"]["gIoU"] == pytest.approx((4 / 6 + 0.75) / 2)
    assert out["per_template"]["Give the {l}."] == {"n": 1, "gIoU": 0.0, "cIoU": 0.0}
    untemplated = Scores()
    untemplated.add("key", 1, 2)  # imported pages have no templates: no per-template table
    assert "per_template" not in untemplated.summary()


def _edit_distance(a: str, b: str) -> int:
    """The textbook dynamic programme, as the reference."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_levenshtein_is_the_edit_distance_on_random_strings():
    rng = np.random.default_rng(0)
    alphabet = [*"abcdé ß0123.,:-€", "日", "本"]
    for _ in range(300):
        a, b = ("".join(rng.choice(alphabet, int(rng.integers(0, 90)))) for _ in range(2))
        assert levenshtein(a, b) == _edit_distance(a, b) == levenshtein(b, a)


def test_anls_scores_text_as_docvqa_does():
    assert levenshtein("kitten", "sitting") == 3 and levenshtein("", "abc") == 3 and levenshtein("ab", "ab") == 0
    assert anls("8", ["8"]) == 1.0
    assert anls("  The  Title ", ["the title"]) == 1.0  # case and white space do not count
    assert anls("v1.1a", ["1.1a"]) == pytest.approx(1 - 1 / 5)  # one extra character of five
    assert anls("12", ["8"]) == 0.0  # a wrong page number earns nothing
    assert anls("10th April", ["10th April 2011"]) == pytest.approx(1 - 5 / 15)  # part of a date: part credit
    assert anls("April", ["10th April 2011"]) == 0.0  # 10 of 15 characters missing: nothing
    assert anls("abcd", ["abxy"]) == 0.0  # ratio 0.5 reaches τ: nothing
    assert anls("Basic", ["Premium", "basic"]) == 1.0  # the closest of several true answers
    assert anls("", [""]) == 1.0
    with pytest.raises(ValueError, match="at least one"):
        anls("x", [])


def test_text_scores_are_summarised_per_kind_only_where_answers_are_words():
    s = Scores()
    s.add("date", 1, 2, text=1.0)
    s.add("date", 1, 2, text=0.0)
    s.add("page-number", 0, 3, text=0.8)
    s.add("contents", 5, 6)  # a region answer: no text score
    out = s.summary()
    assert out["per_type"]["date"]["ANLS"] == 0.5 and out["per_type"]["date"]["n_text"] == 2
    assert "ANLS" not in out["per_type"]["contents"] and "n_text" not in out["per_type"]["contents"]
    assert out["n_text"] == 3 and out["ANLS"] == pytest.approx(1.8 / 3)
    assert out["mANLS"] == pytest.approx((0.5 + 0.8) / 2)  # each kind with text answers counts once
    assert "mANLS" not in Scores().summary()
