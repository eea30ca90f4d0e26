"""Training on several processes (``torchrun --nproc_per_node N docjepa pretrain …``): DDP or FSDP2.

What changes with more than one process, and nothing else does:

- each process takes its slice of every micro-batch (``PositionSampler``), so the global batches are those of
  one process and a run can resume on another number of processes;
- the model is wrapped by ``DistributedDataParallel`` (``ddp``: replicated weights, averaged gradients) or
  sharded by FSDP2's ``fully_shard`` (``fsdp2``: each element of every ``nn.ModuleList``, then the root; weights,
  gradients and optimizer state sharded by rows, RS-SNGD stepping the shards natively);
- accumulation skips the gradient reduction on all but the last micro-batch (``no_sync`` /
  ``set_requires_gradient_sync``);
- logged values are averaged over the processes, counts summed; rank 0 writes metrics, configs and checkpoints;
- a checkpoint holds whole tensors in the one-process format (an FSDP2 run gathers them, CPU-offloaded, on rank
  0), so a run saved by N processes resumes on M, and the saved model is what ``predict`` and ``evaluate`` read.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from ..core.errors import UsageError

log = logging.getLogger("docjepa.train")


@dataclass
class DistConfig:
    """How training is spread over the processes ``torchrun`` starts (ignored in one process)."""

    strategy: Literal["ddp", "fsdp2"] = "ddp"
    """``ddp`` (DistributedDataParallel: a whole model per process, gradients averaged) or ``fsdp2``
    (``fully_shard``: parameters, gradients and optimizer state sharded among the processes)."""


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


ONE = World()
"""A single process."""


def init_world(device_name: str) -> tuple[World, torch.device | None]:
    """The process group of a torchrun launch (initialised here if needed) and this process's device.

    Returns ``(World(), None)`` in a single process: the caller picks the device as usual.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World(), None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device_name.startswith("cuda") or (device_name == "auto" and torch.cuda.is_available())
    if cuda:
        if not torch.cuda.is_available():
            raise UsageError(f"run.device={device_name} but no CUDA device is available")
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} CUDA device(s)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
        atexit.register(_destroy)
    if dist.get_world_size() != size:
        raise UsageError(f"WORLD_SIZE={size} but the process group has {dist.get_world_size()} processes")
    world = World(dist.get_rank(), size, local_rank)
    log.info("process %d of %d on %s", world.rank, world.size, device)
    return world, device


def _destroy() -> None:
    """Close the process group this module opened, while the interpreter is still whole."""
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, world: World, strategy: str, device: torch.device) -> nn.Module:
    """The module to run forward/backward through: the model itself in one process, else DDP or FSDP2."""
    if world.size == 1:
        return model
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        # Pre-training switches losses (and their heads) on and off: unused parameters must be allowed.
        return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)
    if strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        # FSDP2 cannot shard 0-d parameters (a learned gain): they stay whole on every process and their
        # gradients are averaged by :func:`sync_unsharded`.
        scalars = {p for p in model.parameters() if p.dim() == 0}
        # A per-page cache (the page reader's, of the frozen tower) skips a pass on the process that hits it and not
        # on the others: sharded, every process must make the same passes, so it is switched off.
        from ..modeling.page_reader import PageReader

        for module in model.modules():
            if isinstance(module, PageReader):
                module.cache_pages = 0
        for block in _blocks(model):
            fully_shard(block, ignored_params=scalars or None)
        fully_shard(model, ignored_params=scalars or None)
        return model
    raise UsageError(f"dist.strategy must be ddp or fsdp2, got {strategy!r}")


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The outermost elements of ``nn.ModuleList`` s (transformer blocks), each its own FSDP2 unit: a block inside
    a chosen one, or sharing a parameter with one, is left to the enclosing unit."""
    chosen: list[nn.Module] = []
    covered: set[int] = set()
    for module in model.modules():  # pre-order: outer lists first
        if not isinstance(module, nn.ModuleList):
            continue
        for block in module:
            ids = {id(p) for p in block.parameters()}
            if ids and not ids & covered:
                chosen.append(block)
                covered |= ids
    return chosen


def accumulate(wrapped: nn.Module, world: World, strategy: str, last: bool) -> AbstractContextManager:
    """Context of one micro-batch's backward: the gradient reduction happens on the ``last`` one only."""
    if world.size == 1:
        return nullcontext()
    if strategy == "fsdp2":
        wrapped.set_requires_gradient_sync(last)  # type: ignore[operator]
        return nullcontext()
    return nullcontext() if last else wrapped.no_sync()  # type: ignore[operator]


