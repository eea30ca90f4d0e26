"""Cases run on every rank of a spawned gloo group (``tests/rsngd/test_distributed.py``,
``benchmarks/scripts/distributed.py``).

Each rank computes the one-process reference itself (the whole global batch on a whole model) and compares its
distributed run with it, so nothing but a pass/fail and the measured differences has to leave the processes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import rsngd
from rsngd import RSNGD
from rsngd.ablations import AblationRSNGD, uses

VOCAB = 13


class Tiny(nn.Module):
    """A small float64 model whose matrices cover the awkward cases of sharding rows among ranks: row counts
    that do not divide (9, 7, 13), a 3-mode tensor (5 × 2 × 9), a mode smaller than the rank (kept whole) that
    is sharded (2 rows) and one that is not (7 × 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 6)
        self.up = nn.Linear(6, 9)
        self.mix = nn.Parameter(torch.randn(5, 2, 9) / 3)
        self.thin = nn.Parameter(torch.randn(2, 10) / 3)
        self.down = nn.Linear(2, 7)
        self.head = nn.Linear(7, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.up(self.emb(x)))
        h = torch.tanh(torch.einsum("btk,ijk->btij", h, self.mix).flatten(2))
        h = torch.tanh(h @ self.thin.T)
        return self.head(torch.tanh(self.down(h)))


def optimizer(groups: list[dict[str, Any]], **kw: Any) -> RSNGD:
    """RSNGD, or AblationRSNGD for groups with an ablation setting."""
    return (AblationRSNGD if any(uses(g) for g in groups) else RSNGD)(groups, **kw)


def make_model(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    return Tiny().double()


def groups(model: nn.Module, named: bool = True, **hp: Any) -> list[dict[str, Any]]:
    """Projected: every matrix but the embedding (rank 3); AdamW: the embedding and the biases (``adamw_state``
    goes to that group)."""
    proj = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    rest = [(n, p) for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    state = hp.pop("adamw_state", "full")
    out = [
        {"params": [p for _, p in proj], "rank": 3, **hp},
        {"params": [p for _, p in rest], "rank": None, "adamw_state": state},
    ]
    if named:
        out[0]["param_names"] = [n for n, _ in proj]
        out[1]["param_names"] = [n for n, _ in rest]
    return out


OPTIONS = dict(lr=0.05, history=3, update_gap=2, weight_decay=0.01)


def batch(step: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, VOCAB, (size, 5), generator=g)
    return x, torch.roll(x, -1, dims=1)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def my_rows(x: torch.Tensor) -> slice:
    n, rank, world = x.shape[0], dist.get_rank(), dist.get_world_size()
    per = n // world
    return slice(rank * per, (rank + 1) * per)


def reference(steps: int, hp: dict[str, Any], nan_at: int | None = None) -> dict[str, torch.Tensor]:
    """One process, the whole batch."""
    model = make_model()
    opt = optimizer(groups(model, **hp), **OPTIONS)
    for step in range(steps):
        opt.zero_grad()
        loss_of(model, *batch(step)).backward()
        if step == nan_at:
            model.up.weight.grad[0, 0] = float("nan")
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def max_diff(model: nn.Module, ref: dict[str, torch.Tensor]) -> float:
    return max((full(p.detach()) - ref[n]).abs().max().item() for n, p in model.named_parameters())


def fsdp2(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(model.up)
    fully_shard(model)
    return model


def train_fsdp2(steps: int, hp: dict[str, Any], nan_at: int | None = None, nan_rank: int = 1):
    model = fsdp2(make_model())
    opt = optimizer(groups(model, **hp), **OPTIONS)
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step)
        loss_of(model, x[my_rows(x)], y[my_rows(x)]).backward()
        if step == nan_at and dist.get_rank() == nan_rank:
            g = model.head.weight.grad.to_local()
            if g.numel():
                g.view(-1)[0] = float("nan")
        opt.step()
    return model, opt


def case_fsdp2_equals_one_process(hp: dict[str, Any], steps: int = 5) -> float:
    model, _ = train_fsdp2(steps, hp)
    return max_diff(model, reference(steps, hp))


def case_history_columns(hp: dict[str, Any], steps: int = 5) -> dict[str, tuple[int, int]]:
    """After FSDP2 steps (renewals included): each projected matrix's history, the columns this rank holds and
    the whole width k."""
    model, opt = train_fsdp2(steps, hp)
    out = {}
    for name, p in model.named_parameters():
        hist = opt.state[p].get("hist")
        if hist is not None:
            assert hasattr(hist, "to_local"), f"{name}: the history of a sharded matrix is not split"
            out[name] = (hist.to_local().shape[1], hist.shape[1])
    return out


def case_zero_equals_one_process(hp: dict[str, Any], steps: int = 5) -> float:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model()
    rsngd.tag_parameter_names(model)
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(
        groups(model, named=False, **hp)[0]["params"],
        optimizer_class=AblationRSNGD if uses(hp) else RSNGD,
        partitioned=True,
        rank=3,
        **hp,
        **OPTIONS,
    )
    # The non-projected tensors in a second group, as plain AdamW inside RSNGD.
    opt.add_param_group({"params": groups(model, named=False)[1]["params"], "rank": None})
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step)
        loss_of(ddp, x[my_rows(x)], y[my_rows(x)]).backward()
        opt.step()
    return max_diff(model, reference(steps, hp))


def case_ddp_split_equals_one_process(hp: dict[str, Any], steps: int = 5) -> float:
    """DDP with ``data_parallel=True``: each rank orthogonalises its share of the residuals and broadcasts them."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import rsngd.orthogonal as orth

    done = []  # matrices this rank orthogonalised
    scaled = orth.ortho_residuals
    orth.ortho_residuals = lambda wholes: done.extend(w.shape for w in wholes) or scaled(wholes)
    model = make_model()
    ddp = DDP(model)
    opt = optimizer(groups(model, **hp), data_parallel=True, **OPTIONS)
    try:
        for step in range(steps):
            opt.zero_grad()
            x, y = batch(step)
            loss_of(ddp, x[my_rows(x)], y[my_rows(x)]).backward()
            opt.step()
    finally:
        orth.ortho_residuals = scaled
    return max_diff(model, reference(steps, hp)), len(done)


def case_nan_on_one_rank_skips_everywhere(steps: int = 4, nan_at: int = 2) -> tuple[float, int]:
    model, opt = train_fsdp2(steps, {}, nan_at=nan_at)
    skipped = opt.nonfinite_steps
    # The reference skips the same step (its NaN is elsewhere; a skipped step changes nothing anywhere).
    return max_diff(model, reference(steps, {}, nan_at=nan_at)), skipped


def case_dcp_resume(folder: str, steps: int = 6, cut: int = 3, hp: dict[str, Any] | None = None) -> float:
    """Save at step ``cut`` with DCP, continue; returns nothing but writes the final parameters for comparison."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model = fsdp2(make_model())
    opt = optimizer(groups(model, **(hp or {})), **OPTIONS)
    for step in range(steps):
        if step == cut:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=folder)
        opt.zero_grad()
        x, y = batch(step)
        loss_of(model, x[my_rows(x)], y[my_rows(x)]).backward()
        opt.step()
    final = {n: full(p.detach()).clone() for n, p in model.named_parameters()}
    if dist.get_rank() == 0:
        torch.save(final, os.path.join(folder, "uninterrupted.pt"))
    return 0.0


