"""The text-encoder chain's configuration: one typed section per stage (teacher LLM, MNTP, SimCSE, student,
distillation, MLM) and the chain's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..data.split import SplitConfig
from ..train.optim import OptimConfig
from ..train.trainer import RunConfig
from . import benchmark as ev
from .corpus import CorpusConfig

STAGES = ("teacher", "mntp", "simcse", "distill", "mlm", "baseline", "eval")


LLM_STAGES = ("teacher", "mntp", "simcse")


def _run(steps: int, batch_size: int) -> Callable[[], RunConfig]:
    return lambda: RunConfig(steps=steps, batch_size=batch_size, log_every=10, checkpoint_every=100)


@dataclass
class TeacherConfig:
    """The decoder-only teacher."""

    init: str = ""
    """Local folder of a causal LM with its tokenizer (LLaMA family first); empty: train a tiny LLaMA here."""
    hidden_size: int = 256
    """Tiny LLaMA width."""
    layers: int = 4
    """Tiny LLaMA decoder layers."""
    heads: int = 4
    """Tiny LLaMA attention heads."""
    intermediate_size: int = 688
    """Tiny LLaMA MLP width."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, adamw_lr=6e-3))
    run: RunConfig = field(default_factory=_run(400, 32))


@dataclass
class MntpConfig:
    """Masked next-token prediction on the bidirectional teacher."""

    mask_probability: float = 0.2
    """Fraction of tokens masked (80 % mask token / 10 % random / 10 % kept)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3, adamw_lr=2e-3))
    run: RunConfig = field(default_factory=_run(200, 32))


@dataclass
class SimcseConfig:
    """Unsupervised SimCSE on the bidirectional teacher."""

    dropout: float = 0.3
    """Attention dropout that makes the two views differ."""
    scale: float = 20.0
    """Cosine similarities are multiplied by this before the softmax (temperature 0.05)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=5e-4, adamw_lr=1e-3))
    run: RunConfig = field(default_factory=_run(200, 64))


@dataclass
class StudentConfig:
    """The BERT student; the defaults match Document-JEPA's ``tiny`` text encoder, so the result plugs in."""

    hidden_size: int = 128
    """Width."""
    layers: int = 2
    """Encoder layers."""
    heads: int = 4
    """Attention heads."""
    intermediate_size: int = 512
    """MLP width."""
    max_positions: int = 512
    """Position table size (Document-JEPA's text encoder reads up to 512 tokens)."""


@dataclass
class DistillConfig:
    """Distillation of the teacher into the student."""

    hidden_weight: float = 1.0
    """Weight of the word-level hidden-state MSE."""
    pooled_weight: float = 1.0
    """Weight of the pooled-embedding cosine gap."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, adamw_lr=6e-3))
    run: RunConfig = field(default_factory=_run(300, 32))


@dataclass
class MlmConfig:
    """MLM of the student on OCR text (and of the MLM-only baseline)."""

    init: str = ""
    """Start from this BERT folder instead of the distilled student."""
    mask_probability: float = 0.15
    """Fraction of tokens masked (80 / 10 / 10)."""
    distill_weight: float = 0.0
    """Keep the distillation loss (on the unmasked words) during MLM with this weight; 0 = MLM alone."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=2e-3, adamw_lr=4e-3))
    run: RunConfig = field(default_factory=_run(300, 32))


@dataclass
class TextEncoderConfig:
    """Everything ``docjepa text-encoder`` needs."""

    data: CorpusConfig = field(default_factory=CorpusConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    mntp: MntpConfig = field(default_factory=MntpConfig)
    simcse: SimcseConfig = field(default_factory=SimcseConfig)
    student: StudentConfig = field(default_factory=StudentConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    mlm: MlmConfig = field(default_factory=MlmConfig)
    eval: ev.EvalConfig = field(default_factory=ev.EvalConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    """Stages to run, in the chain's order (finished ones are skipped)."""
