"""The Fisher history of a projected tensor: whole, or split by its columns over the tensor's shard group.

The history holds the last s projected gradients as rows (s × k, k the size of the core). Under FSDP2 every rank
sums the projected core anyway (k numbers: ``sharding.Reducer``), so the history need not be repeated on every
rank. Each rank keeps a slice of its columns instead (``torch.chunk``'s split of k, DTensor's ``Shard(1)``), and
everything the step needs from the history is a sum over the columns or is linear in them:

- the Gram matrix GᵀG is a sum over the columns: each rank's s × s part, summed over the group (:func:`gram`);
- the update's core G c is linear in the columns: each rank computes its columns, and one flat sum over the
  group returns the whole cores of all matrices (:func:`gather`);
- a renewal's change of basis mixes the columns: the history is gathered whole for it (:func:`whole`), once per
  ``update_gap`` steps for each matrix, a transient of s × k.

So each rank holds 1/world of the histories, as it holds 1/world of the parameters and of AdamW's moments. The
split history is a DTensor sharded on its columns over the parameter's mesh: distributed checkpoints (DCP) save it
once and reshard it onto another world size, or into one process.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .sharding import Layout, group_key, is_dtensor, local
from .woodbury import momentum_weights_solve

__all__ = [
    "columns",
    "directions",
    "dtype_of",
    "fisher_gram",
    "fit",
    "gather",
    "gram",
    "like",
    "natural_direction",
    "new",
    "push",
    "pushed",
    "solve",
    "split_spec",
    "whole",
]


def split_spec(p: Tensor, lay: Layout) -> tuple[Any, tuple] | None:
    """The mesh and placements of a split history for ``p`` (FSDP2's ``Shard(0)`` on one mesh dimension of more
    than one rank), or None to keep the history whole (one process, DDP, ZeRO, other layouts)."""
    if not is_dtensor(p) or len(lay.groups) != 1 or lay.average or lay.local_shape[1:] != lay.full_shape[1:]:
        return None
    from torch.distributed.tensor import Replicate, Shard

    if sum(isinstance(pl, Shard) for pl in p.placements) != 1 or not any(pl == Shard(0) for pl in p.placements):
        return None
    if dist.get_world_size(lay.groups[0]) == 1:
        return None
    return p.device_mesh, tuple(Shard(1) if pl == Shard(0) else Replicate() for pl in p.placements)


def _local_columns(shape: tuple[int, int], mesh: Any, placements: tuple) -> tuple[int, int]:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local_shape, offset = compute_local_shape_and_global_offset(shape, mesh, placements)
    return offset[1], offset[1] + local_shape[1]


def _split(value: Tensor, mesh: Any, placements: tuple) -> Tensor:
    """This rank's columns of a whole s × k history, as a DTensor of the whole's shape."""
    from torch.distributed.tensor import DTensor

    (s, k), (lo, hi) = value.shape, _local_columns(tuple(value.shape), mesh, placements)
    part = value[:, lo:hi].contiguous()
    return DTensor.from_local(part, mesh, placements, run_check=False, shape=(s, k), stride=(k, 1))


def _group(hist: Tensor) -> dist.ProcessGroup:
    """The process group over which a split history's columns are spread."""
    from torch.distributed.tensor import Shard

    return hist.device_mesh.get_group(hist.placements.index(Shard(1)))


