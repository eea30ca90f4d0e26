"""Invoices laid out by software this project did not write, filled with known values, read by ``docjepa extract``.

    python benchmarks/scripts/foreign_layouts.py [--per-generator 15] [--seed 0] [--docs runs/foreign]
        [--checkpoint shipped] [--threads 2] [--answer-path words|auto|mask]
        [--out benchmarks/results/docjepa/foreign/shipped.json] [--markdown docs/docjepa-extract.md]
    python benchmarks/scripts/foreign_layouts.py --report benchmarks/results/docjepa/foreign/shipped.json
        --markdown docs/docjepa-extract.md      # the docs table again, from a result file

Generators (PyPI packages, the ``foreign`` extra): InvoiceGenerator 1.2.0 (BSD; a boxed two-column layout with its
English, Czech and Brazilian-Portuguese labels, amounts and dates in the locale's format) and PyInvoice 0.1.7 (MIT;
label/value tables). Values are drawn with Faker's locales (names, companies, addresses), amounts, dates and
invoice-number formats from a seeded generator. Each PDF is read as a user's file is (its text layer); a value's
truth is where its rendered text stands on the page (every occurrence: a total printed twice is right twice).

Questions (in English, as a user asks): invoice number, invoice date, due date, total, tax, seller, buyer. Each
answer of the table ``docjepa extract`` writes is scored by what it reads (``exact``: its words, case and
currency signs aside, are the value's) and by the IoU of its box with the value's; the OCR-matching baseline
(:func:`docjepa.data.matcher.baseline_box`) is scored the same way. ``docs/docjepa-extract.md`` gets the table
between its ``foreign-layouts`` markers. Nothing from these documents trains a model.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import random
import re
import shlex
import sys
from decimal import Decimal
from pathlib import Path

QUESTIONS = {
    "number": "What is the invoice number?",
    "date": "What is the invoice date?",
    "due date": "What is the due date?",
    "total": "What is the total amount?",
    "tax": "What is the tax amount?",
    "seller": "Who is the seller?",
    "buyer": "Who is the buyer?",
}
"""Field → the question asked about it."""

GENERATORS = {
    "InvoiceGenerator en": ("invoicegenerator", "en", "en_US", "EUR"),
    "InvoiceGenerator cs": ("invoicegenerator", "cs", "cs_CZ", "CZK"),
    "InvoiceGenerator pt_BR": ("invoicegenerator", "pt_BR", "pt_BR", "BRL"),
    "PyInvoice": ("pyinvoice", "en", "en_GB", None),
}
"""Name → (package, label language, Faker and number locale, currency)."""

CURRENCY = re.compile(r"(¤|€|\$|£|R\$|Kč|EUR|CZK|BRL|USD|GBP)", re.IGNORECASE)
START, END = "<!-- foreign-layouts:start -->", "<!-- foreign-layouts:end -->"


def normalise(text: str) -> str:
    """An answer or a value as compared for ``exact``: currency signs dropped, case folded, the punctuation around
    words stripped, spaces collapsed."""
    words = [CURRENCY.sub("", w).strip(" :;,.()[]").casefold() for w in text.split()]
    return " ".join(w for w in words if w)


def invoice_number(rng: random.Random) -> str:
    year = rng.choice([2024, 2025, 2026])
    return rng.choice(
        [
            f"{year}-{rng.randint(1, 9999):04d}",
            f"INV-{rng.randint(10000, 99999)}",
            f"F{year}{rng.randint(1, 999):03d}",
            f"{rng.randint(100, 999)}/{year % 100:02d}",
        ]
    )


def draw_values(rng: random.Random, fake) -> dict:
    """One invoice's values: number, dates, parties, items (description, units, unit price, tax %)."""
    date = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 1000))
    rate = rng.choice([10, 15, 21])  # one rate, so that the tax is one printed amount
    items = [
        (fake.word().capitalize(), rng.randint(1, 9), Decimal(rng.randint(100, 99999)) / 100, rate)
        for _ in range(rng.randint(1, 5))
    ]
    return {
        "number": invoice_number(rng),
        "date": date,
        "due": date + datetime.timedelta(days=rng.choice([14, 30, 45, 60])),
        "seller": fake.company(),
        "buyer": fake.company(),
        "seller_address": (fake.street_address(), fake.city(), fake.postcode()),
        "buyer_address": (fake.street_address(), fake.city(), fake.postcode()),
        "items": items,
    }


