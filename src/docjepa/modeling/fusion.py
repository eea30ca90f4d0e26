"""Cross-modal fusion: text attends to the image, then the image attends to the text, block after block."""

from __future__ import annotations

from torch import Tensor, nn

from .common import CrossBlock, sincos_2d


class FusionLayer(nn.Module):
    """One two-way layer: text ← image cross-attention + MLP, then image ← text cross-attention + MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.text_from_image = CrossBlock(dim, heads, mlp_ratio)
        self.image_from_text = CrossBlock(dim, heads, mlp_ratio)

    def forward(self, text: Tensor, image: Tensor, image_pos: Tensor, text_padding: Tensor) -> tuple[Tensor, Tensor]:
        text = self.text_from_image(text, image, kv_pos=image_pos)
        image = self.image_from_text(image, text, q_pos=image_pos, kv_padding=text_padding)
        return text, image


class CrossModalFusion(nn.Module):
    """Project text states to the fusion width and run ``layers`` two-way cross-attention layers.

    Text tokens keep their layout through the text encoder; image tokens get fixed 2-D sine-cosine positions.
    """

    def __init__(self, text_dim: int, dim: int, layers: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.text_proj = nn.Linear(text_dim, dim)
        self.layers = nn.ModuleList(FusionLayer(dim, heads, mlp_ratio) for _ in range(layers))
        self.norm_text, self.norm_image = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dim = dim

    def forward(self, text: Tensor, attention_mask: Tensor, image: Tensor) -> tuple[Tensor, Tensor]:
        """text (B, L, Ht), attention_mask (B, L), image (B, D, G, G) → fused text (B, L, D), image (B, D, G, G)."""
        b, d, gh, gw = image.shape
        img = image.flatten(2).transpose(1, 2)  # (B, G·G, D)
        pos = sincos_2d(gh, gw, d, device=image.device).to(img.dtype).unsqueeze(0)
        txt = self.text_proj(text)
        padding = attention_mask == 0
        for layer in self.layers:
            txt, img = layer(txt, img, pos, padding)
        img = self.norm_image(img).transpose(1, 2).reshape(b, d, gh, gw)
        return self.norm_text(txt), img
