"""The polar factor of a gradient: RS-SNGD's ``residual="ortho"`` step outside its subspace.

The part of a gradient that the Tucker subspace misses is replaced by its polar factor U Vᵀ (the nearest
orthogonal matrix, every singular value 1), computed by quintic Newton–Schulz iterations as Muon computes it (in the
dtype it is given: bfloat16 on a GPU, as ``torch.optim.Muon``; the Gram form for long float32 matrices), and scaled
as Muon scales its update. By default it needs no state: no momentum is kept outside the subspace
(``residual_momentum`` keeps a quantised one, ``rsngd.residual``; :func:`lowrank_momentum` is the ablation that keeps
it as two thin factors). Pure functions of tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""Quintic Newton–Schulz coefficients (Muon's): 5 iterations bring every singular value into about [0.7, 1.2]."""


def orthogonalize(x: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """An approximation of the polar factor U Vᵀ of a matrix (or of a tensor unfolded along its first mode) by
    quintic Newton–Schulz iterations, as Muon computes it, in the tensor's dtype (float32 for float16)."""
    return orthogonalize_many([x], steps, eps)[0]


GRAM_RATIO = 2.0
"""Newton–Schulz iterates on the small Gram matrix (:func:`gram_iterations`) for float32 and float64 matrices whose
longer side is at least this many times the shorter (MLP-shaped: 26 % fewer FLOPs at 2.67); plain iterations for
the others, and always in bfloat16, where the Gram form loses the direction of an ill-conditioned residual
(docs/rsngd.md, "Gram Newton–Schulz")."""


def uses_gram(shape: tuple[int, ...], dtype: torch.dtype) -> bool:
    """Whether :func:`orthogonalize_stack` takes the Gram form for matrices of ``shape`` (rows, cols) in ``dtype``."""
    small, large = sorted(shape[-2:])
    return dtype in (torch.float32, torch.float64) and large >= GRAM_RATIO * small


def gram_iterations(y: Tensor, steps: int) -> Tensor:
    """The quintic Newton–Schulz iterations of a normalised wide stack ``y`` (B, m, n), m ≤ n, run on m × m matrices:
    with A = YYᵀ and P = aI + bA + cA², Y ← PY is Y = QY₀ with Q ← PQ and A ← PAP (P and A commute), so only
    the first Gram and the last product touch the long side: 4mn·m + 36m³ FLOPs for 5 steps against the plain
    form's 20mn·m + 10m³."""
    a, b, c = NS_COEFFICIENTS
    gram = y @ y.mT
    q = None
    for k in range(steps):
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        poly.diagonal(dim1=-2, dim2=-1).add_(a)
        q = poly if q is None else poly @ q
        if k < steps - 1:
            gram = poly @ (poly @ gram)
    return y if q is None else q @ y


def orthogonalize_stack(x: Tensor, steps: int = 5, eps: float = 1e-7, inplace: bool = False) -> Tensor:
    """:func:`orthogonalize` of each of a stack of tensors (B, m, …) at once, in ``x``'s dtype: one batched matmul
    per product, three products per iteration (the quintic's polynomial as one ``baddbmm``, as Muon writes it), or
    the Gram form where it needs fewer FLOPs and keeps the precision (:data:`GRAM_RATIO`). A tall stack is iterated
    transposed (on its smaller Gram matrix). With ``inplace`` ``x`` is used up as one of the two buffers the
    iterations alternate between, so the work holds one more stack and three small Grams. The result may be a
    transposed view."""
    a, b, c = NS_COEFFICIENTS
    y = x.reshape(x.shape[0], x.shape[1], -1)
    wide = y.shape[1] <= y.shape[2]
    y = y if wide else y.mT
    norm = torch.linalg.matrix_norm(y, keepdim=True).add_(eps)
    y = y.div_(norm) if inplace else y / norm
    if uses_gram(tuple(y.shape), y.dtype):
        y = gram_iterations(y, steps)
    else:
        other = torch.empty_like(y)
        for _ in range(steps):
            gram = y @ y.mT
            torch.baddbmm(y, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), y, beta=a, out=other)
            y, other = other, y
    y = y if wide else y.mT
    return y if x.dim() == 3 else y.reshape(x.shape)


def orthogonalize_many(xs: list[Tensor], steps: int = 5, eps: float = 1e-7) -> list[Tensor]:
    """:func:`orthogonalize` of each tensor, the tensors of one shape and dtype stacked into one batched
    Newton–Schulz (one batched matmul per product instead of one per matrix)."""
    out: list[Tensor | None] = [None] * len(xs)
    same: dict[tuple, list[int]] = {}
    for i, x in enumerate(xs):
        same.setdefault((tuple(x.shape), x.dtype, x.device), []).append(i)
    for (_, dtype, _), idx in same.items():
        work = torch.float32 if dtype == torch.float16 else dtype
        m = orthogonalize_stack(torch.stack([xs[i] for i in idx]).to(work), steps, eps)
        for j, i in enumerate(idx):
            out[i] = m[j].to(dtype)
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
