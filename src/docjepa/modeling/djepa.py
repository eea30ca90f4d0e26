"""D-JEPA: cross-modal joint-embedding prediction, the objective this project adds.

A document is masked in one region per direction, and each modality must predict what the other one holds
there, in representation space rather than in pixels:

* **text → image.** The image region R_img is hidden from the context encoder (it is one of the I-JEPA target
  blocks, the one holding the most words); the words inside it stay visible in the text. Learned queries at
  R_img's unit positions cross-attend to the *text side of the fused model* only, and regress the EMA target
  encoder's layer-normed embedding of R_img. Nothing of R_img reaches the text side through the image, since
  the image never saw it.
* **image → text.** The words inside a second region R_txt are replaced by [MASK] (and kept out of MLM).
  Queries built from each masked word's box cross-attend to the *image embedding* (the neck map of the context
  pass, before fusion) and classify the hidden token.

So the text must carry what the page looks like where the image is missing, and the image must carry what the
page says where the text is missing: an alignment signal between modalities that MLM and MIM (each within one
modality plus fusion) do not give.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import CrossBlock, gather_tokens, sincos_2d


class DJepaHead(nn.Module):
    """The two cross-modal predictors."""

    def __init__(
        self, dim: int, target_dim: int, vocab_size: int, layers: int, heads: int, grid: int, embed_side: int
    ) -> None:
        super().__init__()
        self.register_buffer("unit_pos", sincos_2d(grid, grid, dim))  # (U, D)
        self.register_buffer("image_pos", sincos_2d(embed_side, embed_side, dim))  # (G², D)
        self.image_query = nn.Parameter(torch.zeros(1, 1, dim))
        self.text_query = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.normal_(self.image_query, std=0.02)
        nn.init.normal_(self.text_query, std=0.02)
        self.box = nn.Linear(4, dim)
        self.to_image = nn.ModuleList(CrossBlock(dim, heads) for _ in range(layers))
        self.to_text = nn.ModuleList(CrossBlock(dim, heads) for _ in range(layers))
        self.image_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, target_dim))
        self.text_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, vocab_size))

    def predict_image(self, fused_text: Tensor, attention_mask: Tensor, region_idx: Tensor) -> Tensor:
        """Fused text (B, L, D), region units (B, Kr) → predicted target embeddings (B, Kr, C)."""
        q = self.image_query + self.unit_pos[region_idx]
        padding = attention_mask == 0
        for block in self.to_image:
            q = block(q, fused_text, kv_padding=padding)
        return self.image_out(q)

    def predict_text(self, image_embedding: Tensor, bbox: Tensor, text_pos: Tensor) -> Tensor:
        """Image map (B, D, G, G), boxes (B, L, 4), masked positions (B, Ld) → token logits (B, Ld, V)."""
        img = image_embedding.flatten(2).transpose(1, 2)  # (B, G², D)
        boxes = gather_tokens(bbox.float() / 1000.0, text_pos)  # (B, Ld, 4)
        q = self.text_query + self.box(boxes)
        for block in self.to_text:
            q = block(q, img, q_pos=None, kv_pos=self.image_pos.to(img.dtype))
        return self.text_out(q)


def djepa_losses(
    head: DJepaHead,
    fused_text: Tensor,
    attention_mask: Tensor,
    image_embedding: Tensor,
    bbox: Tensor,
    targets: Tensor,
    region_idx: Tensor,
    text_pos: Tensor,
    text_labels: Tensor,
) -> tuple[Tensor, Tensor]:
    """(text→image smooth-L1 against the target features (B, U, C), image→text cross-entropy)."""
    pred = head.predict_image(fused_text, attention_mask, region_idx)
    l_img = F.smooth_l1_loss(pred.float(), gather_tokens(targets, region_idx).float())
    if bool((text_labels != -100).any()):
        logits = head.predict_text(image_embedding, bbox, text_pos)
        l_txt = F.cross_entropy(logits.float().flatten(0, 1), text_labels.flatten(), ignore_index=-100)
    else:  # 0, with the head still in the graph (every process must give every parameter a gradient)
        first = torch.zeros_like(text_pos[:, :1])
        l_txt = head.predict_text(image_embedding, bbox, first).float().sum() * 0.0
    return l_img, l_txt
