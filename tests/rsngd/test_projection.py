import pytest
import torch

from rsngd.projection import (
    change_basis,
    clamp_ranks,
    core_shape,
    mix_seed,
    project,
    project_back,
    random_factors,
    svd_factors,
)


def assert_orthonormal(u: torch.Tensor) -> None:
    eye = torch.eye(u.shape[1], dtype=u.dtype)
    torch.testing.assert_close(u.T @ u, eye, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape,rank", [((64, 48), 8), ((30, 100), 16), ((16, 8, 3, 3), 4), ((5, 7), (2, 3))])
def test_random_factors_orthonormal_and_deterministic(shape, rank):
    ranks = clamp_ranks(shape, rank)
    f1 = random_factors(shape, ranks, seed=7)
    f2 = random_factors(shape, ranks, seed=7)
    f3 = random_factors(shape, ranks, seed=8)
    for n, r, a, b, c in zip(shape, ranks, f1, f2, f3):
        if r >= n:
            assert a is None and b is None and c is None
            continue
        assert a.shape == (n, r)
        assert_orthonormal(a)
        assert torch.equal(a, b)
        assert not torch.allclose(a, c)


def test_clamp_ranks():
    assert clamp_ranks((10, 3, 3), 4) == [4, 3, 3]
    assert clamp_ranks((10, 20), (2, 50)) == [2, 20]
    with pytest.raises(ValueError):
        clamp_ranks((10,), 4)
    with pytest.raises(ValueError):
        clamp_ranks((10, 10), (1, 2, 3))
    with pytest.raises(ValueError):
        clamp_ranks((10, 10), 0)


@pytest.mark.parametrize("shape,rank", [((40, 24), 6), ((12, 10, 3, 3), 5), ((9, 8, 7), (3, 2, 4))])
def test_tensor_in_subspace_survives_round_trip(gen, shape, rank):
    ranks = clamp_ranks(shape, rank)
    factors = random_factors(shape, ranks, seed=3)
    core = torch.randn(*core_shape(shape, factors), generator=gen)
    x = project_back(core, factors)  # lies in the subspace by construction
    assert x.shape == torch.Size(shape)
    torch.testing.assert_close(project(x, factors), core, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(project_back(project(x, factors), factors), x, atol=1e-5, rtol=1e-5)


def test_projection_is_the_orthogonal_projector_for_a_matrix(gen):
    g = torch.randn(20, 15, generator=gen, dtype=torch.float64)
    u1, u2 = (f.double() for f in random_factors(g.shape, [4, 5], seed=1))
    torch.testing.assert_close(project(g, [u1, u2]), u1.T @ g @ u2)
    torch.testing.assert_close(project_back(project(g, [u1, u2]), [u1, u2]), u1 @ u1.T @ g @ u2 @ u2.T)


def test_svd_factors_capture_a_low_rank_gradient(gen):
    a = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(3, 25, generator=gen, dtype=torch.float64)
    g = a @ b
    factors = svd_factors(g, [3, 3])
    for u in factors:
        assert_orthonormal(u.float())
    torch.testing.assert_close(project_back(project(g, factors), factors), g)


def test_hosvd_on_a_4d_tensor_with_low_multilinear_rank(gen):
    core = torch.randn(2, 3, 2, 2, generator=gen, dtype=torch.float64)
    mats = [
        torch.linalg.qr(torch.randn(n, r, generator=gen, dtype=torch.float64))[0]
        for n, r in zip((10, 9, 3, 3), (2, 3, 2, 2))
    ]
    g = project_back(core, mats)
    factors = svd_factors(g, clamp_ranks(g.shape, (2, 3, 2, 2)))
    torch.testing.assert_close(project_back(project(g, factors), factors), g)


def test_change_basis_equals_reprojecting(gen):
    shape = (24, 18)
    old = random_factors(shape, [5, 4], seed=11)
    new = random_factors(shape, [5, 4], seed=12)
    cores = torch.randn(6, 5, 4, generator=gen)  # a history of 6 cores
    carried = change_basis(cores, old, new, batch_dims=1)
    expected = torch.stack([project(project_back(c, old), new) for c in cores])
    torch.testing.assert_close(carried, expected, atol=1e-5, rtol=1e-5)


def test_identity_modes_are_kept_whole(gen):
    shape = (16, 6, 3, 3)
    factors = random_factors(shape, clamp_ranks(shape, 4), seed=0)
    assert [f is None for f in factors] == [False, False, True, True]
    g = torch.randn(shape, generator=gen)
    assert project(g, factors).shape == (4, 4, 3, 3)


def test_mix_seed_is_deterministic_and_spreads():
    assert mix_seed(1, 2, 3) == mix_seed(1, 2, 3)
    seeds = {mix_seed(0, pid, r) for pid in range(50) for r in range(20)}
    assert len(seeds) == 1000
    assert all(0 <= s < 2**63 for s in seeds)


# ------------------------------------------------------------- counter-based factors, shards
def _splitmix_ref(x: int) -> int:
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_counter_normal_is_splitmix_box_muller_exactly():
    import math

    from rsngd.projection import counter_normal

    z = counter_normal(3, 5, seed=42)
    key = mix_seed(42) & ((1 << 63) - 1)
    flat = z.reshape(-1).tolist()
    for j in range(7):  # 15 numbers from 8 counters
        bits = _splitmix_ref(j ^ key)
        u1 = ((bits >> 32) + 0.5) * 2.0**-32
        u2 = ((bits & 0xFFFFFFFF) + 0.5) * 2.0**-32
        radius = math.sqrt(-2 * math.log(u1))
        assert flat[2 * j] == pytest.approx(radius * math.cos(2 * math.pi * u2), rel=1e-14, abs=1e-14)
        assert flat[2 * j + 1] == pytest.approx(radius * math.sin(2 * math.pi * u2), rel=1e-14, abs=1e-14)


def test_counter_normal_looks_standard_normal():
    from rsngd.projection import counter_normal

    z = counter_normal(400, 500, seed=3)
    assert abs(z.mean().item()) < 0.01
    assert abs(z.var().item() - 1) < 0.01
    assert abs((z**4).mean().item() - 3) < 0.05
    assert abs((z[:, :-1] * z[:, 1:]).mean().item()) < 0.01  # neighbours (same counter) uncorrelated
    assert not torch.equal(counter_normal(4, 4, seed=4), counter_normal(4, 4, seed=5))


@pytest.mark.parametrize("shape,rank", [((9, 7), 3), ((5, 2, 9), 3), ((2, 10), 3), ((13, 7), 3)])
def test_shards_projections_sum_to_the_whole(shape, rank):
    """Rows split among 'ranks' (as FSDP2's Shard(0), uneven, one possibly empty): the shards' cores sum to
    the whole core, and the back-projections stack to the whole back-projection."""
    from rsngd.projection import project_back_local, project_local, slice_factors

    gen = torch.Generator().manual_seed(0)
    g = torch.randn(*shape, generator=gen, dtype=torch.float64)
    full = random_factors(shape, clamp_ranks(shape, rank), seed=1, dtype=torch.float64)
    core = project(g, full)
    back = project_back(core, full)
    for parts in (2, 3, 4):
        bounds = torch.tensor_split(torch.arange(shape[0]), parts)
        total = torch.zeros_like(core)
        rows = []
        for idx in bounds:
            o, n = (int(idx[0]), len(idx)) if len(idx) else (0, 0)
            offsets = (o,) + (0,) * (len(shape) - 1)
            local_shape = (n, *shape[1:])
            f = slice_factors(full, offsets, local_shape)
            total += project_local(g[o : o + n], f, offsets, shape)
            rows.append(project_back_local(core, f, offsets, local_shape))
        torch.testing.assert_close(total, core, atol=1e-12, rtol=0)
        torch.testing.assert_close(torch.cat(rows), back, atol=1e-12, rtol=0)


# ------------------------------------------------------------- the step's drawing: matmuls only, keys on the device
def test_orthonormalize_is_the_householder_q_with_a_positive_diagonal(gen):
    """Cholesky QR gives the Q of Householder's QR once R's diagonal is made positive (float64, to rounding); in
    float32 one pass leaves Q orthonormal to about 1e-6, two passes to the dtype's rounding."""
    from rsngd.projection import orthonormalize

    z = torch.randn(3, 50, 12, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(z)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    torch.testing.assert_close(orthonormalize(z), q, atol=1e-11, rtol=0)
    eye = torch.eye(12)
    for passes, tol in ((1, 1e-5), (2, 1e-6)):
        got = orthonormalize(z.float(), passes)
        assert (got.mT @ got - eye).abs().max() < tol


def test_the_narrow_orthonormalisation_is_the_float32_one_rounded():
    """Factors wanted in bfloat16 (a GPU step's) orthonormalised with bfloat16 matmuls: within two bfloat16 roundings
    of the float32 Cholesky QR's Q rounded, entry by entry (an entry smaller than the columns' RMS counted at it), and
    as orthonormal as that rounded Q (to 20 %)."""
    from rsngd.projection import counter_normal, orthonormalize, orthonormalize_narrow

    z = torch.stack([counter_normal(1024, 128, seed) for seed in (1, 2)]).float()
    wide = orthonormalize(z, 1).to(torch.bfloat16)
    narrow = orthonormalize_narrow(z, torch.bfloat16)
    assert narrow.dtype == torch.bfloat16 and narrow.shape == z.shape
    ulp = 2.0**-8 * wide.float().abs().clamp_min(z.shape[-2] ** -0.5)
    assert ((narrow.float() - wide.float()).abs() <= 2 * ulp).all()

    def off(q: torch.Tensor) -> float:
        g = q.double().mT @ q.double()
        return (g - torch.eye(g.shape[-1], dtype=g.dtype)).abs().max().item()

    assert off(narrow) < 1.2 * off(wide) and off(narrow) < 2e-3


def test_bfloat16_factors_are_drawn_narrow_and_agree_with_float32_ones():
    """A step whose matmuls run in bfloat16 draws its factors with the narrow orthonormalisation (``subspaces.NARROW``);
    they agree with the float32 step's factors to bfloat16's rounding."""
    from rsngd import RSNGD, subspaces

    p = torch.nn.Parameter(torch.randn(96, 160))
    p.grad = torch.randn(96, 160)
    opt = RSNGD([p], rank=16, residual="none", precision="bfloat16")
    opt.step()
    group, state, space = opt.param_groups[0], opt.state[p], opt._space
    lay = opt._layout_of(p)
    narrow = space.local(p, group, lay, p.device, torch.bfloat16)
    wide = space.full(p, group, state, p.device)
    for a, b in zip(narrow, wide):
        assert a.dtype == torch.bfloat16
        assert (a.float() - b).abs().max() <= 2.0**-7 * b.abs().max()
    subspaces.NARROW = False
    try:
        rounded = space.local(p, group, lay, p.device, torch.bfloat16)
    finally:
        subspaces.NARROW = True
    assert any(not torch.equal(a, b) for a, b in zip(narrow, rounded))


def test_keyed_normal_draws_counter_normal_for_a_batch_of_tensors_and_modes():
    """One draw for B tensors and all their modes gives, for each, exactly the numbers of its own counter draw."""
    from rsngd.projection import counter_normal, factor_key, keyed_normal

    seeds = [3, 11, 12]
    sizes = [(7, 3), (5, 2), (9, 4)]
    keys = torch.tensor([[factor_key(s, m) for m in range(3)] for s in seeds])
    drawn = keyed_normal(sizes, keys, torch.float64)
    for mode, ((n, r), z) in enumerate(zip(sizes, drawn)):
        assert z.shape == (3, n, r)
        for b, seed in enumerate(seeds):
            assert torch.equal(z[b], counter_normal(n, r, mix_seed(seed, mode)))


def test_stacked_projections_equal_the_one_matrix_ones(gen):
    from rsngd.projection import back_stack, project_stack

    g = torch.randn(4, 12, 9, generator=gen, dtype=torch.float64)
    factors = [random_factors((12, 9), (3, 9), seed=s, dtype=torch.float64) for s in range(4)]
    stacked = [torch.stack([f[0] for f in factors]), None]
    cores = project_stack(g, stacked)
    for i in range(4):
        torch.testing.assert_close(cores[i], project(g[i], factors[i]))
    out = g.clone()
    back_stack(cores, stacked, out=out, alpha=-1.0)  # the residuals, in place
    for i in range(4):
        torch.testing.assert_close(out[i], g[i] - project_back(cores[i], factors[i]))
