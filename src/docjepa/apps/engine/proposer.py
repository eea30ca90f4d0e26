"""The model inside the server: one worker thread runs an :class:`~docjepa.apps.engine.model.EngineModel`; the
requests it has not started yet wait in a bounded queue, and those that arrived together are answered together.

Why a thread and not a process: PyTorch releases the GIL inside its operators, so while the model computes, the
event loop and the database threads keep answering (page loads, saves, leases); the weights and the cache of
encoded pages live once, in this process, and masks come back without being serialised. Why one: the model holds
one page's encoding at a time (swapped from its small LRU cache), and on a CPU a second worker would only split
the same cores; PyTorch is given all cores but one (``threads``), leaving one to the web server and to the work
around the model (snapping candidates to words, PNG overlays, RLE), which runs in the requests' own threads.

Batches: when the worker turns to its queue it takes up to ``batch`` requests; the questions about one page are
decoded in one call (:meth:`~.model.EngineModel.propose_many`, the page encoded once), refinements one by one.
A full queue (``queue`` requests waiting) answers :class:`Busy` (HTTP 503 with ``Retry-After``) at once instead
of letting requests pile up behind the model.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ...data.record import Page
from . import masks
from .model import EngineModel, Proposal

log = logging.getLogger("docjepa.engine")
COLOURS = [(230, 40, 40), (30, 120, 230), (20, 170, 90)]
"""Overlay colours of the candidates, in order (the page uses the same)."""


class Busy(Exception):
    """The model's queue is full (HTTP 503); ``retry_after`` seconds until it has likely room again."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"the model is busy: try again in {self.retry_after} s")


@dataclass
class _Job:
    page_id: int
    page: Page
    question: str
    refine: dict | None
    done: Future = field(default_factory=Future)


