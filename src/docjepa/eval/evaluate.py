"""``docjepa evaluate``: the model against the OCR-matching baseline, per question type, on held-out data."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..data.matcher import baseline_box
from ..data.prompt import box_mask
from ..data.record import Page, rasterize, words_under
from ..data.shards import DocumentDataset, RecordError
from ..data.split import SplitConfig, question_pairs
from ..inference.word_answer import word_spans
from .scores import ANLS_THRESHOLD, Scores, anls, best_answer

log = logging.getLogger("docjepa.eval")


def answer_masks(page: Page, question: int, scale: float, size: int) -> list[np.ndarray]:
    """Every answer of a question as a boolean (size, size) mask in the square frame (page × scale)."""
    h, w = max(1, round(page.height * scale)), max(1, round(page.width * scale))
    out = []
    for answer in page.questions[question].answers:
        m = np.zeros((size, size), dtype=bool)
        r = rasterize(answer.regions, (page.height, page.width), (h, w))
        m[: min(h, size), : min(w, size)] = r[:size, :size] > 0
        out.append(m)
    return out


def mask_text(page: Page, mask: np.ndarray, frame: float) -> str:
    """The text of the words a square-frame mask covers (page pixels × ``frame`` = mask pixels), in reading order."""
    return " ".join(page.words[i].text for i in words_under(page.word_boxes(), mask, frame))


def text_truths(page: Page, question: int) -> list[str]:
    """The texts of a question's answers that are words: those whose region's own words read as the answer's text
    (:func:`~docjepa.eval.scores.anls` at least τ). Empty for a region answer (a contents page, a table, a
    paragraph), whose text, when it has one, names the region rather than spelling it: that question is scored by
    IoU alone."""
    out = []
    for answer in page.questions[question].answers:
        if not answer.text.strip():
            continue
        region = rasterize(answer.regions, (page.height, page.width), (page.height, page.width)) > 0
        if anls(mask_text(page, region, 1.0), [answer.text]) >= ANLS_THRESHOLD:
            out.append(answer.text)
    return out


def text_score(page: Page, mask: np.ndarray, frame: float, texts: list[str]) -> float | None:
    """The ANLS of what a square-frame mask reads against a question's :func:`text_truths` (None: there are none,
    the question is not scored by text)."""
    return anls(mask_text(page, mask, frame), texts) if texts else None


def questions_by_page(
    roots: list[Path], split: SplitConfig, part: str, limit: int | None = None
) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """The ``part`` (page, question) pairs of ``roots`` (the first ``limit``), and the same grouped by page, so that
    each page is encoded once; ValueError when there are none."""
    pairs = question_pairs(roots, split, part)
    if limit:
        pairs = pairs[:limit]
    if not pairs:
        raise ValueError(f"no {part} questions in {', '.join(map(str, roots))}")
    by_page: dict[int, list[int]] = defaultdict(list)
    for p, q in pairs:
        by_page[p].append(q)
    return pairs, by_page


def evaluate(
    predictor,
    roots: list[Path],
    split: SplitConfig,
    part: str = "heldout",
    limit: int | None = None,
    progress: bool = True,
    keep_examples: int = 0,
    keep_rows: bool = False,
    span_rules: tuple[tuple, ...] = (),
) -> dict:
    """Scores of the model (its answer as the predictor gives it: the top-scored non-empty mask, snapped to the OCR
    words when the predictor snaps, or the word span; see ``DocumentPredictor.answer_path``), of each answer path
    alone (``paths``: ``mask`` and ``words``) and of the baseline on the ``part`` pairs of ``roots``: IoU of every
    question, and the ANLS of the words each answer covers for every question whose answer is words
    (:func:`text_truths`).

    With ``keep_examples`` > 0 the first few predictions are returned too (for the demo report); with ``keep_rows``
    one row per question (kind, the chosen candidate's predicted IoU, the model's IoU, the baseline's IoU), for
    calibration and reliability diagrams; each row also keeps, for every span rule of ``span_rules`` (the span and
    line-break thresholds, the line gap and its bar of :func:`~docjepa.inference.word_answer.word_span`), the IoU of
    the word span under it and its path features (``spans``), from which ``docjepa calibrate`` chooses one.
    """
    pairs, by_page = questions_by_page(roots, split, part, limit)
    pages = DocumentDataset(list(roots))
    model, base = Scores(), Scores()
    paths = {"mask": Scores(), "words": Scores()}  # each answer path alone (the predictor's ``answer_path``)
    examples, rows = [], []
    bar = tqdm(total=len(pairs), desc=f"evaluate ({part})", disable=not progress, dynamic_ncols=True)
    skipped: list[str] = []
    for p, questions in by_page.items():
        try:
            page = pages[p]
        except RecordError as err:  # logged, counted in the result, and its questions left out
            log.warning("skipping unreadable record %s", err)
            skipped.append(str(err))
            bar.update(len(questions))
            continue
        predictor.set_page(page)
        for q in questions:
            question = page.questions[q]
            decoded = predictor.decode(question.text)
            size, frame = predictor.encoded.frame.mask_size, predictor.encoded.frame.frame  # page px → mask px
            answers = answer_masks(page, q, frame, size)
            texts = text_truths(page, q)
            reading = predictor.read(decoded)
            best = reading.chosen
            pred, _ = reading.answer_mask(best)  # the chosen mask, snapped to the OCR words
            m_parts = best_answer(pred, answers)
            model.add(question.kind, *m_parts, question.template, text_score(page, pred, frame, texts))
            by_path = {}
            for name, scores in paths.items():
                path_mask = reading.answer_mask(best, name)[0]
                by_path[name] = best_answer(path_mask, answers)
                scores.add(question.kind, *by_path[name], question.template, text_score(page, path_mask, frame, texts))
            bmask = box_mask(baseline_box(question.text, page.words), page, frame, size)
            b_parts = best_answer(bmask, answers)
            base.add(question.kind, *b_parts, question.template, text_score(page, bmask, frame, texts))
            if keep_rows:
                rows.append(_row(question, float(decoded.scores[best]), m_parts, b_parts, page.layout))
                rows[-1]["anls"], rows[-1]["baseline_anls"] = model.texts[-1], base.texts[-1]
                rows[-1]["paths"] = {k: v[0] / v[1] if v[1] else 1.0 for k, v in by_path.items()}
                rows[-1]["words_confidence"] = reading.words_confidence or 0.0
                if reading.path_features is not None:
                    rows[-1]["path_features"] = reading.path_features.tolist()
                    rows[-1]["spans"] = _spans(predictor, reading, best, answers, span_rules)
            if len(examples) < keep_examples:
                examples.append(_example(page, question, pred, bmask, answers, frame))
            bar.update(1)
    bar.close()
    if len(model.rows) == 0:
        raise ValueError(f"no {part} question could be scored: every page was unreadable ({skipped[0]})")
    result = {
        "split": part,
        "questions": len(model.rows),
        "pages": len(by_page) - len(skipped),
        "skipped_pages": len(skipped),
        "model": model.summary(),
        "paths": {name: scores.summary() for name, scores in paths.items()},
        "baseline": base.summary(),
    }
    if keep_examples:
        result["examples"] = examples
    if keep_rows:
        result["rows"] = rows
    return result


def _spans(predictor, reading, best: int, answers: list[np.ndarray], rules: tuple[tuple, ...]) -> dict:
    """Per span rule (``(span_logit, line_logit, line_gap, far_logit)``), the word answer's IoU and the path
    features of one question's answers under it; rules that give the same words share one reading."""
    out, seen = {}, {}
    for rule, words in zip(rules, word_spans(reading.word_logits, predictor.encoded.page, list(rules))):
        t, line, gap, far = rule
        words = tuple(words)
        if words not in seen:
            policy = replace(predictor.policy, span_logit=t, line_logit=line, line_gap=gap, far_logit=far)
            under = policy.read(predictor.encoded, reading.decoded)
            inter, union = best_answer(under.answer_mask(best, "words")[0], answers)
            seen[words] = {"words": inter / union if union else 1.0, "path_features": under.path_features.tolist()}
        out[rule] = seen[words]
    return out


def _row(question, score: float, model: tuple[int, int], baseline: tuple[int, int], layout: str | None) -> dict:
    """One question's row: its kind, its page's layout, the chosen candidate's predicted IoU, the model's and the
    baseline's IoU."""
    return {
        "kind": question.kind,
        "layout": layout,
        "template": question.template,
        "score": score,
        "iou": model[0] / model[1] if model[1] else 1.0,
        "baseline_iou": baseline[0] / baseline[1] if baseline[1] else 1.0,
    }


def _example(page: Page, question, pred: np.ndarray, baseline: np.ndarray, answers: list, frame: float) -> dict:
    """One prediction kept for the demo report."""
    return {
        "page": page,
        "question": question.text,
        "kind": question.kind,
        "template": question.template,
        "pred": pred,
        "baseline": baseline,
        "truth": np.any(answers, axis=0),
        "frame": frame,
    }