def render_invoicegenerator(path: Path, v: dict, lang: str, locale: str, currency_code: str) -> dict[str, str]:
    """One InvoiceGenerator invoice; the text each value is printed as."""
    import warnings

    os.environ["INVOICE_LANG"] = lang  # read by the package whenever it translates a label
    from babel.dates import format_date
    from InvoiceGenerator.api import Client, Creator, Invoice, Item, Provider
    from InvoiceGenerator.pdf import SimpleInvoice, currency

    street, city, zip_code = v["buyer_address"]
    client = Client(v["buyer"], address=street, city=city, zip_code=zip_code)
    street, city, zip_code = v["seller_address"]
    provider = Provider(v["seller"], address=street, city=city, zip_code=zip_code, bank_account="2600420569")
    inv = Invoice(client, provider, Creator("Accounts"))
    inv.number, inv.date, inv.payback, inv.use_tax = v["number"], v["date"], v["due"], True
    inv.currency, inv.currency_locale = currency_code, locale
    for desc, units, price, tax in v["items"]:
        inv.add_item(Item(units, price, description=desc, tax=tax))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SimpleInvoice(inv).gen(str(path))
        money = [currency(a, currency_code, locale) for a in (inv.price_tax, inv.price_tax - inv.price)]
    return {
        "number": v["number"],
        "date": format_date(v["date"], locale=lang),
        "due date": format_date(v["due"], locale=lang),
        "total": money[0],
        "tax": money[1],
        "seller": v["seller"],
        "buyer": v["buyer"],
    }


def render_pyinvoice(path: Path, v: dict) -> dict[str, str]:
    """One PyInvoice invoice; the text each value is printed as."""
    from pyinvoice.models import ClientInfo, InvoiceInfo, Item, ServiceProviderInfo
    from pyinvoice.templates import SimpleInvoice

    doc = SimpleInvoice(str(path))
    doc.invoice_info = InvoiceInfo(v["number"], v["date"], v["due"])
    street, city, zip_code = v["seller_address"]
    doc.service_provider_info = ServiceProviderInfo(name=v["seller"], street=street, city=city, post_code=zip_code)
    street, city, zip_code = v["buyer_address"]
    doc.client_info = ClientInfo(name=v["buyer"], street=street, city=city, post_code=zip_code)
    rate = v["items"][0][3]
    for desc, units, price, _ in v["items"]:
        doc.add_item(Item(desc, "", units, str(price)))
    doc.set_item_tax_rate(rate)
    doc.finish()
    subtotal = sum(units * price for _, units, price, _ in v["items"])
    tax = subtotal * rate / 100
    return {
        "number": v["number"],
        "date": v["date"].isoformat(),
        "due date": v["due"].isoformat(),
        "total": f"{subtotal + tax:.2f}",
        "tax": f"{tax:.2f}",
        "seller": v["seller"],
        "buyer": v["buyer"],
    }


def occurrences(words: list, text: str) -> list[list[int]]:
    """Every run of consecutive page words whose texts are the words of ``text``."""
    want = text.split()
    texts = [w.text for w in words]
    return [
        list(range(i, i + len(want))) for i in range(len(texts) - len(want) + 1) if texts[i : i + len(want)] == want
    ]


