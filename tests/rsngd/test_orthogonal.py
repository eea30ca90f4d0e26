import pytest
import torch

from rsngd.orthogonal import ortho_residual, orthogonalize


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
