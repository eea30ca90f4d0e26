"""LLM2Vec on current transformers: a decoder-only LM made bidirectional, then trained with MNTP and SimCSE.

* :class:`BidirectionalLM` wraps any ``*ForCausalLM`` whose decoder accepts a prepared 4-D attention mask
  (LLaMA, Mistral, Qwen2… on transformers 5): it builds a full, padding-aware mask with transformers'
  ``create_bidirectional_mask`` and clears every attention module's ``is_causal`` flag, so no attention
  implementation falls back to a causal kernel.
* MNTP (masked next-token prediction): tokens are masked as in MLM, and token i is predicted from the output at
  position i − 1, so the LM head keeps its next-token role (:func:`mntp_loss`).
* Unsupervised SimCSE: each sentence is encoded twice with attention dropout, mean-pooled, and each copy must
  find its twin among the batch (InfoNCE on cosine similarities × ``scale``; :func:`simcse_loss`).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.masking_utils import create_bidirectional_mask

BIDIRECTIONAL_FLAG = "docjepa_bidirectional"  # set in the config of a saved bidirectional LM


def set_causal(model: nn.Module, causal: bool) -> int:
    """Set ``is_causal`` on every attention module; the number of modules changed."""
    n = 0
    for m in model.modules():
        if hasattr(m, "is_causal"):
            m.is_causal = causal
            n += 1
    return n


def set_attention_dropout(model: nn.Module, p: float) -> None:
    """Attention-probability dropout of every attention module (LLaMA's only dropout)."""
    for m in model.modules():
        if isinstance(getattr(m, "attention_dropout", None), float):
            m.attention_dropout = p


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """(B, L, D) states averaged over the tokens where ``mask`` (B, L) is 1 → (B, D)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)


def word_pool(hidden: Tensor, word_index: Tensor, words: int) -> tuple[Tensor, Tensor]:
    """Average the token states of each word: (B, L, D) with ``word_index`` (B, L) (-1 = none) →
    (B, words, D) and a (B, words) bool mask of the words that have at least one token."""
    valid = (word_index >= 0) & (word_index < words)
    onehot = F.one_hot(word_index.clamp(min=0, max=words - 1), words).to(hidden.dtype)  # (B, L, W)
    onehot = onehot * valid.unsqueeze(-1).to(hidden.dtype)
    counts = onehot.sum(1)  # (B, W)
    pooled = onehot.transpose(1, 2) @ hidden / counts.clamp(min=1).unsqueeze(-1)
    return pooled, counts > 0


def mntp_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Masked next-token prediction: the label of token i (−100 where not masked) is scored by the logits at
    position i − 1. logits (B, L, V), labels (B, L)."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


def simcse_loss(a: Tensor, b: Tensor, scale: float = 20.0) -> tuple[Tensor, Tensor]:
    """InfoNCE between two views (N, D): row i of ``a`` must pick row i of ``b``; (loss, accuracy)."""
    logits = scale * F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T
    labels = torch.arange(len(a), device=a.device)
    return F.cross_entropy(logits, labels), (logits.argmax(1) == labels).float().mean()


class BidirectionalLM(nn.Module):
    """A causal LM whose tokens attend to every non-padding token of the sequence."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        if set_causal(lm, False) == 0:
            raise ValueError(f"{type(lm).__name__} has no attention module with an is_causal flag")

    @property
    def config(self):
        return self.lm.config

    def hidden(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Last hidden states (B, L, D) with full attention over the non-padding tokens."""
        base = self.lm.base_model
        embeds = base.get_input_embeddings()(input_ids)
        mask = create_bidirectional_mask(
            config=self.lm.config,
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            allow_is_bidirectional_skip=False,
        )  # (B, 1, L, L), in the form the configured attention implementation takes; passed through unchanged
        return base(inputs_embeds=embeds, attention_mask=mask).last_hidden_state

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lm.get_output_embeddings()(hidden)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.logits(self.hidden(input_ids, attention_mask))

    def save_pretrained(self, path: str | Path) -> None:
        """The wrapped LM's ``save_pretrained`` with a config flag, so :func:`load_lm` re-wraps it."""
        setattr(self.lm.config, BIDIRECTIONAL_FLAG, True)
        self.lm.save_pretrained(path)


def causal_hidden(lm: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Last hidden states of a causal LM used as it was trained."""
    return lm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def load_lm(path: str | Path) -> nn.Module:
    """A causal LM from a local folder; wrapped in :class:`BidirectionalLM` if it was saved as one."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no causal LM at {path} (config.json missing)")
    lm = AutoModelForCausalLM.from_pretrained(path)
    return BidirectionalLM(lm) if getattr(lm.config, BIDIRECTIONAL_FLAG, False) else lm


def tiny_llama(
    tokenizer, hidden_size: int, layers: int, heads: int, intermediate_size: int, max_tokens: int
) -> LlamaForCausalLM:
    """A small LLaMA for the tokenizer's vocabulary ([CLS]/[SEP] of a WordPiece tokenizer act as BOS/EOS)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max(128, max_tokens),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id,
        eos_token_id=tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


class MntpModel(nn.Module):
    """Bidirectional LM trained with MNTP; ``forward(batch)`` gives the loss and the masked-token accuracy."""

    def __init__(self, model: BidirectionalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> dict[str, Tensor]:
        logits = self.model(batch["input_ids"], batch["attention_mask"])  # (B, L, V)
        labels = batch["labels"]
        loss = mntp_loss(logits, labels)
        hit = (logits[:, :-1].argmax(-1) == labels[:, 1:])[labels[:, 1:] != -100]
        return {"loss": loss, "acc": hit.float().mean() if hit.numel() else torch.zeros((), device=loss.device)}

    def save_pretrained(self, path: str | Path) -> None:
        self.model.save_pretrained(path)


class SimcseModel(nn.Module):
    """Bidirectional LM trained with unsupervised SimCSE (two dropout views of each sentence)."""

    def __init__(self, model: BidirectionalLM, dropout: float, scale: float) -> None:
        super().__init__()
        self.model, self.scale = model, scale
        set_attention_dropout(model, dropout)

    def forward(self, batch: dict) -> dict[str, Tensor]:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        a = mean_pool(self.model.hidden(ids, mask), mask)
        b = mean_pool(self.model.hidden(ids, mask), mask)  # a second dropout mask
        loss, acc = simcse_loss(a, b, self.scale)
        return {"loss": loss, "acc": acc}

    def save_pretrained(self, path: str | Path) -> None:
        """The encoder alone; the dropout lives on the modules, not in the config, so it is saved as 0."""
        self.model.save_pretrained(path)
