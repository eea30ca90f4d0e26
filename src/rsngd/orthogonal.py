"""The polar factor of a gradient: RS-SNGD's ``residual="ortho"`` step outside its subspace.

The part of a gradient that the Tucker subspace misses is replaced by its polar factor U Vᵀ (the nearest
orthogonal matrix, every singular value 1), computed by quintic Newton–Schulz iterations as Muon computes it, and
scaled as Muon scales its update. By default it needs no state: no momentum is kept outside the subspace. With
``residual_momentum`` a momentum of the residual is kept in low-rank form (:func:`lowrank_momentum`): two thin
factors instead of a buffer the size of the matrix. Pure functions of tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""Quintic Newton–Schulz coefficients (Muon's): 5 iterations bring every singular value into about [0.7, 1.2]."""


def orthogonalize(x: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """An approximation of the polar factor U Vᵀ of a matrix (or of a tensor unfolded along its first mode) by
    quintic Newton–Schulz iterations, as Muon computes it: in float32 (float64 for a float64 tensor)."""
    return orthogonalize_many([x], steps, eps)[0]


def orthogonalize_many(xs: list[Tensor], steps: int = 5, eps: float = 1e-7) -> list[Tensor]:
    """:func:`orthogonalize` of each tensor, the tensors of one shape and dtype stacked into one batched
    Newton–Schulz (one batched matmul per iteration instead of one per matrix)."""
    out: list[Tensor | None] = [None] * len(xs)
    same: dict[tuple, list[int]] = {}
    for i, x in enumerate(xs):
        same.setdefault((tuple(x.shape), x.dtype, x.device), []).append(i)
    a, b, c = NS_COEFFICIENTS
    for (shape, dtype, _), idx in same.items():
        work = torch.float64 if dtype == torch.float64 else torch.float32
        m = torch.stack([xs[i].reshape(shape[0], -1) for i in idx]).to(work)
        wide = m.shape[1] <= m.shape[2]
        m = m if wide else m.mT
        m = m / (torch.linalg.matrix_norm(m, keepdim=True) + eps)
        for _ in range(steps):
            gram = m @ m.mT
            m = a * m + (b * gram + c * gram @ gram) @ m
        m = m if wide else m.mT
        for j, i in enumerate(idx):
            out[i] = m[j].reshape(shape).to(dtype)
    return out  # type: ignore[return-value]


def shape_factor(x: Tensor) -> float:
    """Muon's shape adjustment √max(1, rows/cols) of a matrix (or of a tensor unfolded along its first mode)."""
    return max(1.0, x.shape[0] / x[0].numel()) ** 0.5


def ortho_residual(residual: Tensor) -> Tensor:
    """The residual orthogonalised, scaled by √max(1, rows/cols) (Muon's shape adjustment)."""
    return ortho_residuals([residual])[0]


def ortho_residuals(residuals: list[Tensor]) -> list[Tensor]:
    """:func:`ortho_residual` of each, same-shape ones in one batched Newton–Schulz."""
    return [o * shape_factor(r) for o, r in zip(orthogonalize_many(residuals), residuals)]


def lowrank_momentum(residual: Tensor, basis: Tensor, coef: Tensor, beta: float) -> tuple[Tensor, Tensor, Tensor]:
    """A Nesterov momentum of the residual whose buffer is kept at rank r, as ``basis @ coef.T``.

    With R the residual unfolded along its first mode (m × n), ``basis`` (m × r, orthonormal columns, or zeros before
    the first step) and ``coef`` (n × r):

    - the momentum is ``M = β · basis coefᵀ + (1 − β) R`` (Muon's EMA, whose buffer is the whole matrix);
    - it is compressed back to rank r by one power iteration warm-started from ``coef``: ``basis' = orth(M coef)``
      (reduced QR), ``coef' = Mᵀ basis'``, so ``basis' coef'ᵀ`` is M projected onto the r directions that the
      iteration tracks (PowerSGD's compressor, without error feedback: what falls outside is dropped);
    - the direction returned is Nesterov's ``(1 − β) R + β M``, to be orthogonalised.

    Before the first step ``coef`` holds random Gaussian columns (the range finder's start). Returns the direction
    (the residual's shape), the new basis and the new coefficients. (m + n) · r floats of state instead of m · n.
    """
    flat = residual.reshape(residual.shape[0], -1)
    momentum = torch.lerp(flat, basis @ coef.T, beta)
    new_basis, _ = torch.linalg.qr(momentum @ coef)
    new_coef = momentum.T @ new_basis
    direction = torch.lerp(flat, momentum, beta)
    return direction.reshape(residual.shape), new_basis, new_coef
