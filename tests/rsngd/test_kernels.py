"""rsngd.kernels: the 8-bit residual momentum in one Triton kernel, run here by Triton's interpreter on CPU tensors
and checked against a float64 reference and the eager step; off the device, switched off or failing, it declines."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

from rsngd import RSNGD, compact, kernels


@pytest.fixture
def interpreted(monkeypatch):
    """The kernels allowed on CPU tensors, which Triton's interpreter runs (tests/conftest.py chooses it)."""
    triton = pytest.importorskip("triton")
    if not triton.knobs.runtime.interpret:
        pytest.skip("Triton's interpreter was not chosen before Triton was imported (TRITON_INTERPRET=1)")
    monkeypatch.setattr(kernels, "DEVICES", ("cpu",))
    monkeypatch.setitem(kernels.ENABLED, "momentum", True)


def heavy_tailed(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * torch.rand(*shape, generator=gen) ** 3


def reference(residual, codes, scales, beta):
    """One step of the quantised Nesterov momentum in float64: the direction and the new codes and scales."""
    x = residual.double()
    old = compact.dequantize(codes, scales, 8, residual.shape, torch.float64)
    new = x + beta * (old - x)
    return x + beta * (new - x), *compact.quantize(new, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(70, 300), (33, 100), (5, 3, 50), (64, 256)])
def test_momentum_kernel_matches_its_float64_reference(interpreted, gen, shape, dtype):
    rows, cols = compact._rows(shape)
    codes, scales = compact.quantize(heavy_tailed(gen, rows, cols), 8)
    residual = heavy_tailed(gen, *shape).to(dtype)
    direction, want_codes, want_scales = reference(residual, codes, scales, 0.9)
    assert kernels.momentum_step(residual, codes, scales, 0.9, torch.tensor(True))
    gap = (codes.int() - want_codes.int()).abs()
    assert gap.max() <= 1 and (gap == 0).float().mean() > 0.999  # a code apart only at a rounding tie
    torch.testing.assert_close(scales, want_scales, rtol=1e-6, atol=0)
    # float32 arithmetic, rounded once to the residual's dtype
    bound = torch.finfo(dtype).eps * direction.abs() + 16 * torch.finfo(torch.float32).eps * direction.abs().max()
    assert ((residual.double() - direction).abs() <= bound).all()


def test_momentum_kernel_keeps_the_state_where_not_ok(interpreted, gen):
    codes, scales = compact.quantize(heavy_tailed(gen, 40, 200), 8)
    kept = codes.clone(), scales.clone()
    residual = heavy_tailed(gen, 40, 200)
    direction, _, _ = reference(residual, codes, scales, 0.8)
    assert kernels.momentum_step(residual, codes, scales, 0.8, torch.tensor(False))
    assert torch.equal(codes, kept[0]) and torch.equal(scales, kept[1])
    torch.testing.assert_close(residual.double(), direction, rtol=1e-6, atol=1e-7)  # the direction all the same


def steps(gen: torch.Generator, kernel: bool, monkeypatch) -> tuple[list[torch.Tensor], int]:
    """How far four steps of an RS-SNGD with an 8-bit residual momentum move three matrices (two of one shape, a
    batch), and how many times the kernel was asked."""
    calls = []
    step = kernels.momentum_step
    monkeypatch.setattr(kernels, "momentum_step", lambda *a: calls.append(1) or step(*a))
    monkeypatch.setitem(kernels.ENABLED, "momentum", kernel)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(*s, generator=gen)) for s in [(48, 160), (48, 160), (30, 70)]]
    start = [p.detach().clone() for p in params]
    opt = RSNGD(params, lr=0.01, rank=2, history=3, residual_momentum=0.95, residual_bits=8)
    for _ in range(4):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [p.detach() - s for p, s in zip(params, start)], len(calls)


