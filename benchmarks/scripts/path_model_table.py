"""The docs' table of answer paths under a calibrated path model, from the committed results of one run.

    python benchmarks/scripts/path_model_table.py --markdown docs/docjepa-extract.md

Columns: the mask alone, the word span alone, and ``auto`` (the path the calibration's path model chooses per
question; ``docjepa.inference.path_choice``). Rows: the business validation pages (``business/RUN.json``, from
``business_pages.py``, which scores each path alone beside the predictor's answer), the real-page benchmark
(``business/real.json``: RUN-mask measured before the model was calibrated, when ``auto`` answers with the mask;
RUN after) and other generators' invoices (``foreign/RUN-words.json`` with ``--answer-path words``,
``foreign/RUN.json`` with ``auto``). "–": not measured for that path.

The same command fills the longer-training table (:func:`longer_table`): the run of 1,000 steps beside the same
run continued for 1,000 more, each as ``predict`` and ``extract`` answer; and the token-loss table
(:func:`balanced_table`): that continuation beside the same one trained with the balanced token loss, with each
run's span threshold (chosen by ``docjepa calibrate``) and how its value and name answers go wrong
(``business/RUN-errors.json``, from ``business_errors.py``); the line-break table, two models each calibrated
without and with the word span's line-break threshold; the party-names table, two continuations whose training
pages differ only in how often the parties' names are asked; the grammar table, two continuations whose
training pages differ only in the grammar that drew them; the wordings table (:func:`wordings_table`), a run and
its continuation on new pages asked in more wordings; and the any-order table, that run continued on pages whose
keys and parties stand in any order, with and without keys left out of word answers. "–": not measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from business_errors import SORTS

START, END = "<!-- path-model:start -->", "<!-- path-model:end -->"
LONGER_START, LONGER_END = "<!-- longer-training:start -->", "<!-- longer-training:end -->"
RUN = "wider-1000-path-model"
LONGER = {"1,000 steps": RUN, "2,000 steps": "wider-2000c"}
"""The longer-training table's columns: a heading and the run whose committed results it quotes."""
BALANCED_START, BALANCED_END = "<!-- balanced-loss:start -->", "<!-- balanced-loss:end -->"
BALANCED = {
    "1,000 steps, mean": RUN,
    "1,000 steps, balanced": "wider-1000-balanced",
    "2,000 steps, mean": "wider-2000c",
    "2,000 steps, balanced": "wider-2000c-balanced",
    "2,000 steps, neighbours": "wider-2000c-neighbours",
}
"""The token-loss table's columns, as :data:`LONGER`."""
LINES_START, LINES_END = "<!-- line-threshold:start -->", "<!-- line-threshold:end -->"
LINES = {
    "balanced, span threshold alone": "wider-2000c-balanced",
    "balanced, with a line-break threshold": "wider-2000c-balanced-lines",
    "neighbours, span threshold alone": "wider-2000c-neighbours",
    "neighbours, with a line-break threshold": "wider-2000c-neighbours-lines",
}
"""The line-break table's columns: each model calibrated without and with the line-break threshold."""
NAMES_START, NAMES_END = "<!-- party-names:start -->", "<!-- party-names:end -->"
NAMES = {
    "names as before": "wider-2000c-balanced-lines",
    "each party's name asked": "wider-2000c-names",
    "each party's name asked, neighbours loss": "wider-2000c-names-neighbours",
}
"""The party-names table's columns: one continuation trained on pages whose questions differ only in the names
asked, and the second of them again with the neighbours token loss, all calibrated with the line-break threshold."""
GRAMMAR_START, GRAMMAR_END = "<!-- grammar-breakdown:start -->", "<!-- grammar-breakdown:end -->"
GRAMMAR = {
    "grammar as before": "wider-2000c-names",
    "tax breakdown, parties beside, nine languages": "wider-2000c-grammar",
}
"""The grammar table's columns: one continuation trained on the pages of two grammars (the same seed, loss and
schedule), both calibrated with the line-break threshold."""
WORDINGS_START, WORDINGS_END = "<!-- wordings:start -->", "<!-- wordings:end -->"
WORDINGS = {
    "grammar, 2,000 steps": "wider-2000c-grammar",
    "1,000 more steps, new pages, more wordings": "wider-3000c-phrasings",
}
"""The wordings table's columns: a run, and the same run continued 1,000 steps on new pages of the grammar asked in
more wordings (``docjepa.data.synth.phrasings``)."""
ORDER_START, ORDER_END = "<!-- any-order:start -->", "<!-- any-order:end -->"
ORDER = {
    "more wordings, 3,000 steps": "wider-3000c-phrasings",
    "1,000 more steps, keys and parties in any order": "wider-4000c-shuffled-keys",
    "the same, keys left out of word answers": "wider-4000c-shuffled",
}
"""The any-order table's columns: the wordings run (scored before word answers left keys out), its continuation on
pages whose keys and parties stand in any order scored with keys kept (``--keep-keys``), and the same model as
users get it (keys left out; the real pages only so)."""
SPAN_GROUPS = {
    "business pages, `key`, word span alone, mIoU": "kind: key",
    "business pages, `field`, word span alone, mIoU": "kind: field",
    "all business questions, word span alone, mIoU": "all",
}
"""Rows of the any-order table: the business pages' groups answered by the word span alone."""
WORDING_GROUPS = {
    "questions worded as no training question, mIoU": "held-out wording",
    "questions worded as training questions, mIoU": "trained wording",
    "asks for the due date, mIoU": "asks value: due date",
    "asks for the total, mIoU": "asks value: total",
    "asks for the buyer's name, mIoU": "asks name: buyer",
}
"""Rows of the wordings table before :func:`longer_table`'s: the business pages' groups by wording and by what is
asked."""
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
    pct = {k: _pct(v["model exact"]) for k, v in foreign.items()}
    lines.append(f"| other generators' invoices, exact answers | – | {pct['words']} | {pct['auto']} |")
    return "\n".join(lines)


