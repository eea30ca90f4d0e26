"""Size presets for Document-JEPA: ``tiny`` (CPU, 256 px) to ``base`` (1024 px, the paper's input)."""

from __future__ import annotations

from pathlib import Path

from .model import DocJepaConfig
from .text_encoder import bert_architecture

_PRESETS: dict[str, dict] = {
    # ~4 M parameters: 256 px, 16×16 mask units of 16 px, last stage at 1/16.
    "tiny": dict(
        image=dict(
            image_size=[256, 256],
            embed_dim=32,
            depths=[1, 1, 2],
            num_heads=[1, 2, 4],
            masked_unit_size=[4, 4],
            num_query_pool=2,
            masked_unit_attention=[True, True, False],
        ),
        text=dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=512,
            max_position_embeddings=512,
        ),
        neck_dim=128,
        fusion_layers=1,
        fusion_heads=4,
        predictor_dim=96,
        predictor_layers=2,
        predictor_heads=4,
        djepa_layers=1,
        question_tower=dict(
            hidden_size=128,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=32,
        ),
        decoder_heads=4,
        mask_scale=2,  # 128-px masks for a 256-px input
        decoder_mlp_dim=512,
    ),
    # 512 px, a wider tiny: for a quick GPU run or a long CPU one.
    "small": dict(
        image=dict(
            image_size=[512, 512],
            embed_dim=64,
            depths=[1, 2, 7, 2],
            num_heads=[1, 2, 4, 8],
            masked_unit_size=[8, 8],
            num_query_pool=3,
        ),
        text=dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
            max_position_embeddings=512,
        ),
        neck_dim=256,
        fusion_layers=2,
        fusion_heads=8,
        predictor_dim=192,
        predictor_layers=4,
        predictor_heads=6,
        djepa_layers=2,
        question_tower=dict(
            hidden_size=256,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=4,
            max_position_embeddings=32,
        ),
        decoder_heads=8,
        mask_scale=2,
        decoder_mlp_dim=1024,
    ),
    # Hiera-B at 1024×1024 (mask units of 32 px, a 32×32 unit grid), BERT-base, 256-d image embedding.
    "base": dict(
        image=dict(
            image_size=[1024, 1024],
            embed_dim=96,
            depths=[2, 3, 16, 3],
            num_heads=[1, 2, 4, 8],
            masked_unit_size=[8, 8],
            num_query_pool=3,
        ),
        text=dict(
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=512,
        ),
        neck_dim=256,
        fusion_layers=2,
        fusion_heads=8,
        predictor_dim=384,
        predictor_layers=6,
        predictor_heads=12,
        djepa_layers=2,
        question_tower=dict(
            hidden_size=512,
            intermediate_size=2048,
            num_hidden_layers=12,
            num_attention_heads=8,
            max_position_embeddings=77,
        ),
        decoder_heads=8,
        decoder_mlp_dim=2048,
    ),
}

PRESETS = tuple(_PRESETS)


def build_config(
    preset: str,
    vocab_size: int,
    special_ids: dict | None = None,
    text_encoder: str | Path | None = None,
    **overrides,
) -> DocJepaConfig:
    """The configuration of a preset with the tokenizer's vocabulary size (and any top-level overrides).

    ``special_ids`` (``pad_token_id``, ``bos_token_id``, ``eos_token_id``) tell the CLIP question encoder which
    token ends a question; its pooled output is read there. Default: the ids of this package's tokenizers.
    ``text_encoder`` (a local BERT folder) replaces the preset's page text encoder by that BERT's architecture,
    so its weights load unchanged (``LayoutTextEncoder.load_bert``); the rest of the preset stays.
    """
    if preset not in _PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    spec = {k: (dict(v) if isinstance(v, dict) else v) for k, v in _PRESETS[preset].items()}
    if text_encoder:
        spec["text"].update(bert_architecture(text_encoder))
        if spec["text"]["vocab_size"] != vocab_size:
            raise ValueError(
                f"text encoder at {text_encoder} has a vocabulary of {spec['text']['vocab_size']}, the tokenizer "
                f"{vocab_size}: use the text encoder's own tokenizer (leave data.tokenizer unset)"
            )
    spec["text"]["vocab_size"] = vocab_size
    spec["question_tower"]["vocab_size"] = vocab_size
    spec["question_tower"].update(special_ids or {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3})
    spec.update(overrides)
    return DocJepaConfig(**spec)


def special_ids(tokenizer) -> dict:
    """The ids :func:`build_config`'s question tower needs, from a tokenizer ([PAD], [CLS], [SEP])."""
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.cls_token_id,
        "eos_token_id": tokenizer.sep_token_id,
    }