def test_rsngd_steps_alike_with_the_kernel_and_without(interpreted, monkeypatch):
    eager, _ = steps(torch.Generator().manual_seed(3), False, monkeypatch)
    fused, calls = steps(torch.Generator().manual_seed(3), True, monkeypatch)
    assert calls == 12  # each matrix, each step
    for a, b in zip(fused, eager):  # the same moves, but for a code a rounding tie apart now and then
        assert ((a - b).norm() / b.norm()).item() < 1e-4


def test_the_kernel_declines_off_its_device_switched_off_or_for_float64(gen, monkeypatch):
    codes, scales = compact.quantize(heavy_tailed(gen, 8, 64), 8)
    residual = heavy_tailed(gen, 8, 64)
    before = residual.clone(), codes.clone()
    assert not kernels.momentum_step(residual, codes, scales, 0.9, torch.tensor(True))  # CPU: not its device
    monkeypatch.setattr(kernels, "DEVICES", ("cpu",))
    monkeypatch.setitem(kernels.ENABLED, "momentum", False)
    assert not kernels.momentum_step(residual, codes, scales, 0.9, torch.tensor(True))  # switched off
    monkeypatch.setitem(kernels.ENABLED, "momentum", True)
    assert not kernels.momentum_step(residual.double(), codes, scales, 0.9, torch.tensor(True))  # float64
    wide = torch.ones(1, 128 * 65536)  # more blocks than a CUDA grid's second dimension holds
    assert not kernels.momentum_step(wide, *compact.quantize(wide, 8), 0.9, torch.tensor(True))
    assert torch.equal(residual, before[0]) and torch.equal(codes, before[1])


def test_a_kernel_that_fails_warns_once_and_the_step_goes_on_eagerly(gen, monkeypatch):
    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                raise RuntimeError("no compiler here")

            return launch

    monkeypatch.setattr(kernels, "DEVICES", ("cpu",))
    monkeypatch.setitem(kernels.ENABLED, "momentum", True)
    monkeypatch.setattr(kernels, "_kernel", lambda: Broken())
    monkeypatch.setattr(kernels, "_FAILED", set())
    codes, scales = compact.quantize(heavy_tailed(gen, 8, 64), 8)
    residual = heavy_tailed(gen, 8, 64)
    with pytest.warns(UserWarning, match="momentum kernel failed"):
        assert not kernels.momentum_step(residual, codes, scales, 0.9, torch.tensor(True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not kernels.momentum_step(residual, codes, scales, 0.9, torch.tensor(True))  # not tried again
    assert not kernels.available("momentum", residual)


COMPILE = """
import re
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from rsngd import kernels

kernel = kernels._kernel()
names = ["res", "codes", "scales", "ok", "beta", "rows", "cols", "size", "s_res", "s_codes", "s_scales"]
types = ["*bf16", "*u8", "*fp32", "*i1", "fp32"] + ["i32"] * 6
signature = dict(zip(names, types)) | dict.fromkeys(["LEVELS", "ROWS", "BLOCK"], "constexpr")
# what a launch on LLaMA's matrices tells the compiler: aligned pointers, sizes and strides divisible by 16
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in ("beta",)}
src = ASTSource(kernel, signature, constexprs={"LEVELS": 127, "ROWS": 32, "BLOCK": 128}, attrs=attrs)
done = compile(src, target=GPUTarget("cuda", 90, 32))
ptx = done.asm["ptx"]
print("cubin", len(done.asm["cubin"]), "vector", len(re.findall(r"(?:ld|st)[.]global[.]v4", ptx)))
"""


def test_the_kernel_compiles_for_a_hopper_gpu_with_vector_memory_access(tmp_path):
    """Triton's own compiler (not its interpreter) builds the kernel into a cubin for sm_90 (H100, H200) without a
    GPU, and, told what a launch on LLaMA's matrices tells it, reads and writes 16 bytes per access."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    cubin, vector = (int(v) for v in out.stdout.split()[1::2])
    assert cubin > 0 and vector >= 4  # the residual's loads and stores at least
