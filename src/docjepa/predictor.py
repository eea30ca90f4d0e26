"""Encode a page once, answer many questions: the Document-JEPA predictor (like SAM's ``SamPredictor``).

predictor = DocumentPredictor.from_pretrained("runs/finetune")
predictor.set_page(page)                       # or set_image(pil_image, words)
p = predictor.predict("What is the invoice number?")
p.answer                                       # (H, W) bool answer mask at page resolution
p.masks[p.best]                                # the same before snapping to the OCR words
current = predictor.frame_mask(p.answer)
p = predictor.predict("What is the invoice number?", points=[(412, 88)], point_labels=[0], mask=current)
                                               # corrected: the word at (412, 88) is not the answer (apply_clicks)
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .clicks import apply_clicks, boxes_mask, line_boxes, words_in
from .data.collate import CollateConfig, DocumentCollator
from .data.prompt import PromptBuilder, QuestionPrompt, box_mask
from .data.record import Page, Word, union_box
from .errors import UsageError

SNAP_AGREEMENT = 0.3
"""Default ``min_agreement`` of :func:`snap_to_words` (chosen on trained-kinds questions: docs/docjepa-results.md)."""


WORD_LOGIT = 0.0
"""A word is in a word answer when the word decoder's logit of one of its tokens exceeds this (probability ½)."""

ADDED_LATER = frozenset({"word_decoder.click.weight"})
"""Weights added to the model after some checkpoints were saved, whose zero value changes nothing (a model saved
without them loads with them at zero)."""

FULL_PAGE = 0.9
"""A candidate mask covering at least this fraction of the page is not an answer (see :func:`choose_mask`)."""


def _coverage(logits: torch.Tensor, region: torch.Tensor | np.ndarray | None) -> torch.Tensor:
    """(N,) fraction of the page (``region`` of the frame, default all of it) that each candidate covers."""
    on = logits > 0
    if region is None:
        return on.flatten(1).sum(1).float().cpu() / on[0].numel()
    region = torch.as_tensor(region, dtype=torch.bool, device=on.device)
    return (on & region).flatten(1).sum(1).float().cpu() / max(1, int(region.sum()))


def choose_mask(logits: torch.Tensor, scores: torch.Tensor, region: torch.Tensor | np.ndarray | None = None) -> int:
    """Which of N candidate masks (N, H, W) logits to return: the highest predicted IoU among the informative ones.

    A question about a page always has an answer region, and it is a part of the page: a mask that is empty on the
    page, or that covers (nearly, :data:`FULL_PAGE`) all of it, says nothing. On unfamiliar pages the IoU head can
    rank such an output first (SAM filters its automatic masks on quality for the same reason). ``region``: (H, W)
    bool, where the page lies in the frame (default: everywhere). When no candidate is informative, the highest
    predicted IoU among the non-empty ones, and when every one is empty, the highest predicted IoU."""
    cover = _coverage(logits, region)
    filled, informative = cover > 0, (cover > 0) & (cover < FULL_PAGE)
    s = torch.as_tensor(scores, dtype=torch.float32).detach().cpu().clone()
    keep = informative if informative.any() else filled
    if keep.any():
        s[~keep] = float("-inf")
    return int(s.argmax())


def page_region(page: Page, frame: float, size: int) -> np.ndarray:
    """(size, size) bool: where a page (page pixels × ``frame`` = mask pixels) lies in the square frame."""
    h, w = max(1, round(page.height * frame)), max(1, round(page.width * frame))
    region = np.zeros((size, size), dtype=bool)
    region[:h, :w] = True
    return region


def words_box(mask: np.ndarray, page: Page, frame: float) -> tuple[float, float, float, float] | None:
    """The box (page pixels) around the OCR words whose centre lies inside ``mask`` (a boolean square-frame mask,
    page pixels × ``frame`` = mask pixels), or None when it covers none."""
    inside = words_in(mask, page, frame)
    return union_box([page.words[i].box for i in inside], 0.0) if inside else None


