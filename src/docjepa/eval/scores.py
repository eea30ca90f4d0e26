"""Segmentation metrics as in LISA: gIoU (mean of per-question IoU), cIoU (cumulative intersection over
cumulative union), and mIoU here = the mean over question types of each type's gIoU (types weigh equally)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np


def iou_parts(pred: np.ndarray, target: np.ndarray) -> tuple[int, int]:
    """(intersection, union) pixel counts of two boolean masks."""
    pred, target = pred.astype(bool), target.astype(bool)
    return int((pred & target).sum()), int((pred | target).sum())


def best_answer(pred: np.ndarray, answers: list[np.ndarray]) -> tuple[int, int]:
    """(intersection, union) against the answer the prediction matches best (any valid answer counts)."""
    parts = [iou_parts(pred, a) for a in answers]
    return max(parts, key=lambda p: p[0] / p[1] if p[1] else 1.0)


@dataclass
class Scores:
    """Accumulates per-question results and summarises them (overall, per question type and per template)."""

    rows: list[tuple[str, int, int]] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)

    def add(self, qtype: str, inter: int, union: int, template: str = "") -> None:
        self.rows.append((qtype, inter, union))
        self.templates.append(template)

    @staticmethod
    def _summary(rows: list[tuple[str, int, int]]) -> dict:
        """n, gIoU and cIoU of ``rows``; a score with nothing to average is None (JSON null), never NaN."""
        ious = [i / u if u else 1.0 for _, i, u in rows]
        inter, union = sum(r[1] for r in rows), sum(r[2] for r in rows)
        return {
            "n": len(rows),
            "gIoU": float(np.mean(ious)) if ious else None,
            "cIoU": inter / union if union else None,
        }

    def summary(self) -> dict:
        by_type: dict[str, list] = defaultdict(list)
        for r in self.rows:
            by_type[r[0]].append(r)
        per_type = {t: self._summary(rs) for t, rs in sorted(by_type.items())}
        out = self._summary(self.rows)
        out["mIoU"] = float(np.mean([s["gIoU"] for s in per_type.values()])) if per_type else None
        out["per_type"] = per_type
        by_template: dict[str, list] = defaultdict(list)
        for t, r in zip(self.templates, self.rows):
            if t:
                by_template[t].append(r)
        if by_template:
            out["per_template"] = {t: self._summary(rs) for t, rs in sorted(by_template.items())}
        return out
