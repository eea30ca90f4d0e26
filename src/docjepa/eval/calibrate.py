"""``docjepa calibrate``: fit the map from the IoU head's score to measured IoU on labelled pages, store it with
the model (see :mod:`docjepa.inference.calibration`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..data.split import SplitConfig
from ..data.touching import LINE_GAP
from ..inference.calibration import Calibration, isotonic, reliability
from ..inference.path_choice import PathModel, fit_path_model
from .evaluate import evaluate

WORDS_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)
"""Thresholds of ``answer_path="auto"`` tried on a row's ``path_score`` (the path model's estimate, else the word
decoder's confidence; 0: always words; above 1: never)."""
SPAN_GRID = (-6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0)
"""Span thresholds (the word decoder's logit above which a touching word joins a word span) tried by
:func:`fit_span_rule`."""
LINE_GRID = (None, 0.0, 1.0, 2.0, 3.0, 4.0)
"""Line-break thresholds (the logit above which a word joins the span from another line; None: the span threshold)
tried with each span threshold above which they lie."""
FAR_GAPS = (1.5, 2.0)
"""Line gaps (how far apart, in word heights, two lines of a word span may stand when a word clears the far bar)
tried with each pair of thresholds: OCR boxes hug the ink, so the lines of an address block of short words stand
further apart than their boxes are high."""
FAR_GRID = (2.0, 3.0, 4.0, 5.0)
"""Bars for a word on a line further than :data:`~docjepa.data.touching.LINE_GAP` heights, tried at each gap of
:data:`FAR_GAPS` with each pair of thresholds below them."""
PAIRS = tuple((t, line) for t in SPAN_GRID for line in LINE_GRID if line is None or line > t)
"""The ``(span_logit, line_logit)`` pairs: each span threshold with no line-break bar or each bar above it."""
SPAN_RULES = tuple(
    (t, line, gap, far)
    for t, line in PAIRS
    for gap, far in ((LINE_GAP, None), *((g, f) for g in FAR_GAPS for f in FAR_GRID if f > max(t, line or t)))
)
"""The ``(span_logit, line_logit, line_gap, far_logit)`` rules :func:`fit_span_rule` chooses among: each pair of
thresholds without further lines (gap :data:`~docjepa.data.touching.LINE_GAP`, no far bar), and with each far gap
and a far bar above both thresholds."""
RULE_KEYS = ("span_logit", "line_logit", "line_gap", "far_logit")
"""The names of a span rule's four settings, in order (as :class:`~docjepa.inference.calibration.Calibration` keeps
them)."""


