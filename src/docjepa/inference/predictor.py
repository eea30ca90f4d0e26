"""Encode a page once, answer many questions: the Document-JEPA predictor (like SAM's ``SamPredictor``).

predictor = DocumentPredictor.from_pretrained("runs/finetune")
predictor.set_page(page)                       # or set_image(pil_image, words)
p = predictor.predict("What is the invoice number?")
p.answer                                       # (H, W) bool answer mask at page resolution
p.masks[p.best]                                # the same before snapping to the OCR words
current = predictor.frame_mask(p.answer)
p = predictor.predict("What is the invoice number?", points=[(412, 88)], point_labels=[0], mask=current)
                                               # corrected: the word at (412, 88) is not the answer (apply_clicks)

An answer depends only on the page's encoding (``set_page``; :attr:`DocumentPredictor.encoded`, which a caller may
keep and restore with ``set_encoded``) and the arguments of the call: ``decode`` returns everything an answer needs
(:class:`Decoded`), the predictor's answer policy reads it (``predictor.read(decoded)``, a
:class:`~docjepa.inference.answer_policy.Reading`), and nothing of one question is kept for the next.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..core.errors import UsageError
from ..data.collate import CollateConfig, DocumentCollator
from ..data.frame import PageFrame
from ..data.prompt import PromptBuilder, QuestionPrompt
from ..data.reader import reader_batch
from ..data.record import Page, Word, union_box
from .answer_policy import Answer, AnswerPolicy, Reading
from .clicks import boxes_mask, line_boxes
from .decoded import Decoded, EncodedPage
from .mask_choice import FULL_PAGE, SNAP_AGREEMENT, choose_mask, snap_to_words, words_box
from .word_answer import WORD_LOGIT, word_logits, word_span

__all__ = [
    "FULL_PAGE",
    "SNAP_AGREEMENT",
    "WORD_LOGIT",
    "Answer",
    "AnswerPolicy",
    "Decoded",
    "DocumentPredictor",
    "EncodedPage",
    "Prediction",
    "Reading",
    "boxes_mask",
    "choose_mask",
    "line_boxes",
    "snap_to_words",
    "word_logits",
    "word_span",
    "words_box",
]


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
    """The answer's words as boxes (page pixels): the box itself when the mask was snapped, the box around the word
    decoder's span when the answer came from it, a box per block of words where clicks edited it (see
    :meth:`Reading.answer_lines`)."""

    best: int = 0
    """Index of the chosen candidate: the highest predicted IoU among informative masks (see :func:`choose_mask`)."""
    lexical_box: tuple[float, float, float, float] | None = None
    """The OCR matcher's answer box (page pixels) that was the mask prompt (None: none, or no mask prompt)."""
    confidence: np.ndarray | None = None
    """(N,) the IoU each candidate can be expected to reach, from ``scores`` through the model's calibration
    (``calibration.json`` beside its weights, :mod:`docjepa.inference.calibration`); None when the model has none."""
    known: bool | None = None
    """Whether the model knows the answer: the chosen candidate's confidence reaches the calibration's threshold
    (None: not calibrated); for a word answer, the IoU expected of it (``words_confidence`` through the
    calibration's map for word answers) does."""
    path: str = "mask"
    """How the question was answered: ``mask`` (candidate ``best``, snapped) or ``words`` (the word decoder's span,
    ``answer_lines``; see :attr:`AnswerPolicy.answer_path`)."""
    words_confidence: float | None = None
    """The probability the word decoder gives its most likely word (None: the model has no word decoder)."""
    text: str = ""
    """The answer's words (their centres under ``answer``) in reading order, joined by spaces."""
    words: list[int] | None = None
    """The indices of those words in the page's OCR words."""
    expected_iou: float | None = None
    """The IoU the answer can be expected to reach (:attr:`Answer.expected_iou`; None: not calibrated)."""

    def ranked(self) -> list[int]:
        """Candidate indices, the chosen one first, then by predicted IoU."""
        rest = sorted((i for i in range(len(self.scores)) if i != self.best), key=lambda i: -float(self.scores[i]))
        return [self.best, *rest]


