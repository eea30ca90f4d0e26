"""Several questions about one page at once: one batch whatever their lengths, the tower's states kept by question."""

import pytest
import torch

pytest.importorskip("transformers")

from docjepa.data.shards import DocumentDataset
from docjepa.inference.batched import QuestionStates, decode_many
from docjepa.inference.predictor import DocumentPredictor
from docjepa.modeling import build_config
from docjepa.modeling.segmentation import DocJepaForSegmentation


def _close(a, b) -> None:
    torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a.token_logits, b.token_logits, atol=1e-4, rtol=1e-4)
    assert a.lexical_box == b.lexical_box


def test_questions_decoded_together_answer_as_one_by_one(docs, tok):
    """The same logits, scores, word logits and lexical boxes as one decode each, for questions of several lengths
    decoded in one batch (the shorter ones padded) and in batches of two, with and without the tower's states kept;
    kept states are reused, not recomputed, in batches of other lengths than the one they were computed in."""
    torch.manual_seed(0)
    predictor = DocumentPredictor(DocJepaForSegmentation(build_config("tiny", len(tok))), tok, device="cpu")
    page = DocumentDataset(docs / "d")[0]
    predictor.set_page(page)
    questions = [q.text for q in page.questions[:3]] + ["What is the invoice number printed at the top right?"]
    questions += [questions[1], questions[0]]
    assert len({len(tok(q)["input_ids"]) for q in questions}) >= 3
    alone = [predictor.decode(q) for q in questions]
    for d, a in zip(decode_many(predictor, questions), alone):
        _close(d, a)
    for d, a in zip(decode_many(predictor, questions, batch=2), alone):
        _close(d, a)
    cache = QuestionStates(size=3)
    calls = []
    hook = predictor.model.question_encoder.clip.register_forward_hook(lambda *_: calls.append(1))
    try:
        first = decode_many(predictor, questions[:2], cache)
        again = decode_many(predictor, questions[:2], cache)
    finally:
        hook.remove()
    assert len(calls) == 1 and (cache.hits, cache.misses) == (2, 2)  # one tower call; asked again: none
    for d, e, a in zip(first, again, alone[:2]):
        _close(d, a)
        _close(e, a)
    assert len(tok(questions[0])["input_ids"]) != len(tok(questions[1])["input_ids"])
    for i in (0, 1):  # kept from a batch padded to the longer of the two, asked alone
        _close(decode_many(predictor, [questions[i]], cache)[0], alone[i])
    assert len(calls) == 1
    decode_many(predictor, questions[2:5], cache)
    assert len(cache.states) == 3 and questions[0] not in cache.states  # the oldest is dropped
    with pytest.raises(Exception, match="none of them empty"):
        decode_many(predictor, ["What?", " "])
    with pytest.raises(Exception, match="at least 1"):
        decode_many(predictor, ["What?"], batch=0)


def test_a_joint_reader_s_question_states_are_kept_too(docs, tok, tmp_path, gen):
    """With the question read with the page, kept questions run no layer of the tower (the states the joint layers
    start from are kept beside the prompt tokens), and answer as one decode each."""
    from tests.docjepa.modeling.test_joint_reader import models
    from tests.helpers import tiny_bert_folder

    _, joint = models(tok, tiny_bert_folder(tok, tmp_path / "bert", layers=2))
    with torch.no_grad():
        joint.joint_reader.out.weight.normal_(generator=gen)  # a joint reading that changes the answers
    predictor = DocumentPredictor(joint, tok, tok, device="cpu")
    page = DocumentDataset(docs / "d")[0]
    predictor.set_page(page)
    questions = [q.text for q in page.questions[:3]]
    alone = [predictor.decode(q) for q in questions]
    cache, calls = QuestionStates(), []
    hook = joint.question_encoder.clip.register_forward_hook(lambda *_: calls.append(1))
    try:
        first = decode_many(predictor, questions, cache)
        tower_calls = len(calls)
        again = decode_many(predictor, questions, cache)
    finally:
        hook.remove()
    assert tower_calls >= 1 and len(calls) == tower_calls  # asked again: no tower layer runs
    assert all(lower is not None for _, lower in cache.states.values())
    for d, e, a in zip(first, again, alone):
        _close(d, a)
        _close(e, a)