def snap_to_words(
    mask: np.ndarray, page: Page, frame: float, min_agreement: float = SNAP_AGREEMENT
) -> tuple[np.ndarray, tuple[float, float, float, float] | None]:
    """Replace a mask by the box of the OCR words it covers, drawn as answers are drawn (``box_mask``), when that
    box agrees with it (IoU ≥ ``min_agreement``); otherwise keep it. Returns the mask and the box (None: kept).

    The decoder's masks are 4 page pixels a side at the tiny preset, coarse against a line of text two or three
    mask pixels tall, so a mask on the right words still misses part of their box; answers that are words are
    whole words. A mask that the words' box would change a lot (a signature area, a table column: regions that
    are not words) is kept as it is."""
    box = words_box(mask, page, frame)
    if box is None:
        return mask, None
    snapped = box_mask(box, page, frame, mask.shape[-1])
    union = int((snapped | mask).sum())
    if union == 0 or (snapped & mask).sum() / union < min_agreement:
        return mask, None
    return snapped, box


def word_logits(token_logits: torch.Tensor, word_index: torch.Tensor, words: int) -> torch.Tensor:
    """(words,) each OCR word's answer logit: the largest of its tokens' (−inf for a word left without tokens,
    beyond the encoder's ``max_tokens``). ``token_logits`` (L,), ``word_index`` (L,) the word of each token (−1:
    special)."""
    out = torch.full((words,), float("-inf"))
    index = word_index[: token_logits.shape[0]].cpu()
    real = index >= 0
    return out.scatter_reduce(0, index[real], token_logits.detach().float().cpu()[real], reduce="amax")


def answer_words(logits: torch.Tensor, threshold: float = WORD_LOGIT) -> list[int]:
    """The words of a word answer: those whose logit exceeds ``threshold``, or the single best one when none does
    (none at all when no word has tokens)."""
    if logits.numel() == 0 or not torch.isfinite(logits).any():
        return []
    chosen = torch.nonzero(logits > threshold).flatten().tolist()
    return chosen or [int(logits.argmax())]


@dataclass
class Prediction:
    """Masks for one prompt."""

    logits: torch.Tensor
    """(N, M, M) mask logits in the square model frame (the page letterboxed at the top left)."""
    scores: np.ndarray
    """(N,) predicted IoU of each mask."""
    masks: np.ndarray
    """(N, H, W) boolean masks at the page's resolution."""
    answer: np.ndarray | None = None
    """(H, W) the answer: mask ``best``, snapped to the box of the OCR words it covers (see :func:`snap_to_words`);
    empty when every candidate covers the whole page (the model has no answer)."""
    answer_box: tuple[float, float, float, float] | None = None
    """The box around the answer's words in page pixels (None: the mask was kept as the decoder drew it)."""
    answer_lines: list[tuple[float, float, float, float]] | None = None
    """The answer's words as one box per line (page pixels): the box itself when the mask was snapped, the lines of
    the word decoder's words when the answer came from them (see :meth:`DocumentPredictor.answer_mask`)."""

    best: int = 0
    """Index of the chosen candidate: the highest predicted IoU among informative masks (see :func:`choose_mask`)."""
    lexical_box: tuple[float, float, float, float] | None = None
    """The OCR matcher's answer box (page pixels) that was the mask prompt (None: none, or no mask prompt)."""
    confidence: np.ndarray | None = None
    """(N,) the IoU each candidate can be expected to reach, from ``scores`` through the model's calibration
    (``calibration.json`` beside its weights, :mod:`docjepa.calibration`); None when the model has none."""
    known: bool | None = None
    """Whether the model knows the answer: the chosen candidate's confidence reaches the calibration's threshold
    (None: not calibrated)."""

    def ranked(self) -> list[int]:
        """Candidate indices, the chosen one first, then by predicted IoU."""
        rest = sorted((i for i in range(len(self.scores)) if i != self.best), key=lambda i: -float(self.scores[i]))
        return [self.best, *rest]


