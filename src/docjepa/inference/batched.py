"""Several questions about one encoded page at once, for a server that answers requests arriving together.

Questions are decoded in batches of equal token lengths (the page's encoding shared, expanded rather than copied):
the decoder's prompt tokens attend to each other without a padding mask, so a padded question would get another
answer than it gets alone, and only equal lengths keep every answer what :meth:`DocumentPredictor.decode` gives.
The question tower's states depend on the question's text alone; :class:`QuestionStates` keeps the latest ones
(with the states a joint reader starts from), so a question asked again (the same questions about every invoice of
a folder) skips the tower.
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
        """(B, 1 + T, D) states of ``questions`` (token ``ids`` and ``mask`` of equal lengths, as the prompt has
        them) and their (B, T, H) lower states (None without a joint reader): kept ones reused, the others computed
        in one call and kept."""
        if all(q in self.states for q in questions):
            self.hits += len(questions)
            for q in questions:
                self.states.move_to_end(q)
            kept = [self.states[q] for q in questions]
            lower = None if kept[0][1] is None else torch.stack([k[1] for k in kept])
            return torch.stack([k[0] for k in kept]), lower
        self.misses += len(questions)
        joint = predictor.model.joint_reader
        states, lower = predictor.model.question_encoder.encode(ids, mask, None if joint is None else joint.start)
        for i, q in enumerate(questions):
            self.states[q] = (states[i], None if lower is None else lower[i])
            self.states.move_to_end(q)
        while len(self.states) > self.size:
            self.states.popitem(last=False)
        return states, lower


@torch.no_grad()
def decode_many(
    predictor: DocumentPredictor, questions: list[str], cache: QuestionStates | None = None
) -> list[Decoded]:
    """:meth:`DocumentPredictor.decode` of each question on the predictor's current page, batched by length."""
    if not questions or any(not q.strip() for q in questions):
        raise UsageError("give questions, none of them empty")
    groups: dict[tuple[int, int], list[int]] = {}
    for i, q in enumerate(questions):
        groups.setdefault(predictor.prompts.lengths(q), []).append(i)
    out: list[Decoded | None] = [None] * len(questions)
    for idx in groups.values():
        for i, d in zip(idx, _batch(predictor, [questions[i] for i in idx], cache)):
            out[i] = d
    return out  # type: ignore[return-value]


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