def new(p: Tensor, lay: Layout, s: int, k: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """An empty (zero) history of s rows of k: whole, or this rank's columns of it as a DTensor."""
    spec = split_spec(p, lay)
    zeros = torch.zeros(s, k, dtype=dtype, device=device)
    return zeros if spec is None else _split(zeros, *spec)


def dtype_of(p: Tensor) -> torch.dtype:
    """The dtype of a history (and of its cores) for parameter ``p``: float32, or float64 for float64 ones."""
    return torch.promote_types(p.dtype, torch.float32)


def push(hist: Tensor, core: Tensor | None, ok: Tensor) -> None:
    """Drop the oldest row of ``hist`` and append ``core`` (zeros for None) as the newest, in place, only where
    ``ok``: two operations."""
    torch.where(ok, pushed(hist, core), hist, out=hist)


def pushed(hist: Tensor, core: Tensor | None) -> Tensor:
    """The history with its oldest row dropped and ``core`` (zeros for None) appended as the newest."""
    new = core.to(hist.dtype)[None] if core is not None else hist.new_zeros(1, hist.shape[1])
    return torch.cat([hist[1:], new])


def columns(hist: Tensor) -> tuple[int, int]:
    """The columns of the history held here: all of them unless it is split."""
    if not is_dtensor(hist):
        return 0, hist.shape[1]
    return _local_columns(tuple(hist.shape), hist.device_mesh, hist.placements)


def whole(hist: Tensor) -> Tensor:
    """The whole history (s × k): gathered from the ranks (a collective) when it is split."""
    return hist.full_tensor() if is_dtensor(hist) else hist


def like(hist: Tensor, value: Tensor) -> Tensor:
    """``value`` (a whole s × k history) stored as ``hist`` is: whole, or this rank's columns of it."""
    return _split(value, hist.device_mesh, hist.placements) if is_dtensor(hist) else value


def fit(hist: Tensor, p: Tensor, lay: Layout) -> Tensor:
    """A history as this layout keeps it: a whole one (e.g. loaded from a one-process checkpoint without DCP)
    split for a sharded parameter, a split one made whole for a whole parameter."""
    spec = split_spec(p, lay)
    if spec is None:
        return whole(hist)
    return hist if is_dtensor(hist) else _split(hist, *spec)


def fisher_gram(hists: list[Tensor]) -> Tensor:
    """GᵀG = Σ_p G_pᵀ G_p for histories stored as rows (s × k_p); returns (s, s) in float64.

    This is the one reduction the global Fisher needs (Gᵀm = GᵀG w follows from it); :func:`gram` sums the
    parts of split histories over their ranks.
    """
    sums: dict[torch.dtype, Tensor] = {}
    for h in hists:  # one accumulating matmul per history, in its own dtype
        if h.dtype in sums:
            sums[h.dtype].addmm_(h, h.T)
        else:
            sums[h.dtype] = h @ h.T
    assert sums
    return sum(part.to(torch.float64) for part in sums.values())  # type: ignore[return-value]


def gram(hists: list[Tensor], s: int, device: torch.device) -> Tensor:
    """GᵀG = Σ_p G_pᵀ G_p (s × s, float64). A split history adds its columns' part, summed over its group (one
    all-reduce per group, in the order of first appearance, which is the same on every rank)."""
    total = torch.zeros(s, s, dtype=torch.float64, device=device)
    wholes = [h for h in hists if not is_dtensor(h)]
    if wholes:
        total = total + fisher_gram(wholes)
    split: dict[tuple[int, ...], tuple[dist.ProcessGroup, list[Tensor]]] = {}
    for h in hists:
        if is_dtensor(h):
            g = _group(h)
            split.setdefault(group_key(g), (g, []))[1].append(local(h))
    for g, mine in split.values():
        part = fisher_gram(mine)
        dist.all_reduce(part, group=g)
        total = total + part
    return total


def summed_over_ranks(gram: Tensor, filled: int, group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor]:
    """A partition's GᵀG and filled rows (ZeRO: each rank holds some tensors of the global system) summed over
    ``group``: GᵀG added, the filled rows the largest over the ranks (a one-hot summed, > 0 where some rank has
    it), in one all-reduce. Every rank must call it."""
    s = gram.shape[0]
    onehot = (torch.arange(s + 1, device=gram.device) == filled).to(torch.float64)
    packed = torch.cat([gram.reshape(-1), onehot])
    dist.all_reduce(packed, group=group)
    present = packed[s * s :] > 0
    return packed[: s * s].view(s, s), (torch.arange(s + 1, device=gram.device) * present).max().to(torch.float64)


def gather(hists: list[Tensor], pieces: list[Tensor]) -> list[Tensor]:
    """Whole update cores from each rank's columns of them (``pieces[i]`` the columns ``columns(hists[i])``): one
    flat sum per group, each rank filling its own columns and zeros elsewhere (adding zeros is exact). Pieces of
    whole histories are returned as they are."""
    out = list(pieces)
    by_group: dict[tuple[int, ...], tuple[dist.ProcessGroup, list[int]]] = {}
    for i, h in enumerate(hists):
        if is_dtensor(h):
            g = _group(h)
            by_group.setdefault(group_key(g), (g, []))[1].append(i)
    for g, index in by_group.values():
        sizes = [hists[i].shape[1] for i in index]
        flat = pieces[index[0]].new_zeros(sum(sizes))
        start = 0
        for i, k in zip(index, sizes):
            lo, hi = columns(hists[i])
            flat[start + lo : start + hi] = pieces[i]
            start += k
        dist.all_reduce(flat, group=g)
        for i, part in zip(index, flat.split(sizes)):
            out[i] = part
    return out


def solve(
    hists: list[Tensor], filled: int, group: dict[str, Any], device: torch.device, reduce: bool, process_group: Any
) -> tuple[Tensor, Tensor]:
    """The weights of F⁻¹m over the window of one Fisher system, up to a common scale: solve (λI + GᵀG) c = w once
    (``momentum_weights_solve`` with the group's ``momentum``, ``damping`` and ``damping_mode``; ``filled``: the
    rows filled so far); returns c / c_scale (s, float64) and c_scale. Each tensor's F⁻¹m is then G_p c.

    With ``reduce`` (a partition of the global system, ZeRO), GᵀG and the number of filled rows are summed over
    ``process_group``, so every rank solves the system of all tensors (every rank must call it)."""
    s = group["history"]
    gram_ = gram(hists, s, device)  # (s, s) float64; split histories summed over ranks
    if reduce:
        gram_, filled_ = summed_over_ranks(gram_, filled, process_group)
    else:
        filled_ = torch.full((), filled, dtype=torch.float64, device=device)
    return momentum_weights_solve(gram_, filled_, group["momentum"], group["damping"], group["damping_mode"])


def directions(hists: list[Tensor], direction: Tensor) -> list[Tensor]:
    """Each history's G_p c (k,), gathered whole from split histories."""
    cast = {dtype: direction.to(dtype) for dtype in {h.dtype for h in hists}}
    return gather(hists, [cast[h.dtype] @ local(h) for h in hists])


def natural_direction(
    hists: list[Tensor], filled: int, group: dict[str, Any], device: torch.device, reduce: bool, process_group: Any
) -> tuple[list[Tensor], Tensor]:
    """F⁻¹m for each history of one Fisher system, up to a common scale (:func:`solve`, :func:`directions`): each
    G_p c / c_scale (whole cores, gathered from split histories) and c_scale."""
    direction, c_scale = solve(hists, filled, group, device, reduce, process_group)
    return directions(hists, direction), c_scale
