"""What a further question on an encoded page costs, for several models timed side by side.

    python benchmarks/scripts/question_cost.py --data runs/business/val --pages 40 --rounds 2 \\
        --model none=runs/business/ft --model joint2=runs/business/joint --model joint4=runs/business/joint4 \\
        --out benchmarks/results/docjepa/business/question-cost.json

    python benchmarks/scripts/question_cost.py --table --markdown docs/docjepa-extract.md   # the docs' table

Each round times every model in turn on the same pages (``business_pages.question_cost``: ``predict`` after a
page's first question, every further question of the first ``--pages`` pages), so that a slower or faster spell of
the machine falls on all of them; a model's median and p90 are over all its rounds' questions.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import business_pages as bp

START, END = "<!-- joint-layers:start -->", "<!-- joint-layers:end -->"
RUNS = {0: "continued-500", 2: "joint-500", 4: "joint4-500"}
"""Joint layers → the name of its run's results (``business/NAME.json``, ``foreign/NAME.json``)."""
COST_NAMES = {0: "none", 2: "joint2", 4: "joint4"}
"""Joint layers → its model's name in ``business/question-cost.json``."""


def layers_table(results: Path) -> str:
    """The docs' table of joint layers: business and other generators' scores and the cost of a question."""
    cost = json.loads((results / "business/question-cost.json").read_text())["question_ms"]
    lines = [
        "| joint layers | `key` mIoU | `field` mIoU | held-out family | held-out language | exact | other "
        "generators, exact | further question, median / p90 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, run in RUNS.items():
        b = json.loads((results / f"business/{run}.json").read_text())["scores"]
        f = json.loads((results / f"foreign/{run}.json").read_text())["scores"]["by_generator"]["all"]["all"]
        c = cost[COST_NAMES[n]]
        lines.append(
            f"| {n} | {b['kind: key']['model mIoU']:.3f} | {b['kind: field']['model mIoU']:.3f} | "
            f"{b['held-out family (boxed)']['model mIoU']:.3f} | {b['held-out language (it)']['model mIoU']:.3f} | "
            f"{b['all']['model exact']:.0%} | {f['model exact']:.0%} | {c['median']:.0f} / {c['p90']:.0f} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--model", action="append", default=[], help="NAME=CHECKPOINT ('shipped': the packaged one)")
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", action="store_true", help="print (and --markdown: fill) the docs' table of joint layers")
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/docjepa"))
    args = ap.parse_args(argv)
    if args.table:
        from docsections import fill_section

        table = layers_table(args.results)
        for doc in args.markdown:
            fill_section(doc, START, END, table)
        print(table)
        return {"table": table}
    if not (args.data and args.model and args.out):
        ap.error("--data, --model and --out are needed to time (or --table)")
    import torch

    from docjepa.inference.predictor import DocumentPredictor

    torch.set_num_threads(args.threads)
    models = dict(m.split("=", 1) for m in args.model)
    predictors = {n: DocumentPredictor.from_pretrained(None if c == "shipped" else c) for n, c in models.items()}
    times: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(args.rounds):
        for name, predictor in predictors.items():
            times[name] += bp.question_cost(predictor, args.data, args.pages, raw=True)
    out = {
        "command": shlex.join(["python", "benchmarks/scripts/question_cost.py", *(argv or sys.argv[1:])]),
        "threads": args.threads,
        "models": models,
        "question_ms": {n: bp.summarise_times(t) for n, t in times.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["question_ms"]))
    return out


if __name__ == "__main__":
    main()
