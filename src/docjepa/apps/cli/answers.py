"""``docjepa``: the commands that answer and report: predict, extract, demo, results, benchmark real."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ...inference.answer_paths import ANSWER_PATHS
from .args import MAX_DPI, int_at_least, model_path


def _model_spec(text: str) -> tuple[str, Path | None]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKPOINT, got {text!r}")
    return name, model_path(path)


def cmd_benchmark_real(args: argparse.Namespace) -> None:
    import logging

    from .. import real_benchmark as rb

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if args.real_command == "propose":
        spec = rb.propose(args.pdfs, args.out, args.dpi, args.per_kind, args.seed, args.package)
        print(
            json.dumps({"questions": len(spec["questions"]), "documents": len(spec["documents"]), "out": str(args.out)})
        )
    elif args.real_command == "verify":
        print(json.dumps(rb.verify(args.questions, args.good, args.bad, args.note), indent=1))
    elif args.real_command == "run":
        result = rb.run(args.questions, args.pdfs, args.model, args.out, progress=not args.no_progress)
        print(rb.markdown(result))
    else:
        import shlex

        argv = ["benchmark", "real", "report", str(args.result), *(f"--markdown={p}" for p in args.markdown)]
        argv += [f"--summary={p}" for p in args.summary]
        print(rb.report(args.result, args.markdown, "docjepa " + shlex.join(argv), args.summary))


def cmd_predict(args: argparse.Namespace) -> None:
    from ..predict import load_page, predict_file

    result = predict_file(
        args.checkpoint,
        args.question,
        args.out,
        load_page(args.image, args.pdf, args.page, args.dpi, args.lang),
        device=args.device,
        multimask=args.multimask,
        snap=not args.no_snap,
        answer_path=args.answer_path,
    )
    print(json.dumps(result, indent=1))


def cmd_extract(args: argparse.Namespace) -> None:
    from ...core.errors import UsageError
    from ..extract import ExtractConfig, extract, table_format
    from .args import writable_file

    questions = list(args.question or [])
    if args.questions is not None:
        if not args.questions.is_file():
            raise UsageError(f"no questions file at {args.questions}")
        questions += [q.strip() for q in args.questions.read_text(encoding="utf-8").splitlines() if q.strip()]
    table_format(args.out)
    writable_file(args.out)
    config = ExtractConfig(questions, args.per_page, args.dpi, args.lang, args.max_pages, args.answer_path)
    predictor = None
    if args.checkpoint is not None or args.device is not None:
        from ...inference.predictor import DocumentPredictor

        predictor = DocumentPredictor.from_pretrained(args.checkpoint, args.device, answer_path=args.answer_path)
    summary = extract(args.paths, args.out, config, predictor, overwrite=args.overwrite, progress=not args.no_progress)
    print(json.dumps(summary, indent=1))


def cmd_demo(args: argparse.Namespace) -> None:
    from ..demo import DemoConfig, run_demo

    cfg = DemoConfig.quick() if args.quick else DemoConfig()
    cfg.question_tower, cfg.seed, cfg.phrasings = args.question_tower, args.seed, args.phrasings
    cfg.text_encoder = args.text_encoder
    if args.threads is not None:
        cfg.threads = args.threads
    if args.real is not None:
        cfg.real = args.real
    if args.real_max_pages is not None:
        cfg.real_max_pages = args.real_max_pages
    for name in ("train_pages", "pretrain_steps", "finetune_steps"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    run_demo(cfg, args.out, progress=not args.no_progress)


def cmd_export_model(args: argparse.Namespace) -> None:
    from ...core.errors import UsageError
    from ...modeling.shipped import shipped_dir
    from ..model_card import export_continued_model, export_demo_model

    args.out = args.out or shipped_dir()
    if (args.run / "results.json").is_file() or not (args.run / "init").is_dir():
        card = export_demo_model(args.run, args.out, commit=args.commit)
    elif args.heldout is None or args.real is None:
        raise UsageError(f"{args.run} started from the shipped model: give its scores with --heldout and --real")
    else:
        card = export_continued_model(
            args.run, args.out, args.heldout, args.real, commit=args.commit, real_model=args.real_model
        )
    real = card["scores"]["real_pages"]
    print(
        f"{args.out}: {card['weights']['bytes'] / 2**20:.1f} MiB of weights; real pages "
        f"{real['model']['mIoU']:.3f} (baseline {real['baseline']['mIoU']:.3f})"
    )


def cmd_results(args: argparse.Namespace) -> None:
    import shlex

    from ..report import write_markdown

    argv = ["results", *map(str, args.results), *(f"--markdown={p}" for p in args.markdown)]
    print(write_markdown(args.results, args.markdown, "docjepa " + " ".join(shlex.quote(a) for a in argv)))


def _add_benchmark(sub: Any) -> None:
    b = sub.add_parser("benchmark", help="benchmarks on real documents")
    bsub = b.add_subparsers(dest="benchmark_command", required=True)
    br = bsub.add_parser("real", help="the real-page benchmark: propose questions, verify them, score models")
    rsub = br.add_subparsers(dest="real_command", required=True)
    rp = rsub.add_parser("propose", help="candidate questions from the structural rules + contact sheets to check")
    rp.add_argument("pdfs", type=Path, help="folder of the benchmark's PDFs (document id = path inside it)")
    rp.add_argument("--out", type=Path, required=True)
    rp.add_argument("--dpi", type=int_at_least(36, MAX_DPI), default=72)
    rp.add_argument("--per-kind", type=int_at_least(1), default=20)
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("--package", action="append", default=[], help="where the PDFs come from (recorded)")
    rv = rsub.add_parser("verify", help="record which questions a person checked as right (or wrong)")
    rv.add_argument("questions", type=Path)
    rv.add_argument("--good", nargs="*", default=[])
    rv.add_argument("--bad", nargs="*", default=[])
    rv.add_argument("--note", default="", help="why the --bad ones are wrong")
    rr = rsub.add_parser("run", help="score models and the OCR baseline per question kind")
    rr.add_argument(
        "questions", nargs="?", default="real", help="a questions file, or real (the packaged benchmark, the default)"
    )
    rr.add_argument("--pdfs", type=Path, required=True, help="folder holding the benchmark's documents")
    rr.add_argument(
        "--model",
        type=_model_spec,
        action="append",
        default=[],
        help="NAME=CHECKPOINT (repeat; 'shipped': the packaged model)",
    )
    rr.add_argument("--out", type=Path, required=True)
    rr.add_argument("--no-progress", action="store_true")
    rt = rsub.add_parser("report", help="real.json → markdown table (and into marked doc sections)")
    rt.add_argument("result", type=Path)
    rt.add_argument("--markdown", type=Path, action="append", default=[], help="fill its real-bench section")
    rt.add_argument("--summary", type=Path, action="append", default=[], help="fill its real-summary section")
    for x in (rp, rv, rr, rt):
        x.set_defaults(func=cmd_benchmark_real)


def _add_predict(sub: Any) -> None:
    r = sub.add_parser("predict", help="mask of the region answering a question, on an image or a PDF page")
    r.add_argument(
        "--checkpoint",
        type=model_path,
        default=None,
        help="fine-tuning run, checkpoint or model folder (default, or 'shipped': the model shipped in the package)",
    )
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--image", type=Path, help="an image (words by OCR)")
    src.add_argument("--pdf", type=Path, help="a PDF (words from its text layer, OCR when it has none)")
    r.add_argument("--page", type=int_at_least(1), default=1, help="PDF page, from 1")
    r.add_argument("--question", required=True)
    r.add_argument(
        "--out", type=Path, default=None, help="output prefix: PREFIX.mask.png, .overlay.png, .json (default: none)"
    )
    r.add_argument(
        "--dpi", type=int_at_least(36, MAX_DPI), default=150, help=f"PDF rendering resolution (36 to {MAX_DPI})"
    )
    r.add_argument("--lang", default="eng")
    r.add_argument("--multimask", action="store_true", help="also write the two other candidate masks")
    r.add_argument(
        "--no-snap",
        action="store_true",
        help="the decoder's chosen mask as drawn, not snapped to the box of the OCR words it covers",
    )
    r.add_argument(
        "--answer-path",
        choices=ANSWER_PATHS,
        default="auto",
        help="how a question is answered: auto (default: the word decoder's span where it is as sure as the model's "
        "calibration asks, else the mask), words (always the span), mask (the mask decoder's candidate)",
    )
    r.add_argument("--device", default=None)
    r.set_defaults(func=cmd_predict)


def _add_extract(sub: Any) -> None:
    x = sub.add_parser(
        "extract",
        help="documents (folders of PDFs and images) → a table: one row per document, one column per question",
    )
    x.add_argument("paths", nargs="+", type=Path, help="PDFs, images, or folders searched for them")
    x.add_argument("--question", action="append", help="a question (one column); repeat for more")
    x.add_argument("--questions", type=Path, default=None, help="a text file of questions, one per line")
    x.add_argument("--out", type=Path, required=True, help="the table: .csv, .jsonl or .parquet")
    x.add_argument("--per-page", action="store_true", help="one row per page (default: one per document)")
    x.add_argument("--max-pages", type=int_at_least(1), default=None, help="pages read per document (default: all)")
    x.add_argument("--overwrite", action="store_true", help="start the table again (default: go on where it stopped)")
    x.add_argument(
        "--checkpoint", type=model_path, default=None, help="run, checkpoint or model folder (default: the shipped one)"
    )
    x.add_argument(
        "--dpi", type=int_at_least(36, MAX_DPI), default=150, help=f"PDF rendering resolution (36 to {MAX_DPI})"
    )
    x.add_argument("--lang", default="eng", help="Tesseract language(s) for pages without a text layer")
    x.add_argument(
        "--answer-path",
        choices=ANSWER_PATHS,
        default="words",
        help="words (default: the word decoder's span, the better reader of values), auto or mask (as for predict)",
    )
    x.add_argument("--device", default=None)
    x.add_argument("--no-progress", action="store_true")
    x.set_defaults(func=cmd_extract)


def _add_demo(sub: Any) -> None:
    d = sub.add_parser("demo", help="generate data, pre-train, fine-tune, evaluate, write an HTML report")
    d.add_argument("--out", type=Path, default=Path("runs/demo"))
    d.add_argument("--quick", action="store_true", help="a handful of steps (for tests)")
    d.add_argument(
        "--question-tower",
        default="auto",
        help="'auto' (the packaged sentence encoder when installed, else 'clip'), 'clip' (pre-train a CLIP tower "
        "here) or a local pre-trained text-encoder folder",
    )
    d.add_argument("--seed", type=int_at_least(0), default=0, help="seed of data, initialisation and training")
    d.add_argument(
        "--text-encoder",
        default="",
        help="page text encoder: empty (a small BERT trained here from scratch), 'packaged' (the lang extra's "
        "pre-trained all-MiniLM-L6-v2 with its tokenizer) or a local BERT folder",
    )
    d.add_argument("--threads", type=int_at_least(0), default=None, help="torch CPU threads (default: 2)")
    d.add_argument(
        "--phrasings",
        choices=["original", "extended", "business"],
        default="business",
        help="wordings of the training pages (docjepa generate --phrasings; evaluation pages always use the "
        "original ones)",
    )
    d.add_argument(
        "--real",
        default=None,
        help="real pages: 'debian' (the default: fetch TeX Live manuals with apt-get download; synthetic pages only, "
        "with a warning, where that fails), 'none', or a folder made by benchmarks/scripts/real_pdfs.py "
        "(--quick: none)",
    )
    d.add_argument("--real-max-pages", type=int_at_least(1), default=None, help="most pages per real document (6)")
    d.add_argument("--train-pages", type=int_at_least(1), default=None, help="synthetic training pages (400)")
    d.add_argument("--pretrain-steps", type=int_at_least(1), default=None, help="pre-training steps (200)")
    d.add_argument("--finetune-steps", type=int_at_least(1), default=None, help="fine-tuning steps (800)")
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=cmd_demo)


def _add_export(sub: Any) -> None:
    x = sub.add_parser(
        "export-model",
        help="a finished demo run (or a run that went on training the shipped model) → the model shipped in the "
        "package (half-precision weights without the packaged question tower, tokenizer, calibration, model_card.json)",
    )
    x.add_argument(
        "run", type=Path, help="a finished docjepa demo --out folder, or a fine-tuning run from model.init=shipped"
    )
    x.add_argument("--heldout", type=Path, default=None, help="a run from the shipped model: docjepa evaluate's JSON")
    x.add_argument(
        "--real", type=Path, default=None, help="a run from the shipped model: docjepa benchmark real run's real.json"
    )
    x.add_argument("--real-model", default=None, help="the run's name in --real (default: its only model)")
    x.add_argument("--out", type=Path, default=None, help="where to write it (default: the package's)")
    x.add_argument("--commit", default=None, help="the commit whose code trained the run (default: git HEAD)")
    x.set_defaults(func=cmd_export_model)


def _add_results(sub: Any) -> None:
    res = sub.add_parser("results", help="demo results JSON → a markdown table (and into marked doc sections)")
    res.add_argument("results", nargs="+", type=Path, help="results.json files of demo runs (labelled by file name)")
    res.add_argument("--markdown", action="append", type=Path, default=[], help="fill this file's demo section")
    res.set_defaults(func=cmd_results)


def add_parsers(sub: Any) -> None:
    """Add this module's commands to the ``docjepa`` subparsers."""
    _add_benchmark(sub)
    _add_predict(sub)
    _add_extract(sub)
    _add_demo(sub)
    _add_export(sub)
    _add_results(sub)
