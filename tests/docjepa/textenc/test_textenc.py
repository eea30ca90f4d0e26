"""Text-encoder chain: bidirectional LLaMA, MNTP, SimCSE, distillation, MLM, evaluation, the whole pipeline."""

import itertools
import json
import math

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoTokenizer, BertModel, PreTrainedTokenizerFast

from docjepa.apps.cli import main
from docjepa.core.config import load_config
from docjepa.core.errors import ConfigError
from docjepa.data.record import Word
from docjepa.data.tokenizer import train_tokenizer_on_texts
from docjepa.modeling.build import build_config
from docjepa.modeling.text_encoder import LayoutTextEncoder
from docjepa.textenc import (
    BidirectionalLM,
    Distiller,
    mean_pool,
    mntp_loss,
    page_lines,
    simcse_loss,
    student_bert,
    tiny_llama,
    word_pool,
)
from docjepa.textenc import benchmark as ev
from docjepa.textenc.corpus import PairCollator, WordsCollator, windows
from docjepa.textenc.llm2vec import SimcseModel, causal_hidden, load_lm

TEXTS = [
    "Invoice number INV-2041 issued on 12 March",
    "Total amount due 1,284.50 EUR",
    "Paid by credit card thank you for shopping",
    "Customer number 88412 Hamburg Germany",
    "Sales by region 2021 Region Q1 Q2 Q3 Q4",
    "Please pay within 30 days of the invoice date",
    "Consulting services 40.36 Software licence 21.26",
    "Dear Sir or Madam we write to confirm your order",
] * 4


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_tokenizer_on_texts(TEXTS, tmp_path_factory.mktemp("tok"), vocab_size=300)


def small_llama(tok, seed: int = 0):
    torch.manual_seed(seed)
    return tiny_llama(tok, hidden_size=32, layers=2, heads=2, intermediate_size=64, max_tokens=64)


def batch_of(tok, texts, **kw):
    return WordsCollator(tok, 32, **kw)([(i, t.split()) for i, t in enumerate(texts)])


# --- bidirectional attention -----------------------------------------------------------------------------------


def test_bidirectional_lm_sees_later_tokens_and_the_causal_one_does_not(tok, gen):
    lm = small_llama(tok).eval()
    ids = torch.randint(5, len(tok), (2, 12), generator=gen)
    mask = torch.ones_like(ids)
    changed = ids.clone()
    changed[:, 9] = (changed[:, 9] + 1 - 5) % (len(tok) - 5) + 5  # a different token at position 9
    with torch.no_grad():
        causal_a, causal_b = causal_hidden(lm, ids, mask), causal_hidden(lm, changed, mask)
        bi = BidirectionalLM(lm)
        bi_a, bi_b = bi.hidden(ids, mask), bi.hidden(changed, mask)
    assert torch.allclose(causal_a[:, :9], causal_b[:, :9], atol=1e-6)  # control: causal ignores the future
    assert (bi_a[:, :9] - bi_b[:, :9]).abs().amax(-1).min() > 1e-4  # every earlier position changes


