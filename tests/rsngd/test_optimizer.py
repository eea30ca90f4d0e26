import io
import itertools

import pytest
import torch

import rsngd
from rsngd import RSNGD, natural_gradient
from rsngd.ablations import AblationRSNGD
from rsngd.projection import project, project_back, random_factors


def quadratic(gen: torch.Generator, n: int = 20, m: int = 16):
    """0.5‖A W B − C‖² with a known minimiser (loss 0 at W*)."""
    A = torch.randn(30, n, generator=gen) / 30**0.5
    B = torch.randn(m, 24, generator=gen) / m**0.5
    C = A @ torch.randn(n, m, generator=gen) @ B
    return lambda W: 0.5 * (A @ W @ B - C).pow(2).sum()


def run(opt, params, loss_fn, steps, cosine=True):
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps) if cosine else None
    losses = []
    for _ in range(steps):
        loss = loss_fn(*params)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.item())
    return losses


# ------------------------------------------------------------------ the math of one step
def test_step_is_the_projected_natural_gradient(gen):
    """momentum 0, no normalisation, absolute damping: Δp = −lr · P_back(F⁻¹ P(g)), F from the history."""
    W = torch.nn.Parameter(torch.randn(12, 10, generator=gen, dtype=torch.float64))
    lr, lam = 0.1, 0.05
    opt = AblationRSNGD(
        [W],
        residual="none",
        lr=lr,
        rank=4,
        history=3,
        damping=lam,
        damping_mode="absolute",
        momentum=0.0,
        normalize="none",
        update_gap=1000,
    )
    targets = torch.randn(5, 12, 10, generator=gen, dtype=torch.float64)
    cores = []
    for t in range(5):
        loss = (W * targets[t]).sum() + 0.5 * W.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        before = W.detach().clone()
        opt.step()
        factors = random_factors(W.shape, [4, 4], opt.state[W]["seed"], dtype=torch.float64)
        cores.append(project(W.grad, factors).reshape(-1))
        G = torch.stack(cores[-3:], dim=1)  # k × s, newest last
        expected = project_back(natural_gradient(G, cores[-1], lam).view(4, 4), factors)
        torch.testing.assert_close(before - W.detach(), lr * expected, rtol=1e-9, atol=1e-12)


def test_global_fisher_is_one_system_over_all_tensors(gen):
    """fisher='global' equals the natural gradient of the concatenated cores with the stacked history."""
    ps = [
        torch.nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64))
        for shape in [(9, 7), (6, 8), (5, 4, 3)]
    ]
    lam, lr = 0.3, 1.0
    opt = AblationRSNGD(
        ps,
        residual="none",
        lr=lr,
        rank=3,
        history=4,
        damping=lam,
        damping_mode="absolute",
        momentum=0.0,
        normalize="none",
        fisher="global",
    )
    hist = []
    for _ in range(6):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        befores = [p.detach().clone() for p in ps]
        opt.step()
        facs = [
            random_factors(p.shape, [min(3, n) for n in p.shape], opt.state[p]["seed"], dtype=torch.float64) for p in ps
        ]
        cores = [project(p.grad, f).reshape(-1) for p, f in zip(ps, facs)]
        hist.append(torch.cat(cores))
        ng = natural_gradient(torch.stack(hist[-4:], dim=1), hist[-1], lam)
        offset = 0
        for p, f, c, b in zip(ps, facs, cores, befores):
            part = ng[offset : offset + c.numel()]
            offset += c.numel()
            expected = project_back(part.view(project(p.grad, f).shape), f)
            torch.testing.assert_close(b - p.detach(), lr * expected, rtol=1e-9, atol=1e-12)


def test_single_tensor_global_and_tensor_fisher_agree(gen):
    W0 = torch.randn(16, 12, generator=gen)
    grads = torch.randn(8, 16, 12, generator=gen)
    out = []
    for fisher in ("global", "tensor"):
        W = torch.nn.Parameter(W0.clone())
        opt = RSNGD([W], lr=0.01, rank=4, fisher=fisher, update_gap=3)
        for g in grads:
            W.grad = g.clone()
            opt.step()
        out.append(W.detach())
    torch.testing.assert_close(out[0], out[1])


# --------------------------------------------------------------------------- convergence
def test_quadratic_svd_projection_converges(gen):
    loss_fn = quadratic(gen)
    W = torch.nn.Parameter(torch.randn(20, 16, generator=gen))
    # Deterministic gradients are nearly collinear step to step: damping 0.1 rather than the LM default 0.01.
    losses = run(
        AblationRSNGD([W], lr=0.05, rank=6, update_gap=10, projection="svd", damping=0.1, residual="none"),
        [W],
        loss_fn,
        400,
    )
    assert losses[-1] < 1e-2 * losses[0]


