"""The ``docjepa`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from ..core.errors import UsageError, run_command

# Commands taking --key.sub=value config overrides.
OVERRIDABLE = ("pretrain", "pretrain-clip", "finetune", "text-encoder")
MAX_DPI = 600
"""Highest rendering resolution of PDFs: a page at 600 dpi is already ~35 Mpx, far more than OCR needs."""


def int_at_least(minimum: int, maximum: int | None = None):
    """An argparse type: an integer in [minimum, maximum]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def writable_file(path: Path | None) -> None:
    """Fail now, not after the work, when ``path`` cannot be written."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--out {path} is a folder; give a file name")
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write to {parent}")


def cmd_generate(args: argparse.Namespace) -> None:
    from ..data.synth.generate import NoiseOptions, generate

    noise = NoiseOptions(p=args.noise)
    summary = generate(
        args.n,
        args.out,
        seed=args.seed,
        size=args.size,
        workers=args.workers,
        layout=args.layout,
        noise=noise,
        pages_per_shard=args.pages_per_shard,
        progress=not args.no_progress,
        append=args.append,
        phrasings=args.phrasings,
    )
    print(json.dumps({**summary, "out": str(args.out)}, indent=1))


def dataset_info(root: Path) -> dict:
    """Counts and sizes of a dataset folder (documents, pages, words, questions by type, image sizes)."""
    from ..data.shards import iter_pages, shard_paths

    shards = shard_paths(root)
    if not shards:
        raise UsageError(f"no shard-*.parquet files in {root}")
    docs, layouts, qtypes, sizes, sources = set(), Counter(), Counter(), Counter(), Counter()
    pages = words = questions = answers = 0
    for row in iter_pages(root, columns=["doc_id", "width", "height", "words", "questions", "layout", "source"]):
        pages += 1
        docs.add(row["doc_id"])
        words += len(row["words"])
        questions += len(row["questions"])
        answers += sum(len(q["answers"]) for q in row["questions"])
        qtypes.update(q["qtype"] for q in row["questions"])
        layouts[row["layout"] or "none"] += 1
        sizes[f"{row['width']}x{row['height']}"] += 1
        sources[row["source"].split(":")[0]] += 1
    return {
        "path": str(root),
        "shards": len(shards),
        "documents": len(docs),
        "pages": pages,
        "words": words,
        "questions": questions,
        "answers": answers,
        "question_types": dict(qtypes),
        "layouts": dict(layouts),
        "image_sizes": dict(sizes.most_common(10)),
        "sources": dict(sources),
    }


def cmd_info(args: argparse.Namespace) -> None:
    print(json.dumps(dataset_info(args.dir), indent=1))


def cmd_import(args: argparse.Namespace) -> None:
    import logging

    from ..data.importer import import_paths
    from .real_benchmark import benchmark_digests

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    summary = import_paths(
        args.paths,
        args.out,
        dpi=args.dpi,
        lang=args.lang,
        questions=args.questions,
        progress=not args.no_progress,
        append=args.append,
        resume=args.resume,
        pages_per_shard=args.pages_per_shard,
        structure=args.structure,
        max_pages=args.max_pages,
        exclude=benchmark_digests(args.exclude) if args.exclude else None,
    )
    print(json.dumps({**summary.to_dict(), "out": str(args.out)}, indent=1))


def cmd_show(args: argparse.Namespace) -> None:
    from ..data.show import show

    skipped: list = []
    paths = show(args.dir, args.out, args.limit, on_skip=skipped.append)
    print(f"wrote {len(paths)} pages to {args.out}" + (f" ({len(skipped)} unreadable skipped)" if skipped else ""))


def cmd_tokenizer(args: argparse.Namespace) -> None:
    from ..data.tokenizer import train_tokenizer

    tok = train_tokenizer(args.dirs, args.out, vocab_size=args.vocab_size, lowercase=args.lowercase)
    print(json.dumps({"out": str(args.out), "vocab_size": tok.vocab_size}, indent=1))


def cmd_pretrain(args: argparse.Namespace) -> None:
    import logging

    from ..core.config import load_config
    from ..train.pretrain import PretrainConfig, pretrain

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_config(PretrainConfig, args.config, args.overrides)
    last = pretrain(cfg, args.out, resume=args.resume, progress=not args.no_progress)
    _print_result({"out": str(args.out), **last})


def _print_result(result: dict) -> None:
    """The run's last metrics as JSON on stdout, once: by rank 0 of a torchrun launch."""
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(result, indent=1))


