"""Files and folders into shards (``docjepa import``), read by several processes.

Every PDF and image found is read by :func:`~docjepa.data.importer.read_file` in a pool of worker processes (one
per core by default: reading a text layer, rendering and OCR are single-threaded), and written by this process in
the order the files were found, so the shards are the same whatever the number of workers.

Pages are streamed to shards as files are read: a shard is written (atomically) as soon as it holds
``pages_per_shard`` pages, and only between files, so a shard always holds whole documents. A killed or failed
import leaves complete shards only, and ``resume`` continues it: files already in the shards are passed over,
and the shards come out as an uninterrupted import would have written them. A file that cannot be read is skipped
with a warning naming it; the batch never aborts, and a summary is returned at the end.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .importer import ImportSummary, attach_questions, file_digest, find_inputs, load_questions, path_text, read_file
from .shards import ShardOptions, ShardWriter, iter_rows, shard_paths

log = logging.getLogger("docjepa.import")


def _read(job: tuple) -> tuple[list | None, int, str]:
    """One file read in a worker: (pages or None, pages read by OCR, why it was skipped)."""
    path, doc_id, dpi, lang, structure, max_pages = job
    summary = ImportSummary()
    try:
        pages = read_file(path, dpi, lang, doc_id, summary, structure=structure, max_pages=max_pages)
    except Exception as err:
        return None, 0, f"{type(err).__name__}: {err}".strip()
    return pages, summary.ocr_pages, ""


READ, ALREADY, EXCLUDED = "read", "already", "excluded"
"""What :func:`_plan` decides for a file (anything else it gives is the reason the file is skipped)."""


def _plan(inputs, done: set[str], exclude: set[str] | None) -> list[tuple[Path, str, str]]:
    """Each file found with what to do with it: read it, pass it over (``already`` in the shards, on ``resume``;
    ``excluded``: its digest is in ``exclude``), or skip it, for the reason given (given twice, gone, unreadable)."""
    plan, seen = [], set()
    for path, doc_id in inputs:
        if doc_id in done:
            plan.append((path, doc_id, ALREADY))
            continue
        try:
            if doc_id in seen:
                raise ValueError(f"a second file with document id {doc_id!r} (given twice?)")
            seen.add(doc_id)
            if not path.is_file():
                raise FileNotFoundError("no such file")
            action = EXCLUDED if exclude and file_digest(path) in exclude else READ
        except Exception as err:
            action = f"{type(err).__name__}: {err}".strip()
        plan.append((path, doc_id, action))
    return plan


def import_paths(
    paths: list[Path],
    out: Path,
    dpi: int = 150,
    lang: str = "eng",
    questions: Path | None = None,
    progress: bool = True,
    structure: bool = False,
    max_pages: int | None = None,
    exclude: set[str] | None = None,
    shards: ShardOptions | None = None,
    workers: int | None = None,
) -> ImportSummary:
    """Import every PDF and image under ``paths`` into shards in ``out``; never aborts on a bad file.

    ``shards``: pages per shard, appending, and ``resume``: continue an import into ``out`` that was killed or
    failed (files its shards hold are passed over).
    ``structure``: PDF pages get the questions their document declares (:mod:`docjepa.data.structure`);
    ``max_pages``: at most this many pages per PDF; ``exclude``: SHA-256 digests of files to pass over (for example
    the real-page benchmark's documents, so that none of them enters training); ``workers``: processes reading
    files (default: one per core; 1 reads them in this process).
    """
    from tqdm.auto import tqdm

    shards = shards or ShardOptions()
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    spec = load_questions(questions) if questions else {}
    summary = ImportSummary()
    inputs = find_inputs(paths)
    stem_count: dict[str, int] = {}
    for path, _ in inputs:
        stem_count[path.stem] = stem_count.get(path.stem, 0) + 1
    stems = {path_text(p.stem): doc for p, doc in inputs if stem_count[p.stem] == 1}
    done: set[str] = set()
    if shards.resume and out.is_dir() and shard_paths(out):
        done = {row["doc_id"] for _, _, _, row in iter_rows(out, columns=["doc_id"])}
    plan = _plan(inputs, done, exclude)
    jobs = [(path, doc_id, dpi, lang, structure, max_pages) for path, doc_id, action in plan if action == READ]
    workers = min(workers, max(len(jobs), 1))
    # An executor, not a Pool: a worker killed by a crashing reader raises BrokenProcessPool here instead of
    # leaving the import waiting for its file forever.
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) if workers > 1 else None
    results = pool.map(_read, jobs) if pool is not None else map(_read, jobs)  # in order
    try:
        with ShardWriter(out, shards.pages_per_shard, append=shards.append or shards.resume) as writer:
            for path, _, action in tqdm(plan, desc="files", disable=not progress):
                if action in (ALREADY, EXCLUDED):
                    summary.already += action == ALREADY
                    summary.excluded += action == EXCLUDED
                    continue
                pages, ocr_pages, reason = next(results) if action == READ else (None, 0, action)
                if pages is None:
                    log.warning("skipped %s (%s)", path_text(path), reason)
                    summary.skipped.append((path_text(path), reason))
                    continue
                summary.ocr_pages += ocr_pages
                attach_questions(pages, spec, stems)
                writer.add_document(pages)
                summary.pages += len(pages)
                summary.words += sum(len(p.words) for p in pages)
                summary.files += 1
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return summary
