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

from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import CLIPTextConfig, CLIPTextModel
from transformers.models.sam.modeling_sam import SamMaskEmbedding, SamPositionalEmbedding


class QuestionEncoder(nn.Module):
    """CLIP text tower → prompt tokens: the pooled question (end-of-text token) followed by every token's state,
    all projected to the decoder width; padding positions get a learned "not a token" embedding (as SAM pads
    point prompts). The per-token states keep the question's words apart from the first step, when a tower
    trained from scratch still pools most questions to nearly the same vector."""

    def __init__(self, config: CLIPTextConfig, dim: int) -> None:
        super().__init__()
        self.clip = CLIPTextModel(config)
        self.proj = nn.Linear(config.hidden_size, dim)
        self.pooled_kind = nn.Parameter(torch.zeros(dim))
        self.padding = nn.Parameter(torch.zeros(dim))
        nn.init.normal_(self.pooled_kind, std=0.02)
        nn.init.normal_(self.padding, std=0.02)

    def load_clip(self, path: str | Path) -> None:
        """Replace the tower with a local CLIP checkpoint (a ``CLIPTextModel`` or full ``CLIPModel`` folder)."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"CLIP directory {path} does not exist")
        loaded = CLIPTextModel.from_pretrained(path)
        if loaded.config.hidden_size != self.clip.config.hidden_size:
            self.proj = nn.Linear(loaded.config.hidden_size, self.proj.out_features)
        self.clip = loaded

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, T) question tokens → (B, 1 + T, D) prompt tokens."""
        out = self.clip(input_ids=input_ids, attention_mask=attention_mask)
        pooled = self.proj(out.pooler_output).unsqueeze(1) + self.pooled_kind  # (B, 1, D)
        tokens = self.proj(out.last_hidden_state)  # (B, T, D)
        tokens = torch.where(attention_mask.unsqueeze(-1) > 0, tokens, self.padding.to(tokens.dtype))
        return torch.cat([pooled, tokens], dim=1)


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
