"""A model on business pages drawn from the layout grammar (``docjepa generate --layout business``), per family,
language and question kind, with the held-out family (``boxed``) and language (``it``) apart.

    docjepa generate --n 240 --layout business --out runs/business/val --seed 2
    python benchmarks/scripts/business_pages.py --data runs/business/val [--checkpoint shipped] [--threads 2]
        [--out benchmarks/results/docjepa/business/shipped.json] [--markdown docs/docjepa-extract.md]

Every question of every page is scored (the model's answer as ``docjepa evaluate`` scores it: IoU with the
answer's region, ANLS of the words it covers; ``exact``: ANLS 1) beside the OCR-matching baseline, and counted
also by what it asks for (``asks value: total``, ``asks name: seller``, ``asks block: buyer``, ``asks by label``).
A page is in the held-out family or language by its layout (``business/<family>/<language>``); the default
fine-tuning split (:class:`~docjepa.data.split.SplitConfig`) keeps both out of training, and about one question
template in four (``held-out wording``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import defaultdict
from pathlib import Path

START, END = "<!-- business-pages:start -->", "<!-- business-pages:end -->"
HELD_FAMILY, HELD_LANGUAGE = "boxed", "it"


def field_names() -> dict[str, str]:
    """Question template → what it asks for on a business page: ``value: <field>`` (a key's value), ``name:
    <party>``, ``block: <party>`` (name and address), ``by label`` (the page's own label in the question)."""
    from docjepa.data.synth.business import BY_LABEL, NAMES, PARTIES, QUESTIONS
    from docjepa.data.synth.phrasings import EXTRA

    out = {}
    for prefix, asked in (("value", QUESTIONS), ("name", NAMES), ("block", PARTIES)):
        for field, templates in asked.items():
            for t in [*templates, *EXTRA.get(templates[0], ())]:
                out[t] = f"{prefix}: {field}"
    return out | {t: "by label" for t in BY_LABEL}


def groups(row: dict, fields: dict[str, str] | None = None) -> list[str]:
    """The table rows a question counts in (with ``fields``, :func:`field_names`, also what its template asks
    for); a question with a template also in ``held-out wording`` or ``trained wording``, by whether the default
    split keeps its template out of fine-tuning (``template_held_out``): questions worded as no training question
    was."""
    from docjepa.data.split import SplitConfig, template_held_out

    _, family, lang = (row["layout"] or "business/?/?").split("/")
    out = [f"kind: {row['kind']}", f"family: {family}", f"language: {lang}", "all"]
    if fields is not None and row.get("template") in fields:
        out.append(f"asks {fields[row['template']]}")
    if family == HELD_FAMILY:
        out.append(f"held-out family ({HELD_FAMILY})")
    if lang == HELD_LANGUAGE:
        out.append(f"held-out language ({HELD_LANGUAGE})")
    if family != HELD_FAMILY and lang != HELD_LANGUAGE:
        out.append("families and languages trained on")
    if row.get("template"):
        out.append(f"{'held-out' if template_held_out(row['template'], SplitConfig()) else 'trained'} wording")
    return out


def summarise(rows: list[dict]) -> dict:
    """Per group (the table's, and ``asks …``: what each question asks for): questions, model and baseline mIoU,
    exact rate over questions with a text answer, and the mIoU of each answer path alone (``mask``: the chosen
    candidate, snapped; ``words``: the word decoder's span)."""
    acc: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    fields = field_names()
    for r in rows:
        for g in groups(r, fields):
            a = acc[g]
            a["questions"] += 1
            a["model mIoU"] += r["iou"]
            a["baseline mIoU"] += r["baseline_iou"]
            for path, iou in r.get("paths", {}).items():
                a[f"{path} mIoU"] += iou
            if r.get("anls") is not None:
                a["texts"] += 1
                a["model exact"] += r["anls"] == 1.0
                a["baseline exact"] += (r.get("baseline_anls") or 0.0) == 1.0
    out = {}
    for g, a in acc.items():
        n, t = a["questions"], a["texts"] or 1
        out[g] = {
            "questions": int(n),
            "model mIoU": round(a["model mIoU"] / n, 4),
            "baseline mIoU": round(a["baseline mIoU"] / n, 4),
            "model exact": round(a["model exact"] / t, 4),
            "baseline exact": round(a["baseline exact"] / t, 4),
        } | {k: round(a[k] / n, 4) for k in ("mask mIoU", "words mIoU") if k in a}
    return out


def cost(result: dict) -> str:
    q = result.get("question_ms")
    if not q:
        return ""
    timing = f"median {q['median']:.0f} ms, p90 {q['p90']:.0f} ms ({q['n']} questions)"
    return f" A further question on an encoded page: {timing}."


def markdown(result: dict) -> str:
    s = result["scores"]
    order = ["all", "families and languages trained on", f"held-out family ({HELD_FAMILY})",
             f"held-out language ({HELD_LANGUAGE})"]  # fmt: skip
    order += sorted(k for k in s if k.startswith("kind: ")) + sorted(k for k in s if k.startswith("family: "))
    order += sorted(k for k in s if k.startswith("language: "))
    lines = [
        f"Generated by `{result['command']}`: model `{result['model']}`, {result['pages']} pages." + cost(result),
        "",
        "| | questions | model mIoU | baseline mIoU | model exact | baseline exact |",
        "|---|---|---|---|---|---|",
    ]
    for k in order:
        if k in s:
            c = s[k]
            lines.append(
                f"| {k} | {c['questions']} | {c['model mIoU']:.3f} | {c['baseline mIoU']:.3f} | "
                f"{c['model exact']:.0%} | {c['baseline exact']:.0%} |"
            )
    return "\n".join(lines)


def question_cost(predictor, data: Path, pages: int, raw: bool = False) -> dict | list[float]:
    """Milliseconds of a further question on an encoded page (``predict`` after the page's first question), median
    and p90 over every further question of the first ``pages`` pages (``raw``: every time, as measured)."""
    import time

    from docjepa.data.shards import DocumentDataset

    times = []
    dataset = DocumentDataset(data)
    for i in range(min(pages, len(dataset))):
        page = dataset[i]
        predictor.set_page(page)
        predictor.predict(page.questions[0].text)
        for q in page.questions[1:]:
            t = time.perf_counter()
            predictor.predict(q.text)
            times.append(1e3 * (time.perf_counter() - t))
    return times if raw else summarise_times(times)


def summarise_times(times: list[float]) -> dict:
    """Median and p90 (the value 90 % of the times do not exceed) of milliseconds, and how many."""
    import statistics

    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {"median": round(statistics.median(ordered), 1), "p90": round(p90, 1), "n": len(ordered)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--checkpoint", default="shipped")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/docjepa/business/shipped.json"))
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    ap.add_argument("--timed-pages", type=int, default=40, help="pages on which further questions are timed")
    ap.add_argument("--keep-keys", action="store_true", help="leave keys in word answers (AnswerPolicy.drop_keys)")
    args = ap.parse_args(argv)
    import torch

    from docjepa.data.split import SplitConfig
    from docjepa.eval.evaluate import evaluate
    from docjepa.inference.predictor import DocumentPredictor

    torch.set_num_threads(args.threads)
    predictor = DocumentPredictor.from_pretrained(None if args.checkpoint == "shipped" else args.checkpoint)
    predictor.policy.drop_keys = not args.keep_keys
    everything = SplitConfig(layouts=[], template_modulus=0)
    result = evaluate(predictor, [args.data], everything, "all", progress=False, keep_rows=True)
    rows = result["rows"]
    out = {
        "command": shlex.join(
            ["python", "benchmarks/scripts/business_pages.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "model": args.checkpoint,
        "pages": result["pages"],
        "words_threshold": getattr(predictor.policy.calibration, "words_threshold", None),
        "span_logit": predictor.policy.span_threshold,
        "line_logit": predictor.policy.line_threshold,
        "line_gap": predictor.policy.line_spacing,
        "far_logit": predictor.policy.far_threshold,
        "drop_keys": predictor.policy.drop_keys,
        "scores": summarise(rows),
        "question_ms": question_cost(predictor, args.data, args.timed_pages),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    table = markdown(out)
    from docsections import fill_section

    for doc in args.markdown:
        fill_section(doc, START, END, table)
    print(table)
    return out


if __name__ == "__main__":
    main()
