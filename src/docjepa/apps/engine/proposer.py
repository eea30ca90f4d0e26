"""The model inside the server: one worker thread runs a :class:`~docjepa.predictor.DocumentPredictor`.

Why a thread and not a process: PyTorch releases the GIL inside its operators, so while the model computes, the
event loop and the database threads keep answering (page loads, saves, leases); the weights and the cache of
encoded pages live once, in this process, and masks come back without being serialised. Why one: model calls
are serialised (the predictor holds one page's encoding at a time, swapped from a small LRU cache here), and
PyTorch is given all cores but one (``threads``), leaving one to the web server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...data.prompt import box_mask
from ...data.record import Page
from ...predictor import choose_mask, page_region
from . import masks

log = logging.getLogger("docjepa.engine")
COLOURS = [(230, 40, 40), (30, 120, 230), (20, 170, 90)]
"""Overlay colours of the candidates, in order (the page uses the same)."""


def model_version(model_dir: Path) -> str:
    """``RUN-FOLDER-NAME:sha256[:10]`` of the weights: which model proposed an annotation."""
    weights = sorted(Path(model_dir).glob("*.safetensors")) or sorted(Path(model_dir).glob("*.bin"))
    digest = hashlib.sha256()
    for w in weights:
        with open(w, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(chunk)
    name = Path(model_dir).resolve()
    label = name.parents[2].name if name.name == "model" and name.parent.parent.name == "checkpoints" else name.name
    return f"{label}:{digest.hexdigest()[:10]}"


class Proposer:
    """Candidate masks for (page, question), computed in one worker thread."""

    def __init__(
        self, checkpoint: str | Path, device: str | None = None, threads: int | None = None, cache_pages: int = 16
    ) -> None:
        import torch

        from ...modeling.files import resolve_model_dir
        from ...predictor import DocumentPredictor

        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docjepa-model")
        self.lock = threading.Lock()
        self.model_dir = resolve_model_dir(checkpoint)
        self.version = model_version(self.model_dir)
        self.cls, self.device, self.checkpoint = DocumentPredictor, device, str(checkpoint)
        self.predictor = self.pool.submit(self._load, DocumentPredictor, checkpoint, device, torch).result()
        self.cache: OrderedDict[int, tuple] = OrderedDict()
        self.cache_pages = cache_pages
        self.checked_at = 0.0

    def switch(self, checkpoint: str | Path) -> None:
        """Serve another model from the next proposal on. The new model is loaded in the worker thread, so
        proposals already queued finish on the old one and none is dropped; the page cache is emptied."""
        import torch

        from ...modeling.files import resolve_model_dir

        def load() -> None:
            try:
                predictor = self._load(self.cls, checkpoint, self.device, torch)
            except Exception:  # a broken promoted model: keep serving the one that works, say why in the log
                log.exception("could not load %s; still serving %s", checkpoint, self.version)
                return
            with self.lock:
                self.predictor, self.model_dir = predictor, resolve_model_dir(checkpoint)
                self.version, self.checkpoint = model_version(self.model_dir), str(checkpoint)
                self.cache.clear()

        self.pool.submit(load)

    def follow(self, wanted: str | None, every: float = 5.0) -> None:
        """Switch to ``wanted`` (the database's serving checkpoint, read by the caller at most every ``every``
        seconds) when a retraining round promoted another model."""
        if wanted and Path(wanted).resolve() != Path(self.checkpoint).resolve():
            self.checkpoint = wanted  # one switch per promotion, even while it loads
            self.switch(wanted)

    def _load(self, cls, checkpoint, device, torch):
        torch.set_num_threads(self.threads)
        return cls.from_pretrained(checkpoint, device=device)

    def _set_page(self, page_id: int, page: Page) -> float:
        """Make ``page`` the predictor's current page (from the cache when it was encoded before); seconds spent."""
        p = self.predictor
        if page_id in self.cache:
            self.cache.move_to_end(page_id)
            p.page, p.encoding, p.scale, p.word_index = self.cache[page_id]
            return 0.0
        t = time.perf_counter()
        p.set_page(page)
        self.cache[page_id] = (p.page, p.encoding, p.scale, p.word_index)
        while len(self.cache) > self.cache_pages:
            self.cache.popitem(last=False)
        return time.perf_counter() - t

    def propose_sync(self, page_id: int, page: Page, question: str) -> dict:
        """Candidates for a question: each of the decoder's masks snapped to the OCR words it covers (as ``predict``
        answers), at the page's resolution, as overlay PNGs with the words they hold and their predicted IoU."""
        with self.lock:
            encode_s = self._set_page(page_id, page)
            t = time.perf_counter()
            _, scores, best, full = candidate_masks(self.predictor, page, question)
            candidates = [
                {
                    "index": k,
                    "score": float(scores[k]),
                    "png": masks.data_url(masks.to_png(m, COLOURS[k % len(COLOURS)])),
                    "word_ids": masks.words_inside(page.words, m),
                    "empty": not bool(m.any()),
                }
                for k, m in enumerate(full)
            ]
            return {
                "candidates": candidates,
                "best": int(best),
                "model_version": self.version,
                "encode_seconds": encode_s,
                "decode_seconds": time.perf_counter() - t,
            }

    def due(self, every: float = 5.0) -> bool:
        """Time to look at the serving checkpoint setting again?"""
        t = time.monotonic()
        if t - self.checked_at >= every:
            self.checked_at = t
            return True
        return False

    async def propose(self, page_id: int, page: Page, question: str) -> dict:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.propose_sync, page_id, page, question)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def candidate_masks(predictor, page: Page, question: str):
    """The decoder's candidates for a question on the predictor's current page (``page``), each snapped to the OCR
    words it covers as ``predict`` snaps its answer, at the page's resolution: (logits, scores, best, masks)."""
    logits, scores = predictor.predict_logits(question)
    frame = predictor.scale * logits.shape[-1] / predictor.size
    best = choose_mask(logits, scores, page_region(predictor.page, frame, logits.shape[-1]))
    full = []
    for k in range(logits.shape[0]):
        small, box = predictor.answer_mask(logits, scores, best=k)
        if box is not None:
            full.append(box_mask(box, page, 1.0, max(page.height, page.width))[: page.height, : page.width])
        else:
            full.append(_upsample(small, page, frame))
    return logits, scores, int(best), full


def _upsample(small: np.ndarray, page: Page, frame: float) -> np.ndarray:
    """A square-frame mask (page pixels × frame = mask pixels) at the page's resolution (nearest pixel)."""
    ys = np.minimum((np.arange(page.height) * frame).astype(int), small.shape[0] - 1)
    xs = np.minimum((np.arange(page.width) * frame).astype(int), small.shape[1] - 1)
    return small[np.ix_(ys, xs)]
