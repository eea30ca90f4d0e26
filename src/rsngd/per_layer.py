"""RS-SNGD's per-layer mode (``per_layer=True``): each projected matrix's gradient is projected as soon as backward
has produced it and freed, as GaLore's "layerwise" updates, so the projected matrices never hold all their gradients
at once.

The residual step (with its weight decay) is taken in the hook; ``step`` then solves the Fisher system with the
cores gathered here (the global Fisher stays exact: the cores, not the gradients, are what it needs) and applies
the subspace step. One process only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import strategies
from .batches import apply_residual

__all__ = ["LayerHooks"]


class LayerHooks:
    """The gradient hooks of one optimizer's projected matrices and the cores they gathered since the last step."""

    def __init__(self, opt: Any) -> None:
        """``opt``: the ``RSNGD`` whose projected matrices are hooked."""
        self.opt = opt
        self.pending: dict[Tensor, Tensor] = {}
        self.bad: Tensor | None = None
        self.handles = []
        for group in opt.param_groups:
            if group["rank"] is None:
                continue
            if group["residual"] not in ("none", "ortho"):
                raise ValueError(f"per_layer=True takes residual='none' or 'ortho', got {group['residual']!r}")
            for p in group["params"]:
                if p.dim() >= 2:
                    self.handles.append(p.register_post_accumulate_grad_hook(self.absorb))

    def take(self) -> tuple[dict[Tensor, Tensor], Tensor | None]:
        """The cores gathered since the last step and their non-finite count; both start again empty."""
        pending, bad = self.pending, self.bad
        self.pending, self.bad = {}, None
        return pending, bad

    @torch.no_grad()
    def absorb(self, p: Tensor) -> None:
        """Run as soon as ``p``'s gradient is accumulated: project it into the core that the next ``step`` will use,
        take the residual step (with its weight decay) now, and free the gradient. The matrix's factors are drawn
        once for both and released with it (``step`` draws them again, a batch at a time, for the subspace step).

        Without a residual, micro-batches add up in the core (projection is linear). The residual step is final
        here: it is skipped if this gradient is not finite, but not if another tensor's is."""
        if p.grad is None:
            return
        opt = self.opt
        if opt._distributed():
            raise RuntimeError("per_layer=True runs in one process; under torch.distributed use the normal step")
        group = opt._groups[p]
        factors: list = []
        (e,) = opt._project_chunk([[(group, p)]], None, keep=factors)
        bad = p.grad.isfinite().all().logical_not().to(torch.float64)
        self.bad = bad if self.bad is None else self.bad + bad
        previous = self.pending.get(p)
        if strategies.residual(group) is not None and e.outside:
            if previous is not None:
                raise RuntimeError(
                    "per_layer=True with residual='ortho' takes one backward per step (the residual step is taken as "
                    "each gradient arrives): sum the micro-batches' losses before backward, or use residual='none'"
                )
            apply_residual(opt, [e], bad == 0, factors[0])
        self.pending[p] = e.core if previous is None else previous + e.core
        p.grad = None
