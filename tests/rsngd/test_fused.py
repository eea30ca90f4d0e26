"""rsngd.fused: elementwise chains compiled on a GPU, eager elsewhere, eager again where compiling fails."""

import warnings

import pytest
import torch

from rsngd import fused
from rsngd.projection import _normals


def test_off_the_gpu_a_fused_function_runs_eagerly_and_says_so():
    seen = []

    @fused.fused("test-eager")
    def double(x: torch.Tensor) -> torch.Tensor:
        seen.append(fused.running())
        return x * 2

    assert fused.running() is None
    x = torch.randn(5)
    assert torch.equal(double(x), x * 2)
    assert torch.equal(double(x), x * 2)
    assert seen[0] is not None and seen[1] == seen[0] + 1  # each call its own number, while it runs
    assert fused.running() is None


def test_a_failed_compile_warns_once_and_runs_eagerly(monkeypatch):
    calls = []

    def broken(fn, **kw):
        calls.append(fn)

        def run(*args):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(fused, "DEVICES", ("cpu",))
    monkeypatch.setattr(torch, "compile", broken)

    @fused.fused("test-broken")
    def square(x: torch.Tensor) -> torch.Tensor:
        return x * x

    x = torch.randn(4)
    with pytest.warns(UserWarning, match="test-broken runs eagerly"):
        assert torch.equal(square(x), x * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(square(x), x * x)  # no second warning, no second attempt
    assert len(calls) == 1


def test_switched_off_it_runs_eagerly_on_its_devices(monkeypatch):
    monkeypatch.setattr(fused, "DEVICES", ("cpu",))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: pytest.fail("compiled while switched off"))

    @fused.fused("test-off")
    def neg(x: torch.Tensor) -> torch.Tensor:
        return -x

    monkeypatch.setitem(fused.ENABLED, "test-off", False)
    x = torch.randn(3)
    assert torch.equal(neg(x), -x)


@pytest.mark.slow
def test_the_compiled_normals_are_the_eager_ones():
    """Compiled (here by the CPU's compiler; on a GPU by Triton, measured bit-identical on an H200) the normals'
    integer arithmetic is exact: the same numbers but for the last bits of log, sin and cos."""
    keys = torch.randint(0, 2**62, (3, 2))
    eager = _normals.eager(keys, (3000, 1000), torch.float32)
    compiled = torch.compile(_normals.eager, dynamic=True)(keys, (3000, 1000), torch.float32)
    assert compiled.shape == eager.shape == (3, 8000)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
