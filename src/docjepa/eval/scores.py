"""Segmentation metrics as in LISA: gIoU (mean of per-question IoU), cIoU (cumulative intersection over
cumulative union), and mIoU here = the mean over question types of each type's gIoU (types weigh equally); and, for
questions whose answer is words, the answer's text scored as DocVQA scores it (ANLS, :func:`anls`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.distance import Levenshtein


def iou_parts(pred: np.ndarray, target: np.ndarray) -> tuple[int, int]:
    """(intersection, union) pixel counts of two boolean masks."""
    pred, target = pred.astype(bool), target.astype(bool)
    return int((pred & target).sum()), int((pred | target).sum())


def best_answer(pred: np.ndarray, answers: list[np.ndarray]) -> tuple[int, int]:
    """(intersection, union) against the answer the prediction matches best (any valid answer counts)."""
    parts = [iou_parts(pred, a) for a in answers]
    return max(parts, key=lambda p: p[0] / p[1] if p[1] else 1.0)


ANLS_THRESHOLD = 0.5
"""DocVQA's τ: an answer whose normalised edit distance to the truth is this or more scores 0."""


def normalise_text(text: str) -> str:
    """An answer's text as it is compared: lower case, runs of white space as one space, no space at the ends."""
    return " ".join(text.lower().split())


def levenshtein(a: str, b: str) -> int:
    """The edit distance of two strings (insertions, deletions and substitutions of one character each), by
    RapidFuzz's bit-parallel algorithm: evaluation and calibration score thousands of paragraph-long answers."""
    return int(Levenshtein.distance(a, b))


def anls(prediction: str, truths: list[str], threshold: float = ANLS_THRESHOLD) -> float:
    """Average Normalised Levenshtein Similarity of one answer (DocVQA's metric): against the truth it is closest
    to, 1 − the edit distance over the longer text's length, or 0 when that distance ratio is ``threshold`` or
    more (a wrong answer earns nothing for sharing a few letters). Texts are compared :func:`normalise_text`-ed;
    two empty texts agree. ``truths`` must not be empty."""
    if not truths:
        raise ValueError("anls needs at least one true answer text")
    p, best = normalise_text(prediction), 0.0
    for truth in truths:
        t = normalise_text(truth)
        longest = max(len(p), len(t))
        ratio = levenshtein(p, t) / longest if longest else 0.0
        best = max(best, 1.0 - ratio if ratio < threshold else 0.0)
    return best


@dataclass
class Scores:
    """Accumulates per-question results and summarises them (overall, per question type and per template)."""

    rows: list[tuple[str, int, int]] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    texts: list[float | None] = field(default_factory=list)
    """Each question's :func:`anls` (None: its answer is not words, so it has no text score)."""

    def add(self, kind: str, inter: int, union: int, template: str = "", text: float | None = None) -> None:
        self.rows.append((kind, inter, union))
        self.templates.append(template)
        self.texts.append(text)

    @staticmethod
    def _summary(rows: list[tuple[str, int, int]], texts: list[float | None] | None = None) -> dict:
        """n, gIoU and cIoU of ``rows`` and, where some have a text score, their number and mean ANLS; a score
        with nothing to average is None (JSON null), never NaN."""
        ious = [i / u if u else 1.0 for _, i, u in rows]
        inter, union = sum(r[1] for r in rows), sum(r[2] for r in rows)
        out = {
            "n": len(rows),
            "gIoU": float(np.mean(ious)) if ious else None,
            "cIoU": inter / union if union else None,
        }
        scored = [t for t in texts or [] if t is not None]
        if scored:
            out["n_text"] = len(scored)
            out["ANLS"] = float(np.mean(scored))
        return out

    def summary(self) -> dict:
        """Scores overall, per question type (``mIoU``: the mean of the types' gIoU; ``mANLS``: the mean of the
        ANLS of the types that have text answers) and per template."""
        by_type: dict[str, list] = defaultdict(list)
        texts_by_type: dict[str, list] = defaultdict(list)
        for r, t in zip(self.rows, self.texts):
            by_type[r[0]].append(r)
            texts_by_type[r[0]].append(t)
        per_type = {t: self._summary(rs, texts_by_type[t]) for t, rs in sorted(by_type.items())}
        out = self._summary(self.rows, self.texts)
        out["mIoU"] = float(np.mean([s["gIoU"] for s in per_type.values()])) if per_type else None
        with_text = [s["ANLS"] for s in per_type.values() if "ANLS" in s]
        if with_text:
            out["mANLS"] = float(np.mean(with_text))
        out["per_type"] = per_type
        by_template: dict[str, list] = defaultdict(list)
        for t, r in zip(self.templates, self.rows):
            if t:
                by_template[t].append(r)
        if by_template:
            out["per_template"] = {t: self._summary(rs) for t, rs in sorted(by_template.items())}
        return out