class DocumentPredictor:
    """Wraps a ``DocJepaForSegmentation`` with its tokenizers; holds the encoding of one page at a time."""

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
        answer_path: str = "auto",
    ) -> None:
        """The model, its tokenizers and the page reader's limits; the other arguments are the settings of the
        predictor's :class:`AnswerPolicy` (see its fields): ``snap``, the ``min_agreement`` of snapping to the OCR
        words (None: never); ``calibration`` (``from_pretrained`` loads the model's own); ``word_answers``;
        ``click_rules``; ``answer_path`` (``mask``, ``words`` or ``auto``, the default)."""
        self.policy = AnswerPolicy(snap, calibration, word_answers, click_rules, answer_path)
        """How answers are made from the decoder's candidates (its settings are the arguments above)."""
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer, self.qtok = tokenizer, question_tokenizer or tokenizer
        self.size = model.config.image_size
        self.collate = DocumentCollator(
            tokenizer,
            CollateConfig(image_size=self.size, mask_size=model.config.mask_size, max_tokens=max_tokens),
            self.qtok if getattr(model.config, "page_reader", False) else None,
        )
        self.prompts = PromptBuilder(
            tokenizer, self.qtok, max_question_tokens, model.config.mask_size, model.config.lexical_prior
        )
        self.encoded: EncodedPage | None = None
        """The current page's encoding (:meth:`set_page`; :meth:`set_encoded` restores one kept from before)."""

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path | None = None,
        device: str | torch.device | None = None,
        snap: float | None = SNAP_AGREEMENT,
        word_answers: bool = True,
        click_rules: bool = True,
        answer_path: str = "auto",
    ) -> DocumentPredictor:
        """From a fine-tuning run folder, checkpoint folder or model folder (tokenizers are stored with it); with
        no ``path`` (or its folder), the model shipped in the package (:mod:`docjepa.modeling.shipped`)."""
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        from transformers.utils import logging as hf_logging

        from ..modeling.files import SEGMENTATION, require_model
        from ..modeling.segmentation import DocJepaForSegmentation
        from ..modeling.shipped import is_shipped, load_shipped, tower_tokenizer_dir
        from .calibration import Calibration

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the report of missing weights is checked below instead
        shipped = path is None or is_shipped(path)
        try:
            if shipped:
                model, model_dir = load_shipped()
                missing = []
            else:
                model_dir = require_model(path, (SEGMENTATION,), "prediction")
                model, info = DocJepaForSegmentation.from_pretrained(model_dir, output_loading_info=True)
                missing = sorted(info.get("missing_keys") or [])
        finally:
            hf_logging.set_verbosity(verbosity)
        if missing:
            raise UsageError(f"{model_dir} lacks {len(missing)} weights of the model, e.g. {missing[0]}")
        tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
        qdir = tower_tokenizer_dir() if shipped else model_dir / "question_tokenizer"
        qtok = AutoTokenizer.from_pretrained(qdir) if qdir.is_dir() else tok
        return cls(
            model,
            tok,
            qtok,
            device=device,
            snap=snap,
            calibration=Calibration.load(model_dir),
            word_answers=word_answers,
            click_rules=click_rules,
            answer_path=answer_path,
        )

    # ------------------------------------------------------------------ the page
    @torch.no_grad()
    def set_page(self, page: Page) -> EncodedPage:
        """Encode a page (image + OCR words); later answers reuse the encoding, which is returned too."""
        batch = self.collate([(page, None)])
        reader = reader_batch(batch)
        encoding = self.model.encode_image(
            *(batch[k].to(self.device) for k in ("pixel_values", "input_ids", "attention_mask", "bbox")),
            reader=None if reader is None else {k: v.to(self.device) for k, v in reader.items()},
        )
        frame = PageFrame.of(page, self.size, self.model.config.mask_size)
        return self.set_encoded(EncodedPage(page, encoding, batch["word_index"][0], frame))

    def set_image(self, image: Image.Image, words: list[Word]) -> EncodedPage:
        """Encode an image with its OCR words (boxes in the image's pixels)."""
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="PNG")
        return self.set_page(Page("image", 0, image.width, image.height, buf.getvalue(), list(words), "predictor"))

    def set_encoded(self, encoded: EncodedPage) -> EncodedPage:
        """Make a page encoded before (by this predictor's model) the current one, without encoding it again."""
        self.encoded = encoded
        return encoded

    @property
    def page(self) -> Page | None:
        """The current page (None before :meth:`set_page`)."""
        return None if self.encoded is None else self.encoded.page

    def _current(self) -> EncodedPage:
        if self.encoded is None:
            raise RuntimeError("call set_page (or set_image) before predict")
        return self.encoded

    def frame_mask(self, mask: np.ndarray) -> np.ndarray:
        """A mask at the current page's resolution (H, W) bool → the square frame at the decoder's resolution
        (M, M) bool (:meth:`PageFrame.to_frame`), for a mask prompt."""
        page = self._current().page
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (page.height, page.width):
            raise UsageError(f"the mask is {mask.shape}, the page {(page.height, page.width)}")
        return self._current().frame.to_frame(mask)

    # ----------------------------------------------------------------- a prompt
    def prompt(
        self, question: str | None = None, points=None, point_labels=None, box=None, mask=None
    ) -> QuestionPrompt:
        """The decoder's prompt for the current page, made as in training (:class:`PromptBuilder`). Points (P, 2)
        and box (4,) in page pixels; ``mask``: (M, M) bool, a mask in the square frame at the decoder's resolution
        to refine (the current answer), in place of the OCR matcher's box."""
        enc = self._current()
        if question is not None and not question.strip():
            raise UsageError("the question is empty")
        prompt = QuestionPrompt()
        self.prompts.lexical_prior = self.model.config.lexical_prior
        if question is not None:
            prompt = self.prompts([question], [enc.page], enc.word_index.unsqueeze(0))
        if points is not None:
            prompt.points = enc.frame.to_image(points).view(1, -1, 2)
            labels = point_labels if point_labels is not None else [1] * prompt.points.shape[1]
            prompt.point_labels = torch.as_tensor(labels).view(1, -1)
        if box is not None:
            prompt.boxes = enc.frame.to_image(box).view(1, 4)
        if mask is not None:
            m = self.model.config.mask_size
            mask = torch.as_tensor(np.asarray(mask), dtype=torch.float32)
            if mask.shape != (m, m):
                raise UsageError(f"a mask prompt is {m} x {m} (the decoder's frame), not {tuple(mask.shape)}")
            prompt.mask_prompt, prompt.lexical_boxes = mask.view(1, 1, m, m), None
        return prompt.to(self.device)

    @torch.no_grad()
    def decode(
        self, question: str | None = None, *, points=None, point_labels=None, box=None, mask=None, multimask=True
    ) -> Decoded:
        """The decoder's candidates for a question and/or point / box prompts on the current page. Points (P, 2) /
        box (4,) in page pixels; ``mask``: (M, M) the answer to refine (see :meth:`prompt`)."""
        prompt = self.prompt(question, points, point_labels, box, mask)
        clicks = None
        if points is not None and len(points):
            labels = point_labels if point_labels is not None else [1] * len(points)
            prev = None if mask is None else np.asarray(mask, dtype=bool)
            clicks = (np.asarray(points, dtype=np.float64).reshape(-1, 2), list(labels), prev)
        out = self.model.decode(self._current().encoding, prompt, multimask)
        return Decoded(
            logits=out.masks[0].float(),
            scores=out.iou[0].float(),
            token_logits=None if out.token_logits is None else out.token_logits[0],
            lexical_box=prompt.lexical_boxes[0] if prompt.lexical_boxes else None,
            clicks=clicks,
        )

    # ----------------------------------------------------------------- answers
    def read(self, decoded: Decoded) -> Reading:
        """``decoded`` on the current page under the predictor's answer policy (:class:`AnswerPolicy`): the chosen
        candidate, the answer in the frame or at page resolution, its words and confidence."""
        return self.policy.read(self._current(), decoded)

    def predict(
        self, question: str | None = None, *, points=None, point_labels=None, box=None, mask=None, multimask=True
    ) -> Prediction:
        """Masks for a question and/or point / box prompts (and a mask to refine, see :meth:`prompt`), at the
        page's resolution. The answer depends only on the current page's encoding and these arguments."""
        decoded = self.decode(
            question, points=points, point_labels=point_labels, box=box, mask=mask, multimask=multimask
        )
        masks = (self._current().frame.upsample(decoded.logits) > 0).cpu().numpy()
        answer = self.read(decoded).answer(masks)
        return Prediction(
            logits=decoded.logits.cpu(),
            scores=decoded.scores.cpu().numpy(),
            masks=masks,
            answer=answer.mask,
            answer_box=union_box(answer.lines) if answer.lines else None,
            answer_lines=answer.lines,
            best=answer.best,
            lexical_box=decoded.lexical_box,
            confidence=answer.confidence,
            known=answer.known,
            path=answer.path,
            words_confidence=answer.words_confidence,
            text=answer.text,
            words=answer.words,
            expected_iou=answer.expected_iou,
        )
