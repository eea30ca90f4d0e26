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
  (splitmix64 of the element index), so the same seed gives the same factors on any
  device (CPU and CUDA agree up to the rounding of log/cos/QR) and any row of a
  factor can be produced without the others' random numbers;
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
    "counter_normal",
    "mix_seed",
    "mode_product",
    "project",
    "project_back",
    "project_back_local",
    "project_local",
    "random_factors",
    "random_factors_many",
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
    return (x >> k) & ((1 << (64 - k)) - 1)


def _splitmix(x: Tensor) -> Tensor:
    """splitmix64 on int64 tensors (multiplication wraps modulo 2⁶⁴ on every device)."""
    x = x + _signed(_GOLDEN)
    x = (x ^ _shr(x, 30)) * _signed(_M1)
    x = (x ^ _shr(x, 27)) * _signed(_M2)
    return x ^ _shr(x, 31)


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
    ``dtype`` (float32 halves the cost; float64 keeps all 32 bits of each uniform)."""
    scale = 2.0**-32
    u1 = (_shr(bits, 32).to(dtype) + 0.5) * scale
    u2 = ((bits & 0xFFFFFFFF).to(dtype) + 0.5) * scale
    radius = torch.sqrt(-2.0 * torch.log(u1))
    angle = (2 * torch.pi) * u2
    return torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1).reshape(-1)


def random_factors(
    shape: Sequence[int],
    ranks: Sequence[int],
    seed: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Factors:
    """Orthonormal random factors, one per mode, regenerated exactly from ``seed``.

    Mode i's factor is the Q of the Householder QR factorisation (in ``dtype``, float32 at least; R with a
    positive diagonal, so Q is unique and Haar-distributed) of :func:`counter_normal` with seed
    ``mix_seed(seed, i)``. Modes with ``rank >= size`` get ``None`` (identity). The same seed, shapes and dtype
    give the same factors on every device, up to rounding.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    factors: Factors = []
    for mode, (n, r) in enumerate(zip(shape, ranks)):
        if r >= n:
            factors.append(None)
            continue
        work = torch.promote_types(dtype, torch.float32)
        q, rr = torch.linalg.qr(counter_normal(n, r, mix_seed(seed, mode), device=device, dtype=work))
        d = torch.diagonal(rr)
        q = q * torch.where(d < 0, -1.0, 1.0).to(q.dtype)  # positive diagonal of R: Q is unique
        factors.append(q.to(dtype))
    return factors


def random_factors_many(
    specs: Sequence[tuple[Sequence[int], Sequence[int], int]],
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> list[Factors]:
    """:func:`random_factors` for many (shape, ranks, seed) at once, with the same result: counter-based draws
    shared by many matrices (up to :data:`CHUNK_PAIRS` counters each) and one batched QR per factor shape. The
    per-tensor cost of a step that regenerates its factors is then a few kernel launches for many small
    tensors, while large factors are not drawn into one huge, cache-unfriendly buffer."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    work = torch.promote_types(dtype, torch.float32)
    out: list[Factors] = [[None] * len(shape) for shape, _, _ in specs]
    chunk: list[tuple[int, int, int, int, int]] = []  # (spec index, mode, n, r, key)
    size = 0
    for i, (shape, ranks, seed) in enumerate(specs):
        for mode, (n, r) in enumerate(zip(shape, ranks)):
            if r >= n:
                continue
            chunk.append((i, mode, n, r, _signed(mix_seed(mix_seed(seed, mode)) & ((1 << 63) - 1))))
            size += (n * r + 1) // 2
            if size >= CHUNK_PAIRS:
                _draw(chunk, out, device, work, dtype)
                chunk, size = [], 0
    if chunk:
        _draw(chunk, out, device, work, dtype)
    return out


CHUNK_PAIRS = 1 << 18
"""Counters per shared draw of :func:`random_factors_many` (2 MiB of int64)."""


def _draw(
    items: list[tuple[int, int, int, int, int]],
    out: list[Factors],
    device: torch.device,
    work: torch.dtype,
    dtype: torch.dtype,
) -> None:
    """Orthonormal factors of ``items`` (spec index, mode, n, r, key) into ``out``: one draw, QR per shape."""
    pairs = [(n * r + 1) // 2 for _, _, n, r, _ in items]
    total = sum(pairs)
    keys = torch.tensor([k for *_, k in items], dtype=torch.int64)
    starts = torch.tensor([0, *pairs[:-1]], dtype=torch.int64).cumsum(0)
    counts = torch.tensor(pairs, dtype=torch.int64)
    if device.type == "cuda":  # small host tables, copied without waiting for the device
        keys, starts, counts = (t.pin_memory().to(device, non_blocking=True) for t in (keys, starts, counts))
    counter = torch.arange(total, dtype=torch.int64, device=device)
    counter = counter - torch.repeat_interleave(starts, counts, output_size=total)
    bits = _splitmix(counter ^ torch.repeat_interleave(keys, counts, output_size=total))
    z = _box_muller(bits, work)
    offset = 0
    by_shape: dict[tuple[int, int], list[tuple[int, int, Tensor]]] = {}
    for (i, mode, n, r, _), count in zip(items, pairs):
        by_shape.setdefault((n, r), []).append((i, mode, z[2 * offset : 2 * offset + n * r].view(n, r)))
        offset += count
    for members in by_shape.values():
        q, rr = torch.linalg.qr(torch.stack([g for _, _, g in members]))
        d = torch.diagonal(rr, dim1=-2, dim2=-1)
        q = q * torch.where(d < 0, -1.0, 1.0).to(q.dtype)[:, None, :]
        for (i, mode, _), qi in zip(members, q):
            out[i][mode] = qi.to(dtype)


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
