"""Mask answers against word answers, and the per-question choice between them (``DocumentPredictor.answer_path``).

    python benchmarks/scripts/word_answers.py --checkpoint runs/demo/finetune \\
        --calib runs/demo/data/calib runs/demo/data/real-calib --heldout runs/demo/data/eval \\
        --real runs/demo/real-benchmark/pages --out benchmarks/results/docjepa/word-answers/demo-seed0-paths.json

Each set is scored once (``evaluate(keep_rows=True)``): every question gets the IoU of the ``mask`` path (the
chosen mask snapped to the OCR words it covers, the word span when it covers no word's centre; scored once
more without that fallback: ``mask_alone``) and of the ``words`` path (the word decoder's span,
``docjepa.inference.word_answer.word_span``), and the word decoder's confidence. ``auto`` answers with words when
that confidence reaches a threshold, chosen on the calibration pages only as ``docjepa calibrate`` chooses it
(``eval.calibrate.fit_words_threshold``), then applied unchanged to the held-out synthetic questions and to the
real-page benchmark (``DEMO/real-benchmark/pages``, built by ``docjepa demo`` or ``docjepa benchmark real run``).
Writes per-kind gIoU of each path per set.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def summary(rows: list[dict], pick) -> dict:
    """Per-kind gIoU and mIoU (the mean over kinds) of the IoUs ``pick(row)``."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(pick(r))
    per = {k: round(sum(v) / len(v), 4) for k, v in sorted(by_kind.items())}
    return {"mIoU": round(sum(per.values()) / len(per), 4), "n": len(rows), "per_kind": per}


def main() -> None:
    from docjepa.data.split import SplitConfig
    from docjepa.eval.calibrate import WORDS_GRID, auto_iou, calibration_rows, fit_words_threshold, miou_by_set
    from docjepa.eval.evaluate import evaluate
    from docjepa.inference.predictor import DocumentPredictor

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--calib", type=Path, nargs="+", required=True, help="calibration pages: the threshold's only data")
    ap.add_argument("--heldout", type=Path, required=True, help="synthetic evaluation pages (their held-out part)")
    ap.add_argument("--real", type=Path, default=None, help="the real-page benchmark's pages")
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    predictor = DocumentPredictor.from_pretrained(args.checkpoint)
    predictor.policy.calibration = None  # every row's answer is then the mask path's; both paths are scored anyway
    sets = [
        ("calib", args.calib, SplitConfig([], 0), "all", None),
        ("heldout", [args.heldout], SplitConfig(), "heldout", args.limit),
    ]
    if args.real:
        sets.append(("real", [args.real], SplitConfig([], 0), "all", None))
    rows: dict[str, list[dict]] = {}
    result: dict = {"checkpoint": str(args.checkpoint), "grid": list(WORDS_GRID), "sets": {}}
    for name, roots, split, part, limit in sets:
        if name == "calib":  # tagged by folder, as docjepa calibrate fits the threshold
            rows[name] = calibration_rows(predictor, roots, progress=False)
        else:
            scored = evaluate(predictor, roots, split, part=part, limit=limit, progress=False, keep_rows=True)
            rows[name] = scored["rows"]
        result["sets"][name] = {
            "questions": len(rows[name]),
            "baseline": summary(rows[name], lambda x: x["baseline_iou"]),
        }
        predictor.policy.word_answers = False  # the mask alone: no word span where it covers no word
        alone = evaluate(predictor, roots, split, part=part, limit=limit, progress=False, keep_rows=True)["rows"]
        predictor.policy.word_answers = True
        result["sets"][name]["mask_alone"] = summary(alone, lambda x: x["iou"])
    best, fitted = fit_words_threshold(rows["calib"])  # as docjepa calibrate chooses it
    result["calib_fit"] = {"mIoU_by_threshold": fitted, "mIoU_by_set": miou_by_set(rows["calib"]), "threshold": best}
    for name, rs in rows.items():
        entry = result["sets"][name]
        entry["mask"] = summary(rs, lambda x: x["paths"]["mask"])
        entry["words"] = summary(rs, lambda x: x["paths"]["words"])
        entry["auto"] = summary(rs, auto_iou(best))
        entry["auto_words_share"] = round(sum(x["words_confidence"] >= best for x in rs) / len(rs), 3)
        print(
            f"{name:8s} baseline {entry['baseline']['mIoU']:.3f}  mask alone {entry['mask_alone']['mIoU']:.3f}  "
            f"mask {entry['mask']['mIoU']:.3f}  "
            f"words {entry['words']['mIoU']:.3f}  auto@{best} {entry['auto']['mIoU']:.3f} "
            f"({entry['auto_words_share']:.0%} words)",
            flush=True,
        )
        for kind in entry["mask"]["per_kind"]:
            got = [entry[path]["per_kind"][kind] for path in ("mask", "words", "auto")]
            print(f"    {kind:14s} mask {got[0]:.3f}  words {got[1]:.3f}  auto {got[2]:.3f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
