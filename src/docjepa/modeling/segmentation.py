"""Promptable document segmentation: backbone → fused image embedding; question/points/boxes → SAM decoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PretrainedConfig

from ..data.prompt import QuestionPrompt
from .mask_decoder import (
    LayoutPainter,
    MaskDecoder,
    WordCover,
    WordDecoder,
    paint,
    sam_loss,
    tokens_inside,
    word_cover,
)
from .model import DocJepaConfig, DocJepaModel, DocJepaPreTrainedModel
from .prompt_encoder import GeometryPromptEncoder, QuestionEncoder, tower_config


@dataclass
class PageEncoding:
    """What the decoder needs from a page; computed once per page, reused for every question."""

    image: Tensor
    """(B, D, G, G) fused image embedding."""
    text: Tensor
    """(B, L, D) fused OCR tokens."""
    attention_mask: Tensor
    """(B, L) 1 for real tokens."""
    cover: WordCover
    """Which mask pixels each token's box covers."""
    words: Tensor
    """(B, D/8, M, M) the page's words painted at the mask resolution M."""


@dataclass
class SegmentationOutput:
    """Decoder output for a batch of prompts."""

    masks: Tensor
    """(B, N, M, M) mask logits, M = 4 · mask_scale × the embedding grid (N = 3, or 1 without multimask)."""
    iou: Tensor
    """(B, N) predicted IoU of each mask."""
    token_logits: Tensor | None = None
    """(B, L) answer logit of each OCR token (question prompts only)."""


def question_tower_config(config: DocJepaConfig, vocab_size: int | None = None) -> PretrainedConfig:
    """The question tower's configuration (CLIP's for the presets, or a loaded pre-trained tower's)."""
    spec = dict(config.question_tower)
    if vocab_size is not None:
        spec["vocab_size"] = vocab_size
    return tower_config(spec)


def token_targets(target: Tensor, bbox: Tensor, attention_mask: Tensor) -> Tensor:
    """1 for tokens whose box centre lies inside the target mask (B, 1, M, M), 0 for others, −1 for padding."""
    m = target.shape[-1]
    cx = ((bbox[..., 0] + bbox[..., 2]).float() / 2000 * m).long().clamp(0, m - 1)
    cy = ((bbox[..., 1] + bbox[..., 3]).float() / 2000 * m).long().clamp(0, m - 1)
    inside = target[:, 0].flatten(1).gather(1, cy * m + cx)
    real = (attention_mask > 0) & (bbox[..., 2] > bbox[..., 0])
    return torch.where(real, inside, torch.full_like(inside, -1.0))


