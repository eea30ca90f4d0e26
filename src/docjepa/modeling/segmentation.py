"""Promptable document segmentation: backbone → fused image embedding; question/points/boxes → SAM decoder."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PretrainedConfig

from ..data.prompt import QuestionPrompt
from ..data.reader import READER_KEYS, reader_batch
from ..data.touching import touching
from .joint_reader import JointReader, word_boxes
from .key_neighbours import PATHS, KeyNeighbours, neighbour_paths
from .mask_decoder import (
    LayoutPainter,
    MaskDecoder,
    WordCover,
    WordDecoder,
    paint,
    sam_loss,
    tokens_clicked,
    tokens_inside,
    word_cover,
)
from .model import DocJepaConfig, DocJepaModel, DocJepaPreTrainedModel
from .page_reader import PageReader
from .prompt_encoder import GeometryPromptEncoder, QuestionEncoder, tower_config
from .relative_layout import GAIN


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
    reading: Tensor | None = None
    """(B, W, H) the question tower's lower-layer states of each page word, for the joint reader (else None)."""
    word_box: Tensor | None = None
    """(B, W, 4) each page word's box in 0…1000 (with ``reading``)."""
    word_index: Tensor | None = None
    """(B, L) each page token's word, −1 for none (with ``reading``)."""
    key_paths: Tensor | None = None
    """(B, W, P) the word at the end of each of the model's key paths from each page word, −1 for none (with
    ``reading``, for a model with key neighbours; they depend on the page's word boxes only)."""

    def _joint(self, pick) -> dict:
        if self.reading is None:
            return {}
        keys = ("reading", "word_box", "word_index") + (() if self.key_paths is None else ("key_paths",))
        return {k: pick(getattr(self, k)) for k in keys}

    def select(self, idx: Tensor) -> PageEncoding:
        """The encodings of pages ``idx`` (1-D indices)."""
        return PageEncoding(
            self.image[idx],
            self.text[idx],
            self.attention_mask[idx],
            self.cover.select(idx),
            self.words[idx],
            **self._joint(lambda t: t[idx]),
        )

    def repeat(self, b: int) -> PageEncoding:
        """The encoding of a single page, shared by a batch of ``b`` prompts on it (expanded, not copied)."""
        return PageEncoding(
            self.image.expand(b, -1, -1, -1),
            self.text.expand(b, -1, -1),
            self.attention_mask.expand(b, -1),
            self.cover.repeat(b),
            self.words.expand(b, -1, -1, -1),
            **self._joint(lambda t: t.expand(b, *t.shape[1:])),
        )


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
    cheap and runs once per question, so a predictor can cache the page encoding (see ``docjepa.inference.predictor``).
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
        self.page_reader = PageReader(d) if config.page_reader else None
        self.prompt_gate = nn.Linear(d, 1) if config.prompt_gate else None
        self.joint_reader = None
        if getattr(config, "joint_relative", False) and not getattr(config, "joint_layers", 0):
            raise ValueError("joint_relative biases the joint reader's attention: it needs joint_layers")
        if getattr(config, "joint_layers", 0):
            if self.page_reader is None:
                raise ValueError("joint_layers reads the page's words with the question: it needs page_reader")
            tower = self.question_encoder.clip
            relative, gain = bool(getattr(config, "joint_relative", False)), getattr(config, "relative_gain", GAIN)
            self.joint_reader = JointReader(tower.config, config.joint_layers, d, relative=relative, gain=gain)
        self.key_neighbours = None
        if getattr(config, "key_neighbours", False):
            if self.joint_reader is None:
                raise ValueError(
                    "key_neighbours finds a word's neighbours from the joint reader's word boxes: it needs joint_layers"
                )
            self.key_neighbours = KeyNeighbours(d, config.decoder_layers, tuple(getattr(config, "key_paths", PATHS)))
        self.post_init()
        if self.joint_reader is not None:
            self.joint_reader._zero_init()
        if self.page_reader is not None:
            self.page_reader._zero_init()
        if self.key_neighbours is not None:
            self.key_neighbours._zero_init()
        if self.prompt_gate is not None:  # ×1 at the start: the ungated model
            nn.init.zeros_(self.prompt_gate.weight)
            nn.init.zeros_(self.prompt_gate.bias)

    def encode_image(
        self, pixel_values: Tensor, input_ids: Tensor, attention_mask: Tensor, bbox: Tensor, reader: dict | None = None
    ) -> PageEncoding:
        """Pages (image + OCR tokens) → fused image embedding, fused tokens and their painted map. A model with a
        page reader also needs ``reader``: the collator's ``reader_ids``, ``reader_mask``, ``reader_word`` and
        ``word_index`` (see :mod:`~docjepa.modeling.page_reader`); its reading is added to the fused tokens. A
        model with a joint reader also keeps the tower's lower-layer reading of each word, for the questions."""
        out = self.backbone(pixel_values, input_ids, attention_mask, bbox)
        cover = word_cover(bbox, attention_mask, self.config.mask_size)
        text, joint = out.fused_text, {}
        if self.page_reader is not None:
            if reader is None or any(k not in reader for k in (*READER_KEYS, "word_index")):
                raise ValueError("this model reads the page with its question tower: give the collator's reader inputs")
            depth = None if self.joint_reader is None else self.joint_reader.start
            index = reader["word_index"]
            added, lower = self.page_reader(self.question_encoder, reader, index, depth)
            text = text + added.to(text.dtype)
            if lower is not None:
                joint = dict(reading=lower, word_box=word_boxes(bbox, index, lower.shape[1]), word_index=index)
                if self.key_neighbours is not None:
                    joint["key_paths"] = self._key_paths(joint["word_box"])
        return PageEncoding(
            image=out.fused_image,
            text=text,
            attention_mask=attention_mask,
            cover=cover,
            words=self.painter(text, cover),
            **joint,
        )

    def decode(
        self,
        page: PageEncoding,
        prompt: QuestionPrompt,
        multimask: bool = True,
        question_states: Tensor | None = None,
        question_lower: Tensor | None = None,
    ) -> SegmentationOutput:
        """Prompts → masks for encoded pages (see :class:`~docjepa.data.prompt.QuestionPrompt`: a question, points
        or boxes, at least one; the question's word ids enable the lexical path; a mask prompt is refined).
        ``question_states``: the question tower's output for ``prompt``'s questions when the caller has it, and
        ``question_lower`` its states after the joint reader's first layers (:meth:`QuestionEncoder.encode`), which
        a model with a joint reader otherwise computes again."""
        p = prompt
        tokens, high_res, token_logits, q = [], page.words, None, None
        mask_prompt = p.mask_prompt
        if mask_prompt is not None and mask_prompt.shape[-1] != page.cover.size:
            raise ValueError(f"mask prompt is {mask_prompt.shape[-1]} px, the decoder's masks {page.cover.size} px")
        inside = None if mask_prompt is None else tokens_inside(mask_prompt, page.cover, page.text.shape[1])
        if p.question_ids is not None:
            q, lower = question_states, None
            joint = self.joint_reader
            if q is None:  # the tower's pass gives the joint reader its lower states too
                depth = None if joint is None else joint.start
                q, lower = self.question_encoder.encode(p.question_ids, p.question_mask, depth)  # (B, 1 + T, D)
            elif joint is not None:
                lower = question_lower
                if lower is None:
                    lower = joint.question(self.question_encoder, p.question_ids, p.question_mask)
            tokens.append(q)
            q_mask = torch.cat([torch.ones_like(p.question_mask[:, :1]), p.question_mask], dim=1)
            words = None
            if p.word_ids is not None:
                words = self.backbone.text_encoder.bert.embeddings.word_embeddings(p.word_ids)
            clicked = None
            if p.points is not None:
                size = self.config.image_size
                clicked = tokens_clicked(p.points, p.point_labels, page.cover, page.text.shape[1], size)
            text = page.text
            if joint is not None:  # the page's words read again, with this question
                if page.reading is None:
                    raise ValueError("this model reads the question with the page: encode it with the reader inputs")
                read = joint.read(lower, p.question_mask, page.reading, page.word_box, page.word_index)
                text = text + read.to(text.dtype)
            token_logits, feats = self.word_decoder(
                text,
                page.attention_mask,
                q,
                q_mask,
                words,
                p.word_mask,
                p.word_match,
                inside,
                clicked,
                relate=self._relate(page),
            )
            high_res = high_res + paint(feats, page.cover)
        geo = self.prompt_encoder(p.points, p.point_labels, p.boxes)
        if geo is not None:
            tokens.append(geo)
        if not tokens:
            raise ValueError("give a question, points or a box")
        sparse = torch.cat(tokens, dim=1)  # (B, N, D)
        keep = None  # a question's padding (in a batch of several lengths) is no token the decoder reads
        if q is not None:
            keep = F.pad(q_mask, (0, sparse.shape[1] - q_mask.shape[1]), value=1) > 0
        image = page.image
        b, _, g, _ = image.shape
        pos = self.prompt_encoder.image_positions(g).to(image.dtype).expand(b, -1, -1, -1)
        dense = self.prompt_encoder.dense(mask_prompt, b, g).to(image.dtype)
        masks, iou = self.mask_decoder(image, pos, sparse, dense, multimask, high_res=high_res, sparse_mask=keep)
        if mask_prompt is not None and self.config.prior_gain:  # the prompt as a residual: refine, don't redraw
            given = (mask_prompt.flatten(1).amax(1) > 0).view(-1, 1, 1, 1)
            gain = self.prior_gain
            if self.prompt_gate is not None and q is not None and p.points is None:  # trust in the matcher's box
                gain = gain * 2 * torch.sigmoid(self.prompt_gate(q[:, 0]).float()).view(-1, 1, 1, 1)
            masks = masks + given * gain * (2 * mask_prompt.to(masks.dtype) - 1)
        return SegmentationOutput(masks=masks, iou=iou, token_logits=token_logits)

    def _relate(self, page: PageEncoding):
        """What the word decoder adds to the page tokens before each block from their words' key neighbours (None
        without ``key_neighbours``)."""
        if self.key_neighbours is None:
            return None
        paths = page.key_paths if page.key_paths is not None else self._key_paths(page.word_box)
        return lambda x, i: self.key_neighbours(x, page.word_index, paths, i)

    def _key_paths(self, word_box: Tensor) -> Tensor:
        """(B, W, 4) word boxes → (B, W, P) where each of the key paths leads from each word (words with no box are
        not read)."""
        return neighbour_paths(word_box, word_box[..., 2] > word_box[..., 0], self.key_neighbours.paths)

    def forward(
        self,
        batch: dict,
        multimask: bool = True,
        clicks: int = 0,
        click_share: float = 0.0,
        word_loss: float = 0.0,
        token_loss: str = "mean",
    ) -> dict[str, Tensor]:
        """Training step on a ``SegmentCollator`` batch: SAM's loss against ``batch["target"]`` (B, 1, M, M), plus
        binary cross-entropy of the word decoder's token logits (tokens inside the answer vs the rest: their mean
        over all tokens for ``token_loss="mean"``, :func:`balanced_token_loss` for ``"balanced"``,
        :func:`neighbour_token_loss` for ``"neighbours"``), plus
        ``word_loss`` × :func:`word_choice_loss` (the page's most likely token should be one of the answer's).

        ``clicks`` > 0 adds simulated interaction (as SAM's training): for ``click_share`` of the examples, up to
        ``clicks`` more rounds in which a click is drawn uniformly from the error of the previous round's answer
        (positive in a missed part, negative in a wrong one), added to the earlier clicks as point prompts, with
        that answer as the mask prompt; the page is encoded once. Their losses, averaged, weigh half the
        question-only loss, so plain answering stays the larger part of training."""
        page = self.encode_image(
            batch["pixel_values"], batch["input_ids"], batch["attention_mask"], batch["bbox"], reader_batch(batch)
        )
        prompt, target = batch["prompt"], batch["target"]
        out = self.decode(page, prompt, multimask=multimask)
        losses = sam_loss(out.masks, out.iou, target)
        labels = token_targets(target, batch["bbox"], batch["attention_mask"])
        tokens = token_bce(out.token_logits, labels, token_loss, batch["bbox"])
        losses["tokens"] = tokens
        losses["loss"] = losses["loss"] + tokens
        if word_loss > 0:
            choice = word_choice_loss(out.token_logits, labels)
            if choice is not None:
                losses["word_choice"] = choice
                losses["loss"] = losses["loss"] + word_loss * choice
        if clicks > 0 and click_share > 0:
            rounds = self._click_rounds(page, prompt, out, target, clicks, click_share, multimask)
            losses["clicks"] = rounds
            losses["loss"] = losses["loss"] + 0.5 * rounds
        return losses

    def _click_rounds(
        self, page: PageEncoding, prompt, out: SegmentationOutput, target: Tensor, clicks: int, share: float, multimask
    ) -> Tensor:
        """The mean loss of the simulated click rounds of :meth:`forward`. A batch in which no example drew any runs
        them on its first example at weight 0: every batch makes the same decoder passes, so that processes sharding
        the model (FSDP2) issue the same collectives whatever their examples drew."""
        b = target.shape[0]
        chosen = torch.rand(b, device=target.device) < share
        weight = 1.0
        if not chosen.any():
            chosen[0], weight = True, 0.0
        idx = chosen.nonzero().flatten()
        sub = page.select(idx)
        base = prompt.select(idx)
        truth = target[idx] > 0.5  # (b, 1, M, M)
        m = truth.shape[-1]
        scale = self.config.image_size / m  # mask pixels → model input pixels
        previous = out.masks[idx].detach()
        best_iou = out.iou[idx].detach().argmax(1)
        points = torch.zeros(len(idx), 0, 2, device=target.device)
        labels = torch.zeros(len(idx), 0, dtype=torch.long, device=target.device)
        total = []
        for _ in range(clicks):
            answer = previous[torch.arange(len(idx)), best_iou] > 0  # (b, M, M): the answer the person sees
            point, label = sample_clicks(answer, truth[:, 0])
            points = torch.cat([points, point.unsqueeze(1) * scale], dim=1)
            labels = torch.cat([labels, label.unsqueeze(1)], dim=1)
            step = replace(base, points=points, point_labels=labels, mask_prompt=answer.unsqueeze(1).float())
            refined = self.decode(sub, step, multimask=multimask)
            total.append(sam_loss(refined.masks, refined.iou, target[idx])["loss"])
            previous, best_iou = refined.masks.detach(), refined.iou.detach().argmax(1)
        return torch.stack(total).mean() * weight


