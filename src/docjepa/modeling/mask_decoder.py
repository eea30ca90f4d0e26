"""SAM-style mask decoder (transformers' ``SamMaskDecoder``) and the SAM training loss.

The decoder is the two-way transformer of SAM (token self-attention, token→image and image→token
cross-attention; 2 blocks), two transposed convolutions that upsample the image embedding 4×, and an MLP
hypernetwork per output token whose output is a dynamic linear classifier over the upsampled features. It
returns 3 masks plus an IoU estimate for each (or 1 mask when ``multimask=False``). For documents, the OCR
words' fused features are painted at the output resolution and added before the classifiers (see
:class:`DocMaskDecoder`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.models.sam.configuration_sam import SamMaskDecoderConfig
from transformers.models.sam.modeling_sam import SamMaskDecoder, SamTwoWayAttentionBlock

from .common import CrossBlock, SelfBlock


class DocMaskDecoder(SamMaskDecoder):
    """transformers' ``SamMaskDecoder`` with two additions: a high-resolution map (the page's words painted at the
    output resolution, see :class:`LayoutPainter`) is added to the upscaled image embedding before the
    hypernetwork's dynamic classifiers are applied, as SAM 2 adds high-resolution image features; and padded prompt
    tokens are left out of the attentions that read the tokens (:func:`two_way`). When that map is finer than SAM's
    4× upscaling, the upscaled features are bilinearly resized to it first (small inputs need masks finer than 4×
    the embedding grid to resolve a line of text). Every layer is SAM's; only ``forward`` is re-stated to insert
    the sum and the padding mask."""

    def forward(
        self,
        image_embeddings: Tensor,
        image_positional_embeddings: Tensor,
        sparse_prompt_embeddings: Tensor,
        dense_prompt_embeddings: Tensor,
        multimask_output: bool,
        high_res: Tensor | None = None,
        sparse_mask: Tensor | None = None,
        **kwargs,
    ) -> tuple[Tensor, Tensor]:
        """``sparse_mask`` (B, N) or (B, P, N): which prompt tokens are real (False: padding, which no token or pixel
        attends to; None: all real)."""
        b, c, h, w = image_embeddings.shape
        p = sparse_prompt_embeddings.shape[1]
        output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0).repeat(b, p, 1, 1)
        tokens = torch.cat((output_tokens, sparse_prompt_embeddings), dim=2).to(self.iou_token.weight.dtype)
        image = (image_embeddings + dense_prompt_embeddings).repeat_interleave(p, 0)
        pos = image_positional_embeddings.repeat_interleave(p, 0)
        token_out, image = two_way(self.transformer, tokens, image, pos, sparse_mask)
        iou_token_out = token_out[:, :, 0, :]
        mask_tokens_out = token_out[:, :, 1 : 1 + self.num_mask_tokens, :]
        image = image.transpose(2, 3).reshape(b * p, c, h, w)
        up = self.activation(self.upscale_layer_norm(self.upscale_conv1(image)))
        up = self.activation(self.upscale_conv2(up))  # (B·P, C/8, 4h, 4w)
        if high_res is not None:
            if high_res.shape[-1] != up.shape[-1]:  # a finer output grid: upsample SAM's features to it
                up = F.interpolate(up, size=high_res.shape[-2:], mode="bilinear", align_corners=False)
            up = up + high_res.repeat_interleave(p, 0)
        hyper = torch.stack(
            [mlp(mask_tokens_out[:, :, i, :]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=2
        )  # (B, P, T, C/8)
        _, cu, hu, wu = up.shape
        masks = (hyper @ up.reshape(b, p, cu, hu * wu)).reshape(b, p, -1, hu, wu)
        iou = self.iou_prediction_head(iou_token_out)
        keep = slice(1, None) if multimask_output else slice(0, 1)
        return masks[:, :, keep], iou[:, :, keep]


def _key_bias(keep: Tensor | None, outputs: int, dtype: torch.dtype) -> Tensor | None:
    """(B, P, N) real prompt tokens → the additive attention bias (B·P, 1, 1, outputs + N) over the decoder's
    tokens (its ``outputs`` output tokens first, always attended), or None when nothing is padding."""
    if keep is None or bool(keep.all()):
        return None
    keep = keep.reshape(-1, keep.shape[-1])
    keep = torch.cat([keep.new_ones(keep.shape[0], outputs), keep], dim=1)
    bias = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)
    return bias[:, None, None, :]


class MaskedTwoWayBlock(SamTwoWayAttentionBlock):
    """transformers' ``SamTwoWayAttentionBlock`` whose token self-attention and image→token attention take an additive
    bias over the tokens as keys (``token_bias``, see :func:`_key_bias`); its layers and weights are SAM's. The
    decoder's blocks are made of this class (:func:`build_mask_decoder`) and called as modules, so the hooks a
    wrapper puts on each block (FSDP2 gathers its weights there) run."""

    def forward(self, queries, keys, query_point_embedding, key_point_embedding, token_bias=None, **kwargs):
        point, key_pos = query_point_embedding, key_point_embedding
        query = queries if self.skip_first_layer_pe else queries + point
        out, _ = self.self_attn(query=query, key=query, value=queries, attention_similarity=token_bias)
        queries = self.layer_norm1(out if self.skip_first_layer_pe else queries + out)
        out, _ = self.cross_attn_token_to_image(query=queries + point, key=keys + key_pos, value=keys)
        queries = self.layer_norm2(queries + out)
        queries = self.layer_norm3(queries + self.mlp(queries))
        out, _ = self.cross_attn_image_to_token(
            query=keys + key_pos, key=queries + point, value=queries, attention_similarity=token_bias
        )
        return queries, self.layer_norm4(keys + out)


def two_way(transformer, tokens: Tensor, image: Tensor, pos: Tensor, keep: Tensor | None) -> tuple[Tensor, Tensor]:
    """transformers' ``SamTwoWayTransformer`` run as its ``forward`` does, with padded prompt tokens (``keep``
    (B, P, N) False) left out of every attention whose keys are the tokens (:class:`MaskedTwoWayBlock`), so a
    question padded to share a batch gets the answer it gets alone. tokens (B, P, T, D) output and prompt tokens;
    image, pos (B·P, D, h, w) → tokens (B, P, T, D), image (B·P, 1, h·w, D)."""
    outputs = tokens.shape[2] - (0 if keep is None else keep.shape[-1])
    bias = _key_bias(keep, outputs, tokens.dtype)
    keys = image.flatten(2).transpose(1, 2).unsqueeze(1)
    key_pos = pos.flatten(2).transpose(1, 2).unsqueeze(1)
    queries = tokens
    for layer in transformer.layers:
        queries, keys = layer(queries, keys, tokens, key_pos, token_bias=bias)
    out, _ = transformer.final_attn_token_to_image(query=queries + tokens, key=keys + key_pos, value=keys)
    return transformer.layer_norm_final_attn(queries + out), keys


def build_mask_decoder(dim: int, heads: int, mlp_dim: int, layers: int = 2, outputs: int = 3) -> DocMaskDecoder:
    cfg = SamMaskDecoderConfig(
        hidden_size=dim,
        num_attention_heads=heads,
        mlp_dim=mlp_dim,
        num_hidden_layers=layers,
        num_multimask_outputs=outputs,
        iou_head_hidden_dim=dim,
    )
    decoder = DocMaskDecoder(cfg)
    for block in decoder.transformer.layers:  # SAM's blocks, weights as drawn, with the padding mask (no new draw)
        block.__class__ = MaskedTwoWayBlock
    return decoder


@dataclass
class WordCover:
    """Which mask pixels each token's box covers, stored sparsely as (sample, token, pixel) triples."""

    sample: Tensor
    """(P,) batch index of each triple."""
    token: Tensor
    """(P,) token index."""
    pixel: Tensor
    """(P,) pixel index in the flattened size × size mask."""
    count: Tensor
    """(B, size · size) tokens covering each pixel."""
    size: int
    """Side of the mask."""

    def select(self, idx: Tensor) -> WordCover:
        """The cover of samples ``idx`` (1-D indices), renumbered 0 … len(idx) − 1."""
        position = torch.full((self.count.shape[0],), -1, dtype=torch.long, device=self.count.device)
        position[idx] = torch.arange(len(idx), device=self.count.device)
        keep = position[self.sample] >= 0
        return WordCover(
            sample=position[self.sample[keep]],
            token=self.token[keep],
            pixel=self.pixel[keep],
            count=self.count[idx],
            size=self.size,
        )

    def repeat(self, b: int) -> WordCover:
        """The cover of a single sample, the same for each of a batch of ``b`` (several prompts on one page)."""
        if self.count.shape[0] != 1:
            raise ValueError(f"repeat takes the cover of one sample, not {self.count.shape[0]}")
        n = self.sample.numel()
        return WordCover(
            sample=torch.arange(b, device=self.sample.device).repeat_interleave(n),
            token=self.token.repeat(b),
            pixel=self.pixel.repeat(b),
            count=self.count.expand(b, -1),
            size=self.size,
        )


