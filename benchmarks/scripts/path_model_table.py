"""The docs' table of answer paths under a calibrated path model, from the committed results of one run.

    python benchmarks/scripts/path_model_table.py --markdown docs/docjepa-extract.md

Columns: the mask alone, the word span alone, and ``auto`` (the path the calibration's path model chooses per
question; ``docjepa.inference.path_choice``). Rows: the business validation pages (``business/RUN.json``, from
``business_pages.py``, which scores each path alone beside the predictor's answer), the real-page benchmark
(``business/real.json``: RUN-mask measured before the model was calibrated, when ``auto`` answers with the mask;
RUN after) and other generators' invoices (``foreign/RUN-words.json`` with ``--answer-path words``,
``foreign/RUN.json`` with ``auto``). "–": not measured for that path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

START, END = "<!-- path-model:start -->", "<!-- path-model:end -->"
RUN = "wider-1000-path-model"
GROUPS = {
    "business pages, `key` mIoU": "kind: key",
    "business pages, `field` mIoU": "kind: field",
    "held-out family (`boxed`), mIoU": "held-out family (boxed)",
    "held-out language (Italian), mIoU": "held-out language (it)",
    "all business questions, mIoU": "all",
}


def table(results: Path, run: str = RUN) -> str:
    """The markdown table for ``run``'s committed results under ``results`` (benchmarks/results/docjepa)."""
    business = json.loads((results / f"business/{run}.json").read_text())["scores"]
    real = json.loads((results / "business/real.json").read_text())["models"]
    foreign = {
        path: json.loads((results / f"foreign/{name}.json").read_text())["scores"]["by_generator"]["all"]["all"]
        for path, name in (("words", f"{run}-words"), ("auto", run))
    }
    lines = ["| | mask | word span | auto (path model) |", "|---|---|---|---|"]
    for name, group in GROUPS.items():
        g = business[group]
        lines.append(f"| {name} | {g['mask mIoU']:.3f} | {g['words mIoU']:.3f} | {g['model mIoU']:.3f} |")
    mask, auto = real[f"{run}-mask"]["mIoU"], real[run]["mIoU"]
    lines.append(f"| real pages (structure questions), mIoU | {mask:.3f} | – | {auto:.3f} |")
    pct = {k: f"{v['model exact']:.0%}".replace("%", " %") for k, v in foreign.items()}
    lines.append(f"| other generators' invoices, exact answers | – | {pct['words']} | {pct['auto']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/docjepa"))
    ap.add_argument("--run", default=RUN)
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    args = ap.parse_args(argv)
    text = table(args.results, args.run)
    from docsections import fill_section

    for doc in args.markdown:
        fill_section(doc, START, END, text)
    print(text)
    return text


if __name__ == "__main__":
    main()
