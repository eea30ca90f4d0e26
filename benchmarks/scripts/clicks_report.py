"""The tables of docs/engine.md's "Clicks" section, from the committed JSON of ``clicks.py`` and ``refine_time.py``.

    python benchmarks/scripts/clicks_report.py \\
        --curve "seed 0=benchmarks/results/docjepa/clicks/clicks.json" \\
        --curve "seed 1=benchmarks/results/docjepa/clicks-seed1/clicks.json" \\
        --time benchmarks/results/docjepa/engine/refine-time.json --markdown docs/engine.md

replaces what lies between ``<!-- clicks-curve:start -->`` / ``<!-- clicks-curve:end -->`` and
``<!-- refine-time:start -->`` / ``<!-- refine-time:end -->`` in the Markdown file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from docsections import fill_section

SETS = ("held-out synthetic", "real pages")


def curve_table(runs: list[tuple[str, dict]]) -> str:
    """One row per (run, model): mIoU after each number of clicks on each question set, 3 clicks in bold."""
    clicks = runs[0][1]["clicks"]
    head = " / ".join(map(str, clicks))
    lines = [
        f"| pre-training | model | click rules | held-out synthetic: {head} clicks | real pages: {head} clicks |",
        "|---|---|---|---|---|",
    ]
    for label, result in runs:
        for name, model in result["models"].items():
            cells = []
            for s in SETS:
                curve = model[s]["curve"]
                cells.append(
                    " / ".join(
                        f"**{curve[str(k)]['mIoU']:.3f}**" if k == 3 else f"{curve[str(k)]['mIoU']:.3f}" for k in clicks
                    )
                )
            rules = "yes" if model.get("click_rules", True) else "no"
            lines.append(f"| {label} | {name.split(',')[0]} | {rules} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def time_table(result: dict) -> str:
    """Simulated seconds per mask, per model and mode, with the clicks per mask where refinement is allowed."""
    manual = result["manual"]["seconds_per_mask"]
    modes = ("assisted", "assisted+refine", "semi", "semi+refine")
    lines = [
        "| model | click rules | manual | assisted | assisted + refinement | semi-automatic "
        "| semi-automatic + refinement |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in result.items():
        if not isinstance(runs, dict) or "semi" not in runs:
            continue
        cells = []
        for mode in modes:
            r = runs[mode]
            cell = f"{r['seconds_per_mask']:.2f}"
            if mode.endswith("refine"):
                cell += f" ({r.get('clicks_per_mask', 0.0):.2f} clicks / mask)"
            if mode == "semi+refine":
                cell += f", {r['seconds_per_mask'] / manual:.2f} × manual"
            cells.append(cell)
        rules = "yes" if runs.get("click_rules", True) else "no"
        lines.append(f"| {name.split(',')[0]} | {rules} | {manual:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--curve", action="append", required=True, help="LABEL=clicks.json (repeat)")
    ap.add_argument("--time", type=Path, required=True, help="refine_time.py's JSON")
    ap.add_argument("--markdown", type=Path, required=True)
    args = ap.parse_args()
    runs = []
    for spec in args.curve:
        label, _, path = spec.partition("=")
        runs.append((label, json.loads(Path(path).read_text())))
    for marker, table in (
        ("clicks-curve", curve_table(runs)),
        ("refine-time", time_table(json.loads(args.time.read_text()))),
    ):
        fill_section(args.markdown, f"<!-- {marker}:start -->", f"<!-- {marker}:end -->", table)


if __name__ == "__main__":
    main()
