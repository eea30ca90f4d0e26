"""Prompt encoders: a CLIP text tower for the question, and SAM-style point / box prompts.

The question goes through transformers' ``CLIPTextModel``; its pooled output (the end-of-text token) and its
token states are projected to the decoder width and become sparse prompt tokens. Points and boxes are encoded as in SAM:
random Fourier features of the normalised coordinates (transformers' ``SamPositionalEmbedding``, also used for
the image-wide positional map the decoder needs) plus a learned embedding per prompt kind. A mask prompt (a
coarse mask to refine, e.g. the OCR matcher's box, see ``docjepa.data.segment.lexical_prior``) goes through
SAM's convolutional mask embedding (transformers' ``SamMaskEmbedding``) to the dense prompt; without one the
dense prompt is SAM's learned "no mask" embedding broadcast over the grid.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AutoConfig, AutoModel, CLIPTextConfig, CLIPTextModel, PretrainedConfig, PreTrainedModel
from transformers.models.sam.modeling_sam import SamMaskEmbedding, SamPositionalEmbedding

from ..core.errors import UsageError


def build_tower(config: PretrainedConfig) -> PreTrainedModel:
    """An untrained text tower from its configuration (a ``CLIPTextConfig``, or any encoder's, e.g. BERT's)."""
    if isinstance(config, CLIPTextConfig):
        return CLIPTextModel(config)
    return AutoModel.from_config(config)


def load_tower(path: str | Path) -> PreTrainedModel:
    """A pre-trained text tower from a local folder: a ``CLIPTextModel`` (or a full ``CLIPModel`` folder, whose
    text half is taken), or any transformers text encoder such as a sentence-transformers BERT folder. Its weights
    are float32 whatever the folder stores (a half-precision copy trains and answers as the model around it)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"question tower directory {path} does not exist")
    if (path / "config.json").is_file() and json.loads((path / "config.json").read_text()).get(
        "model_type"
    ) == "docjepa":
        raise UsageError(f"{path} holds a Document-JEPA model; the question tower must be a text encoder")
    config = AutoConfig.from_pretrained(path)
    if config.model_type in ("clip", "clip_text_model"):
        return CLIPTextModel.from_pretrained(path, dtype=torch.float32)
    if getattr(config, "is_encoder_decoder", False) or config.model_type in ("llama", "gpt2", "mistral"):
        raise UsageError(f"{path} holds a {config.model_type} model; the question tower must be a text encoder")
    return AutoModel.from_pretrained(path, dtype=torch.float32)


def tower_spec(tower: PreTrainedModel) -> dict:
    """The tower's configuration as a dictionary that :func:`tower_config` rebuilds (stored in DocJepaConfig)."""
    return tower.config.to_dict()


def tower_config(spec: dict) -> PretrainedConfig:
    """Inverse of :func:`tower_spec`; a spec without ``model_type`` is a CLIP text configuration (the presets)."""
    spec = dict(spec)
    kind = spec.pop("model_type", "clip_text_model")
    if kind == "clip_text_model":
        return CLIPTextConfig(**spec)
    return AutoConfig.for_model(kind, **spec)


