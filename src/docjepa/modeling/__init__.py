"""Document-JEPA models: encoders, fusion, pre-training heads and size presets."""

from .build import PRESETS, build_config
from .model import BackboneOutput, DocJepaConfig, DocJepaModel
from .pretraining import DocJepaForPretraining, LossWeights

__all__ = [
    "PRESETS",
    "BackboneOutput",
    "DocJepaConfig",
    "DocJepaForPretraining",
    "DocJepaModel",
    "LossWeights",
    "build_config",
]