def render(folder: Path, per_generator: int, seed: int, dpi: int) -> dict:
    """The invoices and ``truth.json``: per document, per field, the value's text and the page-pixel boxes (at
    ``dpi``) of each place it is printed."""
    from faker import Faker

    from docjepa.data.importer import read_file
    from docjepa.data.record import union_box

    truth = {}
    for name, (package, lang, locale, currency_code) in GENERATORS.items():
        rng, fake = random.Random(f"{seed}-{name}"), Faker(locale)
        fake.seed_instance(seed)
        sub = folder / name.replace(" ", "-")
        sub.mkdir(parents=True, exist_ok=True)
        for k in range(per_generator):
            path = sub / f"invoice-{k:03d}.pdf"
            v = draw_values(rng, fake)
            if package == "pyinvoice":
                texts = render_pyinvoice(path, v)
            else:
                texts = render_invoicegenerator(path, v, lang, locale, currency_code)
            page = read_file(path, dpi)[0]
            doc = path.relative_to(folder).as_posix()
            truth[doc] = {"generator": name, "fields": {}}
            for field, text in texts.items():
                runs = occurrences(page.words, text)
                boxes = [list(union_box([page.words[i].box for i in run])) for run in runs]
                truth[doc]["fields"][field] = {"text": text, "boxes": boxes}
    (folder / "truth.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
    return truth


def box_iou(a, b) -> float:
    if not a or not b:
        return 0.0
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def judge(text: str, box, field: dict) -> tuple[bool, float]:
    """(exact, IoU with the nearest place the value is printed) of one answer."""
    exact = bool(text) and normalise(text) == normalise(field["text"])
    return exact, max((box_iou(box, b) for b in field["boxes"]), default=0.0)


def baseline_answers(folder: Path, truth: dict, dpi: int) -> dict:
    """The OCR-matching baseline's answer (text, box) to every question of every document."""
    import numpy as np

    from docjepa.data.importer import read_file
    from docjepa.data.matcher import baseline_box
    from docjepa.data.record import words_under

    out = {}
    for doc in truth:
        page = read_file(folder / doc, dpi)[0]
        out[doc] = {}
        for field, question in QUESTIONS.items():
            box = baseline_box(question, page.words)
            text = ""
            if box is not None:
                mask = np.zeros((page.height, page.width), dtype=bool)
                mask[int(box[1]) : int(np.ceil(box[3])), int(box[0]) : int(np.ceil(box[2]))] = True
                text = " ".join(page.words[i].text for i in words_under(page.word_boxes(), mask))
            out[doc][field] = (text, list(box) if box is not None else None)
    return out


def model_answers(
    folder: Path, truth: dict, table: Path, checkpoint, dpi: int, answer_path: str | None = None, drop_keys=True
) -> tuple[dict, dict]:
    """The model's answers, read from the table ``docjepa extract`` writes over the folder, and its summary
    (``answer_path``: None, ``docjepa extract``'s default; ``drop_keys``: the answer policy's)."""
    from docjepa.apps.extract import ExtractConfig, extract
    from docjepa.inference.predictor import DocumentPredictor

    path = answer_path or ExtractConfig.answer_path  # docjepa extract's default
    config = ExtractConfig(list(QUESTIONS.values()), dpi=dpi, answer_path=path)
    predictor = DocumentPredictor.from_pretrained(checkpoint, answer_path=path)
    predictor.policy.drop_keys = drop_keys
    two = ExtractConfig([QUESTIONS["number"], QUESTIONS["total"]], dpi=dpi, answer_path=path)  # the README's example
    speed2 = extract([folder], table, two, predictor, overwrite=True, progress=False)  # a first run, also a warm-up
    summary = extract([folder], table, config, predictor, overwrite=True, progress=False)
    summary["two questions"] = speed2["pages_per_second"]
    summary["span_logit"] = predictor.policy.span_threshold
    summary["line_logit"] = predictor.policy.line_threshold
    summary["line_gap"] = predictor.policy.line_spacing
    summary["far_logit"] = predictor.policy.far_threshold
    rows = {r["document"]: r for r in map(json.loads, table.read_text().splitlines())}
    out = {}
    for doc in truth:
        answers = rows[doc]["answers"]
        out[doc] = {
            f: ((answers[q] or {}).get("text", ""), (answers[q] or {}).get("box")) for f, q in QUESTIONS.items()
        }
    return out, summary


def score(truth: dict, answers: dict[str, dict]) -> dict:
    """Per generator and field, and over all: questions, exact rate and mean IoU of each arm (``answers``: arm →
    document → field → (text, box)). A value the page does not print where it can be found is left out and
    counted (``unlocated``)."""
    table: dict = {}
    unlocated = 0
    for doc, entry in truth.items():
        for field, value in entry["fields"].items():
            if not value["boxes"]:
                unlocated += 1
                continue
            for key in ((entry["generator"], field), (entry["generator"], "all"), ("all", field), ("all", "all")):
                cell = table.setdefault(key[0], {}).setdefault(key[1], {"questions": 0})
                cell["questions"] += 1
                for arm, by_doc in answers.items():
                    exact, iou = judge(*by_doc[doc][field], value)
                    cell[f"{arm} exact"] = cell.get(f"{arm} exact", 0) + exact
                    cell[f"{arm} IoU"] = cell.get(f"{arm} IoU", 0.0) + iou
    for fields in table.values():
        for cell in fields.values():
            n = cell["questions"]
            for key in [k for k in cell if k != "questions"]:
                cell[key] = round(cell[key] / n, 4)
    return {"by_generator": table, "unlocated": unlocated}


def wording(question: str) -> str:
    """How fine-tuning on the business grammar with the default split meets ``question``: ``trained`` (one of the
    grammar's wordings that the split keeps in training), ``held out`` (one of its wordings that the split keeps out:
    about one in four, by a hash of the text) or ``new`` (none of its wordings)."""
    from business_pages import field_names

    from docjepa.data.split import SplitConfig, template_held_out

    if question not in field_names():
        return "new"
    return "held out" if template_held_out(question, SplitConfig()) else "trained"


def markdown(result: dict, command: str) -> str:
    """The docs table: per field (all generators; with how the grammar's training split meets its question,
    :func:`wording`) and per generator (all fields), exact and IoU of both arms."""
    s = result["scores"]["by_generator"]
    speed = result["speed"]
    lines = [
        f"Generated by `{command}`: {result['documents']} invoices, {s['all']['all']['questions']} questions, "
        f"model `{result['model']}`, {speed['threads']} threads; `docjepa extract` read "
        f"{speed['pages_per_second']:.2f} pages/s with the 7 questions "
        f"({speed['pages_per_second_two_questions']:.2f} with 2: number and total).",
        "",
        "| | grammar wording | questions | model exact | baseline exact | model IoU | baseline IoU |",
        "|---|---|---|---|---|---|---|",
    ]
    asked = result.get("questions", QUESTIONS)
    rows = [(f, wording(asked[f]), s["all"][f]) for f in QUESTIONS if f in s["all"]]
    rows += [(g, "", s[g]["all"]) for g in GENERATORS if g in s]
    rows.append(("**all**", "", s["all"]["all"]))
    for name, how, c in rows:
        lines.append(
            f"| {name} | {how} | {c['questions']} | {c['model exact']:.0%} | {c['baseline exact']:.0%} | "
            f"{c['model IoU']:.3f} | {c['baseline IoU']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-generator", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dpi", type=int, default=150)
    ap.add_argument("--docs", type=Path, default=Path("runs/foreign"))
    ap.add_argument("--checkpoint", default="shipped")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--answer-path", default=None, help="mask, words or auto (default: docjepa extract's)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/docjepa/foreign/shipped.json"))
    ap.add_argument("--markdown", type=Path, action="append", default=[])
    ap.add_argument("--keep-keys", action="store_true", help="leave keys in word answers (AnswerPolicy.drop_keys)")
    ap.add_argument("--report", type=Path, help="write the --markdown table of this result file, without running")
    args = ap.parse_args(argv)
    if args.report is not None:
        result = json.loads(args.report.read_text())
        table = markdown(result, result["command"])
        from docsections import fill_section

        for doc in args.markdown:
            fill_section(doc, START, END, table)
        print(table)
        return result
    import torch

    torch.set_num_threads(args.threads)
    truth = render(args.docs / "pdf", args.per_generator, args.seed, args.dpi)
    checkpoint = None if args.checkpoint == "shipped" else Path(args.checkpoint)
    model, summary = model_answers(
        args.docs / "pdf", truth, args.docs / "table.jsonl", checkpoint, args.dpi, args.answer_path, not args.keep_keys
    )
    baseline = baseline_answers(args.docs / "pdf", truth, args.dpi)
    command = shlex.join(
        ["python", "benchmarks/scripts/foreign_layouts.py", *(argv if argv is not None else sys.argv[1:])]
    )
    result = {
        "command": command,
        "model": args.checkpoint,
        "drop_keys": not args.keep_keys,
        "span_logit": summary["span_logit"],
        "line_logit": summary["line_logit"],
        "line_gap": summary["line_gap"],
        "far_logit": summary["far_logit"],
        "documents": len(truth),
        "generators": {name: f"{pkg} ({lang} labels, {locale})" for name, (pkg, lang, locale, _) in GENERATORS.items()},
        "packages": {p: importlib.metadata.version(p) for p in ("InvoiceGenerator", "PyInvoice", "Faker", "babel")},
        "questions": QUESTIONS,
        "scores": score(truth, {"model": model, "baseline": baseline}),
        "speed": {
            "pages": summary["pages"],
            "seconds": summary["seconds"],
            "pages_per_second": summary["pages_per_second"],
            "pages_per_second_two_questions": summary["two questions"],
            "threads": args.threads,
            "cpus": os.cpu_count(),
        },
        "examples": {
            doc: {
                f: {
                    "value": truth[doc]["fields"][f]["text"],
                    "model": model[doc][f][0],
                    "baseline": baseline[doc][f][0],
                }
                for f in QUESTIONS
            }
            for doc in list(truth)[:: args.per_generator]
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    table = markdown(result, command)
    from docsections import fill_section

    for doc in args.markdown:
        fill_section(doc, START, END, table)
    print(table)
    return result


if __name__ == "__main__":
    main()