TOKEN_LOSSES = ("mean", "balanced", "neighbours")
"""How the word decoder's per-token binary cross-entropy is averaged (:func:`token_bce`)."""


def token_bce(token_logits: Tensor, labels: Tensor, how: str = "mean", bbox: Tensor | None = None) -> Tensor:
    """The word decoder's binary cross-entropy, ``labels`` as :func:`token_targets` gives them (1 in the answer, 0
    outside, −1 padding): ``mean`` over every real token of the batch, ``balanced``
    (:func:`balanced_token_loss`) or ``neighbours`` (:func:`neighbour_token_loss`, which needs the tokens' ``bbox``)."""
    if how == "balanced":
        return balanced_token_loss(token_logits, labels)
    if how == "neighbours":
        if bbox is None:
            raise ValueError("the neighbours token loss needs the tokens' boxes")
        return neighbour_token_loss(token_logits, labels, bbox)
    if how != "mean":
        raise ValueError(f"unknown token loss {how!r}; choose one of {', '.join(TOKEN_LOSSES)}")
    real = labels >= 0
    return F.binary_cross_entropy_with_logits(token_logits[real].float(), labels[real].float())


def group_token_loss(token_logits: Tensor, labels: Tensor, groups: list[Tensor]) -> Tensor:
    """Per question, the mean over the non-empty ``groups`` (each (B, L) bool) of the mean binary cross-entropy over
    the group's tokens; the mean over questions. ``labels`` as :func:`token_targets` gives them."""
    x = token_logits.float()
    bce = F.binary_cross_entropy_with_logits(x, labels.clamp(min=0).to(x.dtype), reduction="none")
    means, present = [], []
    for g in groups:
        n = g.sum(1)
        means.append((bce * g).sum(1) / n.clamp(min=1))
        present.append(n > 0)
    means, present = torch.stack(means, 1), torch.stack(present, 1).to(x.dtype)
    return ((means * present).sum(1) / present.sum(1).clamp(min=1)).mean()