class QuestionEncoder(nn.Module):
    """Text tower → prompt tokens: the pooled question followed by every token's state, all projected to the
    decoder width; padding positions get a learned "not a token" embedding (as SAM pads point prompts). The
    per-token states keep the question's words apart from the first step, when a tower trained from scratch
    still pools most questions to nearly the same vector.

    The tower is transformers' ``CLIPTextModel`` (pooled at the end-of-text token, as CLIP), or any pre-trained
    text encoder loaded from a local folder (pooled as the mean of its token states, as sentence-transformers
    pools). ``frozen`` keeps the tower's weights and its dropout fixed (eval mode) while the rest trains, so a
    pre-trained tower keeps what it knows of the language instead of fitting the training questions' wording.

    A frozen tower's reading of a question depends on its tokens only, and training data asks the same questions
    of many pages (the 15,551 training pairs of ``finetune/business`` ask 1,234 distinct questions), so while training
    the readings of the last ``cache_questions`` questions are kept (per question, in single precision: about 40 kB
    for a question of 12 tokens of all-MiniLM-L6-v2's) and a question asked again is not read again.
    """

    def __init__(self, config: PretrainedConfig, dim: int, frozen: bool = False, cache_questions: int = 8192) -> None:
        super().__init__()
        self.clip = build_tower(config)
        self.proj = nn.Linear(config.hidden_size, dim)
        self.pooled_kind = nn.Parameter(torch.zeros(dim))
        self.padding = nn.Parameter(torch.zeros(dim))
        nn.init.normal_(self.pooled_kind, std=0.02)
        nn.init.normal_(self.padding, std=0.02)
        self.cache_questions = cache_questions
        self._cache: OrderedDict[bytes, tuple[Tensor, Tensor, Tensor | None]] = OrderedDict()
        self.register_load_state_dict_post_hook(lambda module, _: module._cache.clear())  # new weights: read anew
        self.frozen = False
        self.freeze(frozen)

    def freeze(self, frozen: bool = True) -> None:
        """Fix (or release) the tower's weights; a frozen tower always runs in eval mode."""
        self._cache.clear()
        self.frozen = frozen
        self.clip.requires_grad_(not frozen)
        if frozen:
            self.clip.eval()

    def train(self, mode: bool = True) -> QuestionEncoder:
        super().train(mode)
        if self.frozen:
            self.clip.eval()
        return self

    def load_pretrained_tower(self, path: str | Path) -> None:
        """Replace the tower with a local pre-trained one (see :func:`load_tower`). The tower stays the submodule
        ``clip`` whatever it is, so that saved weights keep their names."""
        loaded = load_tower(path)
        if loaded.config.hidden_size != self.clip.config.hidden_size:
            self.proj = nn.Linear(loaded.config.hidden_size, self.proj.out_features)
        self.clip = loaded
        self.freeze(self.frozen)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, T) question tokens → (B, 1 + T, D) prompt tokens."""
        return self.encode(input_ids, attention_mask)[0]

    def encode(
        self, input_ids: Tensor, attention_mask: Tensor, depth: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """The prompt tokens of :meth:`forward` and, with ``depth``, the tower's states after its first ``depth``
        layers (B, T, H), from the same pass (else None)."""
        if self.training and self.frozen and self.cache_questions > 0:
            states, pooled, lower = self._cached(input_ids, attention_mask, depth)
        else:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
                states, pooled, lower = self._read(input_ids, attention_mask, depth)
        pooled = self.proj(pooled).unsqueeze(1) + self.pooled_kind  # (B, 1, D)
        tokens = self.proj(states)  # (B, T, D)
        tokens = torch.where(attention_mask.unsqueeze(-1) > 0, tokens, self.padding.to(tokens.dtype))
        return torch.cat([pooled, tokens], dim=1), lower

    def _read(
        self, input_ids: Tensor, attention_mask: Tensor, depth: int | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The tower's pass: its token states (B, T, H), its pooled state (B, H) and, with ``depth``, its states
        after its first ``depth`` layers (else None)."""
        out = self.clip(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=depth is not None)
        lower = None if depth is None else out.hidden_states[depth]
        states = out.last_hidden_state  # (B, T, H)
        if isinstance(self.clip, CLIPTextModel):
            return states, out.pooler_output, lower  # the end-of-text token
        keep = attention_mask.unsqueeze(-1).to(states.dtype)
        return states, (states * keep).sum(1) / keep.sum(1).clamp(min=1), lower  # mean over real tokens

    def _cached(
        self, input_ids: Tensor, attention_mask: Tensor, depth: int | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """:meth:`_read` of a frozen tower in training, each question (its real tokens, right-padded) read once
        while it stays among the last :attr:`cache_questions` asked."""
        lengths = attention_mask.sum(1).tolist()
        keys = [bytes([depth or 0]) + input_ids[i, :n].cpu().numpy().tobytes() for i, n in enumerate(lengths)]
        missing = list({k: i for i, k in reversed(list(enumerate(keys))) if k not in self._cache}.values())
        if missing:
            sub = torch.tensor(missing, device=input_ids.device)
            cut = max(int(lengths[i]) for i in missing)
            with torch.no_grad():
                states, pooled, lower = self._read(input_ids[sub, :cut], attention_mask[sub, :cut], depth)
            for j, i in enumerate(missing):
                n = int(lengths[i])
                low = None if lower is None else lower[j, :n].float()
                self._cache[keys[i]] = (states[j, :n].float(), pooled[j].float(), low)
        b, t, h = *input_ids.shape, self.clip.config.hidden_size
        states = torch.zeros(b, t, h, device=input_ids.device)
        lower = None if depth is None else torch.zeros(b, t, h, device=input_ids.device)
        pooled = torch.zeros(b, h, device=input_ids.device)
        for i, k in enumerate(keys):
            self._cache.move_to_end(k)
            got, pooled[i], low = self._cache[k]
            states[i, : len(got)] = got
            if lower is not None:
                lower[i, : len(got)] = low
        while len(self._cache) > self.cache_questions:
            self._cache.popitem(last=False)
        return states, pooled, lower


class GeometryPromptEncoder(nn.Module):
    """Points (with positive / negative labels) and boxes → sparse tokens; the image-wide positional map."""

    def __init__(self, dim: int, image_size: int) -> None:
        super().__init__()
        self.pe = SamPositionalEmbedding(SimpleNamespace(scale=1.0, num_pos_feats=dim // 2))
        self.point_kind = nn.Embedding(2, dim)  # negative, positive
        self.corner_kind = nn.Embedding(2, dim)  # top-left, bottom-right
        self.no_mask = nn.Embedding(1, dim)
        self.mask_embed = SamMaskEmbedding(
            SimpleNamespace(mask_input_channels=16, hidden_act="gelu", layer_norm_eps=1e-6, hidden_size=dim)
        )
        self.image_size = image_size

    def dense(self, masks: Tensor | None, batch: int, side: int) -> Tensor:
        """(B, 1, S, S) mask prompts (S a multiple of 4 · side; an all-zero mask means "none") or None → the
        (B, D, side, side) dense prompt."""
        d = self.no_mask.weight.shape[1]
        none = self.no_mask.weight.view(1, d, 1, 1).expand(batch, d, side, side)
        if masks is None:
            return none
        if masks.shape[-1] % (4 * side) or masks.shape[-1] != masks.shape[-2]:
            raise ValueError(f"mask prompt must be square with a side that is a multiple of {4 * side}")
        masks = masks.to(none.dtype)
        small = F.avg_pool2d(masks, masks.shape[-1] // (4 * side))  # (B, 1, 4·side, 4·side), as SAM's input
        given = masks.flatten(1).amax(1) > 0
        return torch.where(given.view(-1, 1, 1, 1), self.mask_embed(small), none)

    def image_positions(self, side: int) -> Tensor:
        """(1, D, side, side) positional map of the image embedding grid."""
        centres = (torch.arange(side, device=self.pe.positional_embedding.device, dtype=torch.float32) + 0.5) / side
        ys, xs = torch.meshgrid(centres, centres, indexing="ij")
        return self.pe(torch.stack([xs, ys], -1)[None]).squeeze(0).permute(2, 0, 1).unsqueeze(0)

    def forward(self, points: Tensor | None, labels: Tensor | None, boxes: Tensor | None) -> Tensor | None:
        """points (B, P, 2) pixels of the square input, labels (B, P) 1/0, boxes (B, 4) pixels → (B, N, D)."""
        tokens = []
        if points is not None:
            if labels is None:
                raise ValueError("point prompts need labels (1 = on the answer, 0 = not)")
            coords = (points.float() + 0.5) / self.image_size
            tokens.append(self.pe(coords[:, None])[:, 0] + self.point_kind(labels.long()))
        if boxes is not None:
            corners = (boxes.float().view(-1, 2, 2) + 0.5) / self.image_size
            kinds = self.corner_kind(torch.arange(2, device=boxes.device))
            tokens.append(self.pe(corners[:, None])[:, 0] + kinds)
        return torch.cat(tokens, dim=1) if tokens else None
