"""What ``docjepa calibrate`` fits on calibration pages: the word span's rule (``fit_span_rule``), the path
model (``fit_paths``) and the answer-path threshold (``fit_words_threshold``)."""

from __future__ import annotations

import random

import pytest

from docjepa.eval.calibrate import WORDS_GRID, fit_paths, fit_span_rule, fit_words_threshold, miou_by_set


def _rows(set_name: str, kinds: list[str], mask: float, words: float, conf: float, n: int, rng) -> list[dict]:
    """``n`` rows per kind whose mask and word IoUs scatter around ``mask`` and ``words``."""
    out = []
    for kind in kinds:
        for _ in range(n):
            jitter = rng.uniform(-0.05, 0.05)
            out.append(
                {
                    "kind": kind,
                    "set": set_name,
                    "paths": {"mask": mask + jitter, "words": words + jitter},
                    "words_confidence": conf + rng.uniform(-0.04, 0.04),
                }
            )
    return out


def _forms(rng) -> list[dict]:
    """Synthetic forms: the span is right when it is sure (≈0.95), wrong when it is not (≈0.3)."""
    sure = _rows("forms", ["key", "field", "table"], mask=0.5, words=0.95, conf=0.95, n=6, rng=rng)
    unsure = _rows("forms", ["key", "field", "table"], mask=0.5, words=0.05, conf=0.3, n=6, rng=rng)
    return sure + unsure


def test_the_threshold_is_the_best_on_one_set():
    rows = _forms(random.Random(0))
    best, by = fit_words_threshold(rows)
    assert best == 0.4  # the lowest threshold above the unsure spans' confidence
    assert by[best] == max(by.values()) and by[best] > by[WORDS_GRID[-1]] + 0.1


def test_a_span_that_hurts_one_set_is_not_taken_for_all():
    rng = random.Random(1)
    manuals = _rows("manuals", ["section"], mask=0.6, words=0.4, conf=0.95, n=6, rng=rng)
    rows = _forms(rng) + manuals
    best, by = fit_words_threshold(rows)
    # Over all kinds the span looks better (three form kinds gain, one manual kind loses) ...
    assert max(by.values()) > by[WORDS_GRID[-1]]
    # ... but it loses on the manuals at every threshold that takes it there, so the mask answers everywhere.
    assert best == WORDS_GRID[-1]
    untagged = [{k: v for k, v in r.items() if k != "set"} for r in rows]
    assert fit_words_threshold(untagged)[0] == 0.4  # one set: the plain best


def test_a_span_that_ties_on_the_other_set_is_taken():
    rng = random.Random(2)
    manuals = _rows("manuals", ["section"], mask=0.8, words=0.1, conf=0.2, n=6, rng=rng)  # never sure there
    best, _ = fit_words_threshold(_forms(rng) + manuals)
    assert best == 0.4  # above the manuals' spans' confidence (≤ 0.24): they keep their masks


def test_the_path_model_chooses_where_the_confidence_cannot():
    """Values and regions with the same word-decoder confidence: no threshold on it helps, the path model (which
    sees how many words each answer covers) answers each with its better path."""
    rng = random.Random(3)
    rows = []
    for i in range(120):
        value = i % 2 == 0
        rows.append(
            {
                "kind": "key" if value else "table",
                "set": "pages",
                "paths": {"mask": 0.3 if value else 0.9, "words": 0.9 if value else 0.2},
                "words_confidence": rng.uniform(0.6, 0.9),
                "path_features": [rng.uniform(0.6, 0.9), rng.uniform(0, 1), rng.uniform(0.5, 1.5),
                                  rng.uniform(0.5, 2.0) if value else rng.uniform(2.5, 4.0), 0.5, 5.0,
                                  rng.uniform(0, 1), rng.uniform(0, 1)],
            }
        )  # fmt: skip
    _, by_confidence = fit_words_threshold(rows)
    assert max(by_confidence.values()) < 0.61  # the confidence tells the two kinds apart nowhere
    model = fit_paths(rows)
    assert model is not None and all("path_score" in r for r in rows)
    best, by = fit_words_threshold(rows)
    assert by[best] == pytest.approx(0.9)  # each kind its better answer
    ties = [r | {"paths": {"mask": 0.5, "words": 0.5}} for r in rows]
    assert fit_paths([{k: v for k, v in r.items() if k != "path_score"} for r in ties]) is None


def _spanned(set_name: str, kind: str, best: float, n: int, rng) -> list[dict]:
    """``n`` rows whose word spans score 0.9 at threshold ``best`` and less the farther from it (no line-break bar)."""
    out = []
    for _ in range(n):
        spans = {(t, None, 1.0, None): {"words": 0.9 - 0.1 * abs(t - best) + rng.uniform(-0.01, 0.01),
                                  "path_features": [t] * 8}
                 for t in (-5.0, -3.0, -1.0, 1.0)}  # fmt: skip
        out.append({"kind": kind, "set": set_name, "paths": {"mask": 0.5, "words": 0.0}, "spans": spans})
    return out


