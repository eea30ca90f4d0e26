"""Several questions about one encoded page at once: ``docjepa extract`` (the same questions on every page), a
server that answers requests arriving together.

Questions of any lengths are decoded in one batch (the page's encoding shared, expanded rather than copied): a
shorter question is padded, and its padding is a token no layer reads (the question tower, the joint reader, the
word decoder and the mask decoder all mask it), so every answer is the one :meth:`DocumentPredictor.decode` gives
the question alone. The question tower's states depend on the question's text alone; :class:`QuestionStates` keeps
the latest ones (with the states a joint reader starts from), so a question asked again (the same questions about
every invoice of a folder) skips the tower.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..core.errors import UsageError
from .predictor import Decoded, DocumentPredictor


class QuestionStates:
    """The question tower's output of the ``size`` questions used last (by their text), for one model's weights:
    the prompt tokens and, for a model that reads the question with the page, the states its joint reader starts
    from (both depend on the question alone)."""

    def __init__(self, size: int = 512) -> None:
        self.size, self.states = size, OrderedDict()
        self.hits = self.misses = 0

    def __call__(
        self, predictor: DocumentPredictor, questions: list[str], ids, mask
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, 1 + T, D) states of ``questions`` (token ``ids`` and ``mask`` (B, T), padded to the longest, as the
        prompt has them) and their (B, T, H) lower states (None without a joint reader): kept ones reused, the
        others computed in one call and kept (without the batch's padding)."""
        if all(q in self.states for q in questions):
            self.hits += len(questions)
            for q in questions:
                self.states.move_to_end(q)
            kept = [self.states[q] for q in questions]
            t = ids.shape[1]
            lower = None if kept[0][1] is None else _stack([k[1] for k in kept], t)
            return _stack([k[0] for k in kept], 1 + t), lower
        self.misses += len(questions)
        joint = predictor.model.joint_reader
        states, lower = predictor.model.question_encoder.encode(ids, mask, None if joint is None else joint.start)
        for i, q in enumerate(questions):
            n = int(mask[i].sum())  # kept without the batch's padding, to share other batches
            self.states[q] = (states[i, : 1 + n], None if lower is None else lower[i, :n])
            self.states.move_to_end(q)
        while len(self.states) > self.size:
            self.states.popitem(last=False)
        return states, lower


def _stack(rows: list[torch.Tensor], length: int) -> torch.Tensor:
    """(n_i, D) states → (B, length, D), each padded with zeros at its end (padding no layer reads)."""
    return torch.stack([torch.nn.functional.pad(r, (0, 0, 0, length - r.shape[0])) for r in rows])


BATCH = 16
"""At most this many questions decoded in one batch."""


@torch.no_grad()
def decode_many(
    predictor: DocumentPredictor, questions: list[str], cache: QuestionStates | None = None, batch: int = BATCH
) -> list[Decoded]:
    """:meth:`DocumentPredictor.decode` of each question on the predictor's current page, ``batch`` at a time."""
    if not questions or any(not q.strip() for q in questions):
        raise UsageError("give questions, none of them empty")
    if batch < 1:
        raise UsageError(f"batch must be at least 1, got {batch}")
    return [d for i in range(0, len(questions), batch) for d in _batch(predictor, questions[i : i + batch], cache)]


def _batch(predictor: DocumentPredictor, questions: list[str], cache: QuestionStates | None) -> list[Decoded]:
    enc = predictor.encoded
    if enc is None:
        raise RuntimeError("call set_page (or set_image) before decoding")
    predictor.prompts.lexical_prior = predictor.model.config.lexical_prior
    b = len(questions)
    prompt = predictor.prompts(questions, [enc.page] * b, enc.word_index.unsqueeze(0).expand(b, -1))
    prompt = prompt.to(predictor.device)
    states = lower = None
    if cache is not None:
        states, lower = cache(predictor, questions, prompt.question_ids, prompt.question_mask)
    out = predictor.model.decode(enc.encoding.repeat(b), prompt, True, question_states=states, question_lower=lower)
    return [
        Decoded(
            logits=out.masks[i].float(),
            scores=out.iou[i].float(),
            token_logits=None if out.token_logits is None else out.token_logits[i],
            lexical_box=prompt.lexical_boxes[i] if prompt.lexical_boxes else None,
        )
        for i in range(b)
    ]
