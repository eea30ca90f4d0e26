"""What RS-SNGD needs to know about sharded parameters (DTensor) and the collectives of one step.

A DTensor parameter (FSDP2's ``fully_shard`` gives ``Shard(0)`` ones) is handled through its local shard:

- :func:`layout` says which rows of each mode the local shard holds (``offsets``, ``local_shape``) and over
  which process groups a projected core must be summed (the mesh dimensions where the gradient is ``Shard``
  or ``Partial``);
- each rank projects its own rows with the matching rows of the factors; :class:`Reducer` sums every such
  partial core of a step in one flat all-reduce per process group;
- each rank keeps its share of the history's columns (``rsngd.history``), the s × s solve and the update's core
  are then identical on every rank, and each rank writes only its own rows of the update.

Parameters that are whole on every rank (one process, DDP) have a layout with no groups, and nothing here
costs anything for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["Layout", "Reducer", "group_key", "is_dtensor", "layout", "local", "row_sharded", "state_like"]


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return DTensor


_DTENSOR = _dtensor_type()


def is_dtensor(t: Tensor) -> bool:
    return _DTENSOR is not None and isinstance(t, _DTENSOR)


def local(t: Tensor) -> Tensor:
    """The tensor this rank holds: a DTensor's local shard (same storage), or ``t`` itself."""
    return t.to_local() if is_dtensor(t) else t


@dataclass(frozen=True)
class Layout:
    """Where a rank's shard of a tensor sits in the whole tensor."""

    full_shape: tuple[int, ...]
    offsets: tuple[int, ...]
    """First row of each mode held here."""
    local_shape: tuple[int, ...]
    groups: tuple[dist.ProcessGroup, ...] = ()
    """Process groups over which partial results (projected cores) are summed; empty for a whole tensor."""
    average: bool = False
    """The gradient is a ``Partial("avg")``: the sum over ``groups`` is divided by their size."""

    @property
    def sharded(self) -> bool:
        return self.local_shape != self.full_shape


def layout(param: Tensor, grad: Tensor | None = None) -> Layout:
    """The layout of ``param`` (and its gradient) on this rank; a plain tensor is whole."""
    shape = tuple(param.shape)
    if not is_dtensor(param):
        return Layout(shape, (0,) * len(shape), shape)
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh = param.device_mesh
    local_shape, offsets = compute_local_shape_and_global_offset(shape, mesh, param.placements)
    grad_placements = param.placements if grad is None else grad.placements
    groups: list[dist.ProcessGroup] = []
    average = False
    for dim, (pp, gp) in enumerate(zip(param.placements, grad_placements)):
        if isinstance(gp, Shard):
            if gp != pp:
                raise ValueError(f"RSNGD needs a gradient sharded like its parameter, got {gp} for a {pp} parameter")
            groups.append(mesh.get_group(dim))
        elif isinstance(gp, Partial):
            if not isinstance(pp, Replicate):
                raise ValueError(f"RSNGD cannot use a Partial gradient of a {pp} parameter")
            if gp.reduce_op not in ("sum", "avg"):
                raise ValueError(f"RSNGD supports Partial sum/avg gradients, got {gp.reduce_op!r}")
            average = average or gp.reduce_op == "avg"
            groups.append(mesh.get_group(dim))
        elif not isinstance(gp, Replicate) or not isinstance(pp, (Replicate, Shard)):
            raise ValueError(f"RSNGD does not support the placement {gp} (gradient) / {pp} (parameter)")
    return Layout(shape, tuple(offsets), tuple(local_shape), tuple(groups), average)


def row_sharded(lay: Layout) -> bool:
    """Whether a layout is whole but for its rows, sharded over one process group (FSDP2's ``Shard(0)``)."""
    return len(lay.groups) == 1 and not lay.average and lay.local_shape[1:] == lay.full_shape[1:]


def state_like(p: Tensor, t: Tensor) -> Tensor:
    """A state tensor of this rank's rows of ``p``: sharded as ``p`` when ``p`` is a DTensor (so distributed
    checkpoints save and reshard it), else ``t`` itself."""
    if not is_dtensor(p):
        return t
    from torch.distributed.tensor import DTensor

    shape = (p.shape[0], *t.shape[1:])
    stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=shape, stride=stride)


def group_key(group: dist.ProcessGroup | None) -> tuple[int, ...]:
    """The ranks of a process group (``None``: the default group): groups with the same ranks share buffers."""
    return tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))


class Reducer:
    """Collects tensors to sum over process groups, then sums them with one flat all-reduce per group.

    Tensors are added on every rank in the same order (the optimizer's parameter order), so the flat buffers
    line up and every rank makes the same collectives in the same order.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[int, ...], tuple[dist.ProcessGroup | None, list[Tensor]]] = {}

    def add(self, tensor: Tensor, groups: Sequence[dist.ProcessGroup | None]) -> int:
        """Queue ``tensor`` to be summed over each of ``groups`` in turn; returns its handle."""
        handle = id(tensor)
        for g in groups:
            key = group_key(g)
            self._items.setdefault(key, (g, []))[1].append(tensor)
        return handle

    def run(self) -> None:
        """Sum every queued tensor in place (one all-reduce per group, tensors of one dtype per buffer)."""
        for group, tensors in self._items.values():
            by_dtype: dict[torch.dtype, list[Tensor]] = {}
            for t in tensors:
                by_dtype.setdefault(t.dtype, []).append(t)
            for same in by_dtype.values():
                flat = torch.cat([t.reshape(-1) for t in same])
                dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
                offset = 0
                for t in same:
                    t.view(-1).copy_(flat[offset : offset + t.numel()])
                    offset += t.numel()
        self._items.clear()
