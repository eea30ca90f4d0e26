"""Answers from the mask alone against answers that fall back to the word decoder's words.

    python benchmarks/scripts/word_answers.py --checkpoint runs/demo/finetune \\
        --heldout runs/demo/data/eval --real runs/demo/real-benchmark/pages \\
        --out benchmarks/results/docjepa/word-answers/demo-seed0.json

Scores one model twice with ``DocumentPredictor(word_answers=False)`` (the chosen mask, snapped to the OCR words
it covers) and ``word_answers=True`` (the default: when that mask covers no words it agrees with, the words the
word decoder picks), on the held-out synthetic questions (``--limit``) and on the real-page benchmark's pages
(``DEMO/real-benchmark/pages``, built by ``docjepa demo`` or ``docjepa benchmark real run``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from docjepa.data.split import SplitConfig
    from docjepa.eval.evaluate import evaluate
    from docjepa.inference.predictor import DocumentPredictor

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True, help="synthetic evaluation pages (their held-out part)")
    ap.add_argument("--real", type=Path, default=None, help="the real-page benchmark's pages")
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sets = [("heldout", args.heldout, SplitConfig(), "heldout")]
    if args.real:
        sets.append(("real", args.real, SplitConfig([], 0), "all"))
    result: dict = {"checkpoint": str(args.checkpoint)}
    for arm, words in (("mask", False), ("mask, else words", True)):
        predictor = DocumentPredictor.from_pretrained(args.checkpoint, word_answers=words)
        for name, root, split, part in sets:
            r = evaluate(predictor, [root], split, part=part, limit=args.limit, progress=False)
            result.setdefault(name, {"baseline": r["baseline"]})[arm] = r["model"]
            per = {k: round(v["gIoU"], 3) for k, v in r["model"]["per_type"].items()}
            print(f"{name:8s} {arm:17s} mIoU {r['model']['mIoU']:.3f}", per, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
