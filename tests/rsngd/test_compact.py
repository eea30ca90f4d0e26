"""Compact states: block-wise quantised buffers, the factored second moment, and the optimizer options that use
them (the 4/8-bit residual momentum and ``adamw_state="light"``), checked against float64 references."""

import pytest
import torch

from rsngd import RSNGD, optimizer_state_bytes
from rsngd.compact import BLOCK, dequantize, factored_denominator, quantize, state_bytes
from rsngd.orthogonal import ortho_residual
from rsngd.projection import project, project_back, random_factors


def heavy_tailed(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Entries spanning orders of magnitude, as a momentum's do."""
    return torch.randn(*shape, generator=gen) * torch.rand(*shape, generator=gen) ** 3


@pytest.mark.parametrize("bits,bound", [(8, 0.02), (4, 0.2)])
@pytest.mark.parametrize("shape", [(7, 300), (5, 3, 50), (130,)])
def test_quantised_round_trip_error_is_bounded_and_shapes_are_kept(gen, bits, bound, shape):
    x = heavy_tailed(gen, *shape)
    codes, scales = quantize(x, bits)
    y = dequantize(codes, scales, bits, x.shape, torch.float64)
    assert y.shape == x.shape and y.dtype == torch.float64
    assert ((y - x).norm() / x.norm()).item() < bound
    # Signs of the entries that a code can tell from zero are kept.
    large = x.abs() > 0.05 * x.abs().max()
    assert torch.equal(y.sign()[large], x.sign()[large])
    assert codes.dtype == torch.uint8
    assert codes.numel() + 4 * scales.numel() == state_bytes(x.shape, bits)


def test_companded_codes_keep_small_entries_a_linear_code_would_zero(gen):
    """A block with one large entry: a linear 4-bit code (steps of max/7) rounds entries below max/14 to zero;
    the square-root code keeps them."""
    x = torch.full((1, BLOCK), 0.03)
    x[0, 0] = 1.0
    y = dequantize(*quantize(x, 4), 4, x.shape, torch.float32)
    assert (y[0, 1:] > 0).all()


def test_blocks_never_cross_rows_so_row_shards_quantise_alike(gen):
    x = heavy_tailed(gen, 9, 200)
    for bits in (8, 4):
        codes, scales = quantize(x, bits)
        part_codes, part_scales = quantize(x[3:7], bits)
        assert torch.equal(part_codes, codes[3:7]) and torch.equal(part_scales, scales[3:7])


def test_bad_bits_are_refused():
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        quantize(torch.randn(3, 3), 2)
    with pytest.raises(ValueError, match="residual_bits"):
        RSNGD([torch.nn.Parameter(torch.randn(4, 4))], rank=2, residual_bits=2)
    with pytest.raises(ValueError, match="adamw_state"):
        RSNGD([torch.nn.Parameter(torch.randn(4, 4))], rank=None, adamw_state="tiny")


def test_factored_denominator_is_adafactors_rank_one_second_moment(gen):
    g2 = torch.rand(6, 4, generator=gen, dtype=torch.float64)
    row, col = g2.mean(1), g2.mean(0)
    v = torch.outer(row, col) / row.mean()
    torch.testing.assert_close(factored_denominator(row, col, row.mean(), 0.5, 1e-8), (v / 0.5).sqrt() + 1e-8)
    # A rank-one matrix of squares is reproduced exactly.
    a, b = torch.rand(6, generator=gen, dtype=torch.float64), torch.rand(4, generator=gen, dtype=torch.float64)
    sq = torch.outer(a, b)
    got = factored_denominator(sq.mean(1), sq.mean(0), sq.mean(1).mean(), 1.0, 0.0)
    torch.testing.assert_close(got, sq.sqrt())


@pytest.mark.parametrize("bits,bound,share", [(8, 0.02, 0.14), (4, 0.25, 0.075)])
def test_quantised_residual_momentum_follows_the_full_precision_one(gen, bits, bound, share):
    """residual_momentum with a whole-size quantised buffer: each step's update is close to Muon's Nesterov
    direction of the residual computed with a float64 buffer (the same gradients and subspaces)."""
    beta, lr = 0.9, 0.01
    W = torch.nn.Parameter(torch.randn(64, 256, generator=gen, dtype=torch.float64))
    opt = RSNGD([W], lr=lr, rank=2, history=3, update_gap=100, residual_momentum=beta, residual_bits=bits)
    plain = RSNGD([torch.nn.Parameter(W.detach().clone())], lr=lr, rank=2, history=3, update_gap=100, residual="none")
    (V,) = plain.param_groups[0]["params"]
    buf = torch.zeros(64, 256, dtype=torch.float64)
    for _ in range(6):
        with torch.no_grad():
            V.copy_(W)
        g = torch.randn(64, 256, generator=gen, dtype=torch.float64)
        W.grad, V.grad = g.clone(), g.clone()
        opt.step()
        plain.step()
        factors = random_factors(W.shape, [2, 2], opt.state[W]["seed"], dtype=torch.float64)
        rest = g - project_back(project(g, factors), factors)
        buf = beta * buf + (1 - beta) * rest
        expected = 4.0 * ortho_residual((1 - beta) * rest + beta * buf)  # residual_scale 4, the default
        got = (V - W).detach() / lr
        assert ((got - expected).norm() / expected.norm()).item() < bound
    state = opt.state[W]
    assert state["res_codes"].dtype == torch.uint8
    assert optimizer_state_bytes(opt) < share * W.numel() * 8  # a share of one float64 buffer: codes and scales


def test_light_adamw_matches_its_float64_reference(gen):
    """adamw_state="light": an 8-bit first moment and a factored second moment. Against the same update with an
    exact first moment, the parameters agree to the quantisation error; the state is about 1/8 of AdamW's."""
    lr, (b1, b2), eps = 0.01, (0.9, 0.999), 1e-8
    W = torch.nn.Parameter(torch.randn(64, 300, generator=gen, dtype=torch.float64))
    opt = RSNGD([{"params": [W], "rank": None, "adamw_state": "light"}], lr=lr, betas=(b1, b2), eps=eps)
    ref = W.detach().clone()
    m = torch.zeros_like(ref)
    row, col = torch.zeros(64, dtype=torch.float64), torch.zeros(300, dtype=torch.float64)
    for t in range(1, 6):
        g = torch.randn(64, 300, generator=gen, dtype=torch.float64)
        W.grad = g.clone()
        opt.step()
        m = b1 * m + (1 - b1) * g
        sq = g * g + 1e-30
        row, col = b2 * row + (1 - b2) * sq.mean(1), b2 * col + (1 - b2) * sq.mean(0)
        denom = (torch.outer(row, col) / row.mean() / (1 - b2**t)).sqrt() + eps
        ref = ref - lr * (m / (1 - b1**t)) / denom
        step = (ref - W.detach()).norm() / (lr * (m / (1 - b1**t) / denom)).norm()
        assert step.item() < 0.05 * t
    adamw_bytes = 2 * W.numel() * 8
    assert optimizer_state_bytes(opt) < 0.15 * adamw_bytes


def test_light_adamw_in_chunks_of_rows_equals_the_whole_matrix(gen):
    """The light state steps a large matrix a few rows at a time (its transients within ``batch_memory``): with
    chunks of 5 rows of a 64-row matrix (the last one shorter) the parameters and the states equal those of one
    chunk."""
    from rsngd.adamw import LIGHT_BYTES

    start = torch.randn(64, 300, generator=gen, dtype=torch.float64)
    grads = [torch.randn(64, 300, generator=gen, dtype=torch.float64) for _ in range(4)]
    results = []
    for chunk in (1 << 30, 5 * 300):
        W = torch.nn.Parameter(start.clone())
        group = {"params": [W], "rank": None, "adamw_state": "light", "batch_memory": chunk * LIGHT_BYTES}
        opt = RSNGD([group], lr=0.01, weight_decay=0.1)
        for g in grads:
            W.grad = g.clone()
            opt.step()
        results.append((W.detach().clone(), {k: v.clone() for k, v in opt.state[W].items() if torch.is_tensor(v)}))
    (w_whole, s_whole), (w_chunks, s_chunks) = results
    torch.testing.assert_close(w_chunks, w_whole, atol=1e-12, rtol=0)
    for key, value in s_whole.items():
        if value.dtype == torch.uint8:
            assert torch.equal(s_chunks[key], value), key
        else:
            torch.testing.assert_close(s_chunks[key], value, atol=1e-12, rtol=0)