def longer_table(results: Path, runs: dict[str, str] = LONGER) -> str:
    """Runs side by side as users get their answers: business and real pages through ``docjepa predict``
    (``auto`` under each run's calibration), other generators' invoices through ``docjepa extract`` (the word
    span, ``RUN-words.json``) per field."""
    business = {k: json.loads((results / f"business/{r}.json").read_text())["scores"] for k, r in runs.items()}
    real = json.loads((results / "business/real.json").read_text())["models"]
    foreign = {
        k: json.loads((results / f"foreign/{r}-words.json").read_text())["scores"]["by_generator"]["all"]
        for k, r in runs.items()
    }
    rows = {name: [f"{business[k][group]['model mIoU']:.3f}" for k in runs] for name, group in GROUPS.items()}
    rows["business pages, exact answers"] = [_pct(business[k]["all"]["model exact"]) for k in runs]
    rows["real pages (structure questions), mIoU"] = [
        f"{real[r]['mIoU']:.3f}" if r in real else "–" for r in runs.values()
    ]
    for field in ["all", *sorted(f for f in foreign[next(iter(runs))] if f != "all")]:
        label = "all fields" if field == "all" else field
        rows[f"other generators' invoices, exact: {label}"] = [_pct(foreign[k][field]["model exact"]) for k in runs]
    lines = ["| | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    return "\n".join(lines + [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()])


def balanced_table(results: Path, runs: dict[str, str] = BALANCED, lines: bool = False) -> str:
    """:func:`longer_table` for ``runs``, headed by each run's span and path thresholds (its calibration report; a
    calibration that chose no span threshold keeps the default; with ``lines`` its line-break threshold too), its
    word span's mIoU on all business questions and how its answers to value and name questions go wrong (its
    ``-errors.json``: all of them, the totals, and the buyers' and sellers' names together)."""
    head, rule, *rows = longer_table(results, runs).splitlines()
    span = [
        json.loads((results / f"business/{r}-calibration.json").read_text()).get("word_span") for r in runs.values()
    ]
    reports = [json.loads((results / f"business/{r}-errors.json").read_text()) for r in runs.values()]
    scored = [json.loads((results / f"business/{r}.json").read_text()) for r in runs.values()]
    pages = min(e["pages"] for e in reports)

    def names(fields: dict) -> dict:
        named = [f for k, f in fields.items() if k.startswith("name: ")]
        return {k: sum(f[k] for f in named) for k in ("questions", *SORTS)}

    def shares(field: dict) -> str:
        return " / ".join(f"{field[s] / field['questions']:.0%}".replace("%", "") for s in SORTS) + " %"

    thresholds = [f"{s['span_logit']:g}".replace("-", "−") if s else "−3 (default)" for s in span]
    first = [
        "| span threshold (`docjepa calibrate`) | " + " | ".join(thresholds) + " |",
        *(["| line-break threshold (`docjepa calibrate`) | " + " | ".join(map(_line, span)) + " |"] if lines else []),
        "| path threshold of `auto` (`docjepa calibrate`) | "
        + " | ".join(f"{b['words_threshold']:g}" for b in scored)
        + " |",
        "| all business questions, word span alone, mIoU | "
        + " | ".join(f"{b['scores']['all']['words mIoU']:.3f}" for b in scored)
        + " |",
        f"| value and name answers ({pages} pages): {' / '.join(SORTS)} | "
        + " | ".join(shares(e["fields"]["all"]) for e in reports)
        + " |",
        f"| totals ({pages} pages): {' / '.join(SORTS)} | "
        + " | ".join(shares(e["fields"]["value: total"]) for e in reports)
        + " |",
        f"| names of buyer and seller ({pages} pages): {' / '.join(SORTS)} | "
        + " | ".join(shares(names(e["fields"])) for e in reports)
        + " |",
    ]
    return "\n".join([head, rule, *first, *rows])


def wordings_table(results: Path, runs: dict[str, str] = WORDINGS, spans: bool = False) -> str:
    """:func:`longer_table` for ``runs``, headed by each run's thresholds and the business pages' groups of
    :data:`WORDING_GROUPS` (by wording and by what is asked); with ``spans``, also the word span alone on the business
    pages (``key``, ``field``, all), as ``docjepa extract`` answers."""
    head, rule, *rows = longer_table(results, runs).splitlines()
    scored = [json.loads((results / f"business/{r}.json").read_text()) for r in runs.values()]
    cells = {
        "span / line-break / path threshold (`docjepa calibrate`)": [
            f"{b['span_logit']:g} / {_line(b)} / {b['words_threshold']:g}".replace("-", "−") for b in scored
        ]
    }
    for name, group in WORDING_GROUPS.items():
        cells[name] = [f"{b['scores'][group]['model mIoU']:.3f}" for b in scored]
    for name, group in SPAN_GROUPS.items() if spans else ():
        cells[name] = [f"{b['scores'][group]['words mIoU']:.3f}" for b in scored]
    first = [f"| {name} | " + " | ".join(c) + " |" for name, c in cells.items()]
    return "\n".join([head, rule, *first, *rows])


def _line(report: dict | None) -> str:
    """A calibration's line-break threshold as the tables write it ("–": none)."""
    line = (report or {}).get("line_logit")
    return "–" if line is None else f"{line:g}".replace("-", "−")


def _pct(share: float) -> str:
    """A share as the docs' tables write it: ``58 %``."""
    return f"{share:.0%}".replace("%", " %")


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
        fill_section(doc, LONGER_START, LONGER_END, longer_table(args.results))
        fill_section(doc, BALANCED_START, BALANCED_END, balanced_table(args.results))
        fill_section(doc, LINES_START, LINES_END, balanced_table(args.results, LINES, lines=True))
        fill_section(doc, NAMES_START, NAMES_END, balanced_table(args.results, NAMES, lines=True))
        fill_section(doc, GRAMMAR_START, GRAMMAR_END, balanced_table(args.results, GRAMMAR, lines=True))
        fill_section(doc, WORDINGS_START, WORDINGS_END, wordings_table(args.results))
        fill_section(doc, ORDER_START, ORDER_END, wordings_table(args.results, ORDER, spans=True))
    print(text)
    return text


if __name__ == "__main__":
    main()
