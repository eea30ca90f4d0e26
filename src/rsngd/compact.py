"""Compact optimizer states: block-wise quantised buffers and a factored second moment. Pure functions.

**Quantised buffers** (``residual_momentum`` with ``residual_bits``, and the first moment of ``adamw_state="light"``)
store a tensor, unfolded to rows (its first mode × the rest), as 8-bit or 4-bit codes in blocks of :data:`BLOCK`
consecutive entries of a row, each block with its own float32 absolute maximum (as bitsandbytes' block-wise
optimizer states). Blocks never cross a row, so a tensor sharded by rows (FSDP2's ``Shard(0)``) quantises its shards
exactly as the whole tensor would be quantised. Codes are companded (the square root of the magnitude is what is
rounded): a momentum has many entries far below its block's maximum, and a linear code would round them to zero.
A 4-bit buffer packs two codes per byte.

**Factored second moment** (``adamw_state="light"``, as Adafactor): a matrix's running mean of squared gradients
is kept as its row means and column means, ``v ≈ r cᵀ / mean(r)``: m + n floats instead of m · n.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["BLOCK", "Quantised", "dequantize", "factored_denominator", "quantize", "state_bytes"]

BLOCK = 128
"""Entries of a row per quantisation block (one float32 scale each); a shorter row is one block."""

_LEVELS = {8: 127, 4: 7}


def _rows(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """(rows, columns) of a tensor unfolded along its first mode; a vector is one row."""
    if len(shape) < 2:
        return 1, (shape[0] if len(shape) else 1)
    cols = 1
    for d in shape[1:]:
        cols *= d
    return shape[0], cols


Quantised = tuple[Tensor, Tensor]
"""(codes, scales): uint8 codes (rows × padded columns, halved for 4 bits) and float32 scales (rows × blocks)."""


def quantize(x: Tensor, bits: int, inplace: bool = False) -> Quantised:
    """``x`` (any shape, ndim ≥ 1) as block-wise companded codes of ``bits`` (8 or 4) bits. With ``inplace`` a
    contiguous ``x`` of the working dtype is used up (scaled in place): the work then holds one more tensor of its
    size and the codes."""
    if bits not in _LEVELS:
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    rows, cols = _rows(x.shape)
    size = _block(cols)
    blocks = -(-cols // size)
    flat = x.reshape(rows, cols).to(_work(x.dtype))
    if blocks * size != cols:
        flat = torch.nn.functional.pad(flat, (0, blocks * size - cols))
    flat = flat.view(rows, blocks, size)
    scale = torch.linalg.vector_norm(flat, ord=float("inf"), dim=2)  # (rows, blocks): the largest magnitude
    divisor = scale.clamp_min(1e-30).unsqueeze(2)
    unit = flat.div_(divisor) if inplace and flat.data_ptr() == x.data_ptr() else flat / divisor  # in [-1, 1]
    levels = _LEVELS[bits]
    q = unit.abs().sqrt_().mul_(levels).round_().copysign_(unit).add_(levels)  # 0 .. 2·levels
    del unit, flat
    q = q.view(rows, blocks * size).to(torch.uint8)
    scale = scale.to(torch.float32)
    if bits == 4 and q.shape[1] % 2:
        q = torch.nn.functional.pad(q, (0, 1), value=levels)  # a code of zero completes the last byte
    if bits == 4:
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    return q.contiguous(), scale


def dequantize(
    codes: Tensor, scales: Tensor, bits: int, shape: torch.Size | tuple[int, ...], dtype: torch.dtype
) -> Tensor:
    """The tensor that :func:`quantize` stored, in ``dtype`` and ``shape``."""
    levels = _LEVELS[bits]
    rows, cols = _rows(shape)
    q = torch.stack([codes & 0xF, codes >> 4], dim=2).view(rows, 2 * codes.shape[1]) if bits == 4 else codes
    unit = q.to(_work(dtype)).sub_(levels).div_(levels)
    unit = unit.mul_(unit.abs())  # sign · unit²
    size = _block(cols)
    blocks = scales.shape[1]
    unit = unit[:, : blocks * size]
    x = unit.reshape(rows, blocks, size).mul_(scales.unsqueeze(2)).view(rows, blocks * size)[:, :cols]
    return x.reshape(shape).to(dtype)


def _work(dtype: torch.dtype) -> torch.dtype:
    """The dtype codes are computed in: bfloat16 for bfloat16 tensors (a GPU step's), else float32."""
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float32


def state_bytes(shape: torch.Size | tuple[int, ...], bits: int) -> int:
    """Bytes of a quantised buffer of ``shape``: its codes and scales."""
    rows, cols = _rows(shape)
    size = _block(cols)
    blocks = -(-cols // size)
    return rows * (-(-blocks * size * bits // 8)) + rows * blocks * 4


def _block(cols: int) -> int:
    """Entries per block: :data:`BLOCK`, or the whole row when it is shorter."""
    return max(1, min(BLOCK, cols))


def factored_denominator(row: Tensor, col: Tensor, row_mean: Tensor, correction: float, eps: float) -> Tensor:
    """√v̂ + ε of a factored second moment ``v = row colᵀ / row_mean``, bias-corrected by ``correction`` (1 − β₂ᵗ):
    ``row`` (m,) and ``col`` (n,) are running means of the squared gradient over the columns and over the rows,
    ``row_mean`` the mean of ``row`` over all the tensor's rows."""
    v = torch.outer(row, col) / row_mean.clamp_min(1e-30)
    return (v / correction).sqrt_().add_(eps)