class DocJepaForSegmentation(DocJepaPreTrainedModel):
    """Backbone + CLIP question encoder + geometric prompt encoder + word decoder + SAM-style mask decoder.

    ``encode_image`` is the expensive part and depends only on the page (image and OCR words); ``decode`` is
    cheap and runs once per question, so a predictor can cache the page encoding (see ``docjepa.predictor``).
    """

    def __init__(self, config: DocJepaConfig, backbone: DocJepaModel | None = None) -> None:
        super().__init__(config)
        self.backbone = backbone or DocJepaModel(config)
        d = config.neck_dim
        self.question_encoder = QuestionEncoder(question_tower_config(config), d, frozen=config.freeze_question_tower)
        self.prompt_encoder = GeometryPromptEncoder(d, config.image_size)
        self.mask_decoder = MaskDecoder(
            d, config.decoder_heads, config.decoder_mlp_dim, config.decoder_layers, config.mask_outputs
        )
        self.painter = LayoutPainter(d, d // 8)
        self.word_decoder = WordDecoder(
            d, self.backbone.text_encoder.hidden_size, d // 8, config.decoder_layers, config.decoder_heads
        )
        self.prior_gain = nn.Parameter(torch.tensor(float(config.prior_gain)))  # learned from its initial value
        self.post_init()

    def encode_image(
        self, pixel_values: Tensor, input_ids: Tensor, attention_mask: Tensor, bbox: Tensor
    ) -> PageEncoding:
        """Pages (image + OCR tokens) → fused image embedding, fused tokens and their painted map."""
        out = self.backbone(pixel_values, input_ids, attention_mask, bbox)
        cover = word_cover(bbox, attention_mask, self.config.mask_size)
        return PageEncoding(
            image=out.fused_image,
            text=out.fused_text,
            attention_mask=attention_mask,
            cover=cover,
            words=self.painter(out.fused_text, cover),
        )

    def decode(self, page: PageEncoding, prompt: QuestionPrompt, multimask: bool = True) -> SegmentationOutput:
        """Prompts → masks for encoded pages (see :class:`~docjepa.data.prompt.QuestionPrompt`: a question, points
        or boxes, at least one; the question's word ids enable the lexical path; a mask prompt is refined)."""
        p = prompt
        tokens, high_res, token_logits = [], page.words, None
        mask_prompt = p.mask_prompt
        if mask_prompt is not None and mask_prompt.shape[-1] != page.cover.size:
            raise ValueError(f"mask prompt is {mask_prompt.shape[-1]} px, the decoder's masks {page.cover.size} px")
        inside = None if mask_prompt is None else tokens_inside(mask_prompt, page.cover, page.text.shape[1])
        if p.question_ids is not None:
            q = self.question_encoder(p.question_ids, p.question_mask)  # (B, 1 + T, D)
            tokens.append(q)
            q_mask = torch.cat([torch.ones_like(p.question_mask[:, :1]), p.question_mask], dim=1)
            words = None
            if p.word_ids is not None:
                words = self.backbone.text_encoder.bert.embeddings.word_embeddings(p.word_ids)
            token_logits, feats = self.word_decoder(
                page.text, page.attention_mask, q, q_mask, words, p.word_mask, p.word_match, inside
            )
            high_res = high_res + paint(feats, page.cover)
        geo = self.prompt_encoder(p.points, p.point_labels, p.boxes)
        if geo is not None:
            tokens.append(geo)
        if not tokens:
            raise ValueError("give a question, points or a box")
        sparse = torch.cat(tokens, dim=1)  # (B, N, D)
        image = page.image
        b, _, g, _ = image.shape
        pos = self.prompt_encoder.image_positions(g).to(image.dtype).expand(b, -1, -1, -1)
        dense = self.prompt_encoder.dense(mask_prompt, b, g).to(image.dtype)
        masks, iou = self.mask_decoder(image, pos, sparse, dense, multimask, high_res=high_res)
        if mask_prompt is not None and self.config.prior_gain:  # the prompt as a residual: refine, don't redraw
            given = (mask_prompt.flatten(1).amax(1) > 0).view(-1, 1, 1, 1)
            masks = masks + given * self.prior_gain * (2 * mask_prompt.to(masks.dtype) - 1)
        return SegmentationOutput(masks=masks, iou=iou, token_logits=token_logits)

    def forward(self, batch: dict, multimask: bool = True) -> dict[str, Tensor]:
        """Training step on a ``SegmentCollator`` batch: SAM's loss against ``batch["target"]`` (B, 1, M, M), plus
        binary cross-entropy of the word decoder's token logits (tokens inside the answer vs the rest)."""
        page = self.encode_image(batch["pixel_values"], batch["input_ids"], batch["attention_mask"], batch["bbox"])
        out = self.decode(page, batch["prompt"], multimask=multimask)
        losses = sam_loss(out.masks, out.iou, batch["target"])
        labels = token_targets(batch["target"], batch["bbox"], batch["attention_mask"])
        real = labels >= 0
        tokens = F.binary_cross_entropy_with_logits(out.token_logits[real].float(), labels[real])
        losses["tokens"] = tokens
        losses["loss"] = losses["loss"] + tokens
        return losses
