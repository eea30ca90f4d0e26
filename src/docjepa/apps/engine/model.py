"""The model behind the engine, through one narrow interface: :class:`EngineModel` proposes candidate masks for a
question on a page, scores itself on annotated pages, and fine-tunes a successor on them.

The server's worker thread (:mod:`.proposer`), the semi-automatic and automatic stages (:mod:`.automation`),
retraining rounds (:mod:`.retrain`) and the simulation (:mod:`.simulation`) all reach the model through it.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ...data.record import Page
from ...data.split import SplitConfig
from . import launcher

DEFAULT_CONFIG = "finetune/tiny"
"""The packaged fine-tuning config a successor is trained with when none is given."""


def all_questions() -> SplitConfig:
    """A split that holds nothing out: pages annotated in the engine have no layouts or templates to hold out."""
    return SplitConfig(layouts=[], template_modulus=0)


def model_version(model_dir: Path) -> str:
    """``RUN-FOLDER-NAME:sha256[:10]`` of the weights (``shipped:…`` for the package's model): which model
    proposed an annotation."""
    weights = sorted(Path(model_dir).glob("*.safetensors")) or sorted(Path(model_dir).glob("*.bin"))
    digest = hashlib.sha256()
    for w in weights:
        with open(w, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(chunk)
    name = Path(model_dir).resolve()
    label = name.parents[2].name if name.name == "model" and name.parent.parent.name == "checkpoints" else name.name
    from ...modeling.shipped import is_shipped

    if is_shipped(name):
        label = "shipped"
    return f"{label}:{digest.hexdigest()[:10]}"


@dataclass
class Proposal:
    """The decoder's candidates for one question, each snapped to the OCR words it covers, at page resolution."""

    logits: object
    """(candidates, h, w) mask logits of the decoder (a tensor)."""
    scores: object
    """Predicted IoU of each candidate (a tensor)."""
    best: int
    """The candidate the predictor answers with."""
    masks: list[np.ndarray]
    """(H, W) bool mask of each candidate."""
    encode_seconds: float = 0.0
    decode_seconds: float = 0.0


class EngineModel:
    """A Document-JEPA model as the engine uses it, loaded when first asked (fine-tuning from a pre-training run
    never loads it). ``cache_pages``: page encodings kept (by the key the caller gives), so that questions about a
    page seen recently cost only the decoder."""

    def __init__(self, checkpoint: str | Path, device: str | None = None, cache_pages: int = 16) -> None:
        self.checkpoint, self.device = str(checkpoint), device
        self.cache: OrderedDict[object, tuple] = OrderedDict()
        self.cache_pages = cache_pages
        from ...inference.batched import QuestionStates

        self.questions = QuestionStates()
        """The question tower's states of the questions asked last (they depend on the question alone)."""

    @cached_property
    def predictor(self):
        from ...inference.predictor import DocumentPredictor

        return DocumentPredictor.from_pretrained(self.checkpoint, device=self.device)

    @cached_property
    def version(self) -> str:
        """Which model this is (see :func:`model_version`)."""
        from ...modeling.files import resolve_model_dir

        return model_version(resolve_model_dir(self.checkpoint))

    def load(self) -> EngineModel:
        """Load the weights and hash them now, not at the first question (a server does it before it listens)."""
        for attribute in ("predictor", "version"):
            getattr(self, attribute)
        return self

    def encode(self, page: Page, key: object = None) -> float:
        """Make ``page`` the current page: from the cache when ``key`` was encoded before, not at all when it is the
        current page already; seconds spent encoding."""
        p = self.predictor
        if key is not None and key in self.cache:
            self.cache.move_to_end(key)
            p.set_encoded(self.cache[key])
            return 0.0
        if key is None and p.page is page:
            return 0.0
        t = time.perf_counter()
        encoded = p.set_page(page)
        if key is not None:
            self.cache[key] = encoded
            while len(self.cache) > self.cache_pages:
                self.cache.popitem(last=False)
        return time.perf_counter() - t

    def propose(self, page: Page, question: str, key: object = None) -> Proposal:
        """Candidate masks for ``question`` on ``page`` (encoded once per ``key``, or once while it stays current)."""
        encode_s = self.encode(page, key)
        t = time.perf_counter()
        logits, scores, best, masks = candidate_masks(self.predictor, page, question)
        return Proposal(logits, scores, best, masks, encode_s, time.perf_counter() - t)

    def propose_many(self, page: Page, questions: list[str], key: object = None) -> list[Proposal]:
        """:meth:`propose` for several questions on one page (requests that arrived together), decoded together
        with the question tower's states of questions asked before reused
        (:func:`~docjepa.inference.batched.decode_many`); the encoding's and the batch's seconds are shared out."""
        encode_s = self.encode(page, key)
        t = time.perf_counter()
        from ...inference.batched import decode_many

        decoded = decode_many(self.predictor, questions, self.questions)
        out = [Proposal(*snapped(self.predictor, d)) for d in decoded]
        share = (time.perf_counter() - t) / len(out)
        for p in out:
            p.encode_seconds, p.decode_seconds = encode_s / len(out), share
        return out

    def refine(
        self,
        page: Page,
        question: str,
        points=None,
        labels=None,
        box=None,
        mask: np.ndarray | None = None,
        key: object = None,
    ) -> Proposal:
        """Candidates for ``question`` given a person's corrections: points (P, 2) in page pixels with ``labels``
        (1 on the answer, 0 off it), a box, and the current answer (H, W) bool to refine (the mask prompt); from
        the cached page encoding when ``key`` was encoded before."""
        encode_s = self.encode(page, key)
        t = time.perf_counter()
        prompt_mask = None if mask is None or not mask.any() else self.predictor.frame_mask(mask)
        logits, scores, best, masks = candidate_masks(self.predictor, page, question, points, labels, box, prompt_mask)
        return Proposal(logits, scores, best, masks, encode_s, time.perf_counter() - t)

    def score(self, data: Path, split: SplitConfig | None = None, part: str = "all", limit: int | None = None) -> dict:
        """mIoU / gIoU / cIoU of the model and the baseline's mIoU on the ``part`` questions of the shards in
        ``data`` (as ``docjepa evaluate`` scores); the current page is encoded again afterwards when needed."""
        from ...eval.evaluate import evaluate

        result = evaluate(self.predictor, [Path(data)], split or all_questions(), part, limit, False)
        m = result["model"]
        return {
            "mIoU": m["mIoU"],
            "gIoU": m["gIoU"],
            "cIoU": m["cIoU"],
            "baseline_mIoU": result["baseline"]["mIoU"],
            "questions": result["questions"],
        }

    def fine_tune(
        self,
        data: Path,
        out: Path,
        steps: int,
        split: SplitConfig | None = None,
        config: str | None = DEFAULT_CONFIG,
        threads: int | None = None,
        seed: int | None = None,
        log_every: int | None = None,
        child: bool = False,
    ) -> Path:
        """Fine-tune a successor from this model on the shards in ``data`` into the run folder ``out`` (returned;
        a finished run there is taken as it is). ``child``: in a ``docjepa finetune`` child process, so that the
        caller's memory and threads stay its own; else in this process."""
        out = Path(out)
        if (out / "last_metrics.json").is_file():
            return out
        from ...core.config import load_config, save_config, updated
        from ...train.finetune import FinetuneConfig, finetune

        split = split or all_questions()
        run = {"steps": steps, "checkpoint_every": steps}
        run |= {"log_every": log_every} if log_every else {}
        run |= {"threads": threads} if threads else {}
        run |= {"seed": seed} if seed is not None else {}
        cfg = updated(
            load_config(FinetuneConfig, config),
            {
                "model": {"init": self.checkpoint},
                "data": {
                    "train": [data],
                    "split": {"layouts": list(split.layouts), "template_modulus": split.template_modulus},
                },
                "run": run,
            },
        )
        if child:
            with tempfile.TemporaryDirectory() as tmp:
                path = save_config(cfg, Path(tmp) / "finetune.yaml")
                launcher.run(["finetune", "--config", path, "--out", out], "fine-tuning")
            return out
        finetune(cfg, out, progress=False)
        return out

    def improve(
        self,
        data: Path,
        out: Path,
        steps: int,
        val: Path,
        split: SplitConfig | None = None,
        part: str = "all",
        limit: int | None = None,
        train: Callable[[str, Path, Path], Path] | None = None,
        **options: object,
    ) -> tuple[EngineModel, dict]:
        """Fine-tune a successor (:meth:`fine_tune` with ``options``, or ``train(checkpoint, data, out) -> run``) and
        score it on ``val``: (the successor, its scores). One turn of the engine's loop (a round, real or simulated)."""
        run = train(self.checkpoint, data, out) if train else self.fine_tune(data, out, steps, split, **options)
        successor = EngineModel(run, self.device, self.cache_pages)
        return successor, successor.score(val, split, part, limit)


def candidate_masks(predictor, page: Page, question: str, points=None, labels=None, box=None, mask=None):
    """The decoder's candidates for a question (and a person's points, box and current answer in the square frame,
    see ``DocumentPredictor.prompt``) on the predictor's current page (``page``), each snapped to the OCR words it
    covers as ``predict`` snaps its answer, at the page's resolution: (logits, scores, best, masks)."""
    decoded = predictor.decode(question, points=points, point_labels=labels, box=box, mask=mask)
    return snapped(predictor, decoded)


def snapped(predictor, decoded):
    """(logits, scores, best, masks) of one decoder output: each candidate snapped to its words at page size."""
    reading = predictor.read(decoded)
    full = [reading.page_answer(k)[0] for k in range(decoded.logits.shape[0])]
    return decoded.logits, decoded.scores, reading.chosen, full
