"""The question encoder: a frozen tower's readings kept per question while training, equal to reading afresh."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers import BertConfig, CLIPTextConfig

from docjepa.modeling.prompt_encoder import QuestionEncoder

TOWERS = {
    "bert": BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64),
    "clip": CLIPTextConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=64, eos_token_id=2),
}  # fmt: skip


def _encoder(kind: str, frozen: bool = True, **options) -> QuestionEncoder:
    torch.manual_seed(0)
    enc = QuestionEncoder(TOWERS[kind], 16, frozen=frozen, **options)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # no parameter left at zero
    return enc


def _questions(*rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and mask of questions given as token lists (each ending in the end-of-text token, 2)."""
    t = max(map(len, rows))
    ids = torch.zeros(len(rows), t, dtype=torch.long)
    mask = torch.zeros(len(rows), t, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    return ids, mask


def _counting(enc: QuestionEncoder) -> list[int]:
    calls = []
    enc.clip.register_forward_hook(lambda m, a, kw, out: calls.append(kw["input_ids"].shape[0]), with_kwargs=True)
    return calls


Q1, Q2, Q3 = [5, 9, 11, 2], [7, 3, 2], [4, 8, 8, 6, 13, 2]


@pytest.mark.parametrize("kind", TOWERS)
def test_a_question_is_read_once_while_training_and_reads_as_afresh(kind):
    """In training a frozen tower reads each distinct question once (a question twice in a batch, or asked again
    later, comes from the cache); the prompt tokens and the lower states equal a fresh reading in float64, padding
    included."""
    enc = _encoder(kind).train()
    calls = _counting(enc)
    ids, mask = _questions(Q1, Q2, Q1)
    cached, lower = enc.encode(ids, mask, depth=2)
    assert calls == [2] and len(enc._cache) == 2
    ids2, mask2 = _questions(Q2, Q3)
    cached2, lower2 = enc.encode(ids2, mask2, depth=2)
    assert calls == [2, 1] and len(enc._cache) == 3

    fresh = _encoder(kind).double().eval()
    for got, got_lower, (i, m) in ((cached, lower, (ids, mask)), (cached2, lower2, (ids2, mask2))):
        with torch.no_grad():
            want, want_lower = fresh.encode(i, m, depth=2)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        real = m.bool()
        torch.testing.assert_close(got_lower[real].double(), want_lower[real], rtol=1e-5, atol=1e-5)
        assert (got_lower[~real] == 0).all()
    torch.testing.assert_close(cached[0], cached[2])  # one question, one reading


def test_what_trains_still_learns_and_the_tower_does_not():
    enc = _encoder("bert").train()
    ids, mask = _questions(Q1, Q3)
    for _ in range(2):  # read, then from the cache
        out, _ = enc.encode(ids, mask)
        out.square().sum().backward()
        for p in (enc.proj.weight, enc.pooled_kind, enc.padding):
            assert p.grad is not None and p.grad.abs().sum() > 0
            p.grad = None
    assert all(p.grad is None for p in enc.clip.parameters())


def test_no_cache_when_the_tower_trains_or_in_evaluation():
    for enc in (_encoder("bert", frozen=False).train(), _encoder("bert").eval(), _encoder("bert", cache_questions=0)):
        calls = _counting(enc)
        ids, mask = _questions(Q1, Q2)
        enc.encode(ids, mask)
        enc.encode(ids, mask)
        assert calls == [2, 2] and not enc._cache


def test_the_oldest_question_goes_and_new_weights_empty_the_cache():
    enc = _encoder("bert", cache_questions=2).train()
    calls = _counting(enc)
    for q in (Q1, Q2, Q3):
        enc.encode(*_questions(q))
    assert len(enc._cache) == 2 and calls == [1, 1, 1]
    enc.encode(*_questions(Q3))
    enc.encode(*_questions(Q1))  # the oldest was let go
    assert calls == [1, 1, 1, 1]
    enc.encode(*_questions(Q1))
    assert calls == [1, 1, 1, 1]
    enc.load_state_dict(_encoder("bert").state_dict())
    assert not enc._cache
    enc.encode(*_questions(Q1))
    enc.freeze(True)
    assert not enc._cache and calls == [1, 1, 1, 1, 1]
