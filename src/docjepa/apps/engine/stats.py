"""The dashboard: annotations per day and per person, seconds per mask, the shares accepted as proposed, refined
with clicks, edited and drawn, and edits per mask by model version; as JSON and as a figure (``docjepa engine
stats`` writes both)."""

from __future__ import annotations

import io
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import select

from .db import Database
from .tables import Annotation, User


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


RATES = {"accepted": "accepted_as_is_rate", "refined": "refined_rate", "edited": "edited_rate", "drawn": "drawn_rate"}
"""The outcomes shown apart (the server decides each from the saved mask: docjepa.apps.engine.store.proposals)."""


def _summary(rows: list[tuple[float, int, str | None]]) -> dict:
    """rows: (seconds, edits, outcome)."""
    if not rows:
        return {"annotations": 0}
    sec, edits = (np.array(c, dtype=float) for c in list(zip(*rows))[:2])
    outcomes = [r[2] for r in rows]
    return {
        "annotations": len(rows),
        "seconds_per_mask_median": float(np.median(sec)),
        "seconds_per_mask_mean": float(sec.mean()),
        "edits_per_mask_mean": float(edits.mean()),
        **{key: outcomes.count(outcome) / len(rows) for outcome, key in RATES.items()},
    }


def compute(db: Database) -> dict:
    """Counts and rates over every annotation (rejected ones included: they cost the same time)."""
    with db.read() as s:
        names = dict(s.execute(select(User.id, User.name)).all())
        anns = list(
            s.execute(
                select(
                    Annotation.created_at,
                    Annotation.user_id,
                    Annotation.model_version,
                    Annotation.seconds,
                    Annotation.edits,
                    Annotation.outcome,
                    Annotation.review,
                    Annotation.answerable,
                )
            ).all()
        )
    per_day: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_user, by_model = defaultdict(list), defaultdict(list)
    reviews = defaultdict(int)
    for created, uid, model, sec, edits, outcome, review, _answerable in anns:
        who = names.get(uid, str(uid))
        per_day[_day(created)][who] += 1
        row = (sec, edits, outcome)
        by_user[who].append(row)
        by_model[model or "(no proposal)"].append(row)
        reviews[review] += 1
    return {
        "annotations": len(anns),
        "reviews": dict(reviews),
        "per_day": {d: dict(v) for d, v in sorted(per_day.items())},
        "by_person": {u: _summary(r) for u, r in sorted(by_user.items())},
        "by_model_version": {m: _summary(r) for m, r in sorted(by_model.items())},
    }


def plain(text: str) -> str:
    """A person's or a model's name as matplotlib draws it literally: a ``$`` would start mathtext, and a name such
    as ``$\\notacommand$`` would fail the whole figure."""
    return text.replace("$", r"\$")


LEGEND_PEOPLE = 8
"""People named in the per-day legend (those with most annotations); the rest are stacked as one "others" bar."""


def per_day_series(per_day: dict, most: int = LEGEND_PEOPLE) -> dict[str, list[int]]:
    """Annotations per day of the ``most`` people with most annotations (by name when tied), then of everyone else
    together as ``others (N people)``: the stacked bars of the figure, in order."""
    days = list(per_day)
    totals: dict[str, int] = {}
    for d in days:
        for person, n in per_day[d].items():
            totals[person] = totals.get(person, 0) + n
    named = sorted(totals, key=lambda p: (-totals[p], p))[:most]
    series = {plain(p): [per_day[d].get(p, 0) for d in days] for p in named}
    rest = [p for p in totals if p not in named]
    if rest:
        series[f"others ({len(rest)} people)"] = [sum(per_day[d].get(p, 0) for p in rest) for d in days]
    return series


def plot(stats: dict) -> bytes:
    """The dashboard figure as PNG (see :func:`figure`)."""
    import matplotlib.pyplot as plt

    fig = figure(stats)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def figure(stats: dict):
    """A 2×2 figure: annotations per day (stacked by person: the most active ones named, the rest as others),
    seconds per mask by person, the shares accepted as proposed / refined / edited / drawn and edits per mask by
    model version."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    days = list(stats["per_day"])
    series = per_day_series(stats["per_day"])
    ax = axes[0][0]
    bottom = np.zeros(len(days))
    for name, counts in series.items():
        vals = np.array(counts, dtype=float)
        ax.bar(days, vals, bottom=bottom, label=name)
        bottom += vals
    ax.set_title("annotations per day")
    if series:
        ax.set_ylim(0, max(1.0, float(bottom.max())) * 1.6)  # headroom above the bars for the legend
        ax.legend(fontsize=7, ncol=3, loc="upper left", framealpha=0.85)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)

    def bars(ax, table: dict, key: str, title: str) -> None:
        labels = [k for k, v in table.items() if v.get("annotations")]
        ax.bar(range(len(labels)), [table[k][key] for k in labels], color="tab:blue")
        ax.set_xticks(range(len(labels)), [plain(k) for k in labels], rotation=20, fontsize=8, ha="right")
        ax.set_title(title)

    bars(axes[0][1], stats["by_person"], "seconds_per_mask_median", "seconds per mask (median), by person")
    ax = axes[1][0]  # what became of the proposals, stacked: accepted as proposed, refined, edited, drawn
    table = {k: v for k, v in stats["by_model_version"].items() if v.get("annotations")}
    bottom = np.zeros(len(table))
    for outcome, key in RATES.items():
        vals = np.array([v[key] for v in table.values()])
        ax.bar(range(len(table)), vals, bottom=bottom, label=outcome)
        bottom += vals
    ax.set_xticks(range(len(table)), [plain(k) for k in table], rotation=20, fontsize=8, ha="right")
    ax.set_title("share of annotations, by model version")
    ax.set_ylim(0, 1)
    if table:
        ax.legend(fontsize=8)
    bars(axes[1][1], stats["by_model_version"], "edits_per_mask_mean", "edits per mask (mean), by model version")
    fig.suptitle(f"data engine: {stats['annotations']} annotations")
    fig.tight_layout()
    return fig


def write(db: Database, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    stats = compute(db)
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    (out / "stats.png").write_bytes(plot(stats))
    return {"annotations": stats["annotations"], "json": str(out / "stats.json"), "plot": str(out / "stats.png")}
