"""The polar factor of a gradient: RS-SNGD's ``residual="ortho"`` step outside its subspace.

The part of a gradient that the Tucker subspace misses is replaced by its polar factor U Vᵀ (the nearest
orthogonal matrix, every singular value 1), computed by quintic Newton–Schulz iterations as Muon computes it, and
scaled as Muon scales its update. It needs no state: no momentum is kept outside the subspace. Pure functions of
tensors.
"""

from __future__ import annotations

from torch import Tensor

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""Quintic Newton–Schulz coefficients (Muon's): 5 iterations bring every singular value into about [0.7, 1.2]."""


def orthogonalize(x: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """An approximation of the polar factor U Vᵀ of a matrix (or of a tensor unfolded along its first mode) by
    quintic Newton–Schulz iterations in float32, as Muon computes it."""
    a, b, c = NS_COEFFICIENTS
    m = x.reshape(x.shape[0], -1).float()
    wide = m.shape[0] <= m.shape[1]
    m = m if wide else m.T
    m = m / (m.norm() + eps)
    for _ in range(steps):
        gram = m @ m.T
        m = a * m + (b * gram + c * gram @ gram) @ m
    return (m if wide else m.T).reshape(x.shape).to(x.dtype)


def ortho_residual(residual: Tensor) -> Tensor:
    """The residual orthogonalised, scaled by √max(1, rows/cols) (Muon's shape adjustment)."""
    rows, cols = residual.shape[0], residual[0].numel()
    return orthogonalize(residual) * max(1.0, rows / cols) ** 0.5
