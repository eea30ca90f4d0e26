"""Text encoder: transformers' BERT over OCR sub-tokens with the 2-D layout of each word added to its input.

Each sub-token carries its word's box (x0, y0, x1, y1) in 0…1000 of the square model input. Six learned
tables (x0, y0, x1, y1, width, height), as in LayoutLM, are summed into the word embedding before BERT's own
position and segment embeddings. The BERT weights can come from a directory written by ``docjepa
text-encoder`` (or any local BERT checkpoint) through :meth:`LayoutTextEncoder.load_bert`.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn
from transformers import BertConfig, BertModel

LAYOUT_RANGE = 1001  # box coordinates are integers in 0…1000


ARCHITECTURE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_act",
    "layer_norm_eps",
)
"""The fields of a BERT's ``config.json`` that fix the shapes and the arithmetic of its weights."""


def bert_architecture(path: str | Path) -> dict:
    """The architecture of the BERT in a local folder (its ``config.json``), as the ``text`` block of a
    :class:`~docjepa.modeling.model.DocJepaConfig`: a page encoder built from it loads its weights unchanged."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no config.json in text encoder directory {path}")
    cfg = BertConfig.from_pretrained(path)
    if cfg.model_type != "bert":
        raise ValueError(f"text encoder at {path} is a {cfg.model_type!r} model; the page encoder is a BERT")
    return {key: getattr(cfg, key) for key in ARCHITECTURE_KEYS}


class LayoutEmbedding(nn.Module):
    """Sum of learned embeddings of x0, y0, x1, y1, width and height."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.x = nn.Embedding(LAYOUT_RANGE, dim)
        self.y = nn.Embedding(LAYOUT_RANGE, dim)
        self.w = nn.Embedding(LAYOUT_RANGE, dim)
        self.h = nn.Embedding(LAYOUT_RANGE, dim)
        for table in (self.x, self.y, self.w, self.h):
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, bbox: Tensor) -> Tensor:
        """bbox (…, 4) long in 0…1000 → (…, dim)."""
        if bbox.numel() and (int(bbox.min()) < 0 or int(bbox.max()) > 1000):
            raise ValueError("bbox coordinates must lie in 0…1000")
        x0, y0, x1, y1 = bbox.unbind(-1)
        w, h = (x1 - x0).clamp(0, 1000), (y1 - y0).clamp(0, 1000)
        return self.x(x0) + self.y(y0) + self.x(x1) + self.y(y1) + self.w(w) + self.h(h)


class LayoutTextEncoder(nn.Module):
    """BERT with layout; returns (B, L, hidden) token states."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertModel(config, add_pooling_layer=False)
        self.layout = LayoutEmbedding(config.hidden_size)
        self.hidden_size = config.hidden_size

    def load_bert(self, path: str | Path) -> None:
        """Copy BERT weights from a local directory (``BertModel`` or ``BertForMaskedLM`` checkpoint)."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"text encoder directory {path} does not exist")
        loaded = BertModel.from_pretrained(path, add_pooling_layer=False)
        mine, theirs = self.bert.config, loaded.config
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
            if getattr(mine, key) != getattr(theirs, key):
                raise ValueError(
                    f"text encoder at {path} has {key}={getattr(theirs, key)}, the model "
                    f"was configured with {getattr(mine, key)}"
                )
        self.bert.load_state_dict(loaded.state_dict(), strict=False)

    def freeze(self, layers: int) -> None:
        """Keep BERT's embeddings and its first ``layers`` layers as they are (-1: all of them), e.g. pre-trained
        weights while new parts learn; the layout embeddings stay trainable. 0 freezes nothing."""
        if layers == 0:
            return
        total = len(self.bert.encoder.layer)
        if layers < -1 or layers > total:
            raise ValueError(f"freeze_text_layers must be -1 (all), 0 or up to {total}, got {layers}")
        self.bert.embeddings.requires_grad_(False)
        for layer in self.bert.encoder.layer[: total if layers == -1 else layers]:
            layer.requires_grad_(False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, bbox: Tensor) -> Tensor:
        embeds = self.bert.embeddings.word_embeddings(input_ids) + self.layout(bbox)
        out = self.bert(inputs_embeds=embeds, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state