def test_bidirectional_mask_ignores_padding_and_matches_a_float64_reference(tok, gen):
    lm = small_llama(tok).double().eval()
    bi = BidirectionalLM(lm)
    ids = torch.randint(5, len(tok), (1, 7), generator=gen)
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    pmask = torch.cat([torch.ones(1, 7, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        plain = bi.hidden(ids, torch.ones_like(ids))
        with_pad = bi.hidden(padded, pmask)[:, :7]
        lm.config._attn_implementation = "eager"  # the same mask through the other attention implementation
        eager = bi.hidden(padded, pmask)[:, :7]
    assert torch.allclose(plain, with_pad, atol=1e-10)
    assert torch.allclose(plain, eager, atol=1e-10)


def test_saved_bidirectional_lm_loads_as_bidirectional(tok, tmp_path):
    bi = BidirectionalLM(small_llama(tok))
    bi.save_pretrained(tmp_path / "m")
    loaded = load_lm(tmp_path / "m")
    assert isinstance(loaded, BidirectionalLM)
    assert not any(getattr(m, "is_causal", False) for m in loaded.modules())
    ids = torch.randint(5, len(tok), (1, 6))
    with torch.no_grad():
        assert torch.allclose(
            bi.eval().hidden(ids, torch.ones_like(ids)), loaded.eval().hidden(ids, torch.ones_like(ids))
        )


# --- MNTP ------------------------------------------------------------------------------------------------------


def test_mntp_scores_token_i_at_position_i_minus_1(gen):
    vocab, length = 11, 6
    labels = torch.randint(0, vocab, (2, length), generator=gen)
    labels[:, ::2] = -100  # only some positions are masked
    logits = torch.full((2, length, vocab), -30.0)
    for b, i in itertools.product(range(2), range(1, length)):  # position i-1 puts its mass on token i
        if labels[b, i] >= 0:
            logits[b, i - 1, labels[b, i]] = 30.0
    assert float(mntp_loss(logits, labels)) < 1e-6
    unshifted = torch.full_like(logits, -30.0)
    for b, i in itertools.product(range(2), range(length)):
        if labels[b, i] >= 0:
            unshifted[b, i, labels[b, i]] = 30.0  # the same prediction without the shift is wrong
    # the loss reads position i - 1 only, where this prediction put nothing: uniform over the vocabulary
    assert abs(float(mntp_loss(unshifted, labels)) - math.log(vocab)) < 1e-4


def test_masking_collator_masks_a_fifth_and_never_special_tokens(tok):
    collate = WordsCollator(tok, 64, mask_probability=0.2, seed=3)
    items = [(i, t.split()) for i, t in enumerate(TEXTS)]
    batch = collate(items)
    plain = WordsCollator(tok, 64)(items)
    masked = batch["labels"] != -100
    real = plain["word_index"] >= 0
    assert not (masked & ~real).any()  # [CLS], [SEP] and padding are never targets
    assert 0.12 < masked.sum() / real.sum() < 0.28
    assert torch.equal(batch["labels"][masked], plain["input_ids"][masked])  # labels are the original tokens
    assert (batch["input_ids"][masked] == tok.mask_token_id).float().mean() > 0.6  # mostly the mask token
    again = collate(items)
    assert torch.equal(again["input_ids"], batch["input_ids"])  # seeded by position: a resumed run masks alike


# --- SimCSE ----------------------------------------------------------------------------------------------------


def test_simcse_loss_matches_a_float64_reference(gen):
    a, b = torch.randn(5, 8, generator=gen), torch.randn(5, 8, generator=gen)
    loss, _ = simcse_loss(a, b, scale=20.0)
    an, bn = a.double() / a.double().norm(dim=1, keepdim=True), b.double() / b.double().norm(dim=1, keepdim=True)
    s = 20.0 * an @ bn.T
    ref = -(s.diag() - s.logsumexp(1)).mean()
    assert abs(float(loss) - float(ref)) < 1e-5


def test_simcse_loss_falls_and_views_differ(tok):
    torch.manual_seed(0)
    model = SimcseModel(BidirectionalLM(small_llama(tok)), dropout=0.3, scale=20.0).train()
    batch = batch_of(tok, TEXTS[:8])
    with torch.no_grad():
        ids, mask = batch["input_ids"], batch["attention_mask"]
        assert not torch.allclose(model.model.hidden(ids, mask), model.model.hidden(ids, mask))  # dropout is on
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = model(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


# --- distillation ----------------------------------------------------------------------------------------------


def test_word_pool_and_mean_pool_match_loops(gen):
    h = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64)
    word_index = torch.tensor([[-1, 0, 0, 1, 2, -1], [-1, 0, 1, 1, 1, -1]])
    pooled, ok = word_pool(h, word_index, 4)
    for b, w in itertools.product(range(2), range(4)):
        sel = h[b][word_index[b] == w]
        assert bool(ok[b, w]) == (len(sel) > 0)
        if len(sel):
            assert torch.allclose(pooled[b, w], sel.mean(0))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    m = mean_pool(h, mask)
    assert torch.allclose(m[0], h[0, :4].mean(0)) and torch.allclose(m[1], h[1].mean(0))


def test_pair_collator_aligns_words_across_different_tokenizers(tok, tmp_path):
    other = train_tokenizer_on_texts(TEXTS, tmp_path / "small", vocab_size=80)  # splits words into more pieces
    batch = PairCollator(tok, other, 64)([(0, TEXTS[0].split()), (1, TEXTS[1].split())])
    for b in range(2):
        n = len(TEXTS[b].split())
        assert int(batch["s_word_index"][b].max()) + 1 == n == int(batch["t_word_index"][b].max()) + 1
    assert (batch["t_word_index"] >= 0).sum() > (batch["s_word_index"] >= 0).sum()


def test_distillation_narrows_the_teacher_student_gap(tok, tmp_path):
    torch.manual_seed(0)
    teacher = BidirectionalLM(small_llama(tok, seed=1))
    other = train_tokenizer_on_texts(TEXTS, tmp_path / "t", vocab_size=120)
    teacher_other = BidirectionalLM(
        tiny_llama(other, hidden_size=32, layers=2, heads=2, intermediate_size=64, max_tokens=64)
    )
    vocab = sorted({w for t in TEXTS for w in t.split()})
    rng = torch.Generator().manual_seed(5)
    sentences = [(i, [vocab[j] for j in torch.randint(0, len(vocab), (8,), generator=rng)]) for i in range(56)]
    for t, t_tok in ((teacher, tok), (teacher_other, other)):  # same and different tokenizers
        model = Distiller(
            t, student_bert(tok, hidden_size=32, layers=1, heads=2, intermediate_size=64, max_positions=64)
        )
        collate = PairCollator(tok, t_tok, 64)
        train, held = collate(sentences[:48]), collate(sentences[48:])  # held-out sequences are never seen
        with torch.no_grad():
            before, fit_before = model(held), model(train)
        opt = torch.optim.AdamW([p for _, p in model.trainable_named_parameters()], lr=3e-3)
        for _ in range(40):
            loss = model(train)["loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            after, fit_after = model(held), model(train)
        assert float(fit_after["loss"]) < 0.5 * float(fit_before["loss"])
        assert float(after["hidden_mse"]) < 0.8 * float(before["hidden_mse"])  # also on unseen sentences
        assert float(after["pooled_cos_gap"]) < float(before["pooled_cos_gap"])
        assert all(p.grad is None for p in model.teacher.parameters())  # the teacher stays frozen


# --- corpus and evaluation -------------------------------------------------------------------------------------


def test_page_lines_follow_rows_and_windows_keep_order():
    words = [
        Word("Total", (10, 100, 50, 112)),
        Word("12.50", (60, 101, 90, 113)),
        Word("Paid", (10, 130, 40, 142)),
        Word("by", (45, 130, 60, 142)),
        Word("card", (65, 131, 90, 143)),
        Word("Next", (200, 60, 240, 72)),
    ]
    assert page_lines(words) == [[0, 1], [2, 3, 4], [5]]
    assert windows([["a", "b"], ["c", "d", "e"], ["f"]], 3) == [["a", "b"], ["c", "d", "e"], ["f"]]
    assert windows([["a"] * 7], 3) == [["a"] * 3, ["a"] * 3, ["a"]]


def test_chance_recall_matches_enumeration():
    n, gold, k = 7, 2, 3
    hits = [bool({0, 1} & set(perm[:k])) for perm in itertools.permutations(range(n))]
    assert abs(ev.chance_recall(n, gold, k) - sum(hits) / len(hits)) < 1e-12
    assert ev.chance_recall(4, 1, 5) == 1.0


def test_retrieval_scores_and_agreement_on_a_hand_made_set(gen):
    rs = ev.RetrievalSet(
        lines=[["Invoice number INV-7", "Total 12.50", "Paid by card"], ["Date 2024-01-02", "Customer Anna Smith"]],
        questions=["What is the total?", "How was it paid?", "Who is the customer?"],
        page=[0, 0, 1],
        gold=[{1}, {2}, {1}],
        held_out=[False, True, False],
    )
    r = ev.retrieval_scores(ev.lexical_embedder(), rs, ks=(1,))
    assert r["recall@1"] == 1.0 and r["recall@1_heldout"] == 1.0  # each question shares a word with its line
    assert abs(r["chance@1"] - (1 / 3 + 1 / 3 + 1 / 2) / 3) < 1e-12
    a = torch.nn.functional.normalize(torch.randn(30, 8, generator=gen), dim=-1)
    rot = torch.linalg.qr(torch.randn(8, 8, generator=gen))[0]
    assert abs(ev.agreement(a, a @ rot) - 1.0) < 1e-9  # a rotation keeps every similarity
    b = torch.nn.functional.normalize(torch.randn(30, 8, generator=gen), dim=-1)
    assert abs(ev.agreement(a, b)) < 0.2


# --- the pipeline ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_chain_runs_every_stage_and_the_result_loads_with_transformers(docs, tmp_path, caplog):
    out = tmp_path / "te"
    steps = "--teacher.run.steps=3 --mntp.run.steps=2 --simcse.run.steps=2 --distill.run.steps=3 --mlm.run.steps=2"
    args = [
        "text-encoder",
        "--config",
        "text_encoder/tiny",
        "--out",
        str(out),
        "--no-progress",
        f"--data.train=[{docs / 'd'}]",
        f"--eval.data=[{docs / 'd'}]",
        "--data.vocab_size=500",
        "--teacher.hidden_size=32",
        "--teacher.layers=1",
        "--teacher.heads=2",
        "--teacher.intermediate_size=64",
        *steps.split(),
        "--eval.agreement_texts=50",
        "--mlm.distill_weight=0.5",  # MLM keeps distilling
    ]
    for stage in ("teacher", "mntp", "simcse", "distill", "mlm"):
        args += [f"--{stage}.run.batch_size=4", f"--{stage}.run.threads=0", f"--{stage}.optim.rank=8"]
    main(args)
    report = json.loads((out / "eval.json").read_text())
    names = set(report["results"])
    assert {
        "teacher: causal LM",
        "teacher: + MNTP + SimCSE (LLM2Vec)",
        "BERT: distilled + MLM (final)",
        "BERT: MLM only",
        "lexical (hashed content words)",
    } <= names
    assert all(0 <= r["recall@1"] <= r["recall@5"] <= 1 for r in report["results"].values())
    assert (out / "eval.png").is_file() and (out / "eval.md").is_file()
    for stage in ("teacher", "mntp", "simcse", "distill", "mlm", "baseline"):
        lines = (out / stage / "metrics.jsonl").read_text().splitlines()
        assert all(math.isfinite(json.loads(line)["loss"]) for line in lines)
    mlm_last = json.loads((out / "mlm" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"mlm", "hidden_mse", "pooled_cos_gap"} <= set(mlm_last)  # MLM with distillation logs both parts
    assert not (out / "distill_projection.safetensors").exists()  # OUT holds a plain BERT folder
    # The result is a plain BERT folder with its tokenizer, and it plugs into Document-JEPA's tiny text encoder.
    bert = BertModel.from_pretrained(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).vocab_size == tokenizer.vocab_size == bert.config.vocab_size
    enc = tokenizer(["Total 12.50"], return_tensors="pt")
    assert bert(**enc).last_hidden_state.shape[-1] == 128
    encoder = LayoutTextEncoder(build_config("tiny", len(tokenizer)).bert())
    encoder.load_bert(out)
    assert torch.equal(encoder.bert.embeddings.word_embeddings.weight, bert.embeddings.word_embeddings.weight)
    # A second invocation skips the finished stages; an interrupted stage needs --resume.
    caplog.set_level("INFO", logger="docjepa.textenc")
    main([*args, "--stages=teacher,mntp"])
    assert sum("already finished" in r.message for r in caplog.records) == 2
    main([*args, "--stages=mlm", "--mlm.run.steps=4", "--resume"])  # continues the mlm run from step 2 to 4
    steps_logged = [json.loads(line)["step"] for line in (out / "mlm" / "metrics.jsonl").read_text().splitlines()]
    assert steps_logged[-1] == 4


def test_config_rejects_unknown_stage_and_keys(tmp_path):
    from docjepa.textenc import TextEncoderConfig, run_chain

    cfg = load_config(TextEncoderConfig, "text_encoder/tiny", ["--stages=teacher,finetune"])
    with pytest.raises(ValueError, match="unknown stage"):
        run_chain(cfg, tmp_path / "x")
    with pytest.raises(ConfigError, match=r"teacher\.width"):
        load_config(TextEncoderConfig, "text_encoder/tiny", ["--teacher.width=3"])


@pytest.mark.slow
def test_chain_takes_a_local_llama_with_its_own_tokenizer(docs, tmp_path):
    """A user's causal LM folder (LLaMA with a SentencePiece-style BPE tokenizer that has no pad or mask token)
    as the teacher: MNTP, word-aligned distillation into the WordPiece student, and the evaluation run."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from docjepa.textenc import TextEncoderConfig, run_chain

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    bpe.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"]))
    llama_tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    assert llama_tok.pad_token is None and llama_tok.mask_token is None
    llama_dir = tmp_path / "llama"
    llama_tok.save_pretrained(llama_dir)
    small_llama(llama_tok).save_pretrained(llama_dir)

    overrides = [
        f"--teacher.init={llama_dir}",
        "--stages=teacher,mntp,distill,eval",
        f"--data.train=[{docs / 'd'}]",
        f"--eval.data=[{docs / 'd'}]",
        "--data.vocab_size=500",
        "--eval.agreement_texts=40",
    ]
    for stage in ("mntp", "distill"):
        overrides += [f"--{stage}.run.steps=2", f"--{stage}.run.batch_size=4", f"--{stage}.optim.rank=8"]
    cfg = load_config(TextEncoderConfig, "text_encoder/tiny", overrides)
    report = run_chain(cfg, tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "teacher").exists()  # nothing trained: the user's LM is the teacher
    assert isinstance(load_lm(tmp_path / "out" / "mntp" / "checkpoints" / "step-0000002" / "model"), BidirectionalLM)
    assert {"teacher: causal LM", "teacher: + MNTP", "BERT: distilled"} <= set(report["results"])
    lines = (tmp_path / "out" / "distill" / "metrics.jsonl").read_text().splitlines()
    assert all(math.isfinite(json.loads(line)["hidden_mse"]) for line in lines)