@pytest.mark.parametrize("fisher", ["global", "tensor"])
def test_quadratic_random_subspace_with_fira_residual_converges(gen, fisher):
    loss_fn = quadratic(gen)
    W = torch.nn.Parameter(torch.randn(20, 16, generator=gen))
    opt = AblationRSNGD([W], lr=0.05, rank=6, update_gap=10, residual="fira", fisher=fisher)
    losses = run(opt, [W], loss_fn, 400)
    assert losses[-1] < 1e-3 * losses[0]


def test_quadratic_random_subspace_alone_makes_progress(gen):
    # Each random subspace spans 36 of 320 directions: progress is real but slow.
    loss_fn = quadratic(gen)
    W = torch.nn.Parameter(torch.randn(20, 16, generator=gen))
    losses = run(RSNGD([W], lr=0.2, rank=6, update_gap=5, residual="none"), [W], loss_fn, 400)
    assert losses[-1] < 0.2 * losses[0]


@pytest.mark.parametrize("projection", ["random", "svd"])
def test_rosenbrock_reaches_the_minimum(projection):
    x = torch.nn.Parameter(torch.tensor([[-1.5, 2.0]]))

    def rosen(x):
        return ((1 - x[:, 0]) ** 2 + 100 * (x[:, 1] - x[:, 0] ** 2) ** 2).sum()

    losses = run(AblationRSNGD([x], lr=0.02, rank=2, projection=projection), [x], rosen, 2000)
    assert losses[0] > 1.0 and losses[-1] < 1e-4
    torch.testing.assert_close(x.detach(), torch.ones(1, 2), atol=1e-2, rtol=0)


def tiny_llama(seed: int = 0, hidden: int = 64, layers: int = 2, vocab: int = 64, inter: int = 128):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg)


def test_llama_memorises_a_batch(gen):
    model = tiny_llama()
    x = torch.randint(0, 64, (4, 32), generator=gen)
    opt = RSNGD(rsngd.param_groups(model, rank=16), lr=1e-2)
    losses = run(opt, [x], lambda x: model(input_ids=x, labels=x).loss, 120, cosine=False)
    assert losses[0] > 3.5 and losses[-1] < 0.1


# ----------------------------------------------------------------------- state and resume
def train_steps(model, opt, batches):
    for x in batches:
        opt.zero_grad()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()


