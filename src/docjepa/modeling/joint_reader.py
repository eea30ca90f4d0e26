"""The joint reader: the question and the page's words read together by the top layers of the question tower.

The page reader (:mod:`~docjepa.modeling.page_reader`) gives every page word the tower's reading of it, but the
same reading whatever is asked: question and page meet only in the small decoders, which learn from a few
thousand examples which value belongs to the key a question names. Extractive document QA that reads (BERT on
SQuAD, LayoutLM on DocVQA) puts the question and the page's words in one sequence of one pre-trained encoder, so
that every page word's state already depends on the question.

Here the tower's lower layers read the page alone (once per page, kept in the page encoding, cached across
training steps like the page reader's reading) and the question alone; its top ``layers`` layers, copied from the
pre-trained tower and trained, then read one sequence: the question's tokens first, then the page's words in
reading order (each the mean of its sub-tokens' lower states, plus its box through layout tables that start at
zero, so the copied layers read at step 0 exactly what they were trained on). The page words' output states go
through a linear map that starts at zero and are added to the page tokens the word decoder reads, whose answer
logits and painted features the mask decoder uses: at step 0 the model answers exactly as the one without it.

A further question on an encoded page costs the question's pass through the tower and ``layers`` layers over the
question and the page's words (not sub-tokens), so the page is never read again from its first layer.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel

from .page_reader import spread
from .relative_layout import GAIN, RelativeLayoutBias
from .text_encoder import LayoutEmbedding


def word_boxes(bbox: Tensor, word_index: Tensor, words: int) -> Tensor:
    """Each word's box (B, words, 4) from its page tokens' boxes (B, L, 4) and their words (B, L) (−1: none); a
    word no token reaches gets (0, 0, 0, 0)."""
    b = bbox.shape[0]
    out = bbox.new_zeros(b, words, 4)
    keep = (word_index >= 0) & (word_index < words)
    rows = torch.arange(b, device=bbox.device).unsqueeze(1).expand_as(word_index)
    out[rows[keep], word_index[keep]] = bbox[keep]
    return out


def tower_layers(tower: PreTrainedModel) -> nn.ModuleList:
    """The transformer layers of a BERT-family tower (``encoder.layer``); other towers are refused."""
    layers = getattr(getattr(tower, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        kind = getattr(tower.config, "model_type", type(tower).__name__)
        raise ValueError(f"joint reading needs a BERT-family question tower (encoder.layer), not a {kind} tower")
    return layers


class JointReader(nn.Module):
    """The top ``layers`` layers of the question tower over [question tokens; page words] → (B, W, D) per word."""

    def __init__(
        self, tower_config: PretrainedConfig, layers: int, dim: int, relative: bool = False, gain: float = GAIN
    ) -> None:
        super().__init__()
        from transformers.models.bert.modeling_bert import BertLayer

        kind = getattr(tower_config, "model_type", "")
        if kind != "bert":
            raise ValueError(
                f"joint reading copies the question tower's BERT layers; this tower is {kind or 'unnamed'}"
            )
        depth = int(tower_config.num_hidden_layers)
        if not 0 < layers <= depth:
            raise ValueError(f"joint_layers must lie in 1…{depth} (the question tower's layers), got {layers}")
        self.start = depth - layers
        """Index of the tower's hidden state the joint layers read (its first ``start`` layers read alone)."""
        hidden = int(tower_config.hidden_size)
        self.layers = nn.ModuleList(BertLayer(tower_config, layer_idx=self.start + i) for i in range(layers))
        self.layout = LayoutEmbedding(hidden)
        heads = int(tower_config.num_attention_heads)
        self.relative = RelativeLayoutBias(heads, gain=gain) if relative else None
        """A bias on each pair of page words' attention from where they stand relative to each other
        (:mod:`~docjepa.modeling.relative_layout`), shared by the joint layers; None: absolute layout alone."""
        self.out = nn.Linear(hidden, dim)
        self._zero_init()

    def _zero_init(self) -> None:
        """Layout and output start at zero: the copied layers read what the tower gave them, nothing is added."""
        for table in (self.layout.x, self.layout.y, self.layout.w, self.layout.h):
            nn.init.zeros_(table.weight)
        if self.relative is not None:
            self.relative.reset()
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def begin(self, tower: PreTrainedModel) -> None:
        """Start from a pre-trained tower: its top layers' weights copied, layout and output at zero."""
        theirs = tower_layers(tower)[self.start :]
        if len(theirs) != len(self.layers):
            raise ValueError(f"the tower has {len(theirs) + self.start} layers, the joint reader expects more")
        for mine, source in zip(self.layers, theirs):
            mine.load_state_dict(source.state_dict())
        self._zero_init()

    def question(self, encoder, ids: Tensor, mask: Tensor) -> Tensor:
        """The question's tokens after the tower's first ``start`` layers (B, T, H) (``encoder``: the question
        encoder; :meth:`QuestionEncoder.encode` gives them with its prompt tokens, from one pass)."""
        return encoder.encode(ids, mask, self.start)[1]

    def forward(self, question: Tensor, question_mask: Tensor, words: Tensor, word_box: Tensor) -> Tensor:
        """question (B, T, H) lower states and mask (B, T); words (B, W, H) the page words' lower states (all zero:
        not read), word_box (B, W, 4) in 0…1000 → (B, W, D) to add to the page tokens of each word (zero for
        words not read)."""
        valid = words.abs().amax(-1) > 0  # (B, W)
        dtype = self.out.weight.dtype
        page = (words.to(dtype) + self.layout(word_box).to(dtype)) * valid.unsqueeze(-1).to(dtype)
        x = torch.cat([question.to(dtype), page], dim=1)
        keep = torch.cat([question_mask > 0, valid], dim=1)
        bias = torch.zeros(keep.shape, dtype=dtype, device=x.device).masked_fill(~keep, torch.finfo(dtype).min)
        bias = bias[:, None, None, :]
        t = question.shape[1]
        if self.relative is not None:  # the page words' pairs get their relative place's bias, the question's none
            pairs = nn.functional.pad(self.relative(word_box).to(dtype), (t, 0, t, 0))  # (B, heads, T + W, T + W)
            bias = (pairs + bias).masked_fill(~keep[:, None, None, :], torch.finfo(dtype).min)
        for layer in self.layers:
            x = layer(x, attention_mask=bias)
            if isinstance(x, tuple):
                x = x[0]
        return self.out(x[:, t:]) * valid.unsqueeze(-1).to(dtype)

    def read(self, question: Tensor, mask: Tensor, words: Tensor, word_box: Tensor, word_index: Tensor) -> Tensor:
        """Questions' lower states (B, T, H) and mask on their pages' words → (B, L, D) per page token
        (:func:`~docjepa.modeling.page_reader.spread` by ``word_index``)."""
        return spread(self(question, mask, words, word_box), word_index)