def resume_from(
    folder: str, sharded: bool, steps: int = 6, cut: int = 3, hp: dict[str, Any] | None = None
) -> dict[str, torch.Tensor]:
    """Load the DCP checkpoint of :func:`case_dcp_resume` into a fresh model (FSDP2 on this group, or one
    process) and run the remaining steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    torch.manual_seed(123)  # a different initialisation: everything must come from the checkpoint
    model = Tiny().double()
    if sharded:
        model = fsdp2(model)
    opt = optimizer(groups(model, **(hp or {})), **OPTIONS)
    msd, osd = get_state_dict(model, opt)  # creates the optimizer's state (a step with zero lr) to load into
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=folder, no_dist=not sharded)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for step in range(cut, steps):
        opt.zero_grad()
        x, y = batch(step)
        if sharded:
            x, y = x[my_rows(x)], y[my_rows(x)]
        loss_of(model, x, y).backward()
        opt.step()
    return {n: full(p.detach()).clone() for n, p in model.named_parameters()}


def spawn(world: int, fn: Callable[..., Any], *args: Any) -> list[Any]:
    """Run ``fn(*args)`` on ``world`` gloo ranks (one thread each); returns each rank's result."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        mp.spawn(_entry, args=(world, store, tmp, fn, args), nprocs=world, join=True)
        return [torch.load(os.path.join(tmp, f"result{r}.pt"), weights_only=False) for r in range(world)]


def _entry(rank: int, world: int, store: str, tmp: str, fn: Callable[..., Any], args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = fn(*args)
        torch.save(result, os.path.join(tmp, f"result{rank}.pt"))
    finally:
        dist.destroy_process_group()
    # Leave without interpreter finalisation: gloo's worker threads can still hold tensors then, and freeing
    # them while the interpreter is torn down aborts the process now and then (SIGABRT after a clean run).
    os._exit(0)