class DocumentPredictor:
    """Wraps a ``DocJepaForSegmentation`` with its tokenizers; caches the fused image embedding of a page."""

    def __init__(
        self,
        model,
        tokenizer,
        question_tokenizer=None,
        device: str | torch.device | None = None,
        max_tokens: int = 512,
        max_question_tokens: int = 32,
        snap: float | None = SNAP_AGREEMENT,
        calibration=None,
        word_answers: bool = True,
        click_rules: bool = True,
    ) -> None:
        """``snap``: the ``min_agreement`` with which answers are snapped to the OCR words (None: never);
        ``calibration``: a :class:`~docjepa.calibration.Calibration` (``from_pretrained`` loads the model's own);
        ``word_answers``: when the chosen mask covers no words it agrees with, answer with the words the word
        decoder picks (see :meth:`answer_mask`); ``click_rules``: make answers agree with the clicks in the prompt
        (:func:`apply_clicks`; False: the model's own answer to them)."""
        self.word_answers = word_answers
        self.click_rules = click_rules
        self.last_token_logits: torch.Tensor | None = None
        self.last_clicks: tuple[np.ndarray, list[int], np.ndarray | None] | None = None  # points, labels, answer seen
        self.calibration = calibration
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer, self.qtok = tokenizer, question_tokenizer or tokenizer
        self.size = model.config.image_size
        self.collate = DocumentCollator(
            tokenizer, CollateConfig(image_size=self.size, mask_size=model.config.mask_size, max_tokens=max_tokens)
        )
        self.snap = snap
        self.prompts = PromptBuilder(
            tokenizer, self.qtok, max_question_tokens, model.config.mask_size, model.config.lexical_prior
        )
        self.page: Page | None = None
        self.encoding = None  # PageEncoding of the current page
        self.scale = 1.0

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device | None = None,
        snap: float | None = SNAP_AGREEMENT,
        word_answers: bool = True,
        click_rules: bool = True,
    ) -> DocumentPredictor:
        """From a fine-tuning run folder, checkpoint folder or model folder (tokenizers are stored with it)."""
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        from transformers.utils import logging as hf_logging

        from .modeling.files import SEGMENTATION, require_model
        from .modeling.segmentation import DocJepaForSegmentation

        model_dir = require_model(path, (SEGMENTATION,), "prediction")
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the report of missing weights is checked below instead
        try:
            model, info = DocJepaForSegmentation.from_pretrained(model_dir, output_loading_info=True)
        finally:
            hf_logging.set_verbosity(verbosity)
        missing = set(info.get("missing_keys") or [])
        for name in missing & ADDED_LATER:  # a model saved before these existed: zero, as if never used
            with torch.no_grad():
                model.get_parameter(name).zero_()
        missing -= ADDED_LATER
        if missing:
            raise UsageError(f"{model_dir} lacks {len(missing)} weights of the model, e.g. {sorted(missing)[0]}")
        tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
        qdir = model_dir / "question_tokenizer"
        qtok = AutoTokenizer.from_pretrained(qdir) if qdir.is_dir() else tok
        from .calibration import Calibration

        calibration = Calibration.load(model_dir)
        return cls(
            model,
            tok,
            qtok,
            device=device,
            snap=snap,
            calibration=calibration,
            word_answers=word_answers,
            click_rules=click_rules,
        )

    @torch.no_grad()
    def set_page(self, page: Page) -> None:
        """Encode a page (image + OCR words); later ``predict`` calls reuse the embedding."""
        batch = self.collate([(page, None)])
        self.scale = self.size / max(page.width, page.height)
        self.word_index = batch["word_index"][0]
        self.encoding = self.model.encode_image(
            *(batch[k].to(self.device) for k in ("pixel_values", "input_ids", "attention_mask", "bbox"))
        )
        self.page = page

    def set_image(self, image: Image.Image, words: list[Word]) -> None:
        """Encode an image with its OCR words (boxes in the image's pixels)."""
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="PNG")
        self.set_page(Page("image", 0, image.width, image.height, buf.getvalue(), list(words), "predictor"))

    def frame_mask(self, mask: np.ndarray) -> np.ndarray:
        """A mask at the current page's resolution (H, W) bool → the square frame at the decoder's resolution
        (M, M) bool: a mask pixel is set when any page pixel under it is (a word a few page pixels tall stays)."""
        page = self.page
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (page.height, page.width):
            raise UsageError(f"the mask is {mask.shape}, the page {(page.height, page.width)}")
        m = self.model.config.mask_size
        frame = self.scale * m / self.size
        h, w = min(m, max(1, round(page.height * frame))), min(m, max(1, round(page.width * frame)))
        small = Image.fromarray(mask.astype(np.uint8) * 255).resize((w, h), Image.Resampling.BOX)
        out = np.zeros((m, m), dtype=bool)
        out[:h, :w] = np.asarray(small) > 0
        return out

    def prompt(
        self, question: str | None = None, points=None, point_labels=None, box=None, mask=None
    ) -> QuestionPrompt:
        """The decoder's prompt for the current page, made as in training (:class:`PromptBuilder`). Points (P, 2)
        and box (4,) in page pixels; ``mask``: (M, M) bool, a mask in the square frame at the decoder's resolution
        to refine (the current answer), in place of the OCR matcher's box."""
        if self.encoding is None:
            raise RuntimeError("call set_page (or set_image) before predict")
        if question is not None and not question.strip():
            raise UsageError("the question is empty")
        prompt = QuestionPrompt()
        self.prompts.lexical_prior = self.model.config.lexical_prior
        if question is not None:
            prompt = self.prompts([question], [self.page], self.word_index.unsqueeze(0))
        if points is not None:
            prompt.points = torch.as_tensor(points, dtype=torch.float32).view(1, -1, 2) * self.scale
            labels = point_labels if point_labels is not None else [1] * prompt.points.shape[1]
            prompt.point_labels = torch.as_tensor(labels).view(1, -1)
        if box is not None:
            prompt.boxes = torch.as_tensor(box, dtype=torch.float32).view(1, 4) * self.scale
        if mask is not None:
            m = self.model.config.mask_size
            mask = torch.as_tensor(np.asarray(mask), dtype=torch.float32)
            if mask.shape != (m, m):
                raise UsageError(f"a mask prompt is {m} x {m} (the decoder's frame), not {tuple(mask.shape)}")
            prompt.mask_prompt, prompt.lexical_boxes = mask.view(1, 1, m, m), None
        return prompt.to(self.device)

    @torch.no_grad()
    def predict_logits(
        self, question: str | None = None, points=None, point_labels=None, box=None, multimask: bool = True, mask=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, M, M) logits in the square frame and (N,) scores. Points (P, 2) / box (4,) in page pixels; ``mask``:
        (M, M) the answer to refine (see :meth:`prompt`)."""
        self.last_prompt = self.prompt(question, points, point_labels, box, mask)
        self.last_clicks = None
        if points is not None and len(points):
            labels = point_labels if point_labels is not None else [1] * len(points)
            prev = None if mask is None else np.asarray(mask, dtype=bool)
            self.last_clicks = (np.asarray(points, dtype=np.float64).reshape(-1, 2), list(labels), prev)
        out = self.model.decode(self.encoding, self.last_prompt, multimask)
        self.last_token_logits = None if out.token_logits is None else out.token_logits[0]
        return out.masks[0].float(), out.iou[0].float()

    def answer_mask(
        self, logits: torch.Tensor, scores: torch.Tensor, best: int | None = None
    ) -> tuple[np.ndarray, tuple[float, float, float, float] | None]:
        """The answer in the square frame (M, M) bool from candidate logits, and the box around its words in page
        pixels (None: the mask as the decoder drew it). See :meth:`answer_lines` for how it is made."""
        mask, lines = self.answer_lines(logits, scores, best)
        return mask, (union_box(lines) if lines else None)

    def answer_lines(
        self, logits: torch.Tensor, scores: torch.Tensor, best: int | None = None
    ) -> tuple[np.ndarray, list[tuple[float, float, float, float]] | None]:
        """The answer in the square frame (M, M) bool from candidate logits, and its words as one page-pixel box per
        line (None: the mask was kept as the decoder drew it).

        Candidate ``best`` (default: the one :func:`choose_mask` picks), snapped to the OCR words it covers
        (:func:`snap_to_words`). When the chosen candidate covers no words it agrees with (a speck beside a page
        number, a blob between two lines) and the last question's word-decoder logits are at hand, the answer is
        the words the word decoder picks (:func:`answer_words`), drawn line by line: a few words are too small for
        the decoder's mask pixels, not for its per-token logits. Only the page's part of the frame counts: the
        letterbox padding around it is never part of an answer. When the chosen candidate covers the whole page
        (:data:`FULL_PAGE`; it is chosen only when every candidate does), the model has no answer and the mask is
        empty.

        When the prompt held points (a person's clicks), the answer is then made to agree with them
        (:func:`apply_clicks`): a click on a word is a plain statement about that word."""
        mask, lines = self._model_answer(logits, scores, best)
        if self.last_clicks is None or not self.click_rules:
            return mask, lines
        frame = self.scale * logits.shape[-1] / self.size
        return apply_clicks(mask, lines, self.page, frame, *self.last_clicks)

    def _model_answer(
        self, logits: torch.Tensor, scores: torch.Tensor, best: int | None = None
    ) -> tuple[np.ndarray, list[tuple[float, float, float, float]] | None]:
        """:meth:`answer_lines` before the clicks are applied."""
        frame = self.scale * logits.shape[-1] / self.size  # page pixels → mask pixels
        region = page_region(self.page, frame, logits.shape[-1])
        chosen = choose_mask(logits, scores, region)
        best = chosen if best is None else best
        if _coverage(logits[best : best + 1], region)[0] >= FULL_PAGE:  # every candidate is the whole page: no answer
            return np.zeros_like(region), None
        mask = (logits[best] > 0).cpu().numpy() & region
        box = None
        if self.snap is not None:
            mask, box = snap_to_words(mask, self.page, frame, self.snap)
        if box is not None:
            return mask, [box]
        if self.word_answers and best == chosen and self.last_token_logits is not None:
            picked = answer_words(word_logits(self.last_token_logits, self.word_index, len(self.page.words)))
            if picked:
                lines = line_boxes(self.page, picked)
                return boxes_mask(lines, self.page, frame, logits.shape[-1]), lines
        return mask, None

    def page_answer(
        self, logits: torch.Tensor, scores: torch.Tensor, best: int, masks: np.ndarray | None = None
    ) -> tuple[np.ndarray, list[tuple[float, float, float, float]] | None]:
        """:meth:`answer_lines` at the page's resolution (H, W): its words' line boxes drawn there, or else candidate
        ``best`` upsampled (``masks``: the candidates at page resolution, when already made)."""
        page = self.page
        small, lines = self.answer_lines(logits, scores, best)
        if lines:  # the words' boxes, drawn at the page's resolution as answers are drawn
            return boxes_mask(lines, page, 1.0, max(page.height, page.width))[: page.height, : page.width], lines
        if not small.any():
            return np.zeros((page.height, page.width), dtype=bool), None
        if masks is None:
            frame = self.scale * logits.shape[-1] / self.size
            ys = np.minimum((np.arange(page.height) * frame).astype(int), small.shape[0] - 1)
            xs = np.minimum((np.arange(page.width) * frame).astype(int), small.shape[1] - 1)
            return small[np.ix_(ys, xs)], None
        return masks[best], None

    def predict(
        self, question: str | None = None, points=None, point_labels=None, box=None, multimask: bool = True, mask=None
    ) -> Prediction:
        """Masks for a question and/or point / box prompts (and a mask to refine, see :meth:`prompt`), at the
        page's resolution."""
        logits, scores = self.predict_logits(question, points, point_labels, box, multimask, mask)
        page = self.page
        m = logits.shape[-1]
        frame = m / self.size * self.scale  # page pixels → mask pixels
        h, w = max(1, round(page.height * frame)), max(1, round(page.width * frame))
        crop = logits[:, :h, :w].unsqueeze(0)
        full = F.interpolate(crop, size=(page.height, page.width), mode="bilinear", align_corners=False)[0]
        masks = (full > 0).cpu().numpy()
        best = choose_mask(logits, scores, page_region(page, frame, m))
        answer, lines = self.page_answer(logits, scores, best, masks)
        lexical = self.last_prompt.lexical_boxes[0] if self.last_prompt.lexical_boxes else None
        raw = scores.cpu().numpy()
        conf = np.asarray(self.calibration(raw), dtype=np.float32) if self.calibration is not None else None
        known = None
        if conf is not None:  # an empty answer is never known
            known = bool(answer.any() and conf[best] >= self.calibration.threshold)
        return Prediction(
            logits=logits.cpu(),
            scores=raw,
            masks=masks,
            answer=answer,
            answer_box=union_box(lines) if lines else None,
            answer_lines=lines,
            best=best,
            lexical_box=lexical,
            confidence=conf,
            known=known,
        )