def balanced_token_loss(token_logits: Tensor, labels: Tensor) -> Tensor:
    """Per question, half the mean binary cross-entropy over the answer's tokens and half over the page's other
    tokens (over all its tokens alike when the answer holds none); the mean over questions. The plain mean weighs
    an answer's few tokens as one page's hundreds of others, so an answer's weaker words and their neighbours end
    with close logits and a span threshold cuts values short or runs them on (docs/docjepa-extract.md)."""
    real = labels >= 0
    pos = real & (labels > 0.5)
    return group_token_loss(token_logits, labels, [pos, real & ~pos])


def neighbour_token_loss(token_logits: Tensor, labels: Tensor, bbox: Tensor) -> Tensor:
    """As :func:`balanced_token_loss`, with the page's other tokens in two groups weighing alike: those touching an
    answer token, which a word span grows into when their logits are high (a name's address, the next date on its
    line), and the rest. Per question: a third each to the answer's tokens, its neighbours and the others (half each
    to the two groups there are, when it has no neighbour). Touching is :func:`~docjepa.data.touching.touching` on
    the tokens' ``bbox`` (B, L, 4) in the model's 0–1000 coordinates, each axis scaled to the page, so on a portrait
    page a gap along the line reaches a little less far than the word span's rule does in page pixels."""
    real = labels >= 0
    pos = real & (labels > 0.5)
    near = (touching(bbox) & pos.unsqueeze(-1)).any(-2)  # (B, L): touches some answer token
    neg = real & ~pos
    return group_token_loss(token_logits, labels, [pos, neg & near, neg & ~near])