@pytest.mark.parametrize(
    "projection,fisher,residual,dtype",
    [
        ("random", "global", "none", torch.float32),
        ("svd", "tensor", "fira", torch.float32),
        ("random", "tensor", "sign", torch.float32),
        ("random", "global", "fira", torch.bfloat16),
        ("random", "global", "ortho+momentum", torch.float32),
        ("random", "global", "ortho+q4", torch.float32),
        ("random", "global", "ortho+q8", torch.float32),
    ],
)
def test_state_dict_round_trip_resumes_bit_exactly(gen, tmp_path, projection, fisher, residual, dtype):
    batches = [torch.randint(0, 64, (2, 16), generator=gen) for _ in range(10)]
    kw = dict(rank=8, history=4, update_gap=3, projection=projection, fisher=fisher, residual=residual)
    if residual == "ortho+momentum":
        kw.update(residual="ortho", residual_momentum=0.95, residual_rank=3)
    if residual in ("ortho+q4", "ortho+q8"):  # the whole-size quantised residual momentum, the light AdamW state
        bits = int(residual[-1])
        kw.update(residual="ortho", residual_momentum=0.95, residual_bits=bits, adamw_state="light")

    def make(model):
        return AblationRSNGD(rsngd.param_groups(model.to(dtype), **kw), lr=3e-3)

    ref_model = tiny_llama(seed=1)
    ref_opt = make(ref_model)
    train_steps(ref_model, ref_opt, batches)

    model = tiny_llama(seed=1)
    opt = make(model)
    train_steps(model, opt, batches[:5])
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed = tiny_llama(seed=2)  # different init: everything must come from the checkpoint
    resumed.to(dtype).load_state_dict(ckpt["model"])
    resumed_opt = make(resumed)
    resumed_opt.load_state_dict(ckpt["opt"])
    train_steps(resumed, resumed_opt, batches[5:])

    for a, b in zip(ref_model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    for pa, pb in zip(ref_model.parameters(), resumed.parameters()):
        sa, sb = ref_opt.state[pa], resumed_opt.state[pb]
        assert sa.keys() == sb.keys()
        for key in sa:
            if torch.is_tensor(sa[key]):
                assert sa[key].dtype == sb[key].dtype and torch.equal(sa[key], sb[key]), key
            else:
                assert sa[key] == sb[key], key


def test_state_is_tensors_and_numbers_only_and_fp32_for_bf16(gen):
    model = tiny_llama().to(torch.bfloat16)
    opt = AblationRSNGD(rsngd.param_groups(model, rank=8, projection="svd"), lr=1e-3)
    train_steps(model, opt, [torch.randint(0, 64, (2, 16), generator=gen)])
    for state in opt.state.values():
        for value in state.values():
            assert torch.is_tensor(value) or isinstance(value, (int, float))
            if torch.is_tensor(value) and value.is_floating_point():
                assert value.dtype == torch.float32
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    torch.load(buf, weights_only=True)


# ---------------------------------------------------------------------- subspace changes
@pytest.mark.parametrize("projection", ["random", "svd"])
def test_history_is_carried_into_the_new_subspace(gen, projection):
    W = torch.nn.Parameter(torch.randn(14, 11, generator=gen))
    opt = AblationRSNGD([W], lr=1e-3, rank=3, history=3, update_gap=4, projection=projection)
    grads = [torch.randn(14, 11, generator=gen) for _ in range(5)]

    def factors():
        st = opt.state[W]
        if projection == "random":
            return random_factors(W.shape, [3, 3], st["seed"])
        return [st["U0"], st["U1"]]

    for g in grads[:4]:
        W.grad = g.clone()
        opt.step()
    old = factors()
    W.grad = grads[4].clone()
    opt.step()  # the 5th step renews the subspace
    new = factors()
    assert opt.state[W]["renewals"] == 1
    assert not torch.allclose(old[0], new[0])
    hist = opt.state[W]["hist"].view(3, 3, 3)
    for row, g in zip(hist[:2], grads[2:4]):
        expected = project(project_back(project(g, old), old), new)  # the old projection, re-expressed
        torch.testing.assert_close(row, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hist[2], project(grads[4], new), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- robustness
@pytest.mark.parametrize(
    "fisher,residual",
    [("global", {}), ("tensor", {}), ("global", {"residual": "ortho", "residual_momentum": 0.9})],
)
def test_nan_gradient_is_skipped_and_counted(gen, fisher, residual):
    model = tiny_llama()
    opt = RSNGD(rsngd.param_groups(model, rank=8, fisher=fisher, **residual), lr=1e-3)
    x = torch.randint(0, 64, (2, 16), generator=gen)
    train_steps(model, opt, [x, x])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state_before = {id(p): {k: v.clone() for k, v in st.items() if torch.is_tensor(v)} for p, st in opt.state.items()}
    opt.zero_grad()
    model(input_ids=x, labels=x).loss.backward()
    bad = model.model.layers[0].self_attn.q_proj.weight
    bad.grad[0, 0] = float("nan")
    bad.grad[1, 1] = float("inf")
    opt.step()
    assert opt.nonfinite_steps == 1
    # The whole step is skipped, whatever the Fisher: no parameter, moment or history changes.
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    for p, st in opt.state.items():
        for k, v in state_before[id(p)].items():
            assert torch.equal(st[k], v), k
    train_steps(model, opt, [x])  # and training goes on
    assert opt.nonfinite_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_zero_and_missing_gradients(gen):
    a = torch.nn.Parameter(torch.randn(8, 6, generator=gen))
    b = torch.nn.Parameter(torch.randn(5, 7, generator=gen))
    c = torch.nn.Parameter(torch.randn(7, generator=gen))
    opt = RSNGD([a, b, c], lr=0.1, rank=3, weight_decay=0.0)
    a0, b0 = a.detach().clone(), b.detach().clone()
    a.grad = torch.zeros_like(a)  # zero gradient: no movement, no NaN
    opt.step()  # b and c have no gradient at all
    assert torch.equal(a, a0) and torch.equal(b, b0)
    b.grad = torch.randn(5, 7, generator=gen)
    a.grad = None
    opt.step()
    assert torch.equal(a, a0) and not torch.equal(b, b0)
    assert opt.state[a]["hist"][-1].abs().sum() == 0  # a's window advanced with a zero row
    assert all(torch.isfinite(t).all() for st in opt.state.values() for t in st.values() if torch.is_tensor(t))


def test_rank_larger_than_dims_is_clamped(gen):
    W = torch.nn.Parameter(torch.randn(3, 40, generator=gen))
    conv = torch.nn.Parameter(torch.randn(8, 4, 3, 3, generator=gen))
    opt = RSNGD([W, conv], lr=0.01, rank=16)
    W.grad = torch.randn_like(W)
    conv.grad = torch.randn_like(conv)
    opt.step()
    assert opt.state[W]["hist"].shape == (10, 3 * 16)
    assert opt.state[conv]["hist"].shape == (10, 8 * 4 * 3 * 3)


def test_closure_and_several_groups(gen):
    w1 = torch.nn.Parameter(torch.randn(10, 8, generator=gen))
    w2 = torch.nn.Parameter(torch.randn(10, 8, generator=gen))
    bias = torch.nn.Parameter(torch.randn(8, generator=gen))
    opt = RSNGD(
        [{"params": [w1], "lr": 0.1}, {"params": [w2], "lr": 0.0}, {"params": [bias], "rank": None}], rank=4, lr=0.05
    )
    w2_0 = w2.detach().clone()

    def closure():
        opt.zero_grad()
        loss = (w1.sum(0) + w2.sum(0) + bias).pow(2).sum()
        loss.backward()
        return loss

    first = opt.step(closure).item()
    for _ in range(30):
        last = opt.step(closure).item()
    assert last < first
    assert torch.equal(w2, w2_0)  # lr 0 in its group
    assert "exp_avg" in opt.state[bias] and "hist" in opt.state[w1]


def test_sparse_gradients_raise():
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = RSNGD(emb.parameters(), lr=0.1, rank=2)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


@pytest.mark.parametrize(
    "kw",
    [
        dict(projection="qr"),
        dict(fisher="layer"),
        dict(residual="adam"),
        dict(damping=0.0),
        dict(history=0),
        dict(momentum=1.0),
        dict(rank=0),
        dict(update_gap=0),
        dict(normalize="l2"),
        dict(lr=-1.0),
    ],
)
def test_bad_hyperparameters_raise(kw):
    with pytest.raises(ValueError):
        AblationRSNGD([torch.nn.Parameter(torch.randn(4, 4))], **{"rank": 2, **kw})


def test_global_groups_must_share_the_system_settings():
    a, b = (torch.nn.Parameter(torch.randn(4, 4)) for _ in range(2))
    with pytest.raises(ValueError, match="history"):
        RSNGD([{"params": [a], "history": 4}, {"params": [b], "history": 8}], rank=2)
    RSNGD([{"params": [a], "history": 4, "fisher": "tensor"}, {"params": [b], "history": 8}], rank=2)


# -------------------------------------------------------------------------------- memory
def test_projected_state_is_a_small_fraction_of_adamw():
    """LLaMA-shaped (hidden 512, 4 layers), rank 64, history 10: ≤ 10 % of AdamW (goal ≤ 5 %)."""
    model = tiny_llama(hidden=512, layers=4, vocab=256, inter=1376)
    groups = rsngd.param_groups(model, rank=64, history=10)
    projected = groups[0]["params"]
    assert len(projected) == 4 * 7
    x = torch.randint(0, 256, (1, 8))
    model(input_ids=x, labels=x).loss.backward()
    opt = RSNGD(groups, lr=1e-3)
    opt.step()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    adamw.step()
    ours = rsngd.optimizer_state_bytes(opt, projected)
    theirs = rsngd.optimizer_state_bytes(adamw, projected)
    assert theirs == sum(2 * p.numel() * 4 + 4 for p in projected)  # exp_avg, exp_avg_sq, step
    assert ours / theirs <= 0.05


# --------------------------------------------------------------------------------- groups
def test_optimizer_state_bytes_counts_objects_and_views_once():
    class Projector:
        def __init__(self):
            self.ortho = torch.zeros(10, 3)

    p = torch.nn.Parameter(torch.randn(4))
    opt = torch.optim.SGD([p], lr=0.1)
    buf = torch.zeros(100)
    opt.state[p] = {
        "projector": Projector(),
        "a": buf,
        "b": buf[:10],
        "n": 3,
        "list": [torch.zeros(2, dtype=torch.int64)],
    }
    assert rsngd.optimizer_state_bytes(opt) == 10 * 3 * 4 + 100 * 4 + 2 * 8
    assert rsngd.optimizer_state_bytes(opt, logical=True) == 10 * 3 * 4 + 100 * 4 + 10 * 4 + 2 * 8
    opt.state[p] = {"small_view": torch.zeros(50, 50)[:2]}  # the view keeps all 2,500 floats alive
    assert rsngd.optimizer_state_bytes(opt) == 2500 * 4
    assert rsngd.optimizer_state_bytes(opt, logical=True) == 100 * 4


def test_works_with_lr_schedulers_and_itertools(gen):
    W = torch.nn.Parameter(torch.randn(6, 6, generator=gen))
    opt = RSNGD(itertools.chain([W]), lr=0.1, rank=2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5**s)
    W.grad = torch.randn(6, 6, generator=gen)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("eps", 0.0, "eps"),
        ("betas", (1.0, 0.999), r"betas\[0\]"),
        ("betas", (0.9, float("nan")), r"betas\[1\]"),
        ("rank", 4.0, "rank"),
        ("rank", True, "rank"),
        ("rank", (4, 0), "rank"),
        ("history", 2.5, "history"),
        ("history", 0, "history"),
        ("update_gap", True, "update_gap"),
        ("lr", float("inf"), "lr"),
        ("momentum", 1.0, "momentum"),
        ("damping", 0.0, "damping"),
        ("scale", -1.0, "scale"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(option, value, named):
    params = [torch.nn.Parameter(torch.randn(8, 6))]
    kwargs = {"rank": 2, option: value}
    with pytest.raises(ValueError, match=rf"^{named} must"):
        RSNGD(params, **kwargs)


def test_arguments_at_their_limits_are_accepted():
    w = torch.nn.Parameter(torch.randn(8, 6, generator=torch.Generator().manual_seed(0)))
    opt = RSNGD([w], rank=(2, 3), history=1, betas=(0.0, 0.0), eps=1e-12, momentum=0.0, lr=0.0)
    w.grad = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    opt.step()
    assert torch.isfinite(w).all()


# ------------------------------------------------------------------- seeds, renewals, cache, syncs
def test_seeds_come_from_names_whatever_the_wrapper():
    from rsngd.subspaces import name_key

    assert name_key("module.layers.0.q.weight") == name_key("layers.0.q.weight")
    assert name_key("_orig_mod.layers.0.q.weight") == name_key("layers.0.q.weight")
    assert name_key("layers.0.q.weight") != name_key("layers.1.q.weight")
    a, b = tiny_llama(), tiny_llama()
    opt_a = rsngd.create_optimizer(a.named_parameters(), "rsngd", lr=1e-3, rank=4)
    # b's parameters in another order and without names, tagged instead (as inside ZeRO)
    rsngd.tag_parameter_names(b)
    opt_b = RSNGD(list(reversed([p for _, p in b.named_parameters() if p.dim() >= 2])), lr=1e-3, rank=4)
    x = torch.randint(0, 64, (2, 16))
    for model, opt in ((a, opt_a), (b, opt_b)):
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
    seeds_a = {n: opt_a.state[p]["seed"] for n, p in a.named_parameters() if "seed" in opt_a.state[p]}
    seeds_b = {n: opt_b.state[p]["seed"] for n, p in b.named_parameters() if "seed" in opt_b.state[p]}
    assert len(seeds_a) == 14 and seeds_a == {n: seeds_b[n] for n in seeds_a}


@pytest.mark.parametrize("stagger", [True, False])
def test_renewals_are_spread_over_the_gap(gen, stagger):
    params = [torch.nn.Parameter(torch.randn(12, 10, generator=gen)) for _ in range(8)]
    opt = RSNGD(params, lr=1e-3, rank=3, update_gap=4, stagger_renewals=stagger)
    per_step = []
    for _ in range(13):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        before = [opt.state[p].get("renewals", 0) for p in params]
        opt.step()
        per_step.append(sum(opt.state[p]["renewals"] - b for p, b in zip(params, before)))
    assert sum(per_step) == 8 * 3  # each tensor renews every 4 steps in 13 steps: 3 times
    if stagger:
        assert max(per_step) == 2  # 8 tensors over 4 phases
    else:
        assert per_step[4] == per_step[8] == per_step[12] == 8


def test_cached_factors_give_the_same_steps(gen):
    def train(cache):
        g = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in [(12, 10), (6, 5, 4), (9,)]]
        opt = RSNGD(params, lr=1e-2, rank=3, update_gap=3, cache_factors=cache)
        for _ in range(8):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()
        return params, opt

    plain, opt_plain = train(False)
    cached, opt_cached = train(True)
    for a, b in zip(plain, cached):
        assert torch.equal(a, b)
    assert opt_plain.factor_cache_bytes() == 0
    assert opt_cached.factor_cache_bytes() == 4 * (12 * 3 + 10 * 3 + 6 * 3 + 5 * 3 + 4 * 3)


@pytest.mark.parametrize("stateful", [False, True], ids=["recipe", "quantised-states"])
def test_step_makes_no_host_synchronisation(gen, monkeypatch, stateful):
    """Nothing in a step reads a tensor's value on the host (item, tolist, bool, int, float), a renewal and
    a non-finite gradient included: the default residual, and the quantised residual momentum with a matrix in
    the light AdamW state."""
    params = [torch.nn.Parameter(torch.randn(*s, generator=gen)) for s in [(12, 10), (6, 5, 4), (9,), (7, 5)]]
    extra = dict(residual_momentum=0.9, residual_bits=4) if stateful else {}
    groups = [{"params": params[:3]}, {"params": params[3:], "rank": None, "adamw_state": "light"}]
    opt = RSNGD(groups, lr=1e-2, rank=3, update_gap=2, weight_decay=0.1, **extra)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()  # state creation may look at anything once

    def refuse(*_args, **_kw):
        raise AssertionError("host synchronisation in the step")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    for i in range(4):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        if i == 2:
            params[0].grad[0, 0] = float("nan")
        opt.step()
    monkeypatch.undo()
    assert opt.nonfinite_steps == 1


@pytest.mark.parametrize(
    "fisher,accumulation,residual",
    [
        ("global", 1, "none"),
        ("tensor", 1, "none"),
        ("global", 3, "none"),
        ("tensor", 3, "none"),
        ("global", 1, "ortho"),
        ("tensor", 1, "ortho"),
        ("global", 1, "ortho+q8"),
    ],
)
def test_per_layer_steps_equal_the_normal_steps_and_free_gradients(fisher, accumulation, residual):
    """per_layer projects each gradient (and takes the residual step) in its hook: the same parameters as the
    normal step, in float64, with weight decay, and no projected matrix holds its gradient at step time."""

    def train(per_layer):
        torch.manual_seed(0)
        model = tiny_llama().double()
        kw = {"residual": residual}
        if residual == "ortho+q8":  # the rsngd-momentum recipe's 8-bit residual momentum
            kw = {"residual": "ortho", "residual_momentum": 0.95, "residual_bits": 8}
        groups = rsngd.param_groups(model, rank=4, fisher=fisher, update_gap=3, weight_decay=0.1, **kw)
        opt = RSNGD(groups, lr=1e-2, per_layer=per_layer)
        g = torch.Generator().manual_seed(5)
        held = []
        for _ in range(7):
            for _ in range(accumulation):
                x = torch.randint(0, 64, (2, 8), generator=g)
                model(input_ids=x, labels=x).loss.backward()
            held.append(sum(p.grad is not None for p in model.parameters() if p.dim() >= 2))
            opt.step()
            opt.zero_grad()
        return model, held, opt

    normal, held_normal, _ = train(False)
    layered, held_layered, opt = train(True)
    projected = sum(len(g["params"]) for g in opt.param_groups if g["rank"] is not None)
    assert held_layered[0] == held_normal[0] - projected  # projected matrices held no gradient at step time
    moved = max((a - b).abs().max().item() for a, b in zip(normal.parameters(), tiny_llama().double().parameters()))
    assert moved > 1e-3
    for (n, a), b in zip(normal.named_parameters(), layered.parameters()):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=n)


def test_per_layer_with_the_residual_takes_one_backward_per_step():
    model = tiny_llama()
    opt = RSNGD(rsngd.param_groups(model, rank=4), per_layer=True)
    x = torch.randint(0, 64, (2, 8))
    model(input_ids=x, labels=x).loss.backward()
    with pytest.raises(RuntimeError, match="one backward per step"):
        model(input_ids=x, labels=x).loss.backward()
    assert opt.param_groups[0]["residual"] == "ortho"  # the default recipe's residual


def test_per_layer_rejects_residuals():
    W = torch.nn.Parameter(torch.randn(6, 5))
    with pytest.raises(ValueError, match="residual='none' or 'ortho'"):
        AblationRSNGD([W], rank=2, residual="sign", per_layer=True)


def test_per_layer_nan_skips_the_step(gen):
    model = tiny_llama()
    opt = RSNGD(rsngd.param_groups(model, rank=4, residual="none"), lr=1e-2, per_layer=True)
    x = torch.randint(0, 64, (2, 8), generator=gen)
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    opt.zero_grad()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    bad = model.model.layers[0].mlp.up_proj.weight
    handle = bad.register_hook(lambda g: torch.full_like(g, float("nan")))  # runs before the per-layer hook
    model(input_ids=x, labels=x).loss.backward()
    handle.remove()
    opt.step()
    assert opt.nonfinite_steps == 1
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n


def test_core_second_moment_divides_by_adams_denominator_and_restarts_with_the_subspace(gen):
    """core_beta2 (an ablation setting): the normalised F⁻¹m of each step divided by √v̂, v the EMA of its squares
    since the last renewal, checked in float64 against the steps of the same optimizer without it."""
    W = torch.nn.Parameter(torch.randn(9, 7, generator=gen, dtype=torch.float64))
    V = torch.nn.Parameter(W.detach().clone())
    lr, beta2, eps = 0.01, 0.9, 1e-8
    plain = RSNGD([V], lr=lr, rank=3, history=3, update_gap=4, stagger_renewals=False, residual="none")
    adam = AblationRSNGD(
        [W], lr=lr, rank=3, history=3, update_gap=4, stagger_renewals=False, core_beta2=beta2, eps=eps, residual="none"
    )
    v = torch.zeros(9, dtype=torch.float64)
    for step in range(1, 7):
        with torch.no_grad():
            V.copy_(W)  # both start the step from the same point, with the same gradient and history
        g = torch.randn(9, 7, generator=gen, dtype=torch.float64)
        W.grad, V.grad = g.clone(), g.clone()
        before = W.detach().clone()
        plain.step()
        adam.step()
        torch.testing.assert_close(adam.state[W]["hist"], plain.state[V]["hist"], rtol=0, atol=0)
        factors = random_factors(V.shape, [3, 3], plain.state[V]["seed"], dtype=torch.float64)
        u = project((before - V.detach()) / lr, factors).reshape(-1)  # the normalised F⁻¹m of this step
        if step == 5:  # the subspace was renewed before this step (every 4): the moment starts again
            v.zero_()
        t = step if step < 5 else step - 4
        v = beta2 * v + (1 - beta2) * u * u
        expected = before - lr * project_back((u / ((v / (1 - beta2**t)).sqrt() + eps)).view(3, 3), factors)
        torch.testing.assert_close(adam.state[W]["core_v"], v, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(W.detach(), expected, rtol=1e-10, atol=1e-12)
    assert adam.state[W]["renewals"] == 1
    assert "core_v" not in plain.state[V]
    with pytest.raises(ValueError, match="core_beta2"):
        AblationRSNGD([torch.nn.Parameter(torch.randn(3, 3))], rank=2, core_beta2=1.0)


def test_ortho_residual_adds_the_orthogonalised_rest_of_the_gradient(gen):
    """residual="ortho": the plain step plus residual_scale × the polar factor of the part of the gradient outside
    the subspace (rsngd.orthogonal, tested on its own in test_orthogonal.py), √(rows/cols)-scaled for tall
    matrices."""
    from rsngd.orthogonal import ortho_residual

    W = torch.nn.Parameter(torch.randn(20, 12, generator=gen, dtype=torch.float64))
    V = torch.nn.Parameter(W.detach().clone())
    plain = RSNGD([V], lr=0.01, rank=3, history=3, residual="none")
    ortho = RSNGD([W], lr=0.01, rank=3, history=3, residual="ortho", residual_scale=0.5)
    g = torch.randn(20, 12, generator=gen, dtype=torch.float64)
    W.grad, V.grad = g.clone(), g.clone()
    plain.step()
    ortho.step()
    factors = random_factors(W.shape, [3, 3], ortho.state[W]["seed"], dtype=torch.float64)
    rest = g - project_back(project(g, factors), factors)
    torch.testing.assert_close((V - W).detach() / 0.01, 0.5 * ortho_residual(rest), rtol=1e-9, atol=1e-12)
    assert ortho_residual(rest).norm() > 0.5 * min(rest.shape) ** 0.5 * (20 / 12) ** 0.5


def test_residual_momentum_orthogonalises_the_nesterov_momentum_of_the_residual(gen):
    """residual_momentum at a rank that holds the whole matrix is Muon's Nesterov momentum of the residual
    (checked in float64 against a full buffer); at a lower rank its state is two thin factors."""
    from rsngd.orthogonal import ortho_residual

    beta, lr = 0.9, 0.01
    W = torch.nn.Parameter(torch.randn(10, 6, generator=gen, dtype=torch.float64))
    opt = AblationRSNGD(
        [W],
        lr=lr,
        rank=2,
        history=3,
        update_gap=100,
        residual="ortho",
        residual_momentum=beta,
        residual_rank=6,
        residual_scale=1.0,
    )
    plain = RSNGD([torch.nn.Parameter(W.detach().clone())], lr=lr, rank=2, history=3, update_gap=100, residual="none")
    (V,) = plain.param_groups[0]["params"]
    buf = torch.zeros(10, 6, dtype=torch.float64)
    for _ in range(4):
        with torch.no_grad():
            V.copy_(W)
        g = torch.randn(10, 6, generator=gen, dtype=torch.float64)
        W.grad, V.grad = g.clone(), g.clone()
        before = W.detach().clone()
        opt.step()
        plain.step()
        factors = random_factors(W.shape, [2, 2], opt.state[W]["seed"], dtype=torch.float64)
        rest = g - project_back(project(g, factors), factors)
        buf = beta * buf + (1 - beta) * rest
        nesterov = (1 - beta) * rest + beta * buf
        torch.testing.assert_close((V - W).detach() / lr, ortho_residual(nesterov), rtol=1e-7, atol=1e-9)
        state = opt.state[W]
        torch.testing.assert_close(state["res_basis"] @ state["res_coef"].T, buf, rtol=1e-9, atol=1e-12)
        assert not torch.equal(W.detach(), before)

    thin = AblationRSNGD(
        [torch.nn.Parameter(torch.randn(10, 6, generator=gen))],
        rank=2,
        residual="ortho",
        residual_momentum=0.95,
        residual_rank=2,
    )
    (X,) = thin.param_groups[0]["params"]
    X.grad = torch.randn(10, 6, generator=gen)
    thin.step()
    assert thin.state[X]["res_basis"].shape == (10, 2) and thin.state[X]["res_coef"].shape == (6, 2)
    with pytest.raises(ValueError, match="residual_momentum needs residual='ortho'"):
        RSNGD([X], rank=2, residual="none", residual_momentum=0.9)
    with pytest.raises(ValueError, match="residual_momentum must be in"):
        RSNGD([X], rank=2, residual="ortho", residual_momentum=1.0)
    with pytest.raises(ValueError, match="residual_rank"):
        AblationRSNGD([X], rank=2, residual="ortho", residual_momentum=0.9, residual_rank=0)


def test_residual_momentum_on_the_lr_schedule_grows_as_the_lr_falls_below_its_peak(gen):
    """residual_momentum_schedule="lr": the step's β is β · (1 − lr / the largest lr so far), so the residual is
    stateless at the peak (and while the lr climbs) and gains its momentum as the lr decays (float64, full buffer)."""
    from rsngd.orthogonal import ortho_residual

    beta = 0.9
    W = torch.nn.Parameter(torch.randn(10, 6, generator=gen, dtype=torch.float64))
    kw = dict(rank=2, history=3, update_gap=100)
    opt = AblationRSNGD(
        [W],
        residual="ortho",
        residual_scale=1.0,
        residual_momentum=beta,
        residual_rank=6,
        residual_momentum_schedule="lr",
        **kw,
    )
    plain = RSNGD([torch.nn.Parameter(W.detach().clone())], residual="none", **kw)
    (V,) = plain.param_groups[0]["params"]
    buf = torch.zeros(10, 6, dtype=torch.float64)
    peak = 0.0
    for lr in (0.005, 0.01, 0.01, 0.006, 0.002, 0.008):  # a warm-up, the peak, a decay and a rise below the peak
        for o in (opt, plain):
            o.param_groups[0]["lr"] = lr
        with torch.no_grad():
            V.copy_(W)
        g = torch.randn(10, 6, generator=gen, dtype=torch.float64)
        W.grad, V.grad = g.clone(), g.clone()
        opt.step()
        plain.step()
        peak = max(peak, lr)
        b = beta * (1 - lr / peak)
        factors = random_factors(W.shape, [2, 2], opt.state[W]["seed"], dtype=torch.float64)
        rest = g - project_back(project(g, factors), factors)
        buf = b * buf + (1 - b) * rest
        nesterov = (1 - b) * rest + b * buf
        torch.testing.assert_close((V - W).detach() / lr, ortho_residual(nesterov), rtol=1e-7, atol=1e-9)
        if b == 0:  # at the peak the direction is the residual itself, as without a momentum
            torch.testing.assert_close(nesterov, rest)
    assert opt.state[W]["res_lr_peak"] == 0.01
    with pytest.raises(ValueError, match="residual_momentum_schedule must be"):
        AblationRSNGD([W], rank=2, residual="ortho", residual_momentum=0.9, residual_momentum_schedule="cosine")