def word_cover(bbox: Tensor, attention_mask: Tensor, size: int) -> WordCover:
    """The pixels of the square frame at ``size`` that each real token's box (0…1000) covers."""
    coords = torch.arange(size, device=bbox.device)
    lo = (bbox[..., :2].float() * size / 1000).floor().long()  # (B, L, 2) x0, y0
    hi = torch.maximum((bbox[..., 2:].float() * size / 1000).ceil().long(), lo + 1)
    real = (attention_mask > 0) & (bbox[..., 2] > bbox[..., 0]) & (bbox[..., 3] > bbox[..., 1])
    in_x = (coords >= lo[..., 0, None]) & (coords < hi[..., 0, None]) & real[..., None]  # (B, L, size)
    in_y = (coords >= lo[..., 1, None]) & (coords < hi[..., 1, None]) & real[..., None]
    sample, token, row, col = (in_y[..., :, None] & in_x[..., None, :]).nonzero(as_tuple=True)
    pixel = row * size + col
    count = torch.zeros(bbox.shape[0], size * size, device=bbox.device)
    count.index_put_((sample, pixel), torch.ones_like(pixel, dtype=count.dtype), accumulate=True)
    return WordCover(sample=sample, token=token, pixel=pixel, count=count, size=size)


def tokens_inside(mask: Tensor, cover: WordCover, length: int) -> Tensor:
    """(B, L) bool: some pixel of the token's box is set in ``mask`` (B, 1, S, S), S = ``cover.size``."""
    b = cover.count.shape[0]
    hits = mask.flatten(1)[cover.sample, cover.pixel] > 0
    out = torch.zeros(b, length, dtype=torch.bool, device=mask.device)
    return out.index_put_((cover.sample[hits], cover.token[hits]), torch.ones_like(hits[hits]))


