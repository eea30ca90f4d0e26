"""Whether a model tells two dates apart by their keys: the invoice date's key and the due date's exchanged in a
page's text layer, or the two dates themselves, and the same two questions asked again.

    python benchmarks/scripts/key_swap.py --data runs/business/val --docs runs/foreign [--checkpoint shipped]
        [--threads 2] [--out benchmarks/results/docjepa/key-swap/shipped.json]
    python benchmarks/scripts/key_swap.py --report RESULT.json [RESULT.json ...] --markdown docs/docjepa-extract.md

Pages: the business validation pages (``docjepa generate --layout business``) of the families that print a value
right of its key on its line (:data:`FAMILIES`), and other generators' invoices (``foreign_layouts.py``'s folder and
its ``truth.json``), on which the invoice date and the due date each stand right of their key. A key is the words
left of the value on its line, the first of them at most :data:`KEY_REACH` of the page's width from the value and
each next one at most :data:`WORD_GAP` word heights from the one after it. Each page is asked "What is the invoice
date?" and "What is the due date?" three times: as it is; with the two keys' texts exchanged in its text layer;
with the two dates' texts exchanged (:func:`exchanged`: the first word of each span takes the other span's text in
its own box, the span's other words are dropped). The image is left as drawn in one arm and made blank in every
state in the other, where the states differ in the text layer alone.

An answer (its words: by default the word decoder's span, as ``docjepa extract`` answers; ``--answer-path``) is
counted by the places it covers: its date's place (where the date the question asks for is printed on the page as
drawn, after that date's key), the other date's place, both or neither. A model that reads keys moves to the other
place when the keys are exchanged and stays when the dates are; one that reads the dates (which is earlier, what
they look like) does the reverse; one that goes by place alone moves in neither. Also counted: the pages on which
both questions get the same words, a model that does not tell the two questions apart. Nothing here trains a model.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import json
import shlex
import sys
from collections import Counter
from pathlib import Path

QUESTIONS = {"date": "What is the invoice date?", "due date": "What is the due date?"}
"""Field → the question asked about it (as ``foreign_layouts.py`` asks)."""
KEY_REACH = 0.35
"""How far left of its value a key's last word may end, as a share of the page's width."""
WORD_GAP = 2.0
"""The widest gap between two words of one key, in word heights."""
ARMS = ("image as drawn", "blank image")
FAMILIES = ("right", "inline")
"""The business families that print a value right of its key on one line (``docjepa.data.synth.business``)."""
STATES = ("as it is", "keys exchanged", "dates exchanged")
OWN, OTHER = "its date's place", "the other date's place"
START, END = "<!-- key-swap:start -->", "<!-- key-swap:end -->"
RUNS = ("shipped", "relative-balanced-1000", "neighbours-1000", "neighbours-2000", "numbers-2000", "alike-2000")
"""The models whose results (``benchmarks/results/docjepa/key-swap/NAME.json``) the docs' table quotes."""


def key_words(page, value: list[int]) -> list[int]:
    """The words of the key left of the value whose words are ``value`` (page word indices), in reading order on
    its line; [] when none stands there."""
    first = page.words[value[0]].box
    mid, height = (first[1] + first[3]) / 2, first[3] - first[1]
    beside = [
        (w.box[2], k)
        for k, w in enumerate(page.words)
        if k not in value and abs((w.box[1] + w.box[3]) / 2 - mid) < height / 2 and w.box[2] <= first[0] + 1
    ]
    key, edge, reach = [], first[0], KEY_REACH * page.width
    for right, k in sorted(beside, reverse=True):
        if edge - right > reach:
            break
        key.append(k)
        edge, reach = page.words[k].box[0], WORD_GAP * height
    return key[::-1]


def exchanged(page, spans: tuple[list[int], list[int]]):
    """A copy of ``page`` whose two spans of words (two keys, or two values) have their texts exchanged: each span's
    first word takes the other span's text, in its own box, and the span's other words are dropped."""
    out = copy.deepcopy(page)
    a, b = spans
    texts = [" ".join(page.words[k].text for k in span) for span in spans]
    out.words[a[0]].text, out.words[b[0]].text = texts[1], texts[0]
    drop = set(a[1:]) | set(b[1:])
    out.words = [w for k, w in enumerate(out.words) if k not in drop]
    return out


def blank(page):
    """``page`` with a white image of its size (its words shared: :func:`exchanged` copies before it changes any)."""
    from PIL import Image

    data = io.BytesIO()
    Image.new("RGB", (page.width, page.height), "white").save(data, "PNG")
    return dataclasses.replace(page, image=data.getvalue())


def business_cases(data: Path) -> list[tuple[str, object, dict[str, list[int]]]]:
    """(layout, page, field → the value's word indices) of the business pages of :data:`FAMILIES` that ask both
    dates."""
    from business_pages import field_names

    from docjepa.data.shards import DocumentDataset

    fields = field_names()
    out = []
    for page in DocumentDataset(data):
        if page.layout.split("/")[1] not in FAMILIES:
            continue
        values = {}
        for q in page.questions:
            field = fields.get(q.template, "").removeprefix("value: ")
            if field in QUESTIONS and field not in values and q.answers and q.answers[0].word_ids:
                values[field] = list(q.answers[0].word_ids)
        if len(values) == 2:
            out.append((page.layout, page, values))
    return out


