"""Image encoder: transformers' Hiera, a path that encodes only visible mask units, and a SAM-style neck.

Hiera works on *mask units* (squares of ``masked_unit_size`` patch tokens). Its first stages attend within a
unit, so dropping whole units (as MAE and I-JEPA do) is exact: the context encoder simply never sees the
hidden units. The presets choose ``masked_unit_size == query_stride ** num_query_pool`` so that the last
stage has exactly one token per mask unit; I-JEPA then predicts one feature vector per unit.

The neck turns the stages' feature maps into one image embedding map at 1/16 of the input with
``neck_dim`` channels (256 in the base preset, as SAM's image embedding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import HieraConfig, HieraModel
from transformers.models.hiera.modeling_hiera import unroll


def unit_grid(config: HieraConfig) -> tuple[int, int]:
    """Number of mask units along (height, width) for the configured image size."""
    return tuple(i // (s * u) for i, s, u in zip(config.image_size, config.patch_stride, config.masked_unit_size))


def check_hiera_config(config: HieraConfig) -> None:
    """Refuse configurations whose last stage does not have one token per mask unit."""
    pooled = [q**config.num_query_pool for q in config.query_stride]
    if list(config.masked_unit_size) != pooled:
        raise ValueError(
            f"masked_unit_size {list(config.masked_unit_size)} must equal query_stride ** num_query_pool "
            f"({pooled}) so that the last stage has one token per mask unit"
        )


def hiera_forward(hiera: HieraModel, pixel_values: Tensor, keep: Tensor | None = None) -> list[Tensor]:
    """Run Hiera, optionally on the visible mask units only.

    pixel_values: (B, 3, H, W) at the configured size. keep: (B, U) bool over the unit grid (row-major), the same
    number of True per row, or None for the whole image. Returns one tensor per stage: (B, h, w, C) maps when
    keep is None, else (B, K, mh, mw, C) per kept unit (units in ascending index order).
    """
    cfg = hiera.config
    size = tuple(pixel_values.shape[-2:])
    if size != tuple(cfg.image_size):
        raise ValueError(f"image encoder expects {tuple(cfg.image_size)} inputs, got {size}")
    patches = hiera.embeddings.patch_embeddings
    x = patches.masked_conv(pixel_values, keep)  # masked units are zeroed before the conv: no leakage
    x = x.flatten(2).transpose(1, 2) + hiera.embeddings.position_embeddings  # (B, N, C0)
    x = unroll(x, image_shape=size, patch_stride=cfg.patch_stride, schedule=hiera.unroll_schedule)
    if keep is not None:
        counts = keep.sum(1)
        if not bool((counts == counts[0]).all()):
            raise ValueError("every row of keep must hold the same number of visible units")
        b, _, c = x.shape
        area = math.prod(cfg.masked_unit_size)
        x = x[keep.unsqueeze(-1).tile(1, area, c)].view(b, -1, c)  # (B, area·K, C0)
    out = hiera.encoder(x, bool_masked_pos=keep, output_hidden_states=True, return_dict=True)
    return list(out.reshaped_hidden_states[1:])


def units_to_map(x: Tensor, keep: Tensor, grid: tuple[int, int]) -> Tensor:
    """(B, K, mh, mw, C) kept units → (B, gh·mh, gw·mw, C) map with zeros at hidden units."""
    b, _, mh, mw, c = x.shape
    full = x.new_zeros(b, grid[0] * grid[1], mh, mw, c)
    full[keep] = x.reshape(-1, mh, mw, c)
    full = full.view(b, grid[0], grid[1], mh, mw, c).permute(0, 1, 3, 2, 4, 5)
    return full.reshape(b, grid[0] * mh, grid[1] * mw, c)


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel dimension of a (B, C, H, W) map."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


EMBED_STRIDE = 16
"""Input pixels per cell of the image embedding (the neck resamples every stage to 1/16 of the input)."""


class Neck(nn.Module):
    """Multi-scale stage maps → one (B, D, S/16, S/16) embedding: 1×1 projections resampled to 1/16, summed."""

    def __init__(self, stage_dims: list[int], dim: int) -> None:
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, dim, 1) for c in stage_dims)
        self.out = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, bias=False), LayerNorm2d(dim))

    def forward(self, maps: list[Tensor], side: int) -> Tensor:
        """maps: (B, h, w, C_s) per stage; side: the output grid side."""
        total = 0
        for conv, m in zip(self.lateral, maps):
            y = conv(m.permute(0, 3, 1, 2))
            if y.shape[-1] > side:
                y = F.adaptive_avg_pool2d(y, side)
            elif y.shape[-1] < side:
                y = F.interpolate(y, size=(side, side), mode="nearest")
            total = total + y
        return self.out(total)


@dataclass
class ImageFeatures:
    """What the image encoder returns."""

    tokens: Tensor
    """(B, K, C) last-stage tokens, one per visible mask unit (all U units when nothing is hidden)."""
    embedding: Tensor
    """(B, D, G, G) image embedding map at 1/16 of the input (zeros-in where units were hidden)."""


class ImageEncoder(nn.Module):
    """Hiera backbone + neck."""

    def __init__(self, config: HieraConfig, neck_dim: int) -> None:
        super().__init__()
        check_hiera_config(config)
        self.hiera = HieraModel(config, add_pooling_layer=False)
        dims = [int(config.embed_dim * config.embed_dim_multiplier**i) for i in range(len(config.depths))]
        self.neck = Neck(dims, neck_dim)
        self.grid = unit_grid(config)
        self.embed_side = config.image_size[0] // EMBED_STRIDE
        self.out_dim = dims[-1]

    def forward(self, pixel_values: Tensor, keep: Tensor | None = None) -> ImageFeatures:
        stages = hiera_forward(self.hiera, pixel_values, keep)
        if keep is None:
            maps = stages
            tokens = stages[-1].flatten(1, 2)  # (B, U, C): one token per unit, row-major
        else:
            maps = [units_to_map(s, keep, self.grid) for s in stages]
            tokens = stages[-1].flatten(1, 3)  # (B, K, C)
        return ImageFeatures(tokens=tokens, embedding=self.neck(maps, self.embed_side))


@torch.no_grad()
def target_features(hiera: HieraModel, pixel_values: Tensor) -> Tensor:
    """Layer-normed last-stage features of the whole image, (B, U, C): the I-JEPA / D-JEPA targets."""
    last = hiera_forward(hiera, pixel_values)[-1].flatten(1, 2)
    return F.layer_norm(last, last.shape[-1:])