class Proposer:
    """Candidate masks for (page, question), computed in one worker thread."""

    def __init__(
        self,
        checkpoint: str | Path,
        device: str | None = None,
        threads: int | None = None,
        cache_pages: int = 16,
        queue: int = 32,
        batch: int = 8,
    ) -> None:
        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self.device, self.cache_pages = device, cache_pages
        self.queue, self.batch = max(1, queue), max(1, batch)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docjepa-model")
        self.lock = threading.Lock()
        self.jobs: deque[_Job] = deque()
        self.job_seconds = 0.1  # running mean of the model's seconds per request (for Retry-After)
        self.model = self.pool.submit(self._load, checkpoint).result()
        self.checkpoint = str(checkpoint)
        self.checked_at = 0.0

    @property
    def version(self) -> str:
        return self.model.version

    def _load(self, checkpoint) -> EngineModel:
        import torch

        torch.set_num_threads(self.threads)
        return EngineModel(checkpoint, self.device, self.cache_pages).load()

    def switch(self, checkpoint: str | Path) -> None:
        """Serve another model from the next batch on. The new model is loaded in the worker thread, so no request
        is dropped; the new model starts with no page cached."""

        def load() -> None:
            try:
                model = self._load(checkpoint)
            except Exception:  # a broken promoted model: keep serving the one that works, say why in the log
                log.exception("could not load %s; still serving %s", checkpoint, self.version)
                return
            with self.lock:
                self.model, self.checkpoint = model, str(checkpoint)

        self.pool.submit(load)

    def follow(self, wanted: str | None) -> None:
        """Switch to ``wanted`` (the database's serving model, read by the caller at most every few seconds, see
        :meth:`due`) when a retraining round promoted another model."""
        if wanted and Path(wanted).resolve() != Path(self.checkpoint).resolve():
            self.checkpoint = wanted  # one switch per promotion, even while it loads
            self.switch(wanted)

    def due(self, every: float = 5.0) -> bool:
        """Time to look at the serving model setting again?"""
        t = time.monotonic()
        if t - self.checked_at >= every:
            self.checked_at = t
            return True
        return False

    # ------------------------------------------------------------------------------------------------ the queue
    def submit(self, page_id: int, page: Page, question: str, refine: dict | None = None) -> Future:
        """Queue a request for the model: a future of ``(Proposal, model version)``; :class:`Busy` when full."""
        job = _Job(page_id, page, question, refine)
        with self.lock:
            if len(self.jobs) >= self.queue:
                raise Busy(len(self.jobs) * self.job_seconds)
            self.jobs.append(job)
        self.pool.submit(self._drain)
        return job.done

    def _drain(self) -> None:
        """In the worker: answer up to ``batch`` waiting requests (nothing when earlier turns took them all)."""
        with self.lock:
            jobs = [self.jobs.popleft() for _ in range(min(self.batch, len(self.jobs)))]
            model = self.model
        if not jobs:
            return
        t = time.perf_counter()
        pages: dict[int, list[_Job]] = {}
        for job in jobs:
            if job.refine is None:
                pages.setdefault(job.page_id, []).append(job)
        for page_id, same in pages.items():
            questions = [j.question for j in same]
            self._run(same, lambda s=same, q=questions, pid=page_id: model.propose_many(s[0].page, q, key=pid), model)
        for job in jobs:
            if job.refine is not None:
                self._run([job], lambda j=job: [model.refine(j.page, j.question, key=j.page_id, **j.refine)], model)
        self.job_seconds = 0.8 * self.job_seconds + 0.2 * (time.perf_counter() - t) / len(jobs)

    @staticmethod
    def _run(jobs: list[_Job], compute, model: EngineModel) -> None:
        try:
            out = compute()
        except Exception as err:  # the request's own error (its caller answers it), never the worker's end
            for job in jobs:
                job.done.set_exception(err)
            return
        for job, p in zip(jobs, out):
            job.done.set_result((p, model.version))

    # ----------------------------------------------------------------------------------------- the answers
    def candidates(self, page: Page, p: Proposal, version: str, refine: dict | None = None) -> dict:
        """Candidates for a question: each of the decoder's masks as the union of the boxes of the OCR words it
        covers (:func:`~.masks.whole_words`: word clicks on the page then edit it exactly), at the page's
        resolution, as overlay PNGs with the words they hold and their predicted IoU. ``refine``: a person's
        corrections (``points``, ``labels``, ``box``, ``mask``: :meth:`EngineModel.refine`)."""
        keep = [pt for pt, lab in zip(refine.get("points") or [], refine.get("labels") or []) if lab] if refine else []
        candidates = []
        for k, raw in enumerate(p.masks):
            m, ids = masks.whole_words(page.words, raw, keep_at=keep)
            candidates.append(
                {
                    "index": k,
                    "score": float(p.scores[k]),
                    "png": masks.data_url(masks.to_png(m, COLOURS[k % len(COLOURS)])),
                    "word_ids": ids,
                    "empty": not bool(m.any()),
                    "rle": masks.encode(m),  # kept by the server with the proposal, not sent
                }
            )
        return {
            "candidates": candidates,
            "best": int(p.best),
            "model_version": version,
            "encode_seconds": p.encode_seconds,
            "decode_seconds": p.decode_seconds,
        }

    def propose_sync(self, page_id: int, page: Page, question: str, refine: dict | None = None) -> dict:
        """:meth:`propose` for a caller outside the event loop (scripts, tests)."""
        p, version = self.submit(page_id, page, question, refine).result()
        return self.candidates(page, p, version, refine)

    async def propose(self, page_id: int, page: Page, question: str, refine: dict | None = None) -> dict:
        """The candidates (see :meth:`candidates`): the model's part in the worker, the rest in a thread of the
        event loop's pool, so the worker goes on with the next request meanwhile."""
        p, version = await asyncio.wrap_future(self.submit(page_id, page, question, refine))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.candidates, page, p, version, refine)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            left, self.jobs = list(self.jobs), deque()
        for job in left:
            job.done.set_exception(RuntimeError("the model was closed before it answered"))