def word_choice_loss(token_logits: Tensor, labels: Tensor) -> Tensor | None:
    """Cross-entropy of picking an answer token among the page's tokens: −log Σ_{t ∈ answer} softmax(logits)_t, the
    mean over the questions whose answer holds tokens (None: none does). ``labels`` as :func:`token_targets` gives
    them (1 in the answer, 0 outside, −1 padding). Per-token binary cross-entropy weighs every token alike, so on a
    page of hundreds of words the few answer tokens barely move it; this loss asks directly that the most likely
    token be an answer token, which is what a word answer starts from (``word_answer.word_span``)."""
    logits = token_logits.float().masked_fill(labels < 0, float("-inf"))
    inside = labels > 0.5
    has = inside.any(1)
    if not has.any():
        return None
    every = torch.logsumexp(logits[has], dim=1)
    answer = torch.logsumexp(logits[has].masked_fill(~inside[has], float("-inf")), dim=1)
    return (every - answer).mean()


def sample_clicks(answer: Tensor, truth: Tensor) -> tuple[Tensor, Tensor]:
    """One click per example (B, M, M) bool answers against (B, M, M) bool truths: a pixel drawn uniformly from the
    error (missed ∪ wrongly marked), labelled 1 where the truth is (a missed part), 0 elsewhere; a pixel of the truth
    as a positive click when there is no error. → points (B, 2) as (x + ½, y + ½) in mask pixels, labels (B,)."""
    error = answer ^ truth
    m = error.shape[-1]
    flat = error.flatten(1).float()
    none = flat.sum(1) == 0
    fallback = truth.flatten(1).float() + 1e-6  # no error: a click on the answer (anywhere when it is empty)
    weights = torch.where(none.unsqueeze(1), fallback, flat)
    pick = torch.multinomial(weights, 1).squeeze(1)
    y, x = pick // m, pick % m
    label = truth.flatten(1).gather(1, pick.unsqueeze(1)).squeeze(1).long()
    return torch.stack([x.float() + 0.5, y.float() + 0.5], dim=1), label
