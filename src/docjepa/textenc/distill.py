"""Distillation of the bidirectional LLM teacher into a small BERT student.

The student (transformers ``BertForMaskedLM``) learns, through one learned linear projection to the teacher's
width, to reproduce

* the teacher's hidden states, word by word: both sides average their sub-tokens per word, so the teacher may
  use any tokenizer (a LLaMA BPE, or the student's own WordPiece); the target is the teacher state
  layer-normalised without scale or shift, and the loss is their mean squared difference;
* the teacher's pooled sentence embedding (mean over tokens, as LLM2Vec pools): 1 − cosine similarity.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import BertConfig, BertForMaskedLM

from .llm2vec import BidirectionalLM, mean_pool, word_pool

PROJECTION = "distill_projection.safetensors"


def student_bert(
    tokenizer, hidden_size: int, layers: int, heads: int, intermediate_size: int, max_positions: int
) -> BertForMaskedLM:
    """A fresh BERT (with MLM head) for the tokenizer."""
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
    )
    return BertForMaskedLM(config)


def student_hidden(student: BertForMaskedLM, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Last hidden states (B, L, H) of the student's encoder."""
    return student.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def distill_losses(
    s_words: Tensor, s_pooled: Tensor, t_words: Tensor, t_pooled: Tensor, valid: Tensor, proj: nn.Linear
) -> tuple[Tensor, Tensor]:
    """(hidden-state loss, pooled loss) of student word states (B, W, H) / pooled (B, H) against the teacher's
    (B, W, D) / (B, D) over the ``valid`` (B, W) words."""
    target = F.layer_norm(t_words.float(), t_words.shape[-1:])
    hidden = (proj(s_words).float() - target).pow(2).mean(-1)[valid].mean()
    pooled = 1 - F.cosine_similarity(proj(s_pooled).float(), t_pooled.float(), dim=-1).mean()
    return hidden, pooled


class Distiller(nn.Module):
    """Frozen teacher + trainable student and projection; ``forward(batch)`` gives the weighted losses."""

    def __init__(
        self, teacher: BidirectionalLM, student: BertForMaskedLM, hidden_weight: float = 1.0, pooled_weight: float = 1.0
    ) -> None:
        super().__init__()
        self.teacher = teacher.requires_grad_(False).eval()
        self.student = student
        self.proj = nn.Linear(student.config.hidden_size, teacher.config.hidden_size)
        self.hidden_weight, self.pooled_weight = hidden_weight, pooled_weight

    def train(self, mode: bool = True) -> Distiller:
        super().train(mode)
        self.teacher.eval()  # frozen, no dropout
        return self

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.named_parameters() if not n.startswith("teacher.")]

    @torch.no_grad()
    def teacher_states(self, batch: dict, words: int) -> tuple[Tensor, Tensor, Tensor]:
        h = self.teacher.hidden(batch["t_input_ids"], batch["t_attention_mask"])
        w, ok = word_pool(h, batch["t_word_index"], words)
        return w, ok, mean_pool(h, batch["t_attention_mask"])

    def forward(self, batch: dict) -> dict[str, Tensor]:
        words = int(max(batch["s_word_index"].max(), batch["t_word_index"].max())) + 1
        t_words, t_ok, t_pooled = self.teacher_states(batch, words)
        h = student_hidden(self.student, batch["s_input_ids"], batch["s_attention_mask"])
        s_words, s_ok = word_pool(h, batch["s_word_index"], words)
        s_pooled = mean_pool(h, batch["s_attention_mask"])
        hidden, pooled = distill_losses(s_words, s_pooled, t_words, t_pooled, s_ok & t_ok, self.proj)
        loss = self.hidden_weight * hidden + self.pooled_weight * pooled
        return {"loss": loss, "hidden_mse": hidden, "pooled_cos_gap": pooled}

    def save_pretrained(self, path: str | Path) -> None:
        """The student as a ``BertForMaskedLM`` folder, plus the projection (for resuming)."""
        self.student.save_pretrained(path)
        save_file({k: v.detach().contiguous() for k, v in self.proj.state_dict().items()}, str(Path(path) / PROJECTION))

    def load_projection(self, path: str | Path) -> None:
        self.proj.load_state_dict(load_file(str(Path(path) / PROJECTION)))
