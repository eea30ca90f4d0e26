"""One parameter-group rule, one optimizer factory, one schedule."""

import math

import pytest
import torch
from torch import nn

import rsngd
from rsngd import RSNGD
from tests.rsngd.test_optimizer import tiny_llama


class Block(nn.Module):
    """Names as in common implementations: attention and MLP matrices, norms, an embedding and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.attn = nn.Linear(16, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 50, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        x = x + self.mlp(self.norm(x + self.attn(x)))
        return self.head(x)


def train(opt: torch.optim.Optimizer, model: nn.Module, steps: int = 5) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    for _ in range(steps):
        ids = torch.randint(0, 50, (4, 9), generator=gen)
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_split_projects_attention_and_mlp_matrices_only():
    model = Block()
    model.mlp[2].weight.requires_grad_(False)  # frozen parameters are left out
    proj, other, flat = rsngd.split_parameters(model.named_parameters())
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in proj] == ["attn.weight", "mlp.0.weight"]
    assert [names[id(p)] for p in other] == ["embed.weight", "head.weight"]
    assert all(p.dim() == 1 for p in flat) and len(flat) == 5  # biases and the norm
    with pytest.raises(ValueError, match="targets"):
        rsngd.split_parameters(model.named_parameters(), targets=())


def test_rsngd_from_the_factory_equals_hand_made_groups():
    torch.manual_seed(0)
    a, b = Block(), Block()
    b.load_state_dict(a.state_dict())
    made = rsngd.create_optimizer(a.named_parameters(), "rsngd", lr=0.01, adamw_lr=0.02, rank=4, history=3, seed=5)
    groups = rsngd.param_groups(b, rank=4, history=3)
    for g in groups[1:]:
        g["lr"] = 0.02
    groups[1]["adamw_state"] = "light"  # the recipe's embeddings and head
    hand = RSNGD(groups, lr=0.01, seed=5)
    assert torch.equal(train(made, a), train(hand, b))
    assert [g["rank"] for g in made.param_groups] == [4, None, None]
    assert [g["lr"] for g in made.param_groups] == [0.01, 0.02, 0.02]


def test_the_plain_call_is_the_long_run_recipe_and_rsngd_defaults_are_the_stateless_one():
    """create_optimizer(named) with no keyword gives the registry's default recipe, rsngd-momentum (the runs users
    make); RSNGD's own defaults are the rsngd recipe's settings of the projected matrices (the stateless step)."""
    from rsngd.recipes import BASE, DEFAULT, RECIPES

    assert (DEFAULT, BASE) == ("rsngd-momentum", "rsngd")
    recipe = RECIPES[DEFAULT]
    opt = rsngd.create_optimizer(Block().named_parameters())
    proj, other, flat = opt.param_groups
    assert proj["lr"] == recipe.lr and other["lr"] == flat["lr"] == recipe.adamw_lr
    for key, value in recipe.projected.items():
        assert proj[key] == value, key
    assert proj["residual_momentum"] == 0.95
    assert other["adamw_state"] == "light" and flat["adamw_state"] == "full"
    bare = RSNGD([nn.Parameter(torch.randn(8, 8))]).param_groups[0]
    assert bare["lr"] == RECIPES[BASE].lr and bare["residual_momentum"] == 0.0
    for key, value in RECIPES[BASE].projected.items():
        assert bare[key] == value, key
    lite = rsngd.create_optimizer(Block().named_parameters(), "rsngd-lite").param_groups[0]
    assert (lite["rank"], lite["history"]) == (1 / 16, 8)
    assert rsngd.create_optimizer(Block().named_parameters(), "rsngd-subspace").param_groups[0]["residual"] == "none"
    momentum, rest, _ = rsngd.create_optimizer(Block().named_parameters(), "rsngd-momentum").param_groups
    assert (momentum["residual_momentum"], momentum["residual_bits"], momentum["residual_scale"]) == (0.95, 8, 1.0)
    assert rest["adamw_state"] == "light"


def test_moved_settings_are_refused_with_where_they_went():
    p = nn.Parameter(torch.randn(6, 6))
    with pytest.raises(TypeError, match="unexpected keyword argument 'core_beta2'"):
        RSNGD([p], core_beta2=0.9)
    with pytest.raises(ValueError, match=r"rsngd\.ablations\.AblationRSNGD"):
        RSNGD([{"params": [p], "normalize": "none"}])
    with pytest.raises(ValueError, match=r"rsngd\.ablations\.AblationRSNGD"):
        RSNGD([p], residual="sign")
    with pytest.raises(TypeError, match="unexpected keyword argument 'rnak'"):
        RSNGD([p], rnak=3)
    from rsngd.ablations import AblationRSNGD

    assert AblationRSNGD([p], core_beta2=0.9, residual="sign").param_groups[0]["core_beta2"] == 0.9
    # The factory builds the ablation class for an ablation setting (the benchmark's natural-galore).
    opt = rsngd.create_optimizer(Block().named_parameters(), "rsngd", projection="svd", fisher="tensor")
    assert isinstance(opt, AblationRSNGD)


def test_a_fractional_rank_is_a_share_of_the_smallest_side():
    from rsngd.projection import clamp_ranks

    assert clamp_ranks((256, 688), 1 / 8) == [32, 32]
    assert clamp_ranks((5, 2, 9), 0.5) == [1, 1, 1]
    with pytest.raises(ValueError, match="rank must be an integer or a fraction"):
        RSNGD([nn.Parameter(torch.randn(4, 4))], rank=1.5)


def test_adamw_from_the_factory_equals_torch_adamw():
    torch.manual_seed(0)
    a, b = Block(), Block()
    b.load_state_dict(a.state_dict())
    made = rsngd.create_optimizer(a.named_parameters(), "adamw", lr=0.01)
    assert torch.equal(train(made, a), train(torch.optim.AdamW(b.parameters(), lr=0.01, weight_decay=0.0), b))
    decayed = rsngd.create_optimizer(a.named_parameters(), "adamw", lr=0.01, weight_decay=0.1, adamw_lr=0.003)
    assert [(g["lr"], g["weight_decay"]) for g in decayed.param_groups] == [(0.01, 0.1), (0.003, 0.1), (0.003, 0.0)]


def test_a_registered_baseline_is_built_from_the_same_split():
    """A baseline is one registered builder: it gets the projected matrices and the AdamW groups every method
    gets, and create_optimizer knows its name."""
    from rsngd.factory import BASELINES, baseline

    seen = {}

    @baseline("sgd-test")
    def _sgd(split, hp):
        seen["split"] = split
        return torch.optim.SGD([{"params": split.projected, "lr": split.lr}, *split.rest()], lr=split.lr, **hp)

    try:
        opt = rsngd.create_optimizer(Block().named_parameters(), "sgd-test", lr=0.1, adamw_lr=0.01, momentum=0.5)
    finally:
        del BASELINES["sgd-test"]
    split = seen["split"]
    proj, other, flat = rsngd.split_parameters(Block().named_parameters())
    assert [p.shape for p in split.projected] == [p.shape for p in proj]
    assert [p.shape for p in split.other + split.flat] == [p.shape for p in other + flat]
    assert [g["lr"] for g in opt.param_groups] == [0.1] + [0.01] * len(split.rest())
    assert opt.param_groups[0]["momentum"] == 0.5


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'sgdx'"):
        rsngd.create_optimizer(Block().named_parameters(), "sgdx")


def test_schedule_warms_up_then_follows_a_cosine_to_the_floor():
    steps, warm = 100, 10
    f = [rsngd.lr_factor(s, steps, warmup=0.1, min_ratio=0.1) for s in range(steps)]
    assert f[:warm] == pytest.approx([(s + 1) / warm for s in range(warm)])
    for s in range(warm, steps):
        t = (s - warm) / (steps - warm)
        assert f[s] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))
    assert rsngd.lr_factor(steps + 5, steps) == pytest.approx(0.1)  # past the end: the floor
    p = nn.Parameter(torch.randn(3))
    opt = torch.optim.SGD([{"params": [p], "lr": 0.5}], lr=0.5)
    sched = rsngd.warmup_cosine(opt, steps)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5 * x for x in f])


def test_param_groups_split_a_llama():
    model = tiny_llama()
    groups = rsngd.param_groups(model, rank=32, weight_decay=0.1, history=6)
    names = {id(p): n for n, p in model.named_parameters()}
    proj, other, flat = groups
    assert proj["rank"] == 32 and proj["history"] == 6 and proj["weight_decay"] == 0.1
    assert all(("self_attn" in names[id(p)] or "mlp" in names[id(p)]) and p.dim() == 2 for p in proj["params"])
    assert {names[id(p)] for p in other["params"]} == {"model.embed_tokens.weight", "lm_head.weight"}
    assert other["rank"] is None and flat["rank"] is None and flat["weight_decay"] == 0.0
    assert all(p.dim() == 1 for p in flat["params"])
    total = sum(len(g["params"]) for g in groups)
    assert total == len(list(model.parameters()))


def test_adam_mini_gives_the_non_projected_tensors_adamw_lr():
    pytest.importorskip("adam_mini")
    model = Block()
    opt = rsngd.create_optimizer(model.named_parameters(), "adam-mini", lr=0.001, adamw_lr=0.01, dim=16, n_heads=2)
    proj = {id(p) for p in rsngd.split_parameters(model.named_parameters())[0]}
    lrs = {(any(id(p) in proj for p in g["params"]), g["lr"]) for g in opt.param_groups}
    assert lrs == {(True, 0.001), (False, 0.01)}


def test_the_default_recipe_keeps_the_whole_models_state_small():
    """The recipe's embeddings and head in the light AdamW state: on an embedding-heavy LLaMA (vocabulary 2048,
    hidden 64) the whole optimizer state is under a fifth of AdamW's, where full AdamW moments for them would make
    it most of AdamW's."""
    model = tiny_llama(vocab=2048)
    x = torch.randint(0, 2048, (2, 16))
    model(input_ids=x, labels=x).loss.backward()
    sizes = {}
    for label, kw in (("adamw", {"name": "adamw"}), ("rsngd", {}), ("full", {"adamw_state": "full"})):
        opt = rsngd.create_optimizer(model.named_parameters(), **kw)
        opt.step()
        sizes[label] = rsngd.optimizer_state_bytes(opt)
    assert sizes["rsngd"] < 0.2 * sizes["adamw"]
    assert sizes["full"] > 0.6 * sizes["adamw"]
