"""The training collate path: pages (and questions) → model-ready tensors.

Each page is resized so its longer side is ``image_size`` and pasted at the top left of a white square
(letterboxing keeps the aspect ratio and lets one scale factor map page pixels to model pixels). Words
are tokenised with each sub-token keeping its word's box, in 0…1000 of the square. Answer masks are
rasterised at ``mask_size`` × ``mask_size`` in the same square frame, one per valid answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from .record import Page, rasterize
from .tokenizer import normalise_box, tokenize_words


@dataclass
class CollateConfig:
    """Sizes of the tensors the model receives."""

    image_size: int = 512
    """Side of the square model input, in pixels."""
    mask_size: int = 128
    """Side of the square answer masks (the decoder's output resolution)."""
    max_tokens: int = 512
    """Longest token sequence (OCR words are truncated beyond it)."""
    max_answers: int = 3
    """Answers kept per question (ambiguous questions have several)."""


class DocumentCollator:
    """Callable for ``DataLoader(collate_fn=…)`` over items ``(page, question index or None)``."""

    def __init__(self, tokenizer, config: CollateConfig | None = None) -> None:
        self.tokenizer, self.cfg = tokenizer, config or CollateConfig()

    def _image(self, page: Page) -> tuple[torch.Tensor, float]:
        s = self.cfg.image_size / max(page.width, page.height)
        img = page.pil().resize((max(1, round(page.width * s)), max(1, round(page.height * s))), Image.BILINEAR)
        canvas = Image.new("RGB", (self.cfg.image_size, self.cfg.image_size), "white")
        canvas.paste(img, (0, 0))
        x = torch.from_numpy(np.asarray(canvas, dtype=np.float32) / 255.0).permute(2, 0, 1)  # (3, S, S)
        return (x - 0.5) / 0.5, s

    def _masks(self, page: Page, question: int, s: float) -> tuple[torch.Tensor, torch.Tensor]:
        m, n = self.cfg.mask_size, self.cfg.max_answers
        scale = s * m / self.cfg.image_size  # page pixels → mask pixels
        out = torch.zeros(n, m, m)
        valid = torch.zeros(n, dtype=torch.bool)
        for a, answer in enumerate(page.questions[question].answers[:n]):
            h, w = max(1, round(page.height * scale)), max(1, round(page.width * scale))
            mask = rasterize(answer.regions, (page.height, page.width), (h, w))
            out[a, : min(h, m), : min(w, m)] = torch.from_numpy(mask[:m, :m])
            valid[a] = True
        return out, valid

    def __call__(self, items: Sequence[tuple[Page, int | None]]) -> dict:
        images, ids, boxes, word_ids, masks, valid, questions, qtypes = [], [], [], [], [], [], [], []
        for page, question in items:
            x, s = self._image(page)
            images.append(x)
            side = self.cfg.image_size
            word_boxes = [normalise_box(tuple(v * s for v in w.box), side, side) for w in page.words]
            enc = tokenize_words(
                self.tokenizer, [w.text for w in page.words] or [""], word_boxes or [[0, 0, 0, 0]], self.cfg.max_tokens
            )
            ids.append(enc["input_ids"])
            boxes.append(enc["bbox"])
            word_ids.append([-1 if w is None or not page.words else w for w in enc["word_ids"]])
            if question is None:
                masks.append(torch.zeros(self.cfg.max_answers, self.cfg.mask_size, self.cfg.mask_size))
                valid.append(torch.zeros(self.cfg.max_answers, dtype=torch.bool))
                questions.append("")
                qtypes.append("")
            else:
                mk, vd = self._masks(page, question, s)
                masks.append(mk)
                valid.append(vd)
                questions.append(page.questions[question].text)
                qtypes.append(page.questions[question].qtype)
        length = max(len(t) for t in ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(items), length), pad, dtype=torch.long)
        attention = torch.zeros((len(items), length), dtype=torch.long)
        bbox = torch.zeros((len(items), length, 4), dtype=torch.long)
        word_index = torch.full((len(items), length), -1, dtype=torch.long)
        for i, (t, b, w) in enumerate(zip(ids, boxes, word_ids)):
            input_ids[i, : len(t)] = torch.tensor(t)
            attention[i, : len(t)] = 1
            bbox[i, : len(t)] = torch.tensor(b)
            word_index[i, : len(t)] = torch.tensor(w)
        return {
            "pixel_values": torch.stack(images),  # (B, 3, S, S)
            "input_ids": input_ids,  # (B, L)
            "attention_mask": attention,  # (B, L)
            "bbox": bbox,  # (B, L, 4), 0…1000 of the square input
            "word_index": word_index,  # (B, L) index of each token's word in page.words, −1 for special tokens
            "masks": torch.stack(masks),  # (B, A, M, M)
            "answer_valid": torch.stack(valid),  # (B, A)
            "questions": questions,
            "question_types": qtypes,
        }
