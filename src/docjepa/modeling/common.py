"""Small shared pieces: 2-D sine-cosine positions, an MLP, a pre-norm cross-attention block, grid helpers."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def sincos_2d(h: int, w: int, dim: int, device: torch.device | None = None) -> Tensor:
    """Fixed 2-D sine-cosine position embeddings, (h·w, dim), rows in row-major order of the grid."""
    if dim % 4:
        raise ValueError(f"sincos_2d needs dim divisible by 4, got {dim}")
    quarter = dim // 4
    freq = 1.0 / (10000 ** (torch.arange(quarter, device=device, dtype=torch.float32) / quarter))
    ys, xs = torch.meshgrid(
        torch.arange(h, device=device, dtype=torch.float32),
        torch.arange(w, device=device, dtype=torch.float32),
        indexing="ij",
    )
    y = ys.reshape(-1, 1) * freq  # (h·w, dim/4)
    x = xs.reshape(-1, 1) * freq
    return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], dim=1)


class MLP(nn.Module):
    """Two linear layers with GELU between."""

    def __init__(self, dim: int, hidden: int, out: int | None = None) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, out or dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class CrossBlock(nn.Module):
    """Pre-norm block: queries attend to a memory, then an MLP; both residual."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm_q, self.norm_kv, self.norm_mlp = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.mlp = MLP(dim, int(dim * mlp_ratio))

    def forward(
        self,
        q: Tensor,
        kv: Tensor,
        q_pos: Tensor | None = None,
        kv_pos: Tensor | None = None,
        kv_padding: Tensor | None = None,
    ) -> Tensor:
        """q (B, Nq, D), kv (B, Nk, D); positions are added to queries and keys only; kv_padding True = ignore."""
        qn, kvn = self.norm_q(q), self.norm_kv(kv)
        keys = kvn if kv_pos is None else kvn + kv_pos
        out, _ = self.attn(
            qn if q_pos is None else qn + q_pos, keys, kvn, key_padding_mask=kv_padding, need_weights=False
        )
        q = q + out
        return q + self.mlp(self.norm_mlp(q))


class SelfBlock(nn.Module):
    """Pre-norm transformer encoder block (self-attention + MLP)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            dim, heads, int(dim * mlp_ratio), dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        return self.layer(x, src_key_padding_mask=padding)


def gather_tokens(x: Tensor, index: Tensor) -> Tensor:
    """x (B, N, C), index (B, K) long → (B, K, C)."""
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def patchify(pixels: Tensor, patch: int) -> Tensor:
    """(B, 3, H, W) → (B, (H/p)(W/p), p·p·3), patches in row-major order."""
    b, c, h, w = pixels.shape
    x = pixels.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch) * (w // patch), patch * patch * c)