def foreign_cases(docs: Path, dpi: int) -> list[tuple[str, object, dict[str, list[int]]]]:
    """(generator, page, field → the value's word indices) of other generators' invoices (``truth.json``)."""
    from docjepa.data.importer import read_file

    truth = json.loads((docs / "pdf/truth.json").read_text())
    out = []
    for doc, t in truth.items():
        page = read_file(docs / "pdf" / doc, dpi)[0]
        values = {}
        for field in QUESTIONS:
            x0, y0, x1, y1 = t["fields"][field]["boxes"][0]
            inside = [
                k
                for k, w in enumerate(page.words)
                if x0 <= (w.box[0] + w.box[2]) / 2 <= x1 and y0 <= (w.box[1] + w.box[3]) / 2 <= y1
            ]
            if inside:
                values[field] = inside
        if len(values) == 2:
            out.append((t["generator"], page, values))
    return out


def ask(predictor, page) -> dict[str, set]:
    """Field → the boxes of the words the model's answer to its question covers on ``page``."""
    predictor.set_page(page)
    return {field: {tuple(page.words[k].box) for k in predictor.predict(q).words} for field, q in QUESTIONS.items()}


def which(answer: set, own: set, other: set) -> str:
    """Which of two dates (their words' boxes) an answer's words cover."""
    hits = (bool(answer & own), bool(answer & other))
    return {(True, False): OWN, (False, True): OTHER, (True, True): "both"}.get(hits, "neither")


def measure(predictor, cases: list) -> dict:
    """Counts per arm over the ``cases`` whose two keys are found and differ."""
    counts = {arm: {state: Counter() for state in STATES} for arm in ARMS}
    same = {arm: Counter() for arm in ARMS}
    pages = 0
    for _, page, values in cases:
        keys = tuple(key_words(page, values[f]) for f in QUESTIONS)
        if not all(keys) or set(keys[0]) & set(keys[1]):
            continue
        pages += 1
        boxes = {f: {tuple(page.words[k].box) for k in values[f]} for f in QUESTIONS}
        dates = tuple(values[f] for f in QUESTIONS)
        for arm in ARMS:
            base = page if arm == ARMS[0] else blank(page)
            for state, asked in zip(STATES, (base, exchanged(base, keys), exchanged(base, dates))):
                answers = ask(predictor, asked)
                same[arm][state] += bool(answers["date"]) and answers["date"] == answers["due date"]
                for field, other in (("date", "due date"), ("due date", "date")):
                    counts[arm][state][which(answers[field], boxes[field], boxes[other])] += 1
    out = {"pages": pages, "questions": 2 * pages}
    for arm in ARMS:
        out[arm] = {state: dict(counts[arm][state]) for state in STATES}
        out[arm]["same answer to both"] = dict(same[arm])
    return out


def markdown(results: list[dict]) -> str:
    """The docs' table: per model, source and arm, where the answers fall as the page is, with its keys exchanged
    and with its dates exchanged, and how many pages get one answer to both questions."""
    sorts = (OWN, OTHER, "both", "neither")
    lines = [*(f"Generated by `{r['command']}`." for r in results), f"Each cell: {' / '.join(sorts)}.", ""]
    lines += [
        "| model | pages | image | questions | " + " | ".join(STATES) + " | pages answered alike, as it is |",
        "|---" * (5 + len(STATES)) + "|",
    ]
    for result in results:
        for source, r in result["sources"].items():
            n = r["questions"]
            for arm in ARMS:
                cells = [" / ".join(f"{r[arm][state].get(k, 0) / n:.0%}" for k in sorts) for state in STATES]
                alike = r[arm]["same answer to both"].get(STATES[0], 0) / r["pages"]
                head = f"| `{result['model']}` | {source} ({r['pages']}) | {arm} | {n} | "
                lines.append(head + " | ".join(cells) + f" | {alike:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("runs/business/val"))
    ap.add_argument("--docs", type=Path, default=Path("runs/foreign"))
    ap.add_argument("--dpi", type=int, default=150)
    ap.add_argument("--checkpoint", default="shipped")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--answer-path", default="words", help="words (docjepa extract's), auto (predict's) or mask")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/docjepa/key-swap/shipped.json"))
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    ap.add_argument("--report", type=Path, nargs="+", help="only write these results' table into --markdown")
    args = ap.parse_args(argv)
    if args.report:
        results = [json.loads(path.read_text()) for path in args.report]
    else:
        import torch

        from docjepa.inference.predictor import DocumentPredictor

        torch.set_num_threads(args.threads)
        checkpoint = None if args.checkpoint == "shipped" else args.checkpoint
        predictor = DocumentPredictor.from_pretrained(checkpoint, answer_path=args.answer_path)
        sources = {
            "business pages": business_cases(args.data),
            "other generators' invoices": foreign_cases(args.docs, args.dpi),
        }
        result = {
            "command": "python benchmarks/scripts/key_swap.py " + shlex.join(sys.argv[1:] if argv is None else argv),
            "model": str(args.checkpoint),
            "answer_path": args.answer_path,
            "sources": {name: measure(predictor, cases) for name, cases in sources.items()},
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        results = [result]
    text = markdown(results)
    from docsections import fill_section

    for doc in args.markdown:
        fill_section(doc, START, END, text)
    print(text)
    return results


if __name__ == "__main__":
    main()