def _train_command(kind: str):
    def run(args: argparse.Namespace) -> None:
        import logging

        from ..core.config import load_config

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if kind == "finetune":
            from ..train.finetune import FinetuneConfig as Config
            from ..train.finetune import finetune as train
        elif kind == "text-encoder":
            from ..textenc import TextEncoderConfig as Config
            from ..textenc import run_chain as train
        else:
            from ..train.question_tower import ClipConfig as Config
            from ..train.question_tower import pretrain_clip as train
        cfg = load_config(Config, args.config, args.overrides)
        last = train(cfg, args.out, resume=args.resume, progress=not args.no_progress)
        _print_result({"out": str(args.out), **last})

    return run


def cmd_evaluate(args: argparse.Namespace) -> None:
    from ..data.split import SplitConfig
    from ..eval.evaluate import evaluate
    from ..inference.predictor import SNAP_AGREEMENT, DocumentPredictor

    writable_file(args.out)
    predictor = DocumentPredictor.from_pretrained(
        args.checkpoint, device=args.device, snap=None if args.no_snap else SNAP_AGREEMENT
    )
    split = SplitConfig(layouts=args.heldout_layouts, template_modulus=args.template_modulus)
    result = evaluate(predictor, args.data, split, part=args.split, limit=args.limit, progress=not args.no_progress)
    text = json.dumps(result, indent=1, allow_nan=False)
    print(text, flush=True)  # before writing, so that a failed write loses nothing
    if args.out:
        args.out.write_text(text + "\n")


def cmd_calibrate(args: argparse.Namespace) -> None:
    from ..eval.calibrate import calibrate

    result = calibrate(
        args.checkpoint, args.data, args.threshold, progress=not args.no_progress, write=not args.dry_run
    )
    print(json.dumps(result, indent=1, allow_nan=False))


