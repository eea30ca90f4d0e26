"""Hand-written GPU kernels of the step, in Triton: the quantised residual momentum in one pass.

The residual momentum (``residual_momentum`` with ``residual_bits=8``, ``rsngd.residual``) steps a whole-size
buffer kept as 8-bit block-wise codes (``rsngd.compact``): dequantise, step, form the Nesterov direction, quantise
again. Eagerly that is some twenty elementwise passes over every matrix (and a copy of every code into a stacked
batch and back): about 80 bytes of memory traffic per entry (521 GB for the LLaMA-7B step's momentum on the meta
replay, ``rsngd.bench.replay``), where the work needs 6 (read the codes and the residual, write the direction and
the codes). :func:`momentum_step` makes it one kernel per matrix:
each program reads a tile of rows × one quantisation block, computes in float32 and writes the direction in place
of the residual and, where ``ok``, the new codes and scales.

It runs on a CUDA device when Triton is importable and :data:`ENABLED` says so; elsewhere, for 4-bit codes, or if
the kernel fails (warned once), the eager functions of ``rsngd.residual`` run. Off by default until measured on a
GPU (``benchmarks/scripts/gpu_step.py`` times both). Under ``TRITON_INTERPRET=1`` the kernel runs on CPU tensors
(``DEVICES`` widened), which is how the tests compare it with the eager step and a float64 reference.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch import Tensor

from . import compact

__all__ = ["DEVICES", "ENABLED", "available", "momentum_step"]

ENABLED: dict[str, bool] = {"momentum": False}
"""Whether each kernel runs where it can: ``rsngd.kernels.ENABLED["momentum"] = True`` steps the 8-bit residual
momentum with :func:`momentum_step` on a CUDA device."""

DEVICES = ("cuda",)
"""The device types the kernels run on."""

_TILE = 4096
"""Entries per program: rows × one block (32 rows of a 128-entry block)."""

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""Residual dtypes the kernel takes (it computes in float32; a float64 step stays eager)."""

_FAILED: set[str] = set()
tl: Any = None


@functools.cache
def _kernel() -> Any:
    """The kernel, built on first use (None when Triton is not importable). ``tl`` is a module global, as Triton's
    interpreter needs it."""
    global tl
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def momentum8(res, codes, scales, ok, beta, rows, cols, size, s_res, s_codes, s_scales, LEVELS: tl.constexpr,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        j = tl.arange(0, BLOCK)
        c = tl.program_id(1) * size + j
        in_rows = r < rows
        stored = in_rows[:, None] & (j < size)[None, :]  # the block's codes, its padding included
        live = stored & (c < cols)[None, :]
        code = tl.load(codes + r[:, None] * s_codes + c[None, :], mask=stored, other=LEVELS).to(tl.float32)
        scale = tl.load(scales + r * s_scales + tl.program_id(1), mask=in_rows, other=0.0)
        unit = (code - LEVELS) / LEVELS
        old = unit * tl.abs(unit) * scale[:, None]
        x = tl.load(res + r[:, None] * s_res + c[None, :], mask=live, other=0.0).to(tl.float32)
        new = tl.where(live, x + beta * (old - x), 0.0)  # M ← β M + (1 − β) R
        tl.store(res + r[:, None] * s_res + c[None, :], (x + beta * (new - x)).to(res.dtype.element_ty), mask=live)
        top = tl.max(tl.abs(new), axis=1)
        mag = tl.sqrt(tl.abs(new) / tl.maximum(top, 1e-30)[:, None]) * LEVELS
        low = tl.floor(mag)
        frac = mag - low
        half_even = low + (low - 2.0 * tl.floor(low * 0.5))  # ties to the even neighbour, as torch.round
        q = tl.where(frac > 0.5, low + 1.0, tl.where(frac < 0.5, low, half_even))
        q = tl.where(new < 0, -q, q) + LEVELS
        keep = in_rows & (tl.load(ok + 0 * r, mask=in_rows, other=0) != 0)  # ok, read per row
        tl.store(codes + r[:, None] * s_codes + c[None, :], q.to(tl.uint8), mask=stored & keep[:, None])
        tl.store(scales + r * s_scales + tl.program_id(1), top, mask=keep)

    return momentum8


def available(name: str, t: Tensor) -> bool:
    """Whether kernel ``name`` runs for tensors on ``t``'s device."""
    return ENABLED.get(name, False) and name not in _FAILED and t.device.type in DEVICES and _kernel() is not None


def momentum_step(residual: Tensor, codes: Tensor, scales: Tensor, beta: float, ok: Tensor) -> bool:
    """One step of an 8-bit quantised Nesterov momentum in one kernel: ``M ← β M + (1 − β) R`` with ``M`` the buffer
    that ``codes`` and ``scales`` hold (``rsngd.compact``, 8 bits), ``R`` ← ``(1 − β) R + β M`` in place; the codes
    and scales rewritten only where ``ok`` (a one-element bool tensor on the device). False (nothing done) when the
    kernel cannot run here or on these tensors (float64, not contiguous, not 8-bit codes): the caller then steps
    eagerly."""
    if residual.dtype not in _DTYPES or residual.dim() < 1 or not residual.is_contiguous():
        return False
    if not available("momentum", residual) or residual.numel() >= 2**31:  # int32 offsets
        return False
    rows, cols = compact._rows(residual.shape)
    size = compact._block(cols)
    blocks = -(-cols // size)
    if codes.shape != (rows, blocks * size) or scales.shape != (rows, blocks) or codes.stride(1) != 1:
        return False
    if blocks > 65535:  # CUDA's limit on a grid's second dimension
        return False
    block = 1 << (size - 1).bit_length()  # the block's entries, padded to a power of two
    tile = max(1, _TILE // block)
    try:
        _kernel()[(-(-rows // tile), blocks)](
            residual.view(rows, cols), codes, scales, ok.reshape(()), float(beta), rows, cols, size,
            cols, codes.stride(0), scales.stride(0), LEVELS=compact._LEVELS[8], ROWS=tile, BLOCK=block,
        )  # fmt: skip
    except Exception as exc:  # a Triton that cannot build it here: the eager step computes the same
        message = f"rsngd: the momentum kernel failed ({type(exc).__name__}: {exc}); stepping eagerly"
        warnings.warn(message, stacklevel=2)
        _FAILED.add("momentum")
        return False
    return True