def sync_unsharded(model: nn.Module, world: World, strategy: str) -> None:
    """Average over the processes the gradients FSDP2 left alone (0-d parameters); nothing otherwise."""
    if world.size == 1 or strategy != "fsdp2":
        return
    grads = [p.grad for p in model.parameters() if p.dim() == 0 and p.grad is not None]
    if grads:
        flat = torch.stack(grads)
        dist.all_reduce(flat)
        for g, v in zip(grads, flat / world.size):
            g.copy_(v)


def rank_positions(start: int, batch_size: int, world: World) -> Iterator[int]:
    """Sample positions of this rank: its ``batch_size / world`` slice of each global micro-batch."""
    per = batch_size // world.size
    base = start
    while True:
        first = base + world.rank * per
        yield from range(first, first + per)
        base += batch_size


def check_batch(batch_size: int, world: World) -> int:
    """Samples per process and micro-batch (``run.batch_size`` is the global micro-batch)."""
    if batch_size % world.size:
        raise UsageError(f"run.batch_size={batch_size} must be divisible by the {world.size} processes")
    return batch_size // world.size


def mean_over_ranks(values: dict[str, float], world: World) -> dict[str, float]:
    """Each value averaged over the processes that have it: a loss term a process's batches never gave (a kind of
    question none of its samples asked) is left out of that process's share, not counted as 0. Every process
    calls it, with whatever keys it has."""
    if world.size == 1:
        return values
    named: list[list[str]] = [[] for _ in range(world.size)]
    dist.all_gather_object(named, sorted(values))
    keys = sorted(set().union(*named))
    if not keys:
        return {}
    t = torch.tensor([[values.get(k, 0.0), float(k in values)] for k in keys], dtype=torch.float64)
    dist.all_reduce(t)
    return {k: v / n for k, (v, n) in zip(keys, t.tolist())}


def sum_over_ranks(value: int, world: World) -> int:
    if world.size == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def gather_objects(obj: Any, world: World) -> list[Any]:
    if world.size == 1:
        return [obj]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def scalar(t: torch.Tensor) -> float:
    """A (possibly DTensor) 0-d tensor as a float."""
    return float(t.full_tensor() if hasattr(t, "full_tensor") else t)


# --------------------------------------------------------------------------- state
def _fsdp2(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def model_state(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """Whole weights for a checkpoint (gathered to rank 0's CPU under FSDP2; None elsewhere): the same keys as
    one process's ``state_dict``. None when the model is not sharded (``save_pretrained`` reads it itself)."""
    if not _fsdp2(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _names(opt: torch.optim.Optimizer) -> list[str]:
    names = [n for g in opt.param_groups for n in g.get("param_names", [])]
    if len(names) != sum(len(g["params"]) for g in opt.param_groups):
        raise RuntimeError("sharded checkpoints need an optimizer built from named parameters")
    return names


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The optimizer's ``state_dict`` in the one-process format (whole tensors, parameters numbered in group
    order); under FSDP2 gathered to rank 0 (other ranks get an empty dict)."""
    if not _fsdp2(model):
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not full:
        return {}
    index = {n: i for i, n in enumerate(_names(opt))}
    state = {index[name]: value for name, value in full["state"].items()}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in full["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, saved: dict) -> None:
    """Load a one-process-format optimizer state, sharding it under FSDP2."""
    if not _fsdp2(model):
        opt.load_state_dict(saved)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _names(opt)
    state = {names[i]: value for i, value in saved["state"].items()}
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in saved["param_groups"]]
    set_optimizer_state_dict(
        model, opt, {"state": state, "param_groups": groups}, options=StateDictOptions(full_state_dict=True)
    )