def test_the_span_threshold_is_the_best_over_sets_and_the_rows_take_its_spans():
    rng = random.Random(4)
    # Values read best at −1 on one set; the other set, of more questions, reads alike at −3 and −1: each set and
    # kind weighs alike, so −1 wins though more rows prefer −3 a little.
    rows = _spanned("values", "key", -1.0, 5, rng)
    rows += [r for kind in ("a", "b", "c") for r in _spanned("forms", kind, -2.0, 20, rng)]
    best, by = fit_span_rule(rows)
    assert best == (-1.0, None, 1.0, None) and by[best] == max(by.values())
    assert {t for t, *_ in by} == {-5.0, -3.0, -1.0, 1.0}
    assert all(r["paths"]["words"] == r["spans"][best]["words"] for r in rows)
    assert all(r["path_features"] == [-1.0] * 8 and r["paths"]["mask"] == 0.5 for r in rows)
    assert fit_paths(rows) is not None  # fitted on the chosen spans' IoUs and features


def test_a_line_break_bar_is_taken_where_it_scores_better():
    """Names that run on into the address below them score better with a bar at line breaks; the bar is the
    lowest of those that score alike, and none is taken when none helps."""
    rows = [{"kind": "key", "paths": {"mask": 0.5, "words": 0.0},
             "spans": {(-1.0, None, 1.0, None): {"words": 0.4, "path_features": [0.0] * 8},
                       (-1.0, 1.0, 1.0, None): {"words": 0.8, "path_features": [1.0] * 8},
                       (-1.0, 2.0, 1.0, None): {"words": 0.8, "path_features": [2.0] * 8},
                       (-1.0, 3.0, 1.0, None): {"words": 0.6, "path_features": [3.0] * 8}}}]  # fmt: skip
    assert fit_span_rule(rows)[0] == (-1.0, 1.0, 1.0, None) and rows[0]["path_features"] == [1.0] * 8
    alike = {"words": 0.7, "path_features": [0.0] * 8}
    flat = [{"kind": "key", "paths": {"mask": 0.5, "words": 0.0},
             "spans": {(-1.0, 2.0, 1.0, None): alike, (-1.0, None, 1.0, None): alike}}]  # fmt: skip
    assert fit_span_rule(flat)[0] == (-1.0, None, 1.0, None)


def test_further_lines_are_taken_where_the_questions_read_better_and_the_narrowest_gap_on_a_tie():
    """Address blocks whose lines stand further apart than one word height read whole with further lines joining;
    a bar that also runs the more numerous values on into the next key's (keys 0.8 → 0.7) is not taken though the
    per-kind mean rises, one that reads the questions better on the whole is, and of rules that score alike the
    narrower gap; within the pages' noise, the same with 60 keys and 10 blocks, but not with 6 and 1."""
    scores = {(1.0, None): (0.8, 0.4), (2.0, 2.0): (0.7, 0.8), (2.0, 4.0): (0.795, 0.65), (1.5, 4.0): (0.795, 0.65)}
    rows = [{"kind": kind, "paths": {"mask": 0.5, "words": 0.0},
             "spans": {(-1.0, 1.0, *rule): {"words": both[i], "path_features": [rule[0]] * 8}
                       for rule, both in scores.items()}}
            for i, kind in [(0, "key")] * 60 + [(1, "field")] * 10]  # fmt: skip
    best, by = fit_span_rule(rows)
    assert by[-1.0, 1.0, 2.0, 2.0] == max(by.values())  # the best per-kind mean, but 6 keys lose what 1 block gains
    assert best == (-1.0, 1.0, 1.5, 4.0) and by[best] == pytest.approx(0.7225)
    assert [r["path_features"] for r in rows] == [[1.5] * 8] * 70
    assert [r["paths"]["words"] for r in rows] == [0.795] * 60 + [0.65] * 10
    assert fit_span_rule(rows, within_noise=True)[0] == (-1.0, 1.0, 1.5, 4.0)
    few = rows[:6] + rows[-1:]
    assert fit_span_rule(few)[0] == (-1.0, 1.0, 1.5, 4.0)
    # with 6 keys and 1 block the gain is within one standard error of the rule without further lines: none
    assert fit_span_rule(few, within_noise=True)[0] == (-1.0, 1.0, 1.0, None)
    alike = [
        {
            "kind": "key",
            "paths": {"mask": 0.5, "words": 0.0},
            "spans": {(-1.0, 1.0, *rule): {"words": 0.6, "path_features": [0.0] * 8} for rule in scores},
        }
    ]
    assert fit_span_rule(alike)[0] == (-1.0, 1.0, 1.0, None)


