"""Which path model ``predict``'s ``auto`` answer needs: the path model (``docjepa.inference.path_choice``) fitted on
one model's calibration questions with the six features it had before or all eight (the last two: each decoder's
belief in the other's answer), linear or with the features' pairwise products, each with the threshold
``docjepa calibrate`` would choose for it; scored on the calibration folders it was fitted on and on business
validation pages it never saw.

    python benchmarks/scripts/path_model_ablation.py --checkpoint runs/business/ship-nocal/model \\
        --calib runs/business/calib runs/business/real-calib runs/shipped/data/calib --val runs/business/val \\
        --out benchmarks/results/docjepa/business/path-model-ablation.json [--markdown docs/docjepa-extract.md]

The word span is the one the calibration chooses (``fit_span_rule``) on the calibration folders, on both. The
checkpoint's own calibration is not read. The business rows are each question's IoU (``mIoU``: their mean) under
``auto``, per kind and for the held-out family and language as ``business_pages.py`` groups them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

START, END = "<!-- path-model-ablation:start -->", "<!-- path-model-ablation:end -->"
VARIANTS = {"six features, linear": (6, False), "six features, pairs": (6, True)}
VARIANTS |= {"eight features, linear": (8, False), "eight features, pairs (calibrate's)": (8, True)}
"""Column heading → (how many of the features, in their order; with their pairwise products)."""
GROUPS = {"`key`": "kind: key", "`field`": "kind: field", "held-out family (`boxed`)": "held-out family (boxed)"}
GROUPS |= {"held-out language (Italian)": "held-out language (it)", "all questions": "all"}


def variant(rows: list[dict], val: list[dict], count: int, pairs: bool) -> dict:
    """One path model fitted on ``rows``, its threshold, and what ``auto`` reads with them on both."""
    from docjepa.eval.calibrate import auto_iou, balance, by_set, fit_words_threshold, per_kind_miou
    from docjepa.inference.path_choice import FEATURES, fit_path_model

    x = np.array([r["path_features"] for r in rows])
    words, mask = (np.array([r["paths"][k] for r in rows]) for k in ("words", "mask"))
    model = fit_path_model(x, words, mask, balance(rows), pairs=pairs, names=FEATURES[:count])
    for part in (rows, val):
        for r, p in zip(part, model(np.array([r["path_features"] for r in part]))):
            r["path_score"] = float(p)
    threshold, _ = fit_words_threshold(rows)
    auto = auto_iou(threshold)
    return {
        "features": list(model.features),
        "pairs": pairs,
        "words_threshold": threshold,
        "calibration_mIoU": {name: per_kind_miou(part, auto) for name, part in by_set(rows).items()},
        "business_mIoU": by_group(val, auto),
        "business_words_share": float(np.mean([r["path_score"] >= threshold for r in val])),
    }


def by_group(val: list[dict], score) -> dict[str, float]:
    """The mean of ``score`` over each group's business questions (``business_pages.groups``)."""
    from business_pages import groups

    scored: dict[str, list[float]] = {}
    for r in val:
        for g in groups(r):
            scored.setdefault(g, []).append(score(r))
    return {g: float(np.mean(v)) for g, v in scored.items()}


def alone(rows: list[dict], val: list[dict], path: str) -> dict:
    """What one answer path alone reads on the calibration folders and the business pages."""
    from docjepa.eval.calibrate import by_set, per_kind_miou

    def score(r: dict) -> float:
        return r["paths"][path]

    return {
        "calibration_mIoU": {name: per_kind_miou(part, score) for name, part in by_set(rows).items()},
        "business_mIoU": by_group(val, score),
    }


def run(checkpoint: Path, calib: list[Path], val: Path, progress: bool) -> dict:
    from docjepa.eval.calibrate import SPAN_RULES, calibration_rows, fit_span_rule, take_span_rule
    from docjepa.inference.predictor import DocumentPredictor

    predictor = DocumentPredictor.from_pretrained(checkpoint)
    predictor.policy.calibration = None
    rows = calibration_rows(predictor, calib, progress, SPAN_RULES)
    rule, _ = fit_span_rule(rows)
    held = take_span_rule(calibration_rows(predictor, [val], progress, SPAN_RULES), rule)
    out = {"checkpoint": str(checkpoint), "calib": [str(c) for c in calib], "val": str(val), "span_rule": rule}
    out["questions"] = {"calibration": len(rows), "business": len(held)}
    out["alone"] = {path: alone(rows, held, path) for path in ("mask", "words")}
    out["variants"] = {name: variant(rows, held, *spec) for name, spec in VARIANTS.items()}
    return out


def table(result: dict) -> str:
    """Columns: each path alone, then each path model; rows: its threshold, the calibration folders, the business
    pages."""
    columns = {"mask alone": result["alone"]["mask"], "word span alone": result["alone"]["words"]}
    columns |= result["variants"]
    lines = ["| | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]

    def row(heading: str, cells) -> None:
        lines.append(f"| {heading} | " + " | ".join(cells) + " |")

    def threshold(v: dict) -> str:
        t = v.get("words_threshold")
        return "–" if t is None else ("never" if t > 1 else f"{t:g}")

    row("path threshold (the span above it)", map(threshold, columns.values()))
    for folder in result["calib"]:
        cells = (f"{v['calibration_mIoU'][folder]:.3f}" for v in columns.values())
        row(f"calibration folder `{folder}`, per-kind mIoU", cells)
    for heading, group in GROUPS.items():
        row(f"business pages, {heading}, mIoU", (f"{v['business_mIoU'][group]:.3f}" for v in columns.values()))
    share = ("0%", "100%", *(f"{v['business_words_share']:.0%}" for v in result["variants"].values()))
    row("business questions answered with the word span", share)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--calib", type=Path, nargs="+")
    ap.add_argument("--val", type=Path)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/docjepa/business/path-model-ablation.json"))
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.checkpoint is not None:
        if not args.calib or args.val is None:
            ap.error("--checkpoint needs --calib and --val")
        result = run(args.checkpoint, args.calib, args.val, not args.no_progress)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    result = json.loads(args.out.read_text())
    text = table(result)
    from docsections import fill_section

    for doc in args.markdown:
        fill_section(doc, START, END, text)
    print(text)
    return text


if __name__ == "__main__":
    main()
