"""How often the OCR matcher reads the page number right: its answer's words against the true number, per folder.

    python benchmarks/scripts/page_numbers.py runs/shipped/data/real-train runs/shipped/data/real-calib \\
        runs/shipped/real-benchmark/pages --out benchmarks/results/docjepa/page-numbers.json

For every question whose kind is ``page-number`` in each folder of pages (real training, calibration and benchmark
pages as ``docjepa demo`` or ``docjepa benchmark real run`` import them), the words whose centres lie in the
matcher's box (``docjepa.data.matcher.baseline_box``, also the model's mask prompt) are joined and compared with the
true answer's text. Writes, per folder: questions, right answers, and each wrong one (document, page, truth, answer).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def words_in(box, words) -> str:
    """The words whose centres lie in ``box``, joined in reading order ('' for None)."""
    if box is None:
        return ""
    x0, y0, x1, y1 = box
    inside = [w.text for w in words if x0 <= (w.box[0] + w.box[2]) / 2 <= x1 and y0 <= (w.box[1] + w.box[3]) / 2 <= y1]
    return " ".join(inside)


def folder_report(root: Path) -> dict:
    from docjepa.data.matcher import baseline_box
    from docjepa.data.shards import DocumentDataset

    pages = DocumentDataset([root])
    wrong, n = [], 0
    for i in range(len(pages)):
        page = pages[i]
        for q in page.questions:
            if q.kind != "page-number":
                continue
            n += 1
            got = words_in(baseline_box(q.text, page.words), page.words)
            truth = [a.text for a in q.answers]
            if got not in truth:
                wrong.append({"doc": page.doc_id, "page": page.page, "truth": truth, "answer": got})
    return {"questions": n, "right": n - len(wrong), "wrong": wrong}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", type=Path, nargs="+", help="folders of imported pages (Parquet shards)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = {"command": "python " + " ".join(sys.argv), "folders": {}}
    for root in args.folders:
        if not root.is_dir():
            raise SystemExit(f"{root} is not a folder of pages")
        rep = folder_report(root)
        result["folders"][str(root)] = rep
        print(f"{root}: {rep['right']} of {rep['questions']} page numbers right")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