def test_a_span_threshold_tie_keeps_the_default_and_rows_without_spans_are_left():
    spans = {(t, None, 1.0, None): {"words": 0.6, "path_features": [t] * 8} for t in (-6.0, -4.0, -2.0, 0.0)}
    flat = [{"kind": "key", "paths": {"mask": 0.5, "words": 0.3}, "spans": spans}]
    # both 1 from the default, −3: the first of the tie
    assert fit_span_rule(flat)[0] in ((-4.0, None, 1.0, None), (-2.0, None, 1.0, None))
    flat[0]["spans"][-3.0, None, 1.0, None] = {"words": 0.6, "path_features": [0.0] * 8}
    assert fit_span_rule(flat)[0] == (-3.0, None, 1.0, None)
    bare = [{"kind": "key", "paths": {"mask": 0.5, "words": 0.3}}]
    assert fit_span_rule(bare) == (None, {}) and bare[0]["paths"]["words"] == 0.3


def _noisy(effects: dict[float, float], n: int, rng) -> list[dict]:
    """``n`` questions of two kinds in two sets whose word spans read 0.6 ± 0.25 (the question's difficulty, shared
    by every rule) plus each span threshold's ``effects`` and ±0.05 of its own."""
    rows = []
    for i in range(n):
        base = 0.6 + rng.uniform(-0.25, 0.25)
        spans = {(t, None, 1.0, None): {"words": base + e + rng.uniform(-0.05, 0.05), "path_features": [t] * 8}
                 for t, e in effects.items()}  # fmt: skip
        rows.append({"kind": "ab"[i % 2], "set": "xy"[i // 2 % 2], "paths": {"mask": 0.5, "words": 0.0},
                     "spans": spans})  # fmt: skip
    return rows


def test_within_the_noise_a_span_rule_the_pages_cannot_tell_from_the_best_gives_way_to_the_default():
    """On a flat objective the best of the grid is the pages' noise: the rule nearest the default −3 is kept unless
    another reads better by more than one standard error, which a real difference on as many questions does."""
    rng = random.Random(5)
    flat = _noisy({-5.0: 0.0, -3.0: 0.0, -1.0: 0.0, 1.0: -0.1}, 200, rng)
    best, by = fit_span_rule(flat)
    assert best == max(by, key=by.get) != (-3.0, None, 1.0, None)  # the noise makes another the best by its mean ...
    assert fit_span_rule(flat, within_noise=True)[0] == (-3.0, None, 1.0, None)  # ... within it, the default stays
    better = _noisy({-5.0: 0.0, -3.0: 0.0, -1.0: 0.03, 1.0: -0.1}, 200, rng)
    assert fit_span_rule(better, within_noise=True)[0] == (-1.0, None, 1.0, None)


def test_within_the_noise_the_path_threshold_is_the_lowest_the_pages_cannot_tell_from_the_best():
    """Word spans that read as well as the mask on average at every confidence from 0.3 to 0.9, better above it and
    worse below: the thresholds of that plateau differ by the pages' noise alone, which here puts 0.8 first; the
    lowest of them is taken."""
    rng = random.Random(0)
    rows = []
    for i in range(300):
        conf = rng.uniform(0.0, 1.0)
        words = 0.95 if conf > 0.9 else (0.6 + rng.uniform(-0.3, 0.3) if conf > 0.3 else 0.1)
        rows.append({"kind": "ab"[i % 2], "set": "p", "paths": {"mask": 0.6, "words": words},
                     "words_confidence": conf})  # fmt: skip
    best, by = fit_words_threshold(rows, within_noise=True)
    assert max(by, key=by.get) == 0.8 == fit_words_threshold(rows)[0]
    assert best == 0.3 and by[0.2] < by[best] - 0.03


def test_within_the_noise_a_set_that_reads_worse_by_its_noise_alone_does_not_veto_the_span():
    """Manuals whose spans read as well as their masks but for noise (a mean loss of 0.005 against a spread of ±0.3
    over 40 questions) let the forms' threshold stand; a loss of 0.2 vetoes it (as above)."""
    rng = random.Random(7)
    manuals = []
    for i in range(40):
        words = 0.6 + (0.3 if i % 2 else -0.3) - 0.005 + rng.uniform(-0.01, 0.01)
        manuals.append({"kind": "section", "set": "manuals", "paths": {"mask": 0.6, "words": words},
                        "words_confidence": 0.95})  # fmt: skip
    rows = _forms(rng) + manuals
    assert min(m[0.4] - m[WORDS_GRID[-1]] for m in miou_by_set(rows).values()) < 0  # worse on the manuals ...
    assert fit_words_threshold(rows)[0] == WORDS_GRID[-1]  # vetoed for all ...
    assert fit_words_threshold(rows, within_noise=True)[0] == 0.4  # ... but not within the noise
    lost = [r | {"paths": {"mask": 0.6, "words": 0.4}} for r in manuals]
    assert fit_words_threshold(_forms(rng) + lost, within_noise=True)[0] == WORDS_GRID[-1]