def tokens_clicked(points: Tensor, labels: Tensor, cover: WordCover, length: int, image_size: int) -> Tensor:
    """(B, L) what a person's clicks say of each token: 2 when a positive click (label 1) falls in its box, else 1
    when a negative one does, else 0. points (B, P, 2) in pixels of the square input, labels (B, P)."""
    b, m = cover.count.shape[0], cover.size
    cell = (points.float() * m / image_size).long().clamp(0, m - 1)
    pixel = cell[..., 1] * m + cell[..., 0]  # (B, P)
    hits = torch.zeros(b, 2, m * m, dtype=torch.bool, device=points.device)  # [negative, positive] per pixel
    rows = torch.arange(b, device=points.device).unsqueeze(1).expand_as(pixel)
    hits[rows, labels.long().clamp(0, 1), pixel] = True
    out = torch.zeros(b, length, dtype=torch.long, device=points.device)
    for kind in (0, 1):  # positive written last: a token clicked both ways counts as positive
        on = hits[cover.sample, kind, cover.pixel]
        out.index_put_((cover.sample[on], cover.token[on]), torch.full_like(cover.token[on], kind + 1))
    return out


def paint(feats: Tensor, cover: WordCover) -> Tensor:
    """Token features (B, L, C) painted into their boxes → (B, C, size, size), averaged where boxes overlap."""
    b, _, c = feats.shape
    n = cover.size * cover.size
    out = feats.new_zeros(b * n, c).index_add(0, cover.sample * n + cover.pixel, feats[cover.sample, cover.token])
    out = out.view(b, n, c) / cover.count.clamp(min=1).unsqueeze(-1).to(feats.dtype)
    return out.transpose(1, 2).reshape(b, c, cover.size, cover.size)