def _model_spec(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKPOINT, got {text!r}")
    return name, Path(path)


def cmd_benchmark_real(args: argparse.Namespace) -> None:
    import logging

    from . import real_benchmark as rb

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
    from .predict import predict_file

    result = predict_file(
        args.checkpoint,
        args.question,
        args.out,
        image=args.image,
        pdf=args.pdf,
        page=args.page,
        dpi=args.dpi,
        lang=args.lang,
        device=args.device,
        multimask=args.multimask,
        snap=not args.no_snap,
    )
    print(json.dumps(result, indent=1))


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import DemoConfig, run_demo

    cfg = DemoConfig.quick() if args.quick else DemoConfig()
    cfg.question_tower, cfg.seed, cfg.phrasings = args.question_tower, args.seed, args.phrasings
    cfg.text_encoder = args.text_encoder
    if args.threads is not None:
        cfg.threads = args.threads
    if args.real is not None:
        cfg.real = args.real
    if args.real_max_pages is not None:
        cfg.real_max_pages = args.real_max_pages
    run_demo(cfg, args.out, progress=not args.no_progress)


def cmd_results(args: argparse.Namespace) -> None:
    import shlex

    from .report import write_markdown

    argv = ["results", *map(str, args.results), *(f"--markdown={p}" for p in args.markdown)]
    print(write_markdown(args.results, args.markdown, "docjepa " + " ".join(shlex.quote(a) for a in argv)))


def build_parser() -> argparse.ArgumentParser:
    from ..data.synth.layouts import LAYOUTS

    ap = argparse.ArgumentParser(prog="docjepa", description="Document-JEPA: data, training and prediction.")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="synthetic pages with questions and answer masks")
    g.add_argument("--n", type=int_at_least(1), required=True, help="number of pages")
    g.add_argument("--out", type=Path, required=True, help="output folder of Parquet shards")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--size", type=int_at_least(64), default=1024, help="page height in pixels (A4 shape)")
    g.add_argument("--workers", type=int_at_least(1), default=None, help="processes (default: all cores)")
    g.add_argument("--layout", choices=sorted(LAYOUTS), default=None, help="only this layout (default: all)")
    g.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="probability of each scan-like degradation (rotation, blur, speckle, JPEG)",
    )
    g.add_argument(
        "--phrasings",
        choices=["original", "extended", "business"],
        default="extended",
        help="question wordings: the layouts' own, or also three more per question kind (same pages and answers); "
        "business: extended, with labels and amounts printed as real invoices and receipts print them",
    )
    g.add_argument("--pages-per-shard", type=int_at_least(1), default=256)
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--append", action="store_true", help="add shards to a folder that already has some")
    g.set_defaults(func=cmd_generate)
    i = sub.add_parser("info", help="JSON summary of a dataset folder")
    i.add_argument("dir", type=Path)
    i.set_defaults(func=cmd_info)
    m = sub.add_parser("import", help="PDFs and images (OCR) → dataset shards")
    m.add_argument("paths", type=Path, nargs="+", help="files or folders (searched recursively)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument(
        "--dpi", type=int_at_least(36, MAX_DPI), default=150, help=f"PDF rendering resolution (36 to {MAX_DPI})"
    )
    m.add_argument("--lang", default="eng", help="Tesseract language(s), e.g. eng+deu")
    m.add_argument(
        "--questions",
        type=Path,
        default=None,
        help='JSON {doc_id: {page: [{"question": …, "answers": [[x0, y0, x1, y1], …]}]}}',
    )
    m.add_argument("--no-progress", action="store_true")
    m.add_argument("--append", action="store_true", help="add shards to a folder that already has some")
    m.add_argument("--pages-per-shard", type=int_at_least(1), default=256, help="pages per Parquet shard")
    m.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted import into --out (files it holds are passed over)",
    )
    m.add_argument(
        "--structure",
        action="store_true",
        help="PDF pages get the questions their document declares: title, author, date, version, sections (outline), "
        "contents, page numbers, running headers, captions, form fields (docs/docjepa-real.md)",
    )
    m.add_argument("--max-pages", type=int_at_least(1), default=None, help="at most this many pages per PDF")
    m.add_argument(
        "--exclude",
        type=Path,
        default=None,
        help="a real-page benchmark file, or real (the packaged one): its documents are passed over",
    )
    m.set_defaults(func=cmd_import)
    s = sub.add_parser("show", help="draw pages with word boxes and answer masks as PNG")
    s.add_argument("dir", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--limit", type=int_at_least(1), default=20)
    s.set_defaults(func=cmd_show)
    t = sub.add_parser("tokenizer", help="tokenizer tools")
    tsub = t.add_subparsers(dest="action", required=True)
    tt = tsub.add_parser("train", help="train a WordPiece tokenizer on the OCR text of datasets")
    tt.add_argument("dirs", type=Path, nargs="+")
    tt.add_argument("--out", type=Path, required=True)
    tt.add_argument("--vocab-size", type=int_at_least(16), default=8000)
    tt.add_argument("--lowercase", action="store_true")
    tt.set_defaults(func=cmd_tokenizer)
    p = sub.add_parser(
        "pretrain",
        help="pre-train the encoders (I-JEPA, MLM, MIM, D-JEPA)",
        epilog="Any config field can be overridden as --key.sub=value, e.g. --run.steps=50.",
    )
    p.add_argument(
        "--config", type=Path, default=None, help="YAML file, or a packaged config: pretrain/tiny, pretrain/base"
    )
    p.add_argument("--out", type=Path, required=True, help="run folder (checkpoints, metrics, TensorBoard)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_pretrain)
    for kind, helptext, default in (
        (
            "pretrain-clip",
            "CLIP-style pre-training of the question tower on document regions",
            "clip/tiny",
        ),
        ("finetune", "fine-tune promptable segmentation (question → mask)", "finetune/tiny"),
        (
            "text-encoder",
            "text-encoder chain: LLM → LLM2Vec (MNTP, SimCSE) → distilled BERT → MLM, and its evaluation "
            "(choose stages with --stages=distill,mlm,eval)",
            "text_encoder/tiny",
        ),
    ):
        example = "--teacher.run.steps=50" if kind == "text-encoder" else "--run.steps=50"
        f = sub.add_parser(
            kind, help=helptext, epilog=f"Any config field can be overridden as --key.sub=value, e.g. {example}."
        )
        f.add_argument("--config", type=Path, default=None, help=f"YAML file, or a packaged config (e.g. {default})")
        f.add_argument("--out", type=Path, required=True, help="run folder (checkpoints, metrics, TensorBoard)")
        f.add_argument("--resume", action="store_true", help="continue the run(s) in --out from the last checkpoint")
        f.add_argument("--no-progress", action="store_true")
        f.set_defaults(func=_train_command(kind))
    e = sub.add_parser("evaluate", help="mIoU / gIoU / cIoU of a model and of the OCR-matching baseline")
    e.add_argument("--checkpoint", type=Path, required=True, help="fine-tuning run, checkpoint or model folder")
    e.add_argument("--data", type=Path, nargs="+", required=True, help="dataset folder(s)")
    e.add_argument(
        "--split",
        choices=["heldout", "train", "all"],
        default="heldout",
        help="which questions: held-out layouts/templates (default), the training kind, or all",
    )
    e.add_argument("--heldout-layouts", nargs="*", default=["receipt"])
    e.add_argument("--template-modulus", type=int_at_least(0), default=4)
    e.add_argument("--limit", type=int_at_least(1), default=None, help="at most this many questions")
    e.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    e.add_argument("--device", default=None)
    e.add_argument(
        "--no-snap",
        action="store_true",
        help="the decoder's chosen mask as drawn, not snapped to the box of the OCR words it covers",
    )
    e.add_argument("--no-progress", action="store_true")
    e.set_defaults(func=cmd_evaluate)
    c = sub.add_parser(
        "calibrate",
        help="fit the map from the model's predicted IoU to measured IoU on labelled pages it was not trained on "
        "(stored as calibration.json beside its weights)",
    )
    c.add_argument("--checkpoint", type=Path, required=True, help="fine-tuning run, checkpoint or model folder")
    c.add_argument("--data", type=Path, nargs="+", required=True, help="dataset folder(s) with questions")
    c.add_argument("--threshold", type=float, default=0.5, help="an answer is 'known' at calibrated IoU ≥ this")
    c.add_argument("--dry-run", action="store_true", help="report the fit without writing calibration.json")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(func=cmd_calibrate)
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
    rr.add_argument("--model", type=_model_spec, action="append", default=[], help="NAME=CHECKPOINT (repeat)")
    rr.add_argument("--out", type=Path, required=True)
    rr.add_argument("--no-progress", action="store_true")
    rt = rsub.add_parser("report", help="real.json → markdown table (and into marked doc sections)")
    rt.add_argument("result", type=Path)
    rt.add_argument("--markdown", type=Path, action="append", default=[], help="fill its real-bench section")
    rt.add_argument("--summary", type=Path, action="append", default=[], help="fill its real-summary section")
    for x in (rp, rv, rr, rt):
        x.set_defaults(func=cmd_benchmark_real)
    r = sub.add_parser("predict", help="mask of the region answering a question, on an image or a PDF page")
    r.add_argument("--checkpoint", type=Path, required=True)
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--image", type=Path, help="an image (words by OCR)")
    src.add_argument("--pdf", type=Path, help="a PDF (words from its text layer, OCR when it has none)")
    r.add_argument("--page", type=int_at_least(1), default=1, help="PDF page, from 1")
    r.add_argument("--question", required=True)
    r.add_argument("--out", type=Path, required=True, help="output prefix: PREFIX.mask.png, .overlay.png, .json")
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
    r.add_argument("--device", default=None)
    r.set_defaults(func=cmd_predict)
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
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=cmd_demo)
    res = sub.add_parser("results", help="demo results JSON → a markdown table (and into marked doc sections)")
    res.add_argument("results", nargs="+", type=Path, help="results.json files of demo runs (labelled by file name)")
    res.add_argument("--markdown", action="append", type=Path, default=[], help="fill this file's demo section")
    res.set_defaults(func=cmd_results)
    from .engine.cli import add_parser as add_engine_parser

    add_engine_parser(sub, int_at_least)
    return ap


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra and args.command not in OVERRIDABLE:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    name = " ".join(x for x in (args.command, getattr(args, "engine_command", None)) if x)
    run_command(f"docjepa {name}", lambda: args.func(args))


if __name__ == "__main__":
    main()
