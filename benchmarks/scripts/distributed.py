"""RS-SNGD under torch.distributed on CPU (gloo): equality with one process, and memory per process.

Usage: python benchmarks/scripts/distributed.py [--worlds 2 4] [--steps 8] [--memory-hidden 512] [--out FILE]

1. Equality (float64, a LLaMA with 2 layers, hidden 64, MLP 172: row counts that do not divide among the ranks):
   FSDP2 (``fully_shard`` per decoder layer and the root; RS-SNGD steps the DTensor shards, the residual's
   matrices orthogonalised by owner ranks), ZeRO (``ZeroRedundancyOptimizer`` over DDP, ``partitioned=True``)
   and DDP (``data_parallel=True``: the ranks split the Newton–Schulz work) against one process on the same global
   batches, ``--steps`` steps with renewals every 3 steps (staggered), for the ``rsngd`` recipe, its subspace step
   alone, the recipe with a 4-bit residual momentum and the ``rsngd-momentum`` recipe (its 8-bit momentum); the
   largest parameter difference.
2. Memory per process (float32 LLaMA with ``--memory-hidden``, 4 layers, vocabulary 8192, created on the meta
   device and materialised after sharding): peak RSS above the process's RSS before the model was built (the
   transient whole matrices of the residual's owners included), the optimizer state bytes of the process, and
   those of its projected matrices against AdamW's, for AdamW, Muon, the ``rsngd`` recipe and the recipe with
   ``per_layer=True`` in one process, and AdamW, Muon and the recipe under FSDP2 with 2 and 4 processes. Muon is
   ``torch.optim.Muon`` in one process; it refuses sharded parameters, so under FSDP2 it is :class:`ShardedMuon`
   (each matrix orthogonalised whole by one owner rank, as distributed Muon implementations do).

Every rank computes the one-process reference itself. Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def llama(hidden: int, inter: int, layers: int, vocab: int, dtype: torch.dtype, meta: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    if meta:  # no memory yet: the weights are created after sharding
        with torch.device("meta"):
            return LlamaForCausalLM(cfg).to(dtype)
    return LlamaForCausalLM(cfg).to(dtype)


class ShardedMuon(torch.optim.Optimizer):
    """Muon for FSDP2's row-sharded matrices (``torch.optim.Muon`` refuses DTensors), for the memory comparison:
    a float32 momentum of this rank's rows; its Nesterov direction orthogonalised whole by one owner rank and
    returned as rows (``rsngd.ortho_dist.ortho_sharded``: the gather-to-owner scheme of distributed Muon
    implementations, the same transient whole matrices as RS-SNGD's residual); AdamW for the rest, as the usual
    recipe (and ``rsngd.muon.MuonWithAdamW``) has it."""

    def __init__(self, named, lr: float = 0.02, adamw_lr: float = 3e-3, momentum: float = 0.95) -> None:
        import rsngd

        proj, other, flat = rsngd.split_parameters(named)
        groups = [{"params": proj, "muon": True, "lr": lr}, {"params": other + flat, "muon": False, "lr": adamw_lr}]
        super().__init__(groups, {"momentum": momentum, "betas": (0.9, 0.999), "eps": 1e-8})

    @torch.no_grad()
    def step(self, closure=None):
        from rsngd.ortho_dist import ortho_sharded

        mats = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state, grad = self.state[p], p.grad.to_local()
                if group["muon"]:
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p)  # a DTensor sharded as p
                    buf = state["momentum_buffer"].to_local()
                    buf.lerp_(grad, 1 - group["momentum"])
                    mats.append((p, group, grad.lerp(buf, group["momentum"])))
                    continue
                if "exp_avg" not in state:
                    state["step"], state["exp_avg"], state["exp_avg_sq"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                (b1, b2), t = group["betas"], state["step"]
                m, v = state["exp_avg"].to_local(), state["exp_avg_sq"].to_local()
                m.lerp_(grad, 1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (v / (1 - b2**t)).sqrt_().add_(group["eps"])
                p.to_local().addcdiv_(m, denom, value=-group["lr"] / (1 - b1**t))
        if mats:
            group = mats[0][0].device_mesh.get_group(0)
            directions = ortho_sharded([d for _, _, d in mats], [tuple(p.shape) for p, _, _ in mats], group)
            for (p, g, _), o in zip(mats, directions):
                p.to_local().add_(o.view_as(p.to_local()), alpha=-g["lr"])


def optimizer(model, name: str, hp: dict, zero: bool = False):
    import rsngd

    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        rsngd.tag_parameter_names(model)
        proj, other, flat = rsngd.split_parameters(model.named_parameters())
        opt = ZeroRedundancyOptimizer(
            proj, optimizer_class=rsngd.RSNGD, partitioned=True, lr=0.02, update_gap=3, **{"rank": 8, **hp}
        )
        adamw_lr = rsngd.RECIPES["rsngd"].adamw_lr  # the rest as the recipe has it
        opt.add_param_group({"params": other, "rank": None, "adamw_state": "light", "lr": adamw_lr})
        opt.add_param_group({"params": flat, "rank": None, "lr": adamw_lr})
        return opt
    if name == "muon" and dist.get_world_size() > 1:
        return ShardedMuon(model.named_parameters(), lr=0.02)
    if name in ("adamw", "muon"):
        return rsngd.create_optimizer(model.named_parameters(), name, lr=0.02)
    if name == "rsngd-per-layer":
        name, hp = "rsngd", {**hp, "per_layer": True}
    hp = {"rank": 8, **hp}
    return rsngd.create_optimizer(model.named_parameters(), name, lr=0.02, update_gap=3, **hp)


def batch(step: int, size: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (size, 16), generator=torch.Generator().manual_seed(step))


def train(model, opt, steps: int, vocab: int, rank: int = 0, world: int = 1, forward=None) -> None:
    forward = forward or model
    per = 8 // world
    for step in range(steps):
        x = batch(step, 8, vocab)[rank * per : (rank + 1) * per]
        opt.zero_grad()
        forward(input_ids=x, labels=x).loss.backward()
        opt.step()


def full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def equality(steps: int, hp: dict) -> dict:
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    rank, world, vocab = dist.get_rank(), dist.get_world_size(), 128
    ref = llama(64, 172, 2, vocab, torch.float64)
    train(ref, optimizer(ref, "rsngd", hp), steps, vocab)
    expected = {n: p.detach() for n, p in ref.named_parameters()}
    out = {}
    model = llama(64, 172, 2, vocab, torch.float64)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    train(model, optimizer(model, "rsngd", hp), steps, vocab, rank, world)
    out["fsdp2"] = max((full(p.detach()) - expected[n]).abs().max().item() for n, p in model.named_parameters())
    model = llama(64, 172, 2, vocab, torch.float64)
    ddp = DistributedDataParallel(model)
    train(model, optimizer(model, "rsngd", hp, zero=True), steps, vocab, rank, world, forward=ddp)
    out["zero"] = max((p.detach() - expected[n]).abs().max().item() for n, p in model.named_parameters())
    model = llama(64, 172, 2, vocab, torch.float64)
    ddp = DistributedDataParallel(model)
    train(model, optimizer(model, "rsngd", {**hp, "data_parallel": True}), steps, vocab, rank, world, forward=ddp)
    out["ddp"] = max((p.detach() - expected[n]).abs().max().item() for n, p in model.named_parameters())
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(name: str, hidden: int, steps: int = 3) -> dict:
    from torch.distributed.fsdp import fully_shard

    import rsngd

    rank, world, vocab = dist.get_rank(), dist.get_world_size(), 8192
    before = _rss()
    model = llama(hidden, int(hidden * 2.6875), 4, vocab, torch.float32, meta=True)
    if world > 1:
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    model.to_empty(device="cpu")  # each process allocates its shards only
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() >= 2 else p.fill_(1.0)
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    fresh = LlamaRotaryEmbedding(config=model.config)  # the rotary buffers were left empty by to_empty
    for key, buf in fresh.named_buffers():
        getattr(model.model.rotary_emb, key).copy_(buf)
    opt = optimizer(model, name, {"rank": hidden // 8})
    train(model, opt, steps, vocab, rank, world)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    projected, _, _ = rsngd.split_parameters(model.named_parameters())
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in projected)
    return {
        "optimizer": name,
        "world": world,
        "peak_rss_above_start_bytes": peak - before,
        "optimizer_state_bytes": rsngd.optimizer_state_bytes(opt),
        "projected_state_bytes": rsngd.optimizer_state_bytes(opt, projected),
        "projected_adamw_bytes": 8 * local,  # AdamW's two float32 moments of this process's projected rows
    }


def _worker(rank: int, world: int, store: str, tmp: str, job: str, args: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = equality(**args) if job == "equality" else memory(**args)
        torch.save(result, os.path.join(tmp, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()
    os._exit(0)  # no interpreter finalisation with gloo threads about (an occasional SIGABRT otherwise)


def spawn(world: int, job: str, **args) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, os.path.join(tmp, "store"), tmp, job, args), nprocs=world, join=True)
        return [torch.load(os.path.join(tmp, f"{r}.pt"), weights_only=False) for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--memory-hidden", type=int, default=512)
    ap.add_argument("--memory-only", action="store_true", help="skip the equality runs (keep those of --out)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/distributed.json"))
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result: dict = {"steps": args.steps, "update_gap": 3, "torch": torch.__version__, "equality": [], "memory": []}
    settings = (
        ("rsngd recipe", {}),
        ("residual=none", {"residual": "none"}),
        ("4-bit residual momentum", {"residual_momentum": 0.95, "residual_bits": 4}),
        ("rsngd-momentum recipe", {"residual_momentum": 0.95, "residual_bits": 8, "residual_scale": 1.0}),
    )
    if args.memory_only and args.out.exists():
        result["equality"] = json.loads(args.out.read_text())["equality"]
    for world in [] if args.memory_only else args.worlds:
        for label, hp in settings:
            t0 = time.perf_counter()
            diffs = spawn(world, "equality", steps=args.steps, hp=hp)
            row = {
                "world": world,
                "settings": label,
                "fsdp2_max_abs_diff": max(d["fsdp2"] for d in diffs),
                "zero_max_abs_diff": max(d["zero"] for d in diffs),
                "ddp_split_max_abs_diff": max(d["ddp"] for d in diffs),
                "seconds": time.perf_counter() - t0,
            }
            result["equality"].append(row)
            print(json.dumps(row), flush=True)
    runs = [(1, "adamw"), (1, "muon"), (1, "rsngd"), (1, "rsngd-per-layer")]
    runs += [(w, n) for w in args.worlds for n in ("adamw", "muon", "rsngd")]
    for world, name in runs:
        rows = spawn(world, "memory", name=name, hidden=args.memory_hidden)
        row = {
            "optimizer": name,
            "world": world,
            "hidden": args.memory_hidden,
            "peak_rss_above_start_mib": max(r["peak_rss_above_start_bytes"] for r in rows) / 2**20,
            "optimizer_state_mib": max(r["optimizer_state_bytes"] for r in rows) / 2**20,
            "projected_state_vs_adamw": max(r["projected_state_bytes"] / r["projected_adamw_bytes"] for r in rows),
        }
        result["memory"].append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