class LayoutPainter(nn.Module):
    """Paints each OCR token's fused feature (projected to ``out`` channels) into the pixels of its box at the
    decoder's output resolution: a map that lets the decoder's per-pixel classifier follow word boundaries far
    finer than the 1/16 image embedding."""

    def __init__(self, dim: int, out: int) -> None:
        super().__init__()
        self.proj = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, out))

    def forward(self, text: Tensor, cover: WordCover) -> Tensor:
        """text (B, L, D) → (B, out, S, S)."""
        return paint(self.proj(text), cover)


class WordDecoder(nn.Module):
    """Question-conditioned reading of the page's words, painted into the decoder's high-resolution map.

    The page's fused OCR tokens attend to each other (their 2-D layout is in them) and to the question: its
    CLIP token states, and the same question embedded with the text encoder's own word table, so a question
    word and the identical word on the page meet as identical vectors (the lexical match the OCR baseline
    relies on, learned rather than hand-coded), plus an exact-match flag per page token (as DrQA's reader)
    and, given a mask prompt, a learned vector added to the tokens inside it, and, given clicks, a learned vector
    for a positive and one for a negative click added to the tokens they fall on (a click on a word says whether
    that word is in the answer, which the word's own logit can take directly).
    Each token gets an answer logit (trained on which tokens lie
    inside the answer) and features that are painted into its box and added to SAM's upscaled embedding.
    """

    def __init__(self, dim: int, text_dim: int, out: int, layers: int, heads: int) -> None:
        super().__init__()
        self.lexical = nn.Linear(text_dim, dim)
        self.match = nn.Embedding(2, dim)  # DrQA's exact-match feature: does this page token occur in the question?
        self.prior = nn.Linear(1, dim, bias=False)  # added to tokens inside the mask prompt (nothing to the rest)
        self.click = nn.Embedding(3, dim, padding_idx=0)  # a token clicked: nothing, negative, positive
        self.self_blocks = nn.ModuleList(SelfBlock(dim, heads) for _ in range(layers))
        self.cross_blocks = nn.ModuleList(CrossBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.logit = nn.Linear(dim, 1)
        self.features = nn.Linear(dim, out)

    def forward(
        self,
        words: Tensor,
        attention_mask: Tensor,
        question: Tensor,
        question_mask: Tensor,
        question_words: Tensor | None,
        question_words_mask: Tensor | None,
        match: Tensor | None = None,
        prior: Tensor | None = None,
        clicks: Tensor | None = None,
        relate: Callable[[Tensor, int], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """words (B, L, D) fused OCR tokens; question (B, T, D) prompt tokens; question_words (B, T', Ht) the
        question in the text encoder's word embeddings; match (B, L) bool, the page token's id occurs in the
        question; prior (B, L) bool, the token lies inside the mask prompt; clicks (B, L) 0/1/2, a person's
        negative or positive click falls in the token's box (:func:`tokens_clicked`); relate(x, i) what to add to the
        tokens x before block i (``modeling.key_neighbours``) → token logits (B, L), token features (B, L, out)."""
        memory, pad = question, question_mask == 0
        if question_words is not None:
            memory = torch.cat([memory, self.lexical(question_words)], dim=1)
            pad = torch.cat([pad, question_words_mask == 0], dim=1)
        x, padding = words, attention_mask == 0
        if match is not None:
            x = x + self.match(match.long())
        if prior is not None:
            x = x + self.prior(prior.to(x.dtype).unsqueeze(-1))
        if clicks is not None:
            x = x + self.click(clicks).to(x.dtype)
        for i, (self_block, cross) in enumerate(zip(self.self_blocks, self.cross_blocks)):
            if relate is not None:
                x = x + relate(x, i)
            x = self_block(x, padding)
            x = cross(x, memory, kv_padding=pad)
        x = self.norm(x)
        return self.logit(x).squeeze(-1), self.features(x)


class MaskDecoder(nn.Module):
    """Image embedding + prompt tokens (+ painted words) → mask logits (B, N, 4G, 4G) and IoU estimates (B, N)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, layers: int = 2, outputs: int = 3) -> None:
        super().__init__()
        self.sam = build_mask_decoder(dim, heads, mlp_dim, layers, outputs)

    def forward(
        self,
        image: Tensor,
        image_pos: Tensor,
        sparse: Tensor,
        dense: Tensor,
        multimask: bool = True,
        high_res: Tensor | None = None,
        sparse_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``sparse_mask`` (B, N): which of the ``sparse`` tokens are real (False: padding; None: all)."""
        if self.sam.config._attn_implementation is None:  # a standalone module: nothing set it
            self.sam.config._attn_implementation = "sdpa"
        masks, iou = self.sam(
            image_embeddings=image,
            image_positional_embeddings=image_pos,
            sparse_prompt_embeddings=sparse.unsqueeze(1),
            dense_prompt_embeddings=dense,
            multimask_output=multimask,
            high_res=high_res,
            sparse_mask=None if sparse_mask is None else sparse_mask.unsqueeze(1),
        )
        return masks[:, 0], iou[:, 0]


def focal_loss(logits: Tensor, target: Tensor, alpha: float = 0.25, gamma: float = 2.0) -> Tensor:
    """Per-mask sigmoid focal loss, mean over pixels: (B, N, H, W) vs (B, 1, H, W) → (B, N)."""
    target = target.expand_as(logits)
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    pt = p * target + (1 - p) * (1 - target)
    w = alpha * target + (1 - alpha) * (1 - target)
    return (w * ce * (1 - pt) ** gamma).flatten(2).mean(-1)


def dice_loss(logits: Tensor, target: Tensor, eps: float = 1.0) -> Tensor:
    """Per-mask soft dice loss: (B, N, H, W) vs (B, 1, H, W) → (B, N)."""
    p = logits.sigmoid().flatten(2)
    t = target.expand_as(logits).flatten(2)
    return 1 - (2 * (p * t).sum(-1) + eps) / (p.sum(-1) + t.sum(-1) + eps)


def mask_iou(logits: Tensor, target: Tensor) -> Tensor:
    """IoU of each thresholded mask with the target: (B, N, H, W) vs (B, 1, H, W) → (B, N)."""
    p = (logits > 0).flatten(2)
    t = target.expand_as(logits).flatten(2) > 0.5
    inter, union = (p & t).sum(-1).float(), (p | t).sum(-1).float()
    return torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(inter))


def sam_loss(
    logits: Tensor, iou_pred: Tensor, target: Tensor, focal_weight: float = 20.0, dice_weight: float = 1.0
) -> dict[str, Tensor]:
    """SAM's loss: focal : dice = 20 : 1 on the best of the N masks, plus MSE of the predicted IoUs.

    Only the best-fitting mask gets the mask loss (SAM's ambiguity trick); the IoU estimate of every output is
    trained against that output's true IoU, because at inference the estimates choose among the outputs.

    logits (B, N, H, W), iou_pred (B, N), target (B, 1, H, W) in {0, 1}.
    """
    focal, dice = focal_loss(logits.float(), target), dice_loss(logits.float(), target)
    per_mask = focal_weight * focal + dice_weight * dice  # (B, N)
    best = per_mask.argmin(1)  # the mask that fits best is the only one trained (SAM's ambiguity trick)
    rows = torch.arange(len(best), device=best.device)
    true_iou = mask_iou(logits.detach(), target)  # (B, N)
    iou = F.mse_loss(iou_pred.float(), true_iou)  # every output's estimate, so that they rank the candidates
    mask = per_mask[rows, best].mean()
    return {
        "loss": mask + iou,
        "mask": mask,
        "focal": focal[rows, best].mean(),
        "dice": dice[rows, best].mean(),
        "iou": iou,
        "best": best,
    }
