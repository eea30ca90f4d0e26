"""Optimizer memory, measured the same way for every optimizer."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["optimizer_state_bytes"]


def _walk(obj: Any, seen_objects: set[int], storages: dict[int, int], logical: bool, depth: int = 0) -> None:
    if depth > 8 or id(obj) in seen_objects:
        return
    seen_objects.add(id(obj))
    if torch.is_tensor(obj):
        if hasattr(obj, "to_local"):  # a DTensor: this process's shard is what it holds
            obj = obj.to_local()
        if logical or obj.is_sparse or obj.layout != torch.strided:
            storages[id(obj)] = obj.numel() * obj.element_size()
            return
        storage = obj.untyped_storage()
        # Count each storage once, whole: views of one buffer are not double counted.
        storages[storage.data_ptr() or id(storage)] = storage.nbytes()
    elif isinstance(obj, dict):
        for value in obj.values():
            _walk(value, seen_objects, storages, logical, depth + 1)
    elif isinstance(obj, (list, tuple, set)):
        for value in obj:
            _walk(value, seen_objects, storages, logical, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        # Projector objects (GaLore, Fira, APOLLO) keep their matrices as attributes.
        _walk(vars(obj), seen_objects, storages, logical, depth + 1)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, params: Any = None, logical: bool = False) -> int:
    """Bytes held by the tensors in an optimizer's state.

    Walks ``optimizer.state`` (tensors, nested containers and the attributes of objects
    stored there, such as GaLore's projectors) and sums each distinct storage once:
    this is the memory really held, and a small view that keeps a large buffer alive
    counts the whole buffer. With ``logical=True`` each tensor counts only its own
    elements instead. With ``params`` (an iterable of parameters), only the state of
    those parameters is counted, e.g. to compare the projected matrices alone. An optimizer
    that keeps memory between steps outside its state (RS-SNGD's factor cache, reported by its
    ``factor_cache_bytes``) has it counted too.
    """
    params = None if params is None else list(params)
    wanted = None if params is None else {id(p) for p in params}
    storages: dict[int, int] = {}
    seen: set[int] = set()
    for p, state in optimizer.state.items():
        if wanted is not None and id(p) not in wanted:
            continue
        _walk(state, seen, storages, logical)
    cache = getattr(optimizer, "factor_cache_bytes", None)
    return int(sum(storages.values())) + (int(cache(params)) if callable(cache) else 0)
