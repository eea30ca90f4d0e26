"""The docs' tables that compare fine-tuned models differing in one setting (docs/docjepa-extract.md, "Where two words
stand", "A value's key beside it", "Keys further away", "An address block's further lines", "A pass over the
training questions", "Other numbers on the page", "Keys worded alike", "Choosing within the calibration pages' noise",
"Every wording in training", "The mean of a run's last checkpoints", "Two values keyed on stacked lines", "A
keyed value from its key", "The model shipped now" and "Three draws and their mean"), from the runs' committed
results:

    python benchmarks/scripts/runs_table.py --section relative-layout --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section key-neighbours --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section key-paths --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section further-lines --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section whole-pass --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section other-numbers --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section keys-alike --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section within-noise --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section all-wordings --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section averaged --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section keyed-lines --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section key-to-value --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section shipped-now --markdown docs/docjepa-extract.md
    python benchmarks/scripts/runs_table.py --section three-draws --markdown docs/docjepa-extract.md

Each run is scored by ``business_pages.py`` (``business/NAME.json``; on a section's further pages
``business/NAME-SUFFIX.json``), ``foreign_layouts.py`` (``foreign/NAME.json``) and, where the section has a cost
file, timed side by side by ``question_cost.py``, NAME and the name in the cost file as in the section's runs
(:data:`SECTIONS`); where all of a section's runs were scored
on the real pages (``docjepa benchmark real run``, kept under NAME in ``business/real.json``), their mIoU there too.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Section:
    """One table of the docs: its markers' name, its runs and the file that timed them."""

    name: str
    runs: dict[str, tuple[str, str]]
    """Column heading → the run's results' name and its model's name in the cost file."""
    cost: str | None = None
    """The cost file, under the results folder (None: the runs answer at the same cost, and were not timed)."""
    calibrated: bool = False
    """Each run answers with the thresholds ``docjepa calibrate`` chose for it on the same pages (else all with
    the same defaults)."""
    also: tuple[str, str] | None = None
    """Further business pages every run was scored on too: (the suffix of those results, ``business/NAME-SUFFIX.json``;
    the rows' heading), each adding rows for :data:`ALSO`."""
    values: tuple[str, ...] = ()
    """Fields whose questions on the business pages (and on the further pages) get rows of their own."""
    predicted: bool = False
    """Rows of :data:`PREDICTED` too: the business pages as ``predict`` answers them (the span or the mask per
    question, by the run's calibration)."""

    @property
    def markers(self) -> tuple[str, str]:
        return f"<!-- {self.name}:start -->", f"<!-- {self.name}:end -->"


