"""Woodbury natural gradient with a low-rank empirical Fisher.

The Fisher is approximated from the last ``s`` (projected) gradients, the columns
of ``G`` (k × s), as ``F = λ I_k + G Gᵀ``. Its inverse applied to a vector follows
from the Woodbury identity::

    F⁻¹ g = (g − G z) / λ,    where  (λ I_s + GᵀG) z = Gᵀ g.

Only the s × s system is factorised (Cholesky, then a forward and a backward
triangular solve), so the cost is O(k s²) and nothing of size k × k is formed.

The s × s algebra is always done in float64: it is tiny, and it keeps a
rank-deficient or ill-conditioned history from producing a failed factorisation
in single precision. If the factorisation still fails, the damping is raised by
a factor of 10 (up to ``max_retries`` times); the last resort is ``z = 0``,
that is ``F⁻¹g ≈ g/λ``, so the result is never NaN for finite inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["compute_dtype", "damped_cholesky_solve", "momentum_weights_solve", "natural_gradient"]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Float32 or better: low-precision inputs are promoted to float32."""
    return torch.promote_types(dtype, torch.float32)


def damped_cholesky_solve(
    gram: Tensor,
    rhs: Tensor,
    damping: float | Tensor,
    max_retries: int = 6,
) -> tuple[Tensor, Tensor]:
    """Solve ``(damping · I + gram) z = rhs`` by Cholesky, for one or a batch of systems.

    Args:
        gram: symmetric positive semi-definite matrix, shape (..., s, s).
        rhs: right-hand sides, shape (..., s).
        damping: λ > 0, a number or a tensor broadcastable to the batch shape (...).
        max_retries: how many times λ is multiplied by 10 for a system whose
            factorisation fails before giving up on it (its z is then 0).

    Returns:
        ``(z, lam)``: z with the shape of ``rhs`` and the damping each system was
        finally solved with, shape (...), both in float64. ``F⁻¹g`` must then be
        ``(g − G z) / lam`` so that it stays the inverse of one consistent matrix.
    """
    s = gram.shape[-1]
    gram = gram.to(torch.float64)
    rhs = rhs.to(torch.float64)
    lam = torch.as_tensor(damping, dtype=torch.float64, device=gram.device)
    lam = lam.expand(gram.shape[:-2]).clone()
    if s == 0:
        return rhs.clone(), lam
    gram = 0.5 * (gram + gram.transpose(-1, -2))  # exact symmetry for the factorisation
    eye = torch.eye(s, dtype=torch.float64, device=gram.device)
    # Every candidate damping λ·10^k, k = 0..max_retries, is factorised at once (a batch of tiny s × s
    # systems), and each system takes the first that works: the same result as retrying one at a time, with
    # no host synchronisation.
    tries = max_retries + 1
    factors = torch.full((tries,), 10.0, dtype=torch.float64, device=gram.device)
    factors[0] = 1.0
    lams = lam[..., None] * torch.cumprod(factors, 0)  # (..., tries): λ, λ·10, λ·10·10, …
    system = gram[..., None, :, :] + lams[..., None, None] * eye
    chol, info = torch.linalg.cholesky_ex(system)
    b = rhs[..., None, :, None].expand(*rhs.shape[:-1], tries, s, 1)
    # Forward then backward substitution with the triangular factor.
    y = torch.linalg.solve_triangular(chol, b, upper=False)
    sol = torch.linalg.solve_triangular(chol.transpose(-1, -2), y, upper=True).squeeze(-1)
    ok = (info == 0) & torch.isfinite(sol).all(dim=-1)  # (..., tries)
    first = ok.to(torch.int64).argmax(dim=-1, keepdim=True)  # the first that worked (0 if none did)
    found = ok.any(dim=-1)
    z = torch.gather(sol, -2, first[..., None].expand(*first.shape, s)).squeeze(-2)
    z = torch.where(found[..., None], z, torch.zeros_like(z))
    lam = torch.where(found, torch.gather(lams, -1, first).squeeze(-1), lams[..., -1])
    # A system that never factorised keeps z = 0 and its last (largest) damping.
    return z, lam


def natural_gradient(G: Tensor, g: Tensor, damping: float) -> Tensor:
    """Apply the inverse of ``F = damping · I + G Gᵀ`` to ``g`` via Woodbury.

    Args:
        G: history of projected gradients as columns, shape (k, s); s may be 0.
        g: the vector to precondition, shape (k,).
        damping: λ > 0.

    Returns:
        ``F⁻¹ g``, shape (k,), in float32 or in the inputs' dtype if that is wider; the
        arithmetic itself is done in float64.
    """
    if G.dim() != 2 or g.dim() != 1 or G.shape[0] != g.shape[0]:
        raise ValueError(f"expected G (k, s) and g (k,), got {tuple(G.shape)} and {tuple(g.shape)}")
    if not damping > 0:
        raise ValueError(f"damping must be positive, got {damping}")
    dtype = compute_dtype(torch.promote_types(G.dtype, g.dtype))
    # The arithmetic is float64 (inputs convert exactly): g − Gz cancels when λ ≪ ‖g‖²,
    # and single precision would lose the result there.
    G64 = G.to(torch.float64)
    g64 = g.to(torch.float64)
    if G.shape[1] == 0:
        return (g64 / damping).to(dtype)
    z, lam = damped_cholesky_solve(G64.T @ G64, G64.T @ g64, damping)
    return ((g64 - G64 @ z) / lam).to(dtype)


def momentum_weights_solve(
    gram: Tensor, filled: Tensor, momentum: float, damping: float, damping_mode: str
) -> tuple[Tensor, Tensor]:
    """The push-through solve of RS-SNGD's step: ``(λI + GᵀG) c = w`` for a history of s cores (``gram`` = GᵀG,
    s × s, float64; the newest core last), ``w`` the momentum weights over the ``filled`` newest cores
    (``w_j ∝ β^(s-1-j)``, summing to 1), λ = ``damping`` or, with ``damping_mode="relative"``, ``damping`` × the
    mean eigenvalue of GᵀG over the filled cores. Returns ``c / c_scale`` and ``c_scale`` = max |c|: ``c`` can
    exceed the float32 range when λ is tiny, so its direction is applied first, then its size.

    Momentum costs no state: the momentum vector is the weighted sum of the window, ``m = G w``. Because ``m``
    lies in the span of G, the Woodbury form ``F⁻¹m = (m − Gz)/λ`` with ``(λI + GᵀG) z = Gᵀm`` equals the
    push-through form ``F⁻¹m = G c``, which needs only GᵀG and has no cancellation for small λ. With
    ``momentum=0``, ``w = e_s`` and this is exactly :func:`natural_gradient` for the newest gradient."""
    s = gram.shape[0]
    ages = torch.arange(s - 1, -1, -1, dtype=torch.float64, device=gram.device)
    w = torch.where(ages < filled, momentum**ages, torch.zeros((), dtype=torch.float64, device=gram.device))
    w = w / w.sum().clamp_min(1e-300)
    mean_eig = torch.diagonal(gram).sum() / filled.clamp_min(1)
    if damping_mode == "relative":
        # All-zero history: any λ gives 0; keep λ itself.
        lam = torch.where(mean_eig > 0, damping * mean_eig, torch.full_like(mean_eig, damping))
    else:
        lam = torch.full_like(mean_eig, damping)
    c, _ = damped_cholesky_solve(gram, w, lam)
    c_scale = c.abs().max().clamp_min(1e-300)
    return c / c_scale, c_scale
