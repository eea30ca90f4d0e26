"""The model inside the server: one worker thread runs an :class:`~docjepa.apps.engine.model.EngineModel`.

Why a thread and not a process: PyTorch releases the GIL inside its operators, so while the model computes, the
event loop and the database threads keep answering (page loads, saves, leases); the weights and the cache of
encoded pages live once, in this process, and masks come back without being serialised. Why one: model calls
are serialised (the model holds one page's encoding at a time, swapped from its small LRU cache), and PyTorch is
given all cores but one (``threads``), leaving one to the web server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...data.record import Page
from . import masks
from .model import EngineModel

log = logging.getLogger("docjepa.engine")
COLOURS = [(230, 40, 40), (30, 120, 230), (20, 170, 90)]
"""Overlay colours of the candidates, in order (the page uses the same)."""


class Proposer:
    """Candidate masks for (page, question), computed in one worker thread."""

    def __init__(
        self, checkpoint: str | Path, device: str | None = None, threads: int | None = None, cache_pages: int = 16
    ) -> None:
        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self.device, self.cache_pages = device, cache_pages
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docjepa-model")
        self.lock = threading.Lock()
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
        """Serve another model from the next proposal on. The new model is loaded in the worker thread, so
        proposals already queued finish on the old one and none is dropped; the new model starts with no page
        cached."""

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

    def propose_sync(self, page_id: int, page: Page, question: str, refine: dict | None = None) -> dict:
        """Candidates for a question: each of the decoder's masks as the union of the boxes of the OCR words it
        covers (:func:`~.masks.whole_words`: word clicks on the page then edit it exactly), at the page's
        resolution, as overlay PNGs with the words they hold and their predicted IoU. ``refine``: a person's
        corrections (``points``, ``labels``, ``box``, ``mask``: :meth:`EngineModel.refine`)."""
        with self.lock:
            if refine is None:
                p = self.model.propose(page, question, key=page_id)
            else:
                p = self.model.refine(page, question, key=page_id, **refine)
            keep = (
                [pt for pt, lab in zip(refine.get("points") or [], refine.get("labels") or []) if lab] if refine else []
            )
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
                "model_version": self.version,
                "encode_seconds": p.encode_seconds,
                "decode_seconds": p.decode_seconds,
            }

    def due(self, every: float = 5.0) -> bool:
        """Time to look at the serving model setting again?"""
        t = time.monotonic()
        if t - self.checked_at >= every:
            self.checked_at = t
            return True
        return False

    async def propose(self, page_id: int, page: Page, question: str, refine: dict | None = None) -> dict:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.propose_sync, page_id, page, question, refine)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
