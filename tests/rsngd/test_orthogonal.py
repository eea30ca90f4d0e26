import pytest
import torch

from rsngd.orthogonal import lowrank_momentum, ortho_residual, orthogonalize


@pytest.mark.parametrize("shape", [(40, 24), (24, 40), (6, 4, 5)])
def test_newton_schulz_approximates_the_float64_polar_factor(shape):
    """Five quintic iterations bring every singular value into Muon's band around 1 and point along U Vᵀ of the
    float64 SVD (a 3-D tensor is unfolded along its first mode)."""
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    m = x.reshape(shape[0], -1)
    u, _, vh = torch.linalg.svd(m, full_matrices=False)
    o = orthogonalize(x)
    assert o.shape == x.shape and o.dtype == x.dtype
    sv = torch.linalg.svdvals(o.reshape(shape[0], -1))
    assert sv.min() > 0.6 and sv.max() < 1.25
    cosine = (o.reshape_as(m) * (u @ vh)).sum() / (o.norm() * (u @ vh).norm())
    assert cosine > 0.97


def test_orthogonalize_ignores_the_input_scale():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 9, generator=gen)
    torch.testing.assert_close(orthogonalize(1e-4 * x), orthogonalize(x), rtol=1e-3, atol=1e-4)


def test_ortho_residual_scales_tall_matrices_as_muon():
    """√max(1, rows/cols): a tall matrix's update grows, a wide one's is the polar factor."""
    gen = torch.Generator().manual_seed(2)
    tall, wide = torch.randn(36, 9, generator=gen), torch.randn(9, 36, generator=gen)
    torch.testing.assert_close(ortho_residual(tall), orthogonalize(tall) * 2.0)
    torch.testing.assert_close(ortho_residual(wide), orthogonalize(wide))


def test_lowrank_momentum_keeps_the_momentum_projected_on_its_tracked_directions():
    """One step in float64: M = β·basis coefᵀ + (1 − β)R; the new basis is orthonormal and spans M·coef; the new
    buffer is M projected onto it; the direction is Nesterov's (1 − β)R + βM. At full rank the buffer is M."""
    gen = torch.Generator().manual_seed(3)
    beta = 0.95
    basis, _ = torch.linalg.qr(torch.randn(12, 3, generator=gen, dtype=torch.float64))
    coef = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    r = torch.randn(12, 8, generator=gen, dtype=torch.float64)
    direction, new_basis, new_coef = lowrank_momentum(r, basis, coef, beta)
    m = beta * basis @ coef.T + (1 - beta) * r
    torch.testing.assert_close(direction, (1 - beta) * r + beta * m)
    torch.testing.assert_close(new_basis.T @ new_basis, torch.eye(3, dtype=torch.float64))
    span = m @ coef
    torch.testing.assert_close(new_basis @ (new_basis.T @ span), span)  # the basis spans M·coef
    torch.testing.assert_close(new_basis @ new_coef.T, new_basis @ new_basis.T @ m)
    assert (new_basis @ new_coef.T - m).norm() > 1e-3 * m.norm()  # rank 3 < 8: something is dropped

    full_basis = torch.zeros(12, 8, dtype=torch.float64)
    full_coef = torch.randn(8, 8, generator=gen, dtype=torch.float64)
    _, b, c = lowrank_momentum(r, full_basis, full_coef, beta)
    torch.testing.assert_close(b @ c.T, (1 - beta) * r)


def test_gram_iterations_equal_the_plain_ones_in_float64():
    """The Gram form (iterating on the small Gram matrix) is the same polynomial: equal to the plain form in float64
    for a long matrix; ``orthogonalize_stack`` takes it for long float32/float64 matrices only."""
    from rsngd import orthogonal

    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 20, 70, generator=gen, dtype=torch.float64)
    y = x / torch.linalg.matrix_norm(x, keepdim=True)
    plain = y.clone()
    a, b, c = orthogonal.NS_COEFFICIENTS
    for _ in range(5):
        gram = plain @ plain.mT
        plain = a * plain + (b * gram + c * gram @ gram) @ plain
    torch.testing.assert_close(orthogonal.gram_iterations(y, 5), plain, rtol=1e-10, atol=1e-12)
    assert orthogonal.uses_gram((20, 70), torch.float32) and orthogonal.uses_gram((70, 20), torch.float64)
    assert not orthogonal.uses_gram((20, 70), torch.bfloat16) and not orthogonal.uses_gram((20, 30), torch.float32)
    tall = orthogonal.orthogonalize_stack(x.mT.contiguous(), eps=0.0)
    torch.testing.assert_close(tall, plain.mT, rtol=1e-9, atol=1e-11)
