"""Muon for the projected matrices and AdamW for the rest, as one ``torch.optim.Optimizer``.

``torch.optim.Muon`` orthogonalises the momentum of 2-D parameters only (Newton–Schulz); the usual recipe for
language models gives the embeddings, the output head and the 1-D tensors to AdamW. :class:`MuonWithAdamW` holds
the two optimizers and shows their parameter groups as its own (the same dictionaries, so a learning-rate schedule
that writes ``group["lr"]`` reaches both), steps both, and saves and restores both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MuonWithAdamW"]


class MuonWithAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` over ``muon_groups`` (2-D tensors) and ``torch.optim.AdamW`` over ``adamw_groups``.

    Args:
        muon_groups: parameter groups for Muon; every tensor must be 2-D.
        adamw_groups: parameter groups for AdamW (may be empty).
        lr: default learning rate of the Muon groups (Muon's ``adjust_lr_fn`` then scales it per matrix shape).
        adamw_lr: default learning rate of the AdamW groups.
        weight_decay: default decoupled weight decay of both.
        muon: further keyword arguments of ``torch.optim.Muon`` (``momentum``, ``nesterov``, ``ns_steps``,
            ``adjust_lr_fn``…).
    """

    def __init__(
        self,
        muon_groups: list[dict[str, Any]],
        adamw_groups: list[dict[str, Any]],
        lr: float = 0.02,
        adamw_lr: float = 3e-3,
        weight_decay: float = 0.0,
        **muon: Any,
    ) -> None:
        muon_groups = [g for g in muon_groups if g["params"]]
        adamw_groups = [g for g in adamw_groups if g["params"]]
        if not muon_groups:
            raise ValueError("Muon needs at least one 2-D parameter")
        for g in muon_groups:
            bad = [tuple(p.shape) for p in g["params"] if p.dim() != 2]
            if bad:
                raise ValueError(f"Muon steps 2-D parameters only; got shapes {bad}")
        self.muon = torch.optim.Muon(muon_groups, lr=lr, weight_decay=weight_decay, **muon)
        self.adamw = torch.optim.AdamW(adamw_groups, lr=adamw_lr, weight_decay=weight_decay) if adamw_groups else None
        params = [p for o in self._parts() for g in o.param_groups for p in g["params"]]
        super().__init__(params, {"lr": lr})
        # Share the parts' group dictionaries (and so their learning rates) instead of the copies made above.
        self.param_groups = [g for o in self._parts() for g in o.param_groups]
        self._sync_state()

    def _parts(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.muon, self.adamw) if o is not None]

    def _sync_state(self) -> None:
        self.state.clear()
        for o in self._parts():
            self.state.update(o.state)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self._parts():
            o.step()
        self._sync_state()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self._parts():
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict() if self.adamw else None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != {"muon", "adamw"}:
            raise ValueError("not a MuonWithAdamW state dict: expected the keys 'muon' and 'adamw'")
        self.muon.load_state_dict(state_dict["muon"])
        if self.adamw is not None:
            self.adamw.load_state_dict(state_dict["adamw"])
        self.param_groups = [g for o in self._parts() for g in o.param_groups]
        self._sync_state()
