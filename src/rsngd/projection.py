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
  integer seed, so a subspace is stored as one integer and regenerated on demand. The
  Gaussians come from a counter-based generator written in integer tensor ops
  (splitmix64 of the element index; :func:`keyed_normal` draws a batch's from keys on
  the device, in one compiled kernel on a GPU), orthonormalised by Cholesky QR
  (:func:`orthonormalize`: matmuls, no QR kernel; :func:`orthonormalize_narrow` for
  factors kept in bfloat16, with bfloat16 matmuls), so the same seed gives the same
  factors on any device (CPU and CUDA agree up to the rounding of log/cos, the matmuls
  and the factors' dtype) and any row of a factor can be produced without the others'
  random numbers;
* :func:`svd_factors`: the leading left singular vectors of each mode unfolding of
  a gradient (the SVD for a matrix, the HOSVD for d > 2).

:func:`project_stack` and :func:`back_stack` project and map back a stack of same-shape
matrices with their stacked factors, by batched matmuls (RS-SNGD's step, ``rsngd.batches``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .fused import fused

Factors = list[Tensor | None]

__all__ = [
    "Factors",
    "change_basis",
    "clamp_ranks",
    "core_shape",
    "counter_normal",
    "factor_key",
    "keyed_normal",
    "mix_seed",
    "mode_product",
    "orthonormalize",
    "orthonormalize_narrow",
    "project",
    "project_back",
    "project_back_local",
    "project_local",
    "random_factors",
    "slice_factors",
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


def clamp_ranks(shape: Sequence[int], rank: int | float | Sequence[int]) -> list[int]:
    """Per-mode ranks: ``rank`` (one int for all modes, or one per mode) clamped to each size; a float in (0, 1]
    is a fraction of the smallest size (at least 1), the same for all modes."""
    if len(shape) < 2:
        raise ValueError(f"Tucker projection needs a tensor with at least 2 dims, got shape {tuple(shape)}")
    if isinstance(rank, float):
        rank = max(1, int(min(shape) * rank))
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


_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _signed(c: int) -> int:
    """A 64-bit constant as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(x: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (x >> k).bitwise_and_((1 << (64 - k)) - 1)


def _splitmix(x: Tensor) -> Tensor:
    """splitmix64 on int64 tensors, in place on ``x`` (multiplication wraps modulo 2⁶⁴ on every device)."""
    x.add_(_signed(_GOLDEN))
    x.bitwise_xor_(_shr(x, 30)).mul_(_signed(_M1))
    x.bitwise_xor_(_shr(x, 27)).mul_(_signed(_M2))
    return x.bitwise_xor_(_shr(x, 31))


def counter_normal(
    n: int, r: int, seed: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64
) -> Tensor:
    """Standard normal (n, r) matrix from ``seed``; elements 2j and 2j + 1 (row-major) come from counter j only.

    One splitmix64 of (counter XOR key) gives two 32-bit uniforms, and Box–Muller turns them into two
    normals. Integer ops are exact on every device, so CPU and CUDA draw the same numbers up to the last bit
    of log, sin and cos.
    """
    key = _signed(mix_seed(seed) & ((1 << 63) - 1))
    pairs = (n * r + 1) // 2
    bits = _splitmix(torch.arange(pairs, dtype=torch.int64, device=device) ^ key)
    return _box_muller(bits, dtype)[: n * r].view(n, r)


def _box_muller(bits: Tensor, dtype: torch.dtype) -> Tensor:
    """Two standard normals per 64-bit word (its halves as uniforms in (0, 1)), interleaved, computed in
    ``dtype`` (float32 halves the cost; float64 keeps all 32 bits of each uniform). ``bits`` is used up: the
    work is done in place, a few bytes an entry."""
    scale = 2.0**-32
    radius = _shr(bits, 32).to(dtype).add_(0.5).mul_(scale).log_().mul_(-2.0).sqrt_()
    angle = bits.bitwise_and_(0xFFFFFFFF).to(dtype).add_(0.5).mul_(scale).mul_(2 * torch.pi)
    del bits
    pairs = torch.stack((radius * torch.cos(angle), radius.mul_(angle.sin_())), dim=-1)
    return pairs.view(*angle.shape[:-1], -1)


def orthonormalize(z: Tensor, passes: int = 2) -> Tensor:
    """The Q of ``z = QR`` (one matrix or a batch, columns ≤ rows) with R's diagonal positive: the Q a Householder QR
    gives once its signs are fixed, computed by Cholesky QR (``zᵀz = LLᵀ``, ``Q = z L⁻ᵀ``) ``passes`` times (the
    second on the first's Q), in ``z``'s dtype with each small r × r Cholesky in float64.

    Plain matmuls and a triangular solve, no QR kernel and no host synchronisation (a failed factorisation is not
    raised; a tiny shift keeps a nearly singular Gram matrix positive definite). For a Gaussian n × r with
    r ≤ n / 2 the condition number is about 6 at most: one pass leaves Q orthonormal to about 40 × the dtype's
    rounding (enough for factors then rounded to bfloat16), the second to its rounding."""
    q = z
    for _ in range(passes):
        gram = (q.mT @ q).to(torch.float64)
        torch.diagonal(gram, dim1=-2, dim2=-1).add_(1e-13 * q.shape[-2])  # the columns' squared norms are ~rows
        chol, _ = torch.linalg.cholesky_ex(gram)
        q = torch.linalg.solve_triangular(chol.to(q.dtype), q.mT, upper=False).mT  # z L⁻ᵀ, rows contiguous
    return q


def orthonormalize_narrow(z: Tensor, dtype: torch.dtype) -> Tensor:
    """One Cholesky QR pass of ``z`` (float32 or wider, one matrix or a batch) whose Q is wanted rounded to a narrower
    dtype (bfloat16): :func:`orthonormalize` up to that rounding, without its float32 Gram matrix, its float64 Cholesky
    factorisations and its triangular solve with ``z`` (slow on a GPU, one launch per matrix). The Gram matrix
    comes from a matmul of ``z`` rounded to ``dtype`` (tensor cores), its diagonal (each column's squared norm, its
    largest entries) from a float32 reduction of ``z``; the r × r Cholesky factor is inverted in float32 (for a
    Gaussian ``z`` with r ≤ n / 2 its condition number is below 4), and ``Q = z L⁻ᵀ`` is one matmul in ``z``'s dtype,
    rounded to ``dtype``. (The same product in ``dtype`` is faster but leaves each column's norm off by up to that
    dtype's rounding: each column of Q is then near a scaled copy of a rounded column of ``z``, and rounding it
    again does not average out.)"""
    zn = z.to(dtype)
    gram = (zn.mT @ zn).to(torch.float32)
    squares = torch.linalg.vector_norm(z, dim=-2).to(torch.float32).square_()
    torch.diagonal(gram, dim1=-2, dim2=-1).copy_(squares.add_(1e-7 * z.shape[-2]))
    chol, _ = torch.linalg.cholesky_ex(gram)
    eye = torch.eye(z.shape[-1], dtype=torch.float32, device=z.device).expand_as(chol)
    inverse = torch.linalg.solve_triangular(chol, eye, upper=False).mT  # L⁻ᵀ, r × r
    del zn
    return (z @ inverse.to(z.dtype)).to(dtype)


def factor_key(seed: int, mode: int) -> int:
    """The counter key of mode ``mode``'s factor of a subspace with ``seed`` (as :func:`counter_normal` keys it)."""
    return _signed(mix_seed(mix_seed(seed, mode)) & ((1 << 63) - 1))


def keyed_normal(sizes: Sequence[tuple[int, int]], keys: Tensor, dtype: torch.dtype) -> list[Tensor]:
    """Standard normals for a batch of B tensors' factors drawn at once: for each (n, r) of ``sizes`` (one per mode
    drawn) a (B, n, r) matrix, tensor b's from the int64 key ``keys[b, mode]`` (:func:`factor_key`). The same numbers
    as :func:`counter_normal` draws for that key; all modes share one counter array, so a batch costs one splitmix and
    one Box–Muller whatever its number of modes, from keys already on the device; on a GPU in one kernel
    (``rsngd.fused``)."""
    pairs = tuple((n * r + 1) // 2 for n, r in sizes)
    z = _normals(keys, pairs, dtype)
    out, offset = [], 0
    for (n, r), count in zip(sizes, pairs):
        out.append(z[:, 2 * offset : 2 * offset + n * r].view(keys.shape[0], n, r))
        offset += count
    return out


@fused("normals")
def _normals(keys: Tensor, pairs: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """(B, 2 · sum(pairs)) normals: mode m's ``pairs[m]`` counters (from 0) with key ``keys[:, m]``, back to back."""
    index = torch.arange(sum(pairs), dtype=torch.int64, device=keys.device)
    counters, key = index, keys[:, :1].expand(-1, len(index))
    for mode in range(1, len(pairs)):  # counters restart at 0 for each mode, with that mode's key
        later = index >= sum(pairs[:mode])
        counters = counters - later.to(torch.int64) * pairs[mode - 1]
        key = torch.where(later, keys[:, mode : mode + 1], key)
    return _box_muller(_splitmix(key.bitwise_xor(counters)), dtype)


def random_factors(
    shape: Sequence[int],
    ranks: Sequence[int],
    seed: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Factors:
    """Orthonormal random factors, one per mode, regenerated exactly from ``seed``.

    Mode i's factor is the Q of the QR factorisation with R's diagonal positive (so Q is unique and
    Haar-distributed; :func:`orthonormalize`, in ``dtype``, float32 at least) of :func:`counter_normal` with seed
    ``mix_seed(seed, i)``. Modes with ``rank >= size`` get ``None`` (identity). The same seed, shapes and dtype
    give the same factors on every device, up to rounding.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    work = torch.promote_types(dtype, torch.float32)
    factors: Factors = []
    for mode, (n, r) in enumerate(zip(shape, ranks)):
        if r >= n:
            factors.append(None)
            continue
        key = torch.full((1, 1), factor_key(seed, mode), dtype=torch.int64, device=device)
        factors.append(orthonormalize(keyed_normal([(n, r)], key, work)[0])[0].to(dtype))
    return factors


def slice_factors(factors: Factors, offsets: Sequence[int], local_shape: Sequence[int]) -> Factors:
    """The rows of each factor that belong to a shard starting at ``offsets`` with ``local_shape``."""
    out: Factors = []
    for u, o, n in zip(factors, offsets, local_shape):
        out.append(u if u is None or (o == 0 and n == u.shape[0]) else u.narrow(0, o, n))
    return out


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


def project_local(g: Tensor, factors: Factors, offsets: Sequence[int], full_shape: Sequence[int]) -> Tensor:
    """A shard's share of the core: summed over the shards of a tensor, it is ``project`` of the whole tensor.

    ``g`` holds the rows ``offsets[i] : offsets[i] + g.shape[i]`` of each mode i of a tensor of
    ``full_shape``; ``factors`` are already sliced to those rows (:func:`slice_factors`). A mode kept whole
    (factor ``None``) but sharded puts the shard's rows at their place in a zero core.
    """
    x = g
    for mode, u in enumerate(factors):
        if u is not None:
            x = mode_product(x, u.T.to(x.dtype), mode)
        elif x.shape[mode] != full_shape[mode]:
            shape = list(x.shape)
            shape[mode] = full_shape[mode]
            padded = x.new_zeros(shape)
            padded.narrow(mode, offsets[mode], x.shape[mode]).copy_(x)
            x = padded
    return x


def project_back_local(core: Tensor, factors: Factors, offsets: Sequence[int], local_shape: Sequence[int]) -> Tensor:
    """The rows of ``project_back(core, full_factors)`` that belong to a shard (``factors`` already sliced)."""
    x = core
    for mode, u in enumerate(factors):  # narrow the whole modes first: less work after
        if u is None and x.shape[mode] != local_shape[mode]:
            x = x.narrow(mode, offsets[mode], local_shape[mode])
    for mode, u in enumerate(factors):
        if u is not None:
            x = mode_product(x, u.to(x.dtype), mode)
    return x


def project_stack(x: Tensor, factors: Factors) -> Tensor:
    """Cores of a stack of matrices: ``x`` (B, m, n) and each mode's factors stacked, (B, m, r1) and (B, n, r2), or
    None for a mode kept whole; returns (B, r1, r2), ``U1ᵀ X U2`` for each matrix, by batched matmuls."""
    u1, u2 = factors
    y = x if u1 is None else torch.bmm(u1.mT, x)
    return y if u2 is None else torch.bmm(y, u2)


def back_stack(
    core: Tensor, factors: Factors, out: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0
) -> Tensor:
    """``beta · out + alpha · U1 C U2ᵀ`` for a stack of cores (B, r1, r2) and stacked factors (as
    :func:`project_stack`), written into ``out`` (B, m, n) when given (one fused batched matmul), else new."""
    u1, u2 = factors
    left = core if u1 is None else torch.bmm(u1, core)
    if out is None:
        back = left if u2 is None else torch.bmm(left, u2.mT)
        return back * alpha if alpha != 1.0 else back
    if u2 is None:
        return out.mul_(beta).add_(left, alpha=alpha)
    return out.baddbmm_(left, u2.mT, beta=beta, alpha=alpha)
