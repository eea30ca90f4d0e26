"""The demo's real pages: TeX Live manuals from Debian, imported with the questions they declare about themselves.

``docjepa demo`` trains on synthetic pages and on these, calibrates on held-out documents of both, and scores the
real-page benchmark (:mod:`docjepa.apps.real_benchmark`) at the end. The documents come from
:mod:`docjepa.data.debian` (``apt-get download``); the benchmark's documents are never imported (they are another
pool, and ``exclude`` drops any file whose digest is the benchmark's). A machine that cannot fetch them gets a
clear warning and the synthetic-only demo.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..data.debian import FetchError, fetch
from ..data.shards import ShardOptions, shard_paths

log = logging.getLogger("docjepa.apps.demo")


@dataclass
class RealPages:
    """Where the demo's real pages are."""

    pdfs: Path
    """The fetched documents: ``bench/``, ``calib/`` and ``train/`` below it (:func:`docjepa.data.debian.fetch`)."""
    train: Path
    """Imported training pages (shards)."""
    calib: Path
    """Imported calibration pages (shards), from documents never trained on."""
    summary: dict
    """What was fetched and imported: documents, pages and questions per part."""


def _import(pdfs: Path, out: Path, max_pages: int, dpi: int, progress: bool) -> dict:
    from ..data.import_folder import import_paths
    from .real_benchmark import benchmark_digests

    marker = out / "imported.json"
    spec = {"pdfs": str(pdfs), "max_pages": max_pages, "dpi": dpi}
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done.get("spec") != spec:
            raise ValueError(f"{out} holds pages imported as {done.get('spec')}, not {spec}: use another --out")
        return done["summary"]
    summary = import_paths(
        [pdfs],
        out,
        dpi=dpi,
        progress=progress,
        structure=True,
        max_pages=max_pages,
        exclude=benchmark_digests("real"),
        shards=ShardOptions(resume=out.is_dir() and bool(shard_paths(out))),
    ).to_dict()
    if not shard_paths(out):
        raise ValueError(f"no page of {pdfs} could be imported (see the warnings above)")
    marker.write_text(json.dumps({"spec": spec, "summary": summary}) + "\n")
    return summary


def real_pages(source: str, out: Path, max_pages: int, dpi: int = 72, progress: bool = True) -> RealPages | str:
    """Fetch (``source`` = ``debian``) or find (``source`` = a folder as :func:`~docjepa.data.debian.fetch` makes)
    the documents and import their ``train`` and ``calib`` parts into ``out/data``, at most ``max_pages`` pages per
    document (the pages with questions first). Returns the pages, or why there are none (a message to show)."""
    if source == "debian":
        pdfs = out / "real-pdfs"
        try:
            fetched = fetch(pdfs)
        except FetchError as err:
            return (
                f"no real pages: {err}. The demo goes on with synthetic pages only; to add real ones, run "
                "'apt-get update' (the package lists are needed) or give --real FOLDER "
                "(benchmarks/scripts/real_pdfs.py makes one)"
            )
    else:
        pdfs = Path(source)
        if not (pdfs / "train").is_dir():
            raise FileNotFoundError(f"{pdfs} has no train/ folder of PDFs (docjepa.data.debian.fetch makes one)")
        fetched = json.loads((pdfs / "fetched.json").read_text()) if (pdfs / "fetched.json").is_file() else {}
    parts = {}
    for part in ("train", "calib"):
        if not (pdfs / part).is_dir():
            raise FileNotFoundError(f"{pdfs} has no {part}/ folder of PDFs (docjepa.data.debian.fetch makes one)")
        log.info("importing the real %s pages of %s (at most %d per document)", part, pdfs / part, max_pages)
        parts[part] = _import(pdfs / part, out / "data" / f"real-{part}", max_pages, dpi, progress)
    summary = {"pdfs": str(pdfs), "fetched": fetched, "imported": parts}
    return RealPages(pdfs, out / "data" / "real-train", out / "data" / "real-calib", summary)


def score_real_benchmark(pdfs: Path, checkpoint: Path, out: Path, progress: bool = True) -> dict:
    """The real-page benchmark (the packaged questions) on the model and the OCR baseline, into ``out``
    (``real.json``, ``overlays.png``, ``reliability.png``); returns the figures for the report."""
    from ..data.importer import file_digest
    from .real_benchmark import load, run

    spec = load("real")
    docs = {q["doc_id"] for q in spec["questions"] if q.get("verified") is True}
    here = [d for d in docs if (pdfs / "bench" / d).is_file()]
    if not any(file_digest(pdfs / "bench" / d) == spec["documents"][d]["sha256"] for d in here):
        return {"skipped": f"none of the benchmark's {len(docs)} documents is under {pdfs / 'bench'} as it was"}
    result = run("real", pdfs / "bench", [("demo", checkpoint)], out, progress=progress)
    model = result["models"]["demo"]
    return {
        "questions": result["questions"],
        "model": {k: model[k] for k in ("n", "mIoU", "gIoU", "cIoU", "per_type")},
        "baseline": result["baseline"],
        "known": model.get("known"),
        "overlays": str((out / "overlays.png").relative_to(out.parent)),
        "problems": result["benchmark"].get("problems", []),
    }
