"""The clicks curve: mIoU after 0, 1, 2, 3 and 5 simulated clicks (docjepa.eval.interactive), per model.

    python benchmarks/scripts/clicks.py --model demo=runs/demo/finetune --model clicks=runs/ft-clicks \\
        --heldout runs/demo/data/eval --real runs/demo/real-benchmark/pages \\
        --out benchmarks/results/docjepa/clicks

``--alone NAME=CHECKPOINT`` scores a model's own answers to the clicks, without the predictor's click rules
(``docjepa.inference.predictor.apply_clicks``). Writes ``OUT/clicks.json`` (per model and question set: the curve, with
per-kind gIoU at each point; and each set's word ceiling, the best an answer of whole OCR words can score:
``docjepa.eval.interactive.word_ceiling``) and ``OUT/clicks.png`` (mIoU against clicks).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from model_arms import add_model_args, model_arms

    from docjepa.data.split import SplitConfig
    from docjepa.eval.interactive import CLICKS, click_curve, word_ceiling
    from docjepa.inference.predictor import DocumentPredictor

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap, "the model's own answers to the clicks, without the predictor's click rules")
    ap.add_argument("--heldout", type=Path, required=True, help="synthetic evaluation pages (their held-out part)")
    ap.add_argument("--real", type=Path, default=None, help="the real-page benchmark's pages")
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sets = [("held-out synthetic", args.heldout, SplitConfig(), "heldout")]
    if args.real:
        sets.append(("real pages", args.real, SplitConfig([], 0), "all"))
    result: dict = {"clicks": list(CLICKS), "models": {}}
    for name, checkpoint, rules in model_arms(args):
        predictor = DocumentPredictor.from_pretrained(checkpoint, click_rules=rules)
        result["models"][name] = {"checkpoint": checkpoint, "click_rules": rules}
        for label, root, split, part in sets:
            curve = click_curve(predictor, [root], split, part, limit=args.limit, progress=False)
            result["models"][name][label] = curve
            print(name, label, {k: round(v["mIoU"], 3) for k, v in curve["curve"].items()}, flush=True)
    result["word_ceiling"] = {
        label: word_ceiling([root], split, predictor.model.config.mask_size, part, args.limit)
        for label, root, split, part in sets
    }
    print("word ceiling", {k: round(v["mIoU"], 3) for k, v in result["word_ceiling"].items()}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "clicks.json").write_text(json.dumps(result, indent=1) + "\n")
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 3.6), squeeze=False)
    for ax, (label, *_rest) in zip(axes[0], sets):
        for name, runs in result["models"].items():
            curve = runs[label]["curve"]
            ax.plot(CLICKS, [curve[str(k)]["mIoU"] for k in CLICKS], marker="o", label=name)
        ax.set(title=label, xlabel="clicks", ylabel="mIoU", ylim=(0, 1), xticks=list(CLICKS))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "clicks.png", dpi=90)


if __name__ == "__main__":
    main()
