"""Optimizer-state memory of RS-SNGD's recipes against AdamW, Muon and GaLore on the README's LLaMA.

Usage: python benchmarks/scripts/state_memory.py [--hidden 512 --layers 4 --vocab 32000] [--out FILE]

Counts, with ``rsngd.optimizer_state_bytes`` after one step, the state of the projected matrices (attention +
MLP) and of the whole model (embeddings, head and norms included) for AdamW, Muon (``torch.optim.Muon`` on the
projected matrices, AdamW on the rest), the ``rsngd``, ``rsngd-lite``, ``rsngd-momentum`` and ``rsngd-subspace``
recipes as ``create_optimizer`` gives them, ``rsngd`` with the embeddings and head in full AdamW
(``adamw_state="full"``), and GaLore (if ``galore-torch`` is installed; rank hidden/4: both the memory really held
and the bytes of its tensors' own elements, its projector keeping a view of the full SVD factor alive). Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rsngd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1376)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/state_memory.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    heads = max(1, args.hidden // 64)
    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
    )
    model = LlamaForCausalLM(cfg)
    x = torch.randint(0, args.vocab, (1, 16))
    model(input_ids=x, labels=x).loss.backward()
    projected, _, _ = rsngd.split_parameters(model.named_parameters())
    named = list(model.named_parameters())
    optimizers: dict[str, torch.optim.Optimizer] = {
        "adamw": rsngd.create_optimizer(named, "adamw", lr=1e-3),
        "muon": rsngd.create_optimizer(named, "muon", lr=0.02),
        "rsngd": rsngd.create_optimizer(named),
        "rsngd-lite": rsngd.create_optimizer(named, "rsngd-lite"),
        "rsngd-momentum": rsngd.create_optimizer(named, "rsngd-momentum"),
        "rsngd-subspace": rsngd.create_optimizer(named, "rsngd-subspace"),
        "rsngd (adamw_state=full)": rsngd.create_optimizer(named, adamw_state="full"),
    }
    try:
        optimizers["galore"] = rsngd.create_optimizer(
            named, "galore", lr=1e-3, rank=args.hidden // 4, update_proj_gap=200, scale=0.25
        )
    except ImportError:
        print("galore-torch not installed: GaLore left out")
    rows = []
    for name, opt in optimizers.items():
        opt.step()
        rows.append(
            {
                "optimizer": name,
                "projected_bytes": rsngd.optimizer_state_bytes(opt, projected),
                "projected_logical_bytes": rsngd.optimizer_state_bytes(opt, projected, logical=True),
                "total_bytes": rsngd.optimizer_state_bytes(opt),
            }
        )
    adamw = rows[0]
    for r in rows:
        r["projected_vs_adamw"] = r["projected_bytes"] / adamw["projected_bytes"]
        r["projected_logical_vs_adamw"] = r["projected_logical_bytes"] / adamw["projected_bytes"]
        r["total_vs_adamw"] = r["total_bytes"] / adamw["total_bytes"]
    result = {
        "model": {
            "hidden": args.hidden,
            "intermediate": args.intermediate,
            "layers": args.layers,
            "params": sum(p.numel() for p in model.parameters()),
            "projected_params": sum(p.numel() for p in projected),
        },
        "vocab": args.vocab,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    head = ("optimizer", "projected MiB", "(logical)", "vs AdamW", "total MiB", "vs AdamW")
    print("{:25s} {:>14s} {:>10s} {:>9s} {:>10s} {:>9s}".format(*head))
    for r in rows:
        print(
            f"{r['optimizer']:25s} {r['projected_bytes'] / 2**20:14.2f} {r['projected_logical_bytes'] / 2**20:10.2f} "
            f"{r['projected_vs_adamw']:9.2%} {r['total_bytes'] / 2**20:10.2f} {r['total_vs_adamw']:9.2%}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