def per_kind_miou(rows: list[dict], pick) -> float:
    """The mean over question kinds of the mean IoU ``pick(row)`` of each kind's rows."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(pick(r))
    return float(np.mean([np.mean(v) for v in by_kind.values()]))


def score_of(row: dict) -> float:
    """What ``auto`` thresholds in a row: its ``path_score`` (the path model's estimate) when it has one, else the
    word decoder's confidence."""
    return row.get("path_score", row["words_confidence"])


def auto_iou(threshold: float):
    """A row's IoU under ``answer_path="auto"`` at ``threshold`` (rows as ``evaluate(keep_rows=True)`` gives them)."""
    return lambda r: r["paths"]["words"] if score_of(r) >= threshold else r["paths"]["mask"]


def by_set(rows: list[dict]) -> dict[str, list[dict]]:
    """The rows of each calibration set (a row's ``set``; "" when untagged)."""
    sets: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        sets[r.get("set", "")].append(r)
    return sets


def miou_by_set(rows: list[dict]) -> dict[str, dict[float, float]]:
    """Per calibration set (a row's ``set``; "" when untagged), the per-kind mIoU at each threshold of
    :data:`WORDS_GRID`."""
    return {name: {t: per_kind_miou(rs, auto_iou(t)) for t in WORDS_GRID} for name, rs in by_set(rows).items()}


def standard_error(diff: np.ndarray, weights: np.ndarray) -> float:
    """The standard error of ``weights @ diff`` (weights summing to 1), the per-question differences ``diff`` drawn
    independently: √(Σ wᵢ² (dᵢ − d̄)²), d̄ the weighted mean."""
    return float(np.sqrt(np.sum(weights**2 * (diff - weights @ diff) ** 2)))


TIE = 1e-6
"""Two means closer than this score alike."""


def near_best(values: dict, weights: np.ndarray, within_noise: bool = False) -> list:
    """The candidates (keys of ``values``: each one's per-question IoUs, weighed by ``weights``) whose mean ties with
    the best one's (within :data:`TIE`), or with ``within_noise`` lies within one standard error of it, the error that
    of their paired difference (:func:`standard_error`): those the calibration pages cannot tell from the best. On
    a flat objective the best of a grid is the pages' noise; the callers choose among these by a fixed preference
    (with ``within_noise``, the one-standard-error rule)."""
    means = {c: float(weights @ v) for c, v in values.items()}
    top = max(means, key=means.get)
    return [
        c
        for c, v in values.items()
        if means[top] - means[c] <= (standard_error(values[top] - v, weights) if within_noise else 0.0) + TIE
    ]


def no_worse_than_mask(rows: list[dict], threshold: float, within_noise: bool = False) -> bool:
    """Whether ``auto`` at ``threshold`` reads every calibration set (a row's ``set``) no worse than the mask alone
    (per-kind mIoU), or with ``within_noise`` worse by no more than one standard error of their difference there
    (:func:`standard_error`)."""
    for part in by_set(rows).values():
        weights = balance(part)
        diff = np.array([auto_iou(threshold)(r) - r["paths"]["mask"] for r in part])
        if weights @ diff < -(standard_error(diff, weights) if within_noise else 0.0) - 1e-9:
            return False
    return True


def fit_words_threshold(rows: list[dict], within_noise: bool = False) -> tuple[float, dict[float, float]]:
    """The threshold of :data:`WORDS_GRID` whose ``auto`` answers score the best per-kind mIoU on ``rows`` (ties: the
    lower threshold; with ``within_noise``, the lowest within one standard error of the best, :func:`near_best`),
    among those that read no calibration set worse than the mask alone (:func:`no_worse_than_mask`, with
    ``within_noise`` by more than one standard error; rows tagged with their ``set``, as :func:`calibration_rows`
    gives them): a word span that helps on one kind of document (forms) and hurts on another (manuals) is not taken
    for both. With ``within_noise`` the calibration sets also weigh alike in the mIoU it is chosen by, as in
    :func:`fit_span_rule`. Returns it and the mIoU at each threshold (the sets' questions pooled)."""
    by = {t: per_kind_miou(rows, auto_iou(t)) for t in WORDS_GRID}
    allowed = [t for t in WORDS_GRID if no_worse_than_mask(rows, t, within_noise)]
    ious = {t: np.array([auto_iou(t)(r) for r in rows]) for t in allowed}
    weights = balance(rows if within_noise else [{"kind": r["kind"]} for r in rows])
    return min(near_best(ious, weights, within_noise)), by


def fit_span_rule(rows: list[dict], within_noise: bool = False) -> tuple[tuple | None, dict[tuple, float]]:
    """The span rule (``(span_logit, line_logit, line_gap, far_logit)``) for the rows' ``spans`` (as
    ``evaluate(span_rules=...)`` gives them), and the rows' word-path IoU and path features set to those under it, so
    that the path model is fitted on the spans the model will answer with. Returns it (None: no row has spans, rows
    left as they are) and the per-kind mIoU of each rule, the mean over calibration sets.

    The thresholds are those whose word spans, joining the nearest lines alone, score the best per-kind mIoU (the
    mean over calibration sets, each set weighing alike; ties: the span threshold nearest to
    :data:`~docjepa.inference.word_answer.WORD_LOGIT`, then no line-break bar, then the lower one). With them, the
    gap and bar of further lines (or none) whose spans score the best mean IoU, every question of a set counting
    alike and the sets weighing alike (ties: none, then the narrower gap and the higher bar): further lines make
    whole the few address blocks that stop short, so they are not taken where they run the many values on into the
    next key's. With ``within_noise`` each step counts as ties the rules within one standard error of the best
    (:func:`near_best`), so a rule is not taken for a difference the calibration pages cannot tell from their
    noise (docs/docjepa-extract.md, "Choosing within the calibration pages' noise")."""
    from ..inference.word_answer import WORD_LOGIT

    spanned = [r for r in rows if r.get("spans")]
    if not spanned:
        return None, {}
    grid = list(spanned[0]["spans"])
    ious = {rule: np.array([r["spans"][rule]["words"] for r in spanned]) for rule in grid}
    per_kind = balance(spanned)
    by = {rule: float(per_kind @ x) for rule, x in ious.items()}
    first = near_best({rule: x for rule, x in ious.items() if rule[3] is None}, per_kind, within_noise)
    t, line, *_ = max(first, key=lambda rule: (-abs(rule[0] - WORD_LOGIT), rule[1] is None, -(rule[1] or 0.0)))
    per_question = balance([{"kind": "", "set": r.get("set", "")} for r in spanned])
    further = near_best({rule: x for rule, x in ious.items() if rule[:2] == (t, line)}, per_question, within_noise)
    best = max(further, key=lambda rule: (rule[3] is None, -rule[2], rule[3] or 0.0))
    take_span_rule(spanned, best)
    return best, by


def take_span_rule(rows: list[dict], rule: tuple) -> list[dict]:
    """``rows`` (each with ``spans``), their word path's IoU and path features set to those of the span under
    ``rule``; returns them."""
    for r in rows:
        r["paths"] = r["paths"] | {"words": r["spans"][rule]["words"]}
        r["path_features"] = r["spans"][rule]["path_features"]
    return rows


def balance(rows: list[dict]) -> np.ndarray:
    """Each row's weight in the per-kind mIoU of its set, the sets weighing alike (a row's ``set``, "" when
    untagged): 1 / (rows of its kind in its set × kinds in its set × sets), so that a set or kind of few questions
    counts as much in a fit as in the figures it is judged by."""
    count = defaultdict(int)
    kinds = defaultdict(set)
    for r in rows:
        count[r.get("set", ""), r["kind"]] += 1
        kinds[r.get("set", "")].add(r["kind"])
    return np.array(
        [1.0 / (count[r.get("set", ""), r["kind"]] * len(kinds[r.get("set", "")]) * len(kinds)) for r in rows]
    )


def fit_paths(rows: list[dict]) -> PathModel | None:
    """The path model fitted on ``rows`` (each with its ``path_features``), and each row's ``path_score`` set from
    it; None (rows left as they are) when no row tells the two answers apart."""
    x = np.array([r["path_features"] for r in rows])
    words, mask = (np.array([r["paths"][k] for r in rows]) for k in ("words", "mask"))
    try:
        model = fit_path_model(x, words, mask, balance(rows))
    except ValueError:
        return None
    for r, p in zip(rows, model(x)):
        r["path_score"] = float(p)
    return model


def calibration_rows(
    predictor, data: list[Path], progress: bool = True, span_rules: tuple[tuple, ...] = ()
) -> list[dict]:
    """Every question of each folder of ``data``, scored by ``predictor`` with both answer paths
    (``evaluate(keep_rows=True)``, the word span also under each rule of ``span_rules``), each row tagged
    with its folder as ``set``."""
    rows: list[dict] = []
    for folder in data:
        part = SplitConfig([], 0)
        res = evaluate(predictor, [folder], part, part="all", progress=progress, keep_rows=True, span_rules=span_rules)
        rows += [r | {"set": str(folder)} for r in res["rows"]]
    return rows


def calibrate(
    checkpoint: Path,
    data: list[Path],
    threshold: float = 0.5,
    progress: bool = True,
    write: bool = True,
    within_noise: bool = False,
) -> dict:
    """Score every question of ``data`` (pages the model was not trained on), fit an isotonic map from the chosen
    candidate's predicted IoU to its measured IoU, and, for a model with a word decoder, the confidence from which
    its word span answers (a path model of when it beats the mask, :func:`fit_paths`, and the threshold on its
    estimate, :func:`fit_words_threshold`) with a map from the word decoder's confidence to the word answer's IoU;
    write ``calibration.json`` beside the model's weights (unless ``write`` is False), and return the maps with the
    reliability of the scores before and after on that data. The word span's rule (:func:`fit_span_rule`) is
    chosen first, and the rest fitted on the spans it gives; ``within_noise``: both chosen by the one-standard-error
    rule (:func:`fit_span_rule`, :func:`fit_words_threshold`)."""
    from ..inference.predictor import DocumentPredictor
    from ..modeling.files import SEGMENTATION, require_model

    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    predictor = DocumentPredictor.from_pretrained(checkpoint)
    predictor.policy.calibration = None  # fit on raw scores, whatever the model holds now
    rows = calibration_rows(predictor, data, progress, SPAN_RULES)
    scores = np.array([r["score"] for r in rows])
    ious = np.array([r["iou"] for r in rows])
    cal = Calibration.fit(scores, ious, threshold, data=[str(d) for d in data])
    words = np.array([r["words_confidence"] for r in rows])
    out = {
        "questions": len(scores),
        "raw": reliability(scores, ious),
        "calibrated_in_sample": reliability(cal(scores), ious),
        "calibration": {"knots": cal.knots, "values": cal.values, "threshold": threshold},
    }
    if words.any():  # the model has a word decoder: fit when its span answers, and what IoU it reaches then
        rule, by_rule = fit_span_rule(rows, within_noise)
        cal.span_logit, cal.line_logit, gap, cal.far_logit = rule if rule else (None, None, None, None)
        cal.line_gap = gap if cal.far_logit is not None else None
        out["word_span"] = {
            "span_logit": cal.span_logit,
            "line_logit": cal.line_logit,
            "line_gap": cal.line_gap,
            "far_logit": cal.far_logit,
            "within_noise": within_noise,
            "best_mIoU_rule": None if not by_rule else dict(zip(RULE_KEYS, max(by_rule, key=by_rule.get))),
            "words_mIoU_by_rule": [dict(zip(RULE_KEYS, rule)) | {"mIoU": m} for rule, m in by_rule.items()],
        }
        cal.path_model = fit_paths(rows)
        cal.words_threshold, by = fit_words_threshold(rows, within_noise)
        knots, values = isotonic(words, np.array([r["paths"]["words"] for r in rows]))
        cal.words_knots, cal.words_values = [float(v) for v in knots], [float(v) for v in values]
        out["answer_paths"] = {
            "words_threshold": cal.words_threshold,
            "best_mIoU_threshold": max(by, key=by.get),
            "mIoU_by_threshold": by,
            "mIoU_by_set": miou_by_set(rows),
            "mask_mIoU": per_kind_miou(rows, lambda r: r["paths"]["mask"]),
            "words_mIoU": per_kind_miou(rows, lambda r: r["paths"]["words"]),
            "words_share": float(np.mean([score_of(r) >= cal.words_threshold for r in rows])),
            "path_model": None if cal.path_model is None else cal.path_model.to_dict(),
        }
    if write:
        out["file"] = str(cal.save(require_model(checkpoint, (SEGMENTATION,), "calibration")))
    return out
