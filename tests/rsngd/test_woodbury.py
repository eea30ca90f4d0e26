import pytest
import torch

from rsngd import damped_cholesky_solve, natural_gradient


def direct(G: torch.Tensor, g: torch.Tensor, lam: float) -> torch.Tensor:
    """(λI + GGᵀ)⁻¹ g by a dense float64 solve."""
    G, g = G.double(), g.double()
    return torch.linalg.solve(lam * torch.eye(G.shape[0], dtype=torch.float64) + G @ G.T, g)


@pytest.mark.parametrize("k,s", [(1, 1), (7, 3), (64, 10), (300, 20), (5, 12)])
@pytest.mark.parametrize("lam", [1e-3, 0.1, 10.0])
def test_matches_dense_float64(gen, k, s, lam):
    G = torch.randn(k, s, generator=gen, dtype=torch.float64)
    g = torch.randn(k, generator=gen, dtype=torch.float64)
    ref = direct(G, g, lam)
    out = natural_gradient(G, g, lam)
    assert out.dtype == torch.float64
    assert ((out - ref).norm() / ref.norm()).item() <= 1e-6


def test_empty_history_is_scaled_gradient(gen):
    g = torch.randn(9, generator=gen)
    out = natural_gradient(torch.zeros(9, 0), g, 0.5)
    torch.testing.assert_close(out, g / 0.5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_input_computes_in_float32(gen, dtype):
    G = torch.randn(40, 6, generator=gen).to(dtype)
    g = torch.randn(40, generator=gen).to(dtype)
    out = natural_gradient(G, g, 0.2)
    assert out.dtype == torch.float32
    ref = direct(G.float(), g.float(), 0.2)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-4


def test_rank_deficient_history_stays_finite_and_correct(gen):
    base = torch.randn(50, 2, generator=gen, dtype=torch.float64)
    G = torch.cat([base, base, base[:, :1] * 3.0, torch.zeros(50, 2, dtype=torch.float64)], dim=1)  # rank 2 of 7
    g = torch.randn(50, generator=gen, dtype=torch.float64)
    for lam in (1e-8, 1e-3, 1.0):
        out = natural_gradient(G, g, lam)
        assert torch.isfinite(out).all()
        ref = direct(G, g, lam)
        assert ((out - ref).norm() / ref.norm()).item() < 1e-6


@pytest.mark.parametrize("decades,lam", [(3, 1e-3), (2, 1e-4)])
def test_ill_conditioned_float32_history_is_accurate(gen, decades, lam):
    G = torch.randn(200, 10, generator=gen) * torch.logspace(-decades, decades, 10)
    g = torch.randn(200, generator=gen)
    out = natural_gradient(G, g, lam)
    ref = direct(G, g, lam)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_extremely_ill_conditioned_history_stays_finite(gen):
    # Condition number ~1e20: no reference is meaningful, but nothing may overflow or be NaN.
    G = torch.randn(200, 10, generator=gen) * torch.logspace(-6, 6, 10)
    out = natural_gradient(G, torch.randn(200, generator=gen), 1e-6)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_failed_factorisation_retries_with_more_damping(gen):
    # An indefinite "gram" makes the first factorisation fail; the retry must succeed.
    A = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    gram = A @ A.T - 5.0 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, generator=gen, dtype=torch.float64)
    z, lam = damped_cholesky_solve(gram, b, 1e-3)
    assert torch.isfinite(z).all()
    assert lam.item() > 1e-3
    assert torch.linalg.eigvalsh(gram + lam * torch.eye(6, dtype=torch.float64)).min() > 0
    torch.testing.assert_close((gram + lam * torch.eye(6, dtype=torch.float64)) @ z, b)


def test_batched_solve_only_raises_damping_where_needed(gen):
    A = torch.randn(3, 5, 5, generator=gen, dtype=torch.float64)
    gram = A @ A.transpose(-1, -2)
    gram[1] -= 100.0 * torch.eye(5, dtype=torch.float64)  # only system 1 is indefinite
    b = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    z, lam = damped_cholesky_solve(gram, b, 0.5)
    assert lam[0].item() == 0.5 and lam[2].item() == 0.5 and lam[1].item() > 0.5
    for i in (0, 2):
        torch.testing.assert_close(torch.linalg.solve(gram[i] + 0.5 * torch.eye(5, dtype=torch.float64), b[i]), z[i])


def test_hopeless_system_gives_zero_not_nan():
    gram = -1e30 * torch.eye(3, dtype=torch.float64)
    z, _ = damped_cholesky_solve(gram, torch.ones(3, dtype=torch.float64), 1e-3, max_retries=2)
    assert torch.equal(z, torch.zeros(3, dtype=torch.float64))


def test_bad_arguments_raise(gen):
    with pytest.raises(ValueError, match="expected G"):
        natural_gradient(torch.randn(4, 2), torch.randn(5), 0.1)
    with pytest.raises(ValueError, match="damping"):
        natural_gradient(torch.randn(4, 2), torch.randn(4), 0.0)
