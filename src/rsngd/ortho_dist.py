"""The orthogonalised residual when the work or the tensors are spread over ranks.

Newton–Schulz needs a whole matrix. Two cases:

- **Sharded parameters** (FSDP2, ``Shard(0)`` on one mesh dimension): every matrix gets one owner rank
  (:func:`owners`: largest first, to the least-loaded rank). One ``all_to_all`` sends each rank's rows of every
  matrix to its owner, the owner orthogonalises its whole matrices (batched by shape), and a second ``all_to_all``
  returns each rank its rows. A rank holds whole matrices only for those it owns, during the step.
- **Replicated parameters** (DDP: the same gradient on every rank): each rank orthogonalises the matrices it owns
  and broadcasts the results, instead of every rank repeating all the work.

Both give what one process computes, up to the order of floating-point sums inside a batched matmul.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from . import orthogonal

__all__ = ["ortho_replicated", "ortho_sharded", "owners", "row_split"]


def owners(sizes: list[int], world: int) -> list[int]:
    """The rank that orthogonalises each matrix: largest first, each to the rank with the least work so far
    (Newton–Schulz work grows with the size; ties go to the lowest rank). The same on every rank."""
    load = [0] * world
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        out[i] = r
        load[r] += sizes[i]
    return out


def row_split(rows: int, world: int) -> list[tuple[int, int]]:
    """(first row, number of rows) held by each rank of a ``Shard(0)`` tensor (``torch.chunk``'s split, as
    DTensor shards: chunks of ⌈rows / world⌉, the last ones shorter or empty)."""
    chunk = -(-rows // world)
    out = []
    for r in range(world):
        start = min(r * chunk, rows)
        out.append((start, min(rows, start + chunk) - start))
    return out


def ortho_sharded(parts: list[Tensor], shapes: list[tuple[int, ...]], group: dist.ProcessGroup | None) -> list[Tensor]:
    """This rank's rows of the scaled polar factor of each matrix, given this rank's rows ``parts`` of matrices of
    ``shapes`` sharded by rows over ``group``. Every rank of ``group`` calls it with the same shapes in the same
    order."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if not parts:
        return []
    dtype, device = parts[0].dtype, parts[0].device
    splits = [row_split(shape[0], world) for shape in shapes]
    cols = [math.prod(shape[1:]) for shape in shapes]
    for i, part in enumerate(parts):
        if part.shape[0] != splits[i][rank][1] or part.numel() != splits[i][rank][1] * cols[i]:
            raise ValueError(f"rank {rank} holds {tuple(part.shape)} of a {shapes[i]} matrix: not torch.chunk's rows")
    own = owners([math.prod(shape) for shape in shapes], world)
    mine = [i for i in range(len(shapes)) if own[i] == rank]

    def exchange(send: list[Tensor], recv_sizes: list[int]) -> list[Tensor]:
        out = torch.empty(sum(recv_sizes), dtype=dtype, device=device)
        sizes = [t.numel() for t in send]
        dist.all_to_all_single(out, torch.cat(send), recv_sizes, sizes, group=group)
        return list(out.split(recv_sizes))

    def flat(ts: list[Tensor]) -> Tensor:
        return torch.cat([t.reshape(-1) for t in ts]) if ts else torch.empty(0, dtype=dtype, device=device)

    # 1. every rank sends its rows of each matrix to the matrix's owner
    send = [flat([parts[i].to(dtype) for i in range(len(parts)) if own[i] == d]) for d in range(world)]
    recv = exchange(send, [sum(splits[i][r][1] * cols[i] for i in mine) for r in range(world)])
    wholes, offsets = [], [0] * world
    for i in mine:
        rows = []
        for r in range(world):
            n = splits[i][r][1] * cols[i]
            rows.append(recv[r][offsets[r] : offsets[r] + n].view(splits[i][r][1], cols[i]))
            offsets[r] += n
        wholes.append(torch.cat(rows).view(shapes[i]))
    done = orthogonal.ortho_residuals(wholes)
    # 2. the owner returns each rank its rows
    back = []
    for r in range(world):
        first = [splits[i][r][0] for i in mine]
        rows_r = [
            done[j].reshape(shapes[i][0], cols[i])[first[j] : first[j] + splits[i][r][1]] for j, i in enumerate(mine)
        ]
        back.append(flat(rows_r))
    got = exchange(
        back, [sum(splits[i][rank][1] * cols[i] for i in range(len(shapes)) if own[i] == r) for r in range(world)]
    )
    out: list[Tensor] = [None] * len(parts)  # type: ignore[list-item]
    offsets = [0] * world
    for i in range(len(shapes)):
        r, n = own[i], splits[i][rank][1] * cols[i]
        out[i] = got[r][offsets[r] : offsets[r] + n].view(parts[i].shape).to(parts[i].dtype)
        offsets[r] += n
    return out


def ortho_replicated(residuals: list[Tensor], group: dist.ProcessGroup | None) -> list[Tensor]:
    """The scaled polar factor of each matrix, the same on every rank of ``group``: each rank computes the
    matrices it owns and broadcasts them."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if not residuals:
        return []
    own = owners([r.numel() for r in residuals], world)
    out: list[Tensor] = [None] * len(residuals)  # type: ignore[list-item]
    mine = [i for i in range(len(residuals)) if own[i] == rank]
    for i, o in zip(mine, orthogonal.ortho_residuals([residuals[i] for i in mine])):
        out[i] = o
    dtype, device = residuals[0].dtype, residuals[0].device
    for r in range(world):
        idx = [i for i in range(len(residuals)) if own[i] == r]
        if not idx:
            continue
        if r == rank:
            buf = torch.cat([out[i].reshape(-1).to(dtype) for i in idx])
        else:
            buf = torch.empty(sum(residuals[i].numel() for i in idx), dtype=dtype, device=device)
        dist.broadcast(buf, src=dist.get_global_rank(group, r) if group is not None else r, group=group)
        if r != rank:
            offset = 0
            for i in idx:
                n = residuals[i].numel()
                out[i] = buf[offset : offset + n].view(residuals[i].shape).to(residuals[i].dtype)
                offset += n
    return out
