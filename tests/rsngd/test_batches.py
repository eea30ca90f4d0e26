"""The two passes of the step (``rsngd.batches``), its budget (``rsngd.budget``), its precision and its strategies
(``rsngd.strategies``)."""

from typing import ClassVar

import pytest
import torch

import rsngd
from rsngd import RSNGD, strategies
from rsngd.ablations import AblationRSNGD
from rsngd.batches import plan
from rsngd.sharding import layout


def params(gen, dtype=torch.float64):
    shapes = [(24, 16)] * 5 + [(40, 16)] * 3 + [(16, 40)] * 2 + [(6, 5, 4), (9,)]
    return [torch.nn.Parameter(torch.randn(*s, generator=gen, dtype=dtype)) for s in shapes]


def train(ps, steps=6, **kw):
    gen = torch.Generator().manual_seed(9)
    opt = RSNGD(ps, lr=1e-2, rank=3, update_gap=2, weight_decay=0.1, **kw)
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        opt.step()
    return opt


@pytest.mark.parametrize("extra", [{}, {"residual_momentum": 0.9}], ids=["rsngd", "residual-momentum"])
def test_batches_of_any_size_give_the_same_steps(gen, extra):
    """One tensor per batch and chunk (a budget of one byte) or every same-shape tensor together: the same
    parameters in float64, renewals and the residual's momentum included."""
    start = params(gen)
    results = []
    for budget in (1, 1 << 30):
        ps = [torch.nn.Parameter(p.detach().clone()) for p in start]
        train(ps, batch_memory=budget, **extra)
        results.append(ps)
    moved = max((a - b).abs().max().item() for a, b in zip(results[1], start))
    assert moved > 1e-3
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_plan_cuts_batches_to_the_budget_and_keeps_shapes_apart(gen):
    ps = params(gen, torch.float32)
    group = RSNGD(ps, rank=3, batch_memory=3 * 24 * 16 * 4 * 2 + 3 * 3 * 16 * 16 * 4).param_groups[0]
    for p in ps:
        p.grad = torch.zeros_like(p)
    chunks = plan([(group, p) for p in ps if p.dim() >= 2], lambda p: layout(p, p.grad), lambda p: torch.float32)
    batches = [[p for _, p in b] for c in chunks for b in c]
    assert all(len({tuple(p.shape) for p in b}) == 1 for b in batches)
    assert [len(b) for b in batches if b[0].shape == (24, 16)] == [3, 2]
    assert sum(len(b) for b in batches) == 11


def test_the_step_in_bfloat16_follows_the_float32_step(gen):
    """``precision="bfloat16"`` (what a GPU step runs) on the CPU: every matmul of the step in bfloat16, the update
    within a few percent of the float32 step's."""
    start = params(gen, torch.float32)
    updates = {}
    for precision in ("float32", "bfloat16"):
        ps = [torch.nn.Parameter(p.detach().clone()) for p in start]
        train(ps, steps=3, precision=precision)
        updates[precision] = torch.cat([(p - s).detach().reshape(-1) for p, s in zip(ps, start)])
    diff = (updates["bfloat16"] - updates["float32"]).norm() / updates["float32"].norm()
    assert 0 < diff < 0.05


def test_the_factor_cache_counts_in_the_state(gen):
    ps = params(gen, torch.float32)
    opt = train(ps, steps=1, cache_factors=True)
    plain = train([torch.nn.Parameter(p.detach().clone()) for p in ps], steps=1)
    assert opt.factor_cache_bytes() > 0
    assert rsngd.optimizer_state_bytes(opt) == rsngd.optimizer_state_bytes(plain) + opt.factor_cache_bytes()
    assert opt.factor_cache_bytes(ps[:1]) == 4 * (24 * 3 + 16 * 3)  # float32 factors on the CPU, rank 3


def test_the_ablations_are_strategies_not_overrides():
    """``AblationRSNGD`` adds settings and overrides nothing; its strategies come from the registry, which names the
    class that takes each and refuses an unknown kind or value."""
    own = {k for k, v in vars(AblationRSNGD).items() if callable(v) and not k.startswith("__")}
    assert own == set()
    assert strategies.residuals(AblationRSNGD.extra_settings) == ("none", "ortho", "sign", "fira")
    assert strategies.residuals(RSNGD.extra_settings) == ("none", "ortho")
    with pytest.raises(ValueError, match="unknown strategy kind"):
        strategies.register("preconditioner", "x", None)
    with pytest.raises(ValueError, match="not a registered normalize strategy"):
        strategies.normalizer({"normalize": "l3"})


def test_a_registered_strategy_is_taken_by_its_class(gen, monkeypatch):
    """A new residual step registered for a subclass that declares it: the subclass takes it, ``RSNGD`` refuses it
    naming the subclass."""

    class Halved:
        def direction(self, opt, batch, residuals, ok):
            return residuals, 0.5 * batch[0].group["residual_scale"]

    monkeypatch.setitem(strategies.REGISTRY.strategies, ("residual", "halved"), (Halved(), "tests.Study"))
    monkeypatch.setitem(strategies.REGISTRY.settings, "study", ("tests.Study", None, False))

    class Study(RSNGD):
        extra_settings: ClassVar[dict] = {"study": 0}

    w = torch.nn.Parameter(torch.randn(12, 10, generator=gen, dtype=torch.float64))
    opt = Study([w], rank=2, residual="halved", residual_scale=1.0, lr=0.1)
    w.grad = torch.randn(12, 10, generator=gen, dtype=torch.float64)
    before = w.detach().clone()
    opt.step()
    assert not torch.equal(w, before)
    with pytest.raises(ValueError, match=r"residual='halved' is a setting of tests\.Study"):
        RSNGD([w], rank=2, residual="halved")
