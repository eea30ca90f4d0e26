"""The docs' table comparing the joint reader with and without the relative-layout bias (docs/docjepa-extract.md,
"Where two words stand"), from the runs' committed results:

    python benchmarks/scripts/relative_layout_table.py --markdown docs/docjepa-extract.md

Each run is scored by ``business_pages.py`` (``business/NAME.json``), ``foreign_layouts.py``
(``foreign/NAME.json``) and timed side by side by ``question_cost.py`` (``business/relative-cost.json``), NAME and
the name in the cost file as in :data:`RUNS`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

START, END = "<!-- relative-layout:start -->", "<!-- relative-layout:end -->"
RUNS = {
    "absolute layout alone": ("absolute-500", "absolute"),
    "relative bias, gain 1": ("relative-gain1-500", "gain1"),
    "relative bias, gain 10": ("relative-500", "gain10"),
}
"""Column heading → the run's results' name and its model's name in the cost file."""
BUSINESS = (
    ("`key`, word span", "kind: key", "words mIoU"),
    ("`key`, mask", "kind: key", "mask mIoU"),
    ("`field`, word span", "kind: field", "words mIoU"),
    ("`field`, mask", "kind: field", "mask mIoU"),
    ("held-out family (`boxed`), word span", "held-out family (boxed)", "words mIoU"),
    ("held-out family (`boxed`), mask", "held-out family (boxed)", "mask mIoU"),
    ("held-out language (Italian), word span", "held-out language (it)", "words mIoU"),
    ("held-out language (Italian), mask", "held-out language (it)", "mask mIoU"),
    ("questions worded as no training question, word span", "held-out wording", "words mIoU"),
    ("all questions, word span", "all", "words mIoU"),
    ("all questions, mask", "all", "mask mIoU"),
)
"""Rows from the business pages: heading, the group, the score (mIoU)."""
FIELDS = ("number", "date", "due date", "total", "tax", "seller", "buyer")


def row(heading: str, cells) -> str:
    """One markdown row: the heading, then one cell per run."""
    return f"| {heading} | " + " | ".join(cells) + " |"


def table(results: Path) -> str:
    """The markdown table of the runs of :data:`RUNS`, one column each."""
    names = [name for name, _ in RUNS.values()]
    business = [json.loads((results / f"business/{n}.json").read_text())["scores"] for n in names]
    foreign = [json.loads((results / f"foreign/{n}.json").read_text())["scores"]["by_generator"] for n in names]
    cost = json.loads((results / "business/relative-cost.json").read_text())["question_ms"]
    lines = ["| | " + " | ".join(RUNS) + " |", "|---|" + "---|" * len(RUNS)]
    for heading, group, score in BUSINESS:
        lines.append(row(f"business pages, {heading}, mIoU", (f"{b[group][score]:.3f}" for b in business)))
    lines.append(row("business pages, exact answers (the mask)", (f"{b['all']['model exact']:.0%}" for b in business)))
    for field in ("all fields", *FIELDS):
        key = "all" if field == "all fields" else field
        exact = (f"{f['all'][key]['model exact']:.0%}" for f in foreign)
        lines.append(row(f"other generators' invoices, exact: {field}", exact))
    times = (cost[timed] for _, timed in RUNS.values())
    lines.append(row("a further question, median / p90", (f"{c['median']:.0f} / {c['p90']:.0f} ms" for c in times)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/docjepa"))
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    args = ap.parse_args(argv)
    from docsections import fill_section

    text = table(args.results)
    for doc in args.markdown:
        fill_section(doc, START, END, text)
    print(text)
    return text


if __name__ == "__main__":
    main()
