"""``docjepa``: the data commands: generate, info, import, show, tokenizer."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from .args import MAX_DPI, int_at_least


def cmd_generate(args: argparse.Namespace) -> None:
    from ...data.shards import ShardOptions
    from ...data.synth.generate import NoiseOptions, generate

    noise = NoiseOptions(p=args.noise)
    summary = generate(
        args.n,
        args.out,
        seed=args.seed,
        size=args.size,
        workers=args.workers,
        layout=args.layout,
        noise=noise,
        progress=not args.no_progress,
        phrasings=args.phrasings,
        shards=ShardOptions(args.pages_per_shard, append=args.append),
    )
    print(json.dumps({**summary, "out": str(args.out)}, indent=1))


def dataset_info(root: Path) -> dict:
    """Counts and sizes of a dataset folder (documents, pages, words, questions by kind, image sizes)."""
    from ...data.kinds import row_kind
    from ...data.shards import iter_pages, shard_paths

    shards = shard_paths(root)
    if not shards:
        raise UsageError(f"no shard-*.parquet files in {root}")
    docs, layouts, kinds, sizes, sources = set(), Counter(), Counter(), Counter(), Counter()
    pages = words = questions = answers = 0
    for row in iter_pages(root, columns=["doc_id", "width", "height", "words", "questions", "layout", "source"]):
        pages += 1
        docs.add(row["doc_id"])
        words += len(row["words"])
        questions += len(row["questions"])
        answers += sum(len(q["answers"]) for q in row["questions"])
        kinds.update(row_kind(q) for q in row["questions"])
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
        "question_kinds": dict(kinds),
        "layouts": dict(layouts),
        "image_sizes": dict(sizes.most_common(10)),
        "sources": dict(sources),
    }


def cmd_info(args: argparse.Namespace) -> None:
    print(json.dumps(dataset_info(args.dir), indent=1))


def cmd_import(args: argparse.Namespace) -> None:
    import logging

    from ...data.import_folder import import_paths
    from ...data.shards import ShardOptions
    from ..real_benchmark import benchmark_digests

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    summary = import_paths(
        args.paths,
        args.out,
        dpi=args.dpi,
        lang=args.lang,
        questions=args.questions,
        progress=not args.no_progress,
        structure=args.structure,
        max_pages=args.max_pages,
        exclude=benchmark_digests(args.exclude) if args.exclude else None,
        shards=ShardOptions(args.pages_per_shard, append=args.append, resume=args.resume),
        workers=args.workers,
    )
    print(json.dumps({**summary.to_dict(), "out": str(args.out)}, indent=1))


def cmd_show(args: argparse.Namespace) -> None:
    from ...data.show import show

    skipped: list = []
    paths = show(args.dir, args.out, args.limit, on_skip=skipped.append)
    print(f"wrote {len(paths)} pages to {args.out}" + (f" ({len(skipped)} unreadable skipped)" if skipped else ""))


def cmd_shrink(args: argparse.Namespace) -> None:
    import logging

    from ...data.shrink import shrink

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        summary = shrink(args.dirs, args.out, args.side, args.questions_only, progress=not args.no_progress)
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from err
    print(json.dumps({**summary, "out": str(args.out)}, indent=1))


def cmd_tokenizer(args: argparse.Namespace) -> None:
    from ...data.tokenizer import train_tokenizer

    tok = train_tokenizer(args.dirs, args.out, vocab_size=args.vocab_size, lowercase=args.lowercase)
    print(json.dumps({"out": str(args.out), "vocab_size": tok.vocab_size}, indent=1))


def _add_generate(sub: Any) -> None:
    from ...data.synth.business import EXTRA_LAYOUTS
    from ...data.synth.layouts import LAYOUTS

    g = sub.add_parser("generate", help="synthetic pages with questions and answer masks")
    g.add_argument("--n", type=int_at_least(1), required=True, help="number of pages")
    g.add_argument("--out", type=Path, required=True, help="output folder of Parquet shards")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--size", type=int_at_least(64), default=1024, help="page height in pixels (A4 shape)")
    g.add_argument("--workers", type=int_at_least(1), default=None, help="processes (default: all cores)")
    g.add_argument(
        "--layout",
        choices=sorted([*LAYOUTS, *EXTRA_LAYOUTS]),
        default=None,
        help="only this layout (default: the mix of all but business, which is made only when asked for)",
    )
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
        help="question wordings: the layouts' own, or also three or more per question kind (same pages and answers); "
        "business: extended, with labels and amounts printed as real invoices and receipts print them",
    )
    g.add_argument("--pages-per-shard", type=int_at_least(1), default=256)
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--append", action="store_true", help="add shards to a folder that already has some")
    g.set_defaults(func=cmd_generate)


def _add_info(sub: Any) -> None:
    i = sub.add_parser("info", help="JSON summary of a dataset folder")
    i.add_argument("dir", type=Path)
    i.set_defaults(func=cmd_info)


def _add_import(sub: Any) -> None:
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
        "--workers",
        type=int_at_least(1),
        default=None,
        help="processes reading files (default: one per core; the shards are the same whatever the number)",
    )
    m.add_argument(
        "--exclude",
        type=Path,
        default=None,
        help="a real-page benchmark file, or real (the packaged one): its documents are passed over",
    )
    m.set_defaults(func=cmd_import)


def _add_show(sub: Any) -> None:
    s = sub.add_parser("show", help="draw pages with word boxes and answer masks as PNG")
    s.add_argument("dir", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--limit", type=int_at_least(1), default=20)
    s.set_defaults(func=cmd_show)


def _add_shrink(sub: Any) -> None:
    s = sub.add_parser(
        "shrink",
        help="a dataset's pages with their images stored at the size a model reads them (smaller to carry)",
    )
    s.add_argument("dirs", type=Path, nargs="+", help="dataset folders")
    s.add_argument("--out", type=Path, required=True, help="an empty folder for the shrunk shards")
    s.add_argument(
        "--side", type=int_at_least(16), required=True, help="the model's input side in pixels (tiny preset: 256)"
    )
    s.add_argument("--questions-only", action="store_true", help="keep only pages that ask something")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_shrink)


def _add_tokenizer(sub: Any) -> None:
    t = sub.add_parser("tokenizer", help="tokenizer tools")
    tsub = t.add_subparsers(dest="action", required=True)
    tt = tsub.add_parser("train", help="train a WordPiece tokenizer on the OCR text of datasets")
    tt.add_argument("dirs", type=Path, nargs="+")
    tt.add_argument("--out", type=Path, required=True)
    tt.add_argument("--vocab-size", type=int_at_least(16), default=8000)
    tt.add_argument("--lowercase", action="store_true")
    tt.set_defaults(func=cmd_tokenizer)


def add_parsers(sub: Any) -> None:
    """Add this module's commands to the ``docjepa`` subparsers."""
    _add_generate(sub)
    _add_info(sub)
    _add_import(sub)
    _add_show(sub)
    _add_shrink(sub)
    _add_tokenizer(sub)