SECTIONS = {
    s.name: s
    for s in (
        Section(
            "relative-layout",
            {
                "absolute layout alone": ("absolute-500", "absolute"),
                "relative bias, gain 1": ("relative-gain1-500", "gain1"),
                "relative bias, gain 10": ("relative-500", "gain10"),
            },
            "business/relative-cost.json",
        ),
        Section(
            "key-neighbours",
            {
                "without key neighbours": ("relative-balanced-1000", "without"),
                "with key neighbours": ("neighbours-1000", "neighbours"),
            },
            "business/neighbours-cost.json",
            calibrated=True,
        ),
        Section(
            "key-paths",
            {
                "five paths (seed 0)": ("neighbours-1000", "five"),
                "five paths (seed 1)": ("neighbours-1000-seed1", "five-seed1"),
                "ten paths, no `L` (seed 0)": ("above-1000", "ten"),
                "eleven paths (seed 0)": ("paths-1000", "eleven"),
                "eleven paths (seed 1)": ("paths-1000-seed1", "eleven-seed1"),
            },
            "business/paths-cost.json",
            calibrated=True,
        ),
        Section(
            "further-lines",
            {
                "seed 0, nearest lines": ("neighbours-1000", "five"),
                "seed 0, further lines": ("neighbours-1000-further", "five-further"),
                "seed 1, nearest lines": ("neighbours-1000-seed1", "five-seed1"),
                "seed 1, further lines": ("neighbours-1000-seed1-further", "five-seed1-further"),
            },
            calibrated=True,
        ),
        Section(
            "whole-pass",
            {
                "1,000 steps (seed 0)": ("neighbours-1000-further", "five-further"),
                "1,000 steps (seed 1)": ("neighbours-1000-seed1-further", "five-seed1-further"),
                "2,000 steps (seed 0)": ("neighbours-2000", "five-2000"),
            },
            calibrated=True,
        ),
        Section(
            "other-numbers",
            {
                "2,000 steps": ("neighbours-2000", "five-2000"),
                "2,000 steps, other numbers on the training pages": ("numbers-2000", "numbers-2000"),
            },
            calibrated=True,
            also=("numbers", "business pages printing other numbers"),
        ),
        Section(
            "keys-alike",
            {
                "2,000 steps, other numbers": ("numbers-2000", "numbers-2000"),
                "2,000 steps, other numbers, keys worded alike": ("alike-2000", "alike-2000"),
            },
            calibrated=True,
            also=("alike", "business pages keying a third of their dates and totals alike"),
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "within-noise",
            {
                "other numbers, the best rule": ("numbers-2000", "numbers-2000"),
                "other numbers, one standard error": ("numbers-2000-se", "numbers-2000-se"),
                "keys worded alike, the best rule": ("alike-2000", "alike-2000"),
                "keys worded alike, one standard error": ("alike-2000-se", "alike-2000-se"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "all-wordings",
            {
                "keys worded alike, a quarter of the wordings held out": ("alike-2000-se", "alike-2000-se"),
                "keys worded alike, every wording trained": ("wordings-2000", "wordings-2000"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "averaged",
            {
                "first run, the last checkpoint": ("alike-2000", "alike-2000"),
                "second run, the last checkpoint": ("alike-2000-rerun", "alike-2000-rerun"),
                "second run, the mean of its second half's checkpoints": (
                    "alike-2000-rerun-avg",
                    "alike-2000-rerun-avg",
                ),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "keyed-lines",
            {
                "second run, stacked keyed lines joined": ("alike-2000-rerun", "alike-2000-rerun"),
                "second run, kept apart": ("alike-2000-rerun-keyed", "alike-2000-rerun-keyed"),
                "seed 1, kept apart": ("alike-2000-seed1", "alike-2000-seed1"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "key-to-value",
            {
                "second run, from the most likely word": ("alike-2000-rerun-keyed", "alike-2000-rerun-keyed"),
                "second run, from the key": ("alike-2000-rerun-fill", "alike-2000-rerun-fill"),
                "seed 1, from the most likely word": ("alike-2000-seed1", "alike-2000-seed1"),
                "seed 1, from the key": ("alike-2000-seed1-fill", "alike-2000-seed1-fill"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "shipped-now",
            {
                "calibrated on business and real pages": ("alike-2000-rerun-fill", "alike-2000-rerun-fill"),
                "also on the first recipe's pages (shipped)": ("alike-2000-rerun-ship", "alike-2000-rerun-ship"),
                "seed 2, the same recipe and calibration": ("alike-2000-seed2", "alike-2000-seed2"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
        ),
        Section(
            "three-draws",
            {
                "second run (shipped)": ("alike-2000-rerun-pairs", "alike-2000-rerun-pairs"),
                "seed 1": ("alike-2000-seed1-pairs", "alike-2000-seed1-pairs"),
                "seed 2": ("alike-2000-seed2-pairs", "alike-2000-seed2-pairs"),
                "the mean of the three runs' weights": ("soup3", "soup3"),
            },
            calibrated=True,
            values=("date", "due date", "tax", "total"),
            predicted=True,
        ),
    )
}
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
PREDICTED = (
    ("`key`, `predict`'s answer", "kind: key", "model mIoU"),
    ("`field`, `predict`'s answer", "kind: field", "model mIoU"),
    ("all questions, `predict`'s answer", "all", "model mIoU"),
)
"""Rows from the business pages as ``predict`` answers them (:attr:`Section.predicted`)."""
ALSO = ("`key`, word span", "`field`, word span", "all questions, word span")
"""The rows of :data:`BUSINESS` that a section's further business pages (:attr:`Section.also`) add."""
FIELDS = ("number", "date", "due date", "total", "tax", "seller", "buyer")


def row(heading: str, cells) -> str:
    """One markdown row: the heading, then one cell per run."""
    return f"| {heading} | " + " | ".join(cells) + " |"


def table(results: Path, section: Section) -> str:
    """The markdown table of the section's runs, one column each."""
    runs = section.runs
    names = [name for name, _ in runs.values()]
    scored = [json.loads((results / f"business/{n}.json").read_text()) for n in names]
    business = [r["scores"] for r in scored]
    foreign = [json.loads((results / f"foreign/{n}.json").read_text())["scores"]["by_generator"] for n in names]
    lines = ["| | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    values = [(f"the {v}, word span", f"asks value: {v}", "words mIoU") for v in section.values]
    for heading, group, score in [*BUSINESS, *(PREDICTED if section.predicted else ()), *values]:
        lines.append(row(f"business pages, {heading}, mIoU", (f"{b[group][score]:.3f}" for b in business)))
    answer = "`predict`'s answer" if section.calibrated else "the mask"
    lines.append(row(f"business pages, exact answers ({answer})", (f"{b['all']['model exact']:.0%}" for b in business)))
    if section.also is not None:
        suffix, pages = section.also
        also = [json.loads((results / f"business/{n}-{suffix}.json").read_text())["scores"] for n in names]
        for heading, group, score in [*(r for r in BUSINESS if r[0] in ALSO), *values]:
            lines.append(row(f"{pages}, {heading}, mIoU", (f"{b[group][score]:.3f}" for b in also)))
        lines.append(row(f"{pages}, exact answers ({answer})", (f"{b['all']['model exact']:.0%}" for b in also)))
    for field in ("all fields", *FIELDS):
        key = "all" if field == "all fields" else field
        exact = (f"{f['all'][key]['model exact']:.0%}" for f in foreign)
        lines.append(row(f"other generators' invoices, exact: {field}", exact))
    real = json.loads((results / "business/real.json").read_text())["models"]
    if all(n in real for n in names):  # runs scored on the real pages (``docjepa benchmark real run``)
        lines.append(row("real pages (structure questions), mIoU", (f"{real[n]['mIoU']:.3f}" for n in names)))
    if section.calibrated:
        lines.append(row("word span rule: span / line-break logit, further lines", map(_rule, scored)))
        lines.append(row("path threshold (`predict` answers with the word span above it)", map(_threshold, scored)))
    if section.cost is not None:
        cost = json.loads((results / section.cost).read_text())["question_ms"]
        times = (cost[timed] for _, timed in runs.values())
        lines.append(row("a further question, median / p90", (f"{c['median']:.0f} / {c['p90']:.0f} ms" for c in times)))
    return "\n".join(lines)


def _rule(result: dict) -> str:
    """The word span's rule a run answered with: its span and line-break thresholds, then the gap and bar of further
    lines ("–": none; results written before they were chosen joined none)."""

    def bar(value) -> str:
        return "–" if value is None else f"{value:g}"

    far = result.get("far_logit")
    further = "–" if far is None else f"{result['line_gap']:g} heights above {far:g}"
    return f"{bar(result['span_logit'])} / {bar(result['line_logit'])}, {further}"


def _threshold(result: dict) -> str:
    """The path model's estimate above which a run's ``predict`` answered with the word span ("never": above 1)."""
    t = result.get("words_threshold")
    return "–" if t is None else ("never" if t > 1 else f"{t:g}")


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/docjepa"))
    ap.add_argument("--section", choices=sorted(SECTIONS), required=True)
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    args = ap.parse_args(argv)
    from docsections import fill_section

    section = SECTIONS[args.section]
    text = table(args.results, section)
    for doc in args.markdown:
        fill_section(doc, *section.markers, text)
    print(text)
    return text


if __name__ == "__main__":
    main()
