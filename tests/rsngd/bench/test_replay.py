"""One optimizer step replayed at full LLaMA-1B and LLaMA-7B shapes on the meta device (``rsngd.bench.replay``):
what RS-SNGD's step costs a GPU, checked on the CPU against Muon's step replayed in the same run.

Targets (docs/rsngd.md, "The step on a GPU"): the step's temporaries at most 0.5 GB at 1B and 1.0 GB at 7B; per-layer
updates at 7B peak at most 20 GB (weights, the gradients held, state, temporaries; GaLore reports 22 GB); at least
99 % of the matmul FLOPs in bfloat16; no QR and no host→device copy on a step that renews nothing; kernel launches
at most 1.5 × Muon's (the factors' normals, one compiled kernel on a GPU, counted once per draw)."""

import pytest
import torch

from rsngd import kernels
from rsngd.bench.replay import SHAPES, StepTracker, llama_parameters, replay

GB = 1e9
LIMIT = {"llama-1b": 0.5 * GB, "llama-7b": 1.0 * GB}
OPS = 1.5


@pytest.fixture(scope="module")
def muon():
    return {shape: replay("muon", shape, lr=0.02) for shape in LIMIT}


def show(label: str, r: dict) -> str:
    return (
        f"{label}: temporaries {r['temporaries_bytes'] / GB:.3f} GB, peak {r['peak_bytes'] / GB:.2f} GB, "
        f"state {r['state_bytes'] / GB:.3f} GB, {r['kernel_ops']} kernels, bf16 {100 * r['bf16_flop_share']:.2f} %"
    )


@pytest.mark.parametrize("shape", sorted(LIMIT))
@pytest.mark.parametrize("method", ["rsngd", "rsngd-momentum"])
def test_the_step_at_llama_shapes_meets_its_gpu_targets(muon, method, shape):
    r = replay(method, shape)
    print(show(f"{method} {shape}", r), "|", show("muon", muon[shape]))
    assert r["temporaries_bytes"] <= LIMIT[shape]
    assert r["peak_bytes"] < muon[shape]["peak_bytes"]
    assert r["bf16_flop_share"] >= 0.99
    assert r["qr_calls"] == 0 and r["host_to_device_copies"] == 0
    assert r["kernel_ops"] <= OPS * muon[shape]["kernel_ops"]
    # The work is Muon's (the Newton–Schulz iterations of the same matrices) and the subspace's projections and
    # factors, about 2 % more.
    assert abs(sum(r["flops"].values()) / sum(muon[shape]["flops"].values()) - 1) < 0.025


def test_per_layer_updates_of_a_7b_model_peak_under_20_gb():
    r = replay("rsngd", "llama-7b", per_layer=True)
    print(show("rsngd per_layer llama-7b", r))
    assert r["peak_bytes"] <= 20 * GB
    assert r["qr_calls"] == 0 and r["host_to_device_copies"] == 0
    assert r["bf16_flop_share"] >= 0.99


def test_the_tracker_counts_what_a_step_allocates_and_launches():
    """Known work: a bf16 matmul's FLOPs, a float32 one's, live bytes freed when Python drops them, a QR, a copy
    from the host, a multi-tensor op that takes the fast path (one launch) and one that does not (one per tensor)."""
    a = torch.empty(64, 32, device="meta", dtype=torch.bfloat16)
    b = torch.empty(32, 16, device="meta", dtype=torch.bfloat16)
    with StepTracker() as t:
        c = a @ b  # 64·16 bf16 = 2 kB, 2·64·32·16 FLOPs
        d = c.float() @ b.float().T  # a float32 matmul of 2·64·16·32
        del c, d
        torch.linalg.qr(torch.empty(8, 4, device="meta"))
        torch.ones(5).to("meta")
        same = [torch.empty(3, device="meta") for _ in range(4)]
        torch._foreach_add_(same, same)
        torch._foreach_add_(same, [s.double() for s in same])  # two dtypes: torch's slow path
    r = t.report()
    assert r["flops"]["bfloat16"] == 2 * 64 * 32 * 16 and r["flops"]["float32"] == 2 * 64 * 16 * 32
    assert r["qr_calls"] == 1 and r["host_to_device_copies"] == 1
    assert r["temporaries_bytes"] >= 64 * 16 * 4 + 64 * 32 * 4 and t.live < r["temporaries_bytes"]
    assert r["top_ops"]["_foreach_add_"] == 1 + 4


def test_a_fused_function_counts_as_one_launch_per_call():
    """The normals' chain of some thirty operations runs as one compiled kernel on a GPU: the replay counts each
    call once (and every operation outside it as before)."""
    from rsngd.projection import keyed_normal

    keys = torch.empty(3, 2, device="meta", dtype=torch.int64)
    with StepTracker() as t:
        keyed_normal([(64, 8), (32, 8)], keys, torch.float32)
        keyed_normal([(64, 8)], keys[:, :1], torch.float32)
        torch.empty(4, device="meta").add_(1)
    r = t.report()
    assert r["top_ops"]["fused"] == 2 and r["kernel_ops"] == 3


def test_the_tracker_counts_the_bytes_each_launch_reads_and_writes():
    """Memory traffic: an operation's distinct tensor arguments and its results; a fused call's arguments and
    results only, not the arrays its eager operations pass between them."""
    from rsngd.projection import keyed_normal

    a = torch.empty(64, 32, device="meta", dtype=torch.bfloat16)
    b = torch.empty(32, 16, device="meta", dtype=torch.bfloat16)
    x = torch.empty(1000, device="meta")
    keys = torch.empty(3, 1, device="meta", dtype=torch.int64)
    with StepTracker() as t:
        a @ b
        x.add_(x)  # x read (once: the same tensor twice) and written
    assert t.report()["traffic_bytes"] == (64 * 32 + 32 * 16 + 64 * 16) * 2 + 2 * 4000
    with StepTracker() as t:
        keyed_normal([(64, 8)], keys, torch.float32)
    assert t.report()["traffic_bytes"] == 3 * 8 + 3 * 64 * 8 * 4  # keys in, normals out


def test_the_momentum_kernel_stand_in_replaces_the_eager_passes_by_one_launch_per_matrix():
    """``rsngd-momentum`` with its momentum's Triton kernel (``rsngd.kernels``) replayed by a stand-in: one launch
    per matrix, which reads and writes the residual (bf16) and the 8-bit codes once (6 bytes per entry, and the
    scales), in place of the eager step's passes; nothing else in the step changes."""
    eager = replay("rsngd-momentum", "llama-1b")
    kernel = replay("rsngd-momentum", "llama-1b", kernels=("momentum",))
    plain = replay("rsngd", "llama-1b")
    matrices = [p for name, p in llama_parameters(SHAPES["llama-1b"]) if "layers" in name and p.dim() == 2]
    entries = sum(p.numel() for p in matrices)
    assert kernel["top_ops"]["momentum kernel"] == len(matrices)
    assert 6 * entries < kernel["top_traffic"]["momentum kernel"] < 6.1 * entries
    assert kernel["kernel_ops"] < eager["kernel_ops"] and kernel["traffic_bytes"] < eager["traffic_bytes"]
    assert kernel["traffic_bytes"] - plain["traffic_bytes"] < 0.15 * (eager["traffic_bytes"] - plain["traffic_bytes"])
    assert kernel["flops"] == eager["flops"] and kernel["state_bytes"] == eager["state_bytes"]
    assert kernels.ENABLED["momentum"] is False and kernels.DEVICES == ("cuda",)  # restored
