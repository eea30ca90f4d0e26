"""Where a model's real-page score is lost: the answer it gives against the best of what it drew, per kind.

    python benchmarks/scripts/answer_headroom.py run --checkpoint shipped \\
        --real runs/shipped/real-benchmark/pages --heldout runs/shipped/data/eval \\
        --out benchmarks/results/docjepa/shipped/headroom.json
    python benchmarks/scripts/answer_headroom.py report benchmarks/results/docjepa/shipped/headroom.json \\
        --markdown docs/docjepa-real.md

For every question of the real-page benchmark's pages and the held-out questions of a run's synthetic evaluation
pages, scored as ``docjepa evaluate`` scores (IoU at the decoder's resolution against the best of the true
answers, mean per kind, mIoU the mean over kinds):

- ``answer``: the answer the predictor gives (its calibrated choice of candidate and path);
- ``mask`` / ``words``: the chosen candidate as a mask (snapped to its words), and the word decoder's span;
- ``best candidate``: the best of the decoder's candidate masks, each snapped as the answer is;
- ``best drawn``: the best of those and the word span (what a perfect choice among what the model drew scores);
- ``ceiling``: the true answer's own words drawn as the predictor draws words (``question_ceiling``, the measure
  of ``word_ceiling``): the most an answer of whole OCR words scores under this metric.

Questions whose answer is words (``docjepa.eval.evaluate.text_truths``) are also scored by their text, as DocVQA
scores answers (ANLS of the words each of ``answer``, ``mask`` and ``words`` covers; ``TEXT_ARMS``): the IoU of a
one-character page number against its glyph box says little about whether the answer reads right.

``report`` fills the ``<!-- headroom:start -->`` … ``end`` section of the Markdown file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

START, END = "<!-- headroom:start -->", "<!-- headroom:end -->"
ARMS = ("answer", "mask", "words", "best candidate", "best drawn", "ceiling")
TEXT_ARMS = ("answer", "mask", "words")


def question_rows(predictor, root: Path, part: str, limit: int | None) -> list[dict]:
    """One row per question: its kind, the IoU of each arm (``ARMS``) and, when its answer is words, the ANLS of
    each of ``TEXT_ARMS`` (``text``)."""
    from docjepa.data.frame import PageFrame
    from docjepa.data.shards import DocumentDataset
    from docjepa.data.split import SplitConfig
    from docjepa.eval.evaluate import answer_masks, questions_by_page, text_score, text_truths
    from docjepa.eval.interactive import question_ceiling
    from docjepa.eval.scores import best_answer

    split = SplitConfig() if part == "heldout" else SplitConfig([], 0)
    _, by_page = questions_by_page([root], split, part, limit)
    pages = DocumentDataset([root])
    rows = []
    for p, questions in by_page.items():
        page = pages[p]
        predictor.set_page(page)
        size, frame = predictor.encoded.frame.mask_size, predictor.encoded.frame.frame
        assert frame == PageFrame.of(page, size, size).frame  # the ceiling draws in the predictor's frame
        for q in questions:
            truths = answer_masks(page, q, frame, size)

            def iou(mask: np.ndarray, truths: list[np.ndarray] = truths) -> float:
                inter, union = best_answer(mask, truths)
                return inter / union if union else 1.0

            decoded = predictor.decode(page.questions[q].text)
            reading = predictor.read(decoded)
            chosen = reading.chosen
            drawn = {
                "answer": reading.answer_mask(chosen)[0],
                "mask": reading.answer_mask(chosen, "mask")[0],
                "words": reading.answer_mask(chosen, "words")[0],
            }
            got = {arm: iou(m) for arm, m in drawn.items()}
            got["best candidate"] = max(iou(reading.answer_mask(c, "mask")[0]) for c in range(decoded.logits.shape[0]))
            got["best drawn"] = max(got["best candidate"], got["words"], got["answer"])
            got["ceiling"] = question_ceiling(page, q, frame, size)
            rows.append({"kind": page.questions[q].kind, **got})
            texts = text_truths(page, q)
            if texts:
                rows[-1]["text"] = {arm: text_score(page, drawn[arm], frame, texts) for arm in TEXT_ARMS}
    return rows


def summarise(rows: list[dict]) -> dict:
    """Per kind: questions and each arm's mean IoU; ``mIoU``: each arm's mean over kinds."""
    kinds: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        kinds[r["kind"]].append(r)
    per_kind = {
        k: {"n": len(rs), **{a: round(float(np.mean([r[a] for r in rs])), 4) for a in ARMS}}
        for k, rs in sorted(kinds.items())
    }
    out = {
        "questions": len(rows),
        "mIoU": {a: round(float(np.mean([v[a] for v in per_kind.values()])), 4) for a in ARMS},
        "per_kind": per_kind,
    }
    text: dict[str, dict] = {}
    for k, rs in sorted(kinds.items()):
        scored = [r["text"] for r in rs if "text" in r]
        if scored:
            text[k] = {"n": len(scored), **{a: round(float(np.mean([t[a] for t in scored])), 4) for a in TEXT_ARMS}}
    if text:
        out["text_questions"] = sum(v["n"] for v in text.values())
        out["mANLS"] = {a: round(float(np.mean([v[a] for v in text.values()])), 4) for a in TEXT_ARMS}
        out["text_per_kind"] = text
    return out


def run(args) -> None:
    from docjepa.inference.predictor import DocumentPredictor

    checkpoint = None if args.checkpoint == "shipped" else args.checkpoint
    predictor = DocumentPredictor.from_pretrained(checkpoint)
    result = {"command": "python benchmarks/scripts/answer_headroom.py " + " ".join(sys.argv[1:]), "sets": {}}
    sets = [("real pages", args.real, "all"), ("held-out synthetic", args.heldout, "heldout")]
    for name, root, part in sets:
        if root is None:
            continue
        t = time.perf_counter()
        rows = question_rows(predictor, root, part, args.limit)
        result["sets"][name] = {"pages": str(root), "part": part, **summarise(rows)}
        m = result["sets"][name]["mIoU"]
        print(f"{name}: " + "  ".join(f"{a} {m[a]:.3f}" for a in ARMS) + f"  ({time.perf_counter() - t:.0f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


def table(result: dict) -> str:
    """The docs' tables: one row per set's mIoU, then one per kind of the first set; the same for the text answers'
    ANLS where the sets have questions whose answer is words."""
    head = "| | " + " | ".join(ARMS) + " |"
    lines = [head, "|" + "---|" * (len(ARMS) + 1)]
    sets = list(result["sets"].items())
    for name, s in sets:
        lines.append(f"| {name}, mIoU ({s['questions']}) | " + " | ".join(f"{s['mIoU'][a]:.3f}" for a in ARMS) + " |")
    label, first = sets[0][0].split()[0], sets[0][1]
    for kind, v in first["per_kind"].items():
        lines.append(f"| {label}: {kind} ({v['n']}) | " + " | ".join(f"{v[a]:.3f}" for a in ARMS) + " |")
    if "mANLS" not in first:
        return "\n".join(lines)
    lines += ["", "| text answers, ANLS | " + " | ".join(TEXT_ARMS) + " |", "|" + "---|" * (len(TEXT_ARMS) + 1)]
    for name, s in sets:
        if "mANLS" in s:
            lines.append(
                f"| {name}, mean over kinds ({s['text_questions']}) | "
                + " | ".join(f"{s['mANLS'][a]:.3f}" for a in TEXT_ARMS)
                + " |"
            )
    for kind, v in first["text_per_kind"].items():
        lines.append(f"| {label}: {kind} ({v['n']}) | " + " | ".join(f"{v[a]:.3f}" for a in TEXT_ARMS) + " |")
    return "\n".join(lines)


def report(args) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from docsections import fill_section

    result = json.loads(args.result.read_text())
    body = (
        f"Generated by `python benchmarks/scripts/answer_headroom.py report {args.result}` from `{result['command']}`."
        f"\n\n{table(result)}"
    )
    fill_section(args.markdown, START, END, body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="score every arm on each set and write the JSON")
    r.add_argument("--checkpoint", default="shipped", help="a run or model folder, or 'shipped' (default)")
    r.add_argument("--real", type=Path, required=True, help="the real-page benchmark's pages (every question)")
    r.add_argument("--heldout", type=Path, default=None, help="synthetic evaluation pages (their held-out part)")
    r.add_argument("--limit", type=int, default=400, help="held-out questions (default 400)")
    r.add_argument("--out", type=Path, required=True)
    r.set_defaults(func=run)
    p = sub.add_parser("report", help="fill the docs' section from the JSON")
    p.add_argument("result", type=Path)
    p.add_argument("--markdown", type=Path, required=True)
    p.set_defaults(func=report)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
