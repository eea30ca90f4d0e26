"""Model and schedule presets for the benchmark (LLaMA shapes as in GaLore's experiments)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Preset:
    """One benchmark configuration: a LLaMA shape and a training schedule."""

    name: str
    hidden: int
    """Model width."""
    intermediate: int
    """MLP width."""
    heads: int
    """Attention heads (key/value heads too)."""
    layers: int
    """Transformer blocks."""
    vocab: int
    """BPE vocabulary size (the tokenizer is trained to this size)."""
    seq: int
    """Tokens per sequence."""
    batch: int
    """Sequences per optimizer step."""
    micro_batch: int
    """Sequences per forward/backward pass; batch / micro_batch passes are accumulated."""
    steps: int
    """Optimizer steps."""
    eval_every: int
    """Steps between validation evaluations (and always at the end)."""
    eval_batches: int
    """Micro-batches of held-out text per evaluation."""
    warmup: float = 0.1
    """Fraction of steps of linear warm-up."""
    min_lr: float = 0.1
    """Cosine decay ends at this fraction of the peak learning rate."""

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        # A few steps of every optimizer in well under a minute on CPU: for tests.
        Preset(
            "smoke",
            hidden=64,
            intermediate=172,
            heads=4,
            layers=2,
            vocab=512,
            seq=32,
            batch=4,
            micro_batch=4,
            steps=6,
            eval_every=3,
            eval_batches=2,
        ),
        # About 7 M parameters, ~0.55 s per step: nine optimizers in about 20 minutes on 2 CPU cores.
        Preset(
            "cpu",
            hidden=256,
            intermediate=688,
            heads=4,
            layers=4,
            vocab=8192,
            seq=256,
            batch=8,
            micro_batch=8,
            steps=200,
            eval_every=25,
            eval_batches=8,
        ),
        # GaLore's shapes, for a GPU: batch 512 sequences of 256 tokens through gradient accumulation.
        Preset(
            "llama-60m",
            hidden=512,
            intermediate=1376,
            heads=8,
            layers=8,
            vocab=32000,
            seq=256,
            batch=512,
            micro_batch=128,
            steps=10000,
            eval_every=500,
            eval_batches=20,
        ),
        Preset(
            "llama-130m",
            hidden=768,
            intermediate=2048,
            heads=12,
            layers=12,
            vocab=32000,
            seq=256,
            batch=512,
            micro_batch=64,
            steps=20000,
            eval_every=1000,
            eval_batches=20,
        ),
        Preset(
            "llama-350m",
            hidden=1024,
            intermediate=2736,
            heads=16,
            layers=24,
            vocab=32000,
            seq=256,
            batch=512,
            micro_batch=32,
            steps=60000,
            eval_every=2000,
            eval_batches=20,
        ),
    ]
}


# A longer horizon on CPU: 1.8 M non-embedding parameters (hidden 192), 2000 steps = 10x the cpu preset's tokens
# (4.1 M) in about 20 minutes on 2 CPU cores; the same tokenizer size, sequence and batch as cpu.
PRESETS["cpu-long"] = replace(PRESETS["cpu"], name="cpu-long", hidden=192, intermediate=512, steps=2000, eval_every=100)


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise SystemExit(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
