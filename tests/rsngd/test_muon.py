"""Muon on the projected matrices with AdamW on the rest, as one optimizer."""

import copy

import pytest
import torch

import rsngd
from rsngd.muon import MuonWithAdamW
from tests.rsngd.test_factory import Block, train


def twins() -> tuple[Block, Block]:
    torch.manual_seed(0)
    a, b = Block(), Block()
    b.load_state_dict(a.state_dict())
    return a, b


def test_muon_from_the_factory_equals_torch_muon_and_adamw_side_by_side():
    a, b = twins()
    made = rsngd.create_optimizer(a.named_parameters(), "muon", lr=0.02, adamw_lr=0.004)
    proj, other, flat = rsngd.split_parameters(b.named_parameters())
    muon = torch.optim.Muon(proj, lr=0.02, weight_decay=0.0)
    adamw = torch.optim.AdamW([{"params": other}, {"params": flat}], lr=0.004, weight_decay=0.0)

    class Both(torch.optim.Optimizer):  # the reference: the two torch optimizers stepped one after the other
        def __init__(self):
            super().__init__(list(b.parameters()), {})

        def step(self, closure=None):
            muon.step()
            adamw.step()

        def zero_grad(self, set_to_none=True):
            muon.zero_grad()
            adamw.zero_grad()

    got, want = train(made, a), train(Both(), b)
    assert torch.equal(got, want)
    start = torch.cat([p.detach().flatten() for p in twins()[0].parameters()])
    assert not torch.equal(got, start)  # it trained


def test_group_learning_rates_reach_both_parts_and_state_is_counted():
    a, _ = twins()
    opt = rsngd.create_optimizer(a.named_parameters(), "muon", lr=0.02, adamw_lr=0.004)
    assert [g["lr"] for g in opt.param_groups] == [0.02, 0.004, 0.004]
    for g in opt.param_groups:
        g["lr"] *= 0.5  # what a schedule does
    assert [g["lr"] for g in opt.muon.param_groups] == [0.01]
    assert [g["lr"] for g in opt.adamw.param_groups] == [0.002, 0.002]
    train(opt, a, steps=1)
    proj, _, _ = rsngd.split_parameters(a.named_parameters())
    # Muon keeps one momentum buffer per matrix (float32): its bytes are the projected matrices' size.
    assert rsngd.optimizer_state_bytes(opt, proj) == 4 * sum(p.numel() for p in proj)
    assert rsngd.optimizer_state_bytes(opt) > rsngd.optimizer_state_bytes(opt, proj)


def test_a_restored_state_continues_identically():
    a, b = twins()
    opt_a = rsngd.create_optimizer(a.named_parameters(), "muon", lr=0.02, adamw_lr=0.004)
    train(opt_a, a, steps=2)
    b.load_state_dict(a.state_dict())
    opt_b = rsngd.create_optimizer(b.named_parameters(), "muon", lr=0.02, adamw_lr=0.004)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as saved and read back: no shared buffers
    assert torch.equal(train(opt_a, a, steps=3), train(opt_b, b, steps=3))
    with pytest.raises(ValueError, match="not a MuonWithAdamW state dict"):
        opt_b.load_state_dict({"state": {}, "param_groups": []})


def test_non_matrix_parameters_are_refused_by_muon():
    with pytest.raises(ValueError, match="2-D parameters only"):
        MuonWithAdamW([{"params": [torch.nn.Parameter(torch.randn(3))]}], [])
    with pytest.raises(ValueError, match="at least one 2-D parameter"):
        MuonWithAdamW([{"params": []}], [{"params": [torch.nn.Parameter(torch.randn(3))]}])
