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
