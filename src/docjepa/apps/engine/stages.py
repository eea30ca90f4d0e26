"""The engine's ways of proposing, beyond a person asking: questions made from the page itself and from the
project's question bank (semi-automatic), uncertainty ranking (which proposals a person should see first), and
the stability filter and thresholds of automatic labels (as SAM's automatic stage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from ...data.record import Page, Word
from ...data.synth.phrasings import EXTRA

LABEL_TEMPLATES = ("What is the {l}?", "Where is the {l} field?")
"""Questions asked of every label the page shows ("Account number:" → "What is the account number?")."""
STABILITY_OFFSET = 1.0
"""Mask-logit threshold shift of the stability score: IoU of the mask at logit > +offset and at logit > −offset."""


BANK_WORDINGS = 3
"""Extra wordings of each template asked by the bank: more wordings of one question propose the same regions, at
a decoder pass each."""


def question_bank() -> list[str]:
    """Questions from the project's templates and their first :data:`BANK_WORDINGS` extra wordings that need no
    slot (asked of every page)."""
    out = []
    for key, more in EXTRA.items():
        out += [q for q in (key, *more[:BANK_WORDINGS]) if "{" not in q]
    return sorted(set(out))


def _lines(words: list[Word]) -> list[list[int]]:
    """Word indices grouped into lines: consecutive words whose vertical centres lie within half a word height."""
    lines: list[list[int]] = []
    for i, w in enumerate(words):
        cy, h = (w.box[1] + w.box[3]) / 2, w.box[3] - w.box[1]
        if lines:
            last = words[lines[-1][-1]]
            if abs((last.box[1] + last.box[3]) / 2 - cy) <= h / 2 and w.box[0] >= last.box[0]:
                lines[-1].append(i)
                continue
        lines.append([i])
    return lines


def page_labels(page: Page, max_words: int = 4) -> list[str]:
    """Key labels the page shows: up to ``max_words`` words of a line ending in a colon ("Account number:")."""
    labels = []
    for line in _lines(page.words):
        for end, i in enumerate(line):
            if not page.words[i].text.endswith(":"):
                continue
            start = end  # walk back over close words of the same phrase (a wide gap or a colon ends it)
            while start > 0 and end - start + 1 < max_words:
                prev, cur = page.words[line[start - 1]], page.words[line[start]]
                gap, height = cur.box[0] - prev.box[2], cur.box[3] - cur.box[1]
                if prev.text.endswith(":") or gap > 1.5 * height:
                    break
                start -= 1
            text = " ".join(page.words[k].text for k in line[start : end + 1]).rstrip(":").strip()
            if text and re.search(r"[A-Za-z]", text):
                labels.append(text.lower())
    return list(dict.fromkeys(labels))


def page_questions(page: Page, bank: bool = True) -> list[tuple[str, str]]:
    """(question, kind) the engine proposes for a page: one per label it shows, then the question bank."""
    out = [(LABEL_TEMPLATES[0].format(l=label), "key") for label in page_labels(page)]
    if bank:
        out += [(q, "bank") for q in question_bank()]
    return out


def pairwise_disagreement(masks: torch.Tensor) -> float:
    """1 − mean pairwise IoU of N boolean masks (N, H, W): 0 when the candidates agree."""
    m = masks.flatten(1).float()
    inter = m @ m.T
    area = m.sum(1)
    union = area[:, None] + area[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(union))
    n = m.shape[0]
    if n < 2:
        return 0.0
    off = iou[~torch.eye(n, dtype=torch.bool)]
    return float(1 - off.mean())


def uncertainty(logits: torch.Tensor, scores: torch.Tensor, best: int) -> float:
    """How unsure the model is of a proposal, higher = show it first: (1 − predicted IoU of the chosen mask) plus
    the candidates' disagreement, each in [0, 1]."""
    return (1 - float(scores[best])) + pairwise_disagreement(logits > 0)


def stability(logits: torch.Tensor, offset: float = STABILITY_OFFSET) -> float:
    """SAM's stability score of one mask's logits: IoU of {logit > +offset} and {logit > −offset} (1 when the
    threshold barely matters; 0 for an empty mask)."""
    hi, lo = (logits > offset).sum(), (logits > -offset).sum()
    return float(hi / lo) if lo > 0 else 0.0


@dataclass
class Thresholds:
    """Which automatic labels are kept: predicted IoU and stability at least these."""

    min_iou: float
    min_stability: float
    precision: float
    """Fraction of kept labels agreeing with people's (IoU ≥ ``agree``) on the pages the thresholds were chosen on."""
    coverage: float
    """Fraction of those labels kept."""
    n: int


def choose_thresholds(pred_iou, stab, true_iou, agree: float = 0.8, target: float = 0.9) -> Thresholds:
    """The (predicted IoU, stability) thresholds that keep the most labels whose agreement with people's answers
    (true IoU ≥ ``agree``) is at least ``target``, chosen on human-annotated questions. When no setting reaches
    the target, the one with the highest agreement (ties: more kept)."""
    p, s, t = (np.asarray(x, dtype=float) for x in (pred_iou, stab, true_iou))
    good = t >= agree
    best = None
    grid = np.linspace(0, 1, 41)
    for mi in np.unique(np.concatenate([[0.0], np.quantile(p, grid)])) if len(p) else []:
        for ms in np.unique(np.concatenate([[0.0], np.quantile(s, grid)])):
            keep = (p >= mi) & (s >= ms)
            if not keep.any():
                continue
            prec, cov = float(good[keep].mean()), float(keep.mean())
            key = (prec >= target, cov if prec >= target else prec, cov)
            if best is None or key > best[0]:
                best = (key, Thresholds(float(mi), float(ms), prec, cov, len(p)))
    if best is None:
        return Thresholds(1.0, 1.0, 0.0, 0.0, len(p))
    return best[1]
