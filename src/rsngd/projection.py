"""Low-rank Tucker projection of gradient tensors, as pure functions.

A tensor ``g`` of shape (n1, …, nd), d ≥ 2, is projected onto the subspace spanned
by factor matrices ``U(i)`` of shape (ni, ri) with orthonormal columns::

    core = g ×1 U(1)ᵀ ×2 U(2)ᵀ … ×d U(d)ᵀ          # shape (r1, …, rd)
    back = core ×1 U(1) ×2 U(2) … ×d U(d)            # shape (n1, …, nd)

For a matrix this is ``U1ᵀ G U2`` and ``U1 C U2ᵀ``. A factor of ``None`` stands for
the identity: it is used for every mode whose rank is not smaller than its size
(ranks are clamped to the sizes), so small modes such as a 3×3 convolution kernel
are kept whole and cost nothing.

Two kinds of factors:

* :func:`random_factors`: orthonormalised Gaussian matrices generated from an
  integer seed, so a subspace is stored as one integer and regenerated on demand;
* :func:`svd_factors`: the leading left singular vectors of each mode unfolding of
  a gradient (the SVD for a matrix, the HOSVD for d > 2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

Factors = list[Tensor | None]

__all__ = [
    "Factors",
    "change_basis",
    "clamp_ranks",
    "core_shape",
    "mix_seed",
    "mode_product",
    "project",
    "project_back",
    "random_factors",
    "svd_factors",
]

_MASK64 = (1 << 64) - 1


def mix_seed(*values: int) -> int:
    """Deterministically mix integers into one 63-bit seed (splitmix64 finaliser)."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (int(v) & _MASK64)) & _MASK64
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
        x = x ^ (x >> 31)
    return x & ((1 << 63) - 1)


def clamp_ranks(shape: Sequence[int], rank: int | Sequence[int]) -> list[int]:
    """Per-mode ranks: ``rank`` (one int for all modes, or one per mode) clamped to each size."""
    if len(shape) < 2:
        raise ValueError(f"Tucker projection needs a tensor with at least 2 dims, got shape {tuple(shape)}")
    ranks = [int(rank)] * len(shape) if isinstance(rank, int) else [int(r) for r in rank]
    if len(ranks) != len(shape):
        raise ValueError(f"got {len(ranks)} ranks for a tensor of shape {tuple(shape)}")
    if any(r < 1 for r in ranks):
        raise ValueError(f"ranks must be positive, got {ranks}")
    return [min(r, n) for r, n in zip(ranks, shape)]


def core_shape(shape: Sequence[int], factors: Factors) -> list[int]:
    """Shape of the projected core for a tensor of ``shape`` and these factors."""
    return [n if u is None else u.shape[1] for n, u in zip(shape, factors)]


def mode_product(x: Tensor, matrix: Tensor, mode: int) -> Tensor:
    """``x ×mode matrix``: contract mode ``mode`` of ``x`` (size n) with ``matrix`` (m, n)."""
    out = torch.tensordot(x, matrix, dims=([mode], [1]))  # the new mode is last
    return out.movedim(-1, mode)


def random_factors(
    shape: Sequence[int],
    ranks: Sequence[int],
    seed: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Factors:
    """Orthonormal random factors, one per mode, regenerated exactly from ``seed``.

    Modes with ``rank >= size`` get ``None`` (identity). The same seed, shapes,
    device and dtype always give the same factors.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    factors: Factors = []
    for n, r in zip(shape, ranks):
        if r >= n:
            factors.append(None)
            continue
        gauss = torch.randn(n, r, generator=gen, device=device, dtype=torch.float32)
        q, rr = torch.linalg.qr(gauss)
        # Fix the sign ambiguity of QR so that q is Haar-distributed and well defined.
        q = q * torch.sign(torch.diagonal(rr)).where(torch.diagonal(rr) != 0, torch.ones(()))
        factors.append(q.to(dtype))
    return factors


def unfold(x: Tensor, mode: int) -> Tensor:
    """Mode-``mode`` unfolding: shape (n_mode, product of the other sizes)."""
    return x.movedim(mode, 0).reshape(x.shape[mode], -1)


def svd_factors(grad: Tensor, ranks: Sequence[int]) -> Factors:
    """Leading singular vectors of each mode unfolding of ``grad`` (SVD / HOSVD).

    Computed in float32 or wider; modes with ``rank >= size`` get ``None``.
    """
    x = grad.to(torch.promote_types(grad.dtype, torch.float32))
    factors: Factors = []
    for mode, (n, r) in enumerate(zip(x.shape, ranks)):
        if r >= n:
            factors.append(None)
            continue
        u, _, _ = torch.linalg.svd(unfold(x, mode), full_matrices=False)
        factors.append(u[:, :r].contiguous())
    return factors


def _multiply_modes(x: Tensor, factors: Factors, transpose: bool) -> Tensor:
    """``x ×i U(i)ᵀ`` (transpose) or ``x ×i U(i)`` for every mode with a factor."""
    if len(factors) != x.dim():
        raise ValueError(f"{len(factors)} factors for a tensor with {x.dim()} dims")
    for mode, u in enumerate(factors):
        if u is not None:
            x = mode_product(x, (u.T if transpose else u).to(x.dtype), mode)
    return x


def project(g: Tensor, factors: Factors) -> Tensor:
    """Project ``g`` onto the subspace: ``g ×i U(i)ᵀ`` for every mode; returns the core."""
    return _multiply_modes(g, factors, transpose=True)


def project_back(core: Tensor, factors: Factors) -> Tensor:
    """Map a core back to the full space: ``core ×i U(i)`` for every mode."""
    return _multiply_modes(core, factors, transpose=False)


def change_basis(core: Tensor, old: Factors, new: Factors, batch_dims: int = 0) -> Tensor:
    """Express a core given in the ``old`` factors in the ``new`` ones: ``core ×i (U_newᵀ U_old)``.

    This is the exact projection of ``project_back(core, old)`` onto the new subspace,
    computed without leaving the low-rank space. ``batch_dims`` leading dims of
    ``core`` are carried along (for a history of cores, say).
    """
    out = core
    for mode, (u_old, u_new) in enumerate(zip(old, new)):
        if u_old is None and u_new is None:
            continue
        if u_old is None or u_new is None:
            raise ValueError("old and new factors must use the identity on the same modes")
        out = mode_product(out, (u_new.T @ u_old).to(out.dtype), mode + batch_dims)
    return out
