"""``docjepa text-encoder``: the chain LLM → LLM2Vec (bidirectional, MNTP, SimCSE) → distilled BERT → MLM.

Every stage is a training run in its own folder under ``--out`` (checkpoints, JSONL/TensorBoard metrics, its
config), started from the previous stage's output, with RS-SNGD by default:

=========  ==============================================================  ======================
stage      trains                                                          output folder
=========  ==============================================================  ======================
teacher    a tiny LLaMA, causal LM on the corpus (skipped: ``teacher.init``)  ``OUT/teacher``
mntp       the teacher made bidirectional, masked next-token prediction   ``OUT/mntp``
simcse     the same, unsupervised SimCSE                                   ``OUT/simcse``
distill    a BERT student matching the teacher's states and embeddings     ``OUT/distill``
mlm        the student, MLM on OCR text; copied to ``OUT`` itself           ``OUT/mlm``
baseline   a BERT with MLM alone, as many steps as distill + mlm           ``OUT/baseline``
eval       the embedding benchmark of every model above                    ``OUT/eval.json``, png
=========  ==============================================================  ======================

A finished stage is skipped when the pipeline runs again (so stages can be run one at a time with
``--stages``); an interrupted one continues with ``--resume``. ``BertModel.from_pretrained(OUT)`` loads the
result, and ``docjepa pretrain --model.text_encoder=OUT`` starts Document-JEPA's text encoder from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from torch import nn
from transformers import AutoTokenizer, BertForMaskedLM, PreTrainedTokenizerFast

from ..core.config import to_dict
from ..data.tokenizer import train_tokenizer_on_texts
from ..modeling.files import latest_checkpoint
from ..train.data import EpochDataset
from ..train.optim import OptimConfig
from ..train.trainer import RunConfig, Task, Trainer
from . import benchmark as ev
from .config import (
    STAGES,
    TextEncoderConfig,
)
from .corpus import Corpus, PairCollator, WordsCollator, build_corpus
from .distill import PROJECTION, Distiller, student_bert
from .llm2vec import BidirectionalLM, MntpModel, SimcseModel, load_lm, tiny_llama

log = logging.getLogger("docjepa.textenc")


def stage_output(out: Path, stage: str) -> Path | None:
    """The model folder of a finished (or at least checkpointed) stage, else None."""
    ckpt = latest_checkpoint(out / stage) if (out / stage / "checkpoints").is_dir() else None
    return None if ckpt is None else ckpt / "model"


class _Chain:
    """Shared state of one pipeline invocation: config, output folder, corpus and tokenizers."""

    def __init__(self, cfg: TextEncoderConfig, out: Path, resume: bool, progress: bool) -> None:
        self.cfg, self.out, self.resume, self.progress = cfg, out, resume, progress
        self._corpus: Corpus | None = None
        self._student_tok = None
        self._teacher_tok = None

    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            self._corpus = build_corpus(self.cfg.data, self.cfg.split)
        return self._corpus

    @property
    def student_tok(self):
        if self._student_tok is None:
            name = self.cfg.data.tokenizer
            own = self.out / "tokenizer"
            if name:
                if not (Path(name) / "tokenizer.json").is_file():
                    raise FileNotFoundError(f"no tokenizer.json in {name}")
                self._student_tok = PreTrainedTokenizerFast.from_pretrained(name)
            elif (own / "tokenizer.json").is_file():
                self._student_tok = PreTrainedTokenizerFast.from_pretrained(own)
            else:
                log.info("training a %d-token WordPiece tokenizer on the corpus", self.cfg.data.vocab_size)
                self._student_tok = train_tokenizer_on_texts(
                    self.corpus.texts(), own, self.cfg.data.vocab_size, lowercase=self.cfg.data.lowercase
                )
        return self._student_tok

    @property
    def teacher_tok(self):
        if self._teacher_tok is None:
            init = self.cfg.teacher.init
            self._teacher_tok = AutoTokenizer.from_pretrained(init) if init else self.student_tok
        return self._teacher_tok

    def causal_teacher(self) -> Path:
        """The causal LM the chain starts from."""
        if self.cfg.teacher.init:
            return Path(self.cfg.teacher.init)
        path = stage_output(self.out, "teacher")
        if path is None:
            raise FileNotFoundError(f"no teacher in {self.out / 'teacher'}: run the teacher stage or set teacher.init")
        return path

    def final_teacher(self) -> Path:
        """The most trained LLM: SimCSE's output, else MNTP's, else the causal teacher."""
        for stage in ("simcse", "mntp"):
            path = stage_output(self.out, stage)
            if path is not None:
                return path
        return self.causal_teacher()

    def stage(
        self,
        name: str,
        steps_cfg: RunConfig,
        optim: OptimConfig,
        build: Callable[[Path | None], nn.Module],
        items: list[list[str]],
        collate,
        save_extra: Callable[[Path], None] | None = None,
    ) -> Path:
        """Run one stage as a resumable training run in ``OUT/name``; its model folder."""
        run_dir = self.out / name
        if Trainer.is_finished(run_dir, steps_cfg.steps):
            log.info("stage %s: already finished in %s (delete that folder to run it again)", name, run_dir)
            return stage_output(self.out, name)
        resume = self.resume and Trainer.checkpoint_step(run_dir) is not None
        trainer = Trainer(
            run_dir, steps_cfg, optim, self.cfg, resume=resume, progress=self.progress, resume_ignores=_later(name)
        )
        trainer.fit(_Stage(name, build, items, collate, steps_cfg.seed, save_extra))
        return stage_output(self.out, name)


# Config sections in the order the stages first read them; a stage's resume ignores changes to later ones.
_SECTIONS = ("teacher", "mntp", "simcse", "student", "distill", "mlm")
_LAST_READ = {"teacher": "teacher", "mntp": "mntp", "simcse": "simcse", "distill": "distill"}


def _later(stage: str) -> tuple[str, ...]:
    """Config keys a stage does not depend on: the evaluation's, and the sections of the stages after it."""
    last = _SECTIONS.index(_LAST_READ.get(stage, "mlm"))
    return ("stages", "eval", "split", *_SECTIONS[last + 1 :])


class _Stage(Task):
    """One stage of the chain as a trainer task."""

    def __init__(self, name: str, build, items, collate, seed: int, save_extra) -> None:
        self.name, self._build, self.items, self._collate, self.seed = name, build, items, collate, seed
        self._save_extra = save_extra

    def build(self, out: Path, checkpoint: Path | None) -> nn.Module:
        return self._build(checkpoint)

    def dataset(self) -> EpochDataset:
        return EpochDataset(self.items, self.seed)

    def collate(self, model: nn.Module):
        return self._collate

    def save_extra(self, model_dir: Path) -> None:
        if self._save_extra is not None:
            self._save_extra(model_dir)


class _CausalLM(nn.Module):
    """A causal LM with ``forward(batch)`` → losses, for the shared loop."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, batch: dict) -> dict:
        out = self.lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        return {"loss": out.loss}

    def save_pretrained(self, path: Path) -> None:
        self.lm.save_pretrained(path)


def _teacher(chain: _Chain) -> None:
    cfg, t = chain.cfg, chain.cfg.teacher
    if t.init:
        log.info("stage teacher: using the causal LM in %s", t.init)
        return
    tok = chain.student_tok

    def build(ckpt: Path | None) -> nn.Module:
        if ckpt is not None:
            return _CausalLM(load_lm(ckpt))
        return _CausalLM(tiny_llama(tok, t.hidden_size, t.layers, t.heads, t.intermediate_size, cfg.data.max_tokens))

    chain.stage(
        "teacher",
        t.run,
        t.optim,
        build,
        chain.corpus.sequences(),
        WordsCollator(tok, cfg.data.max_tokens),
        save_extra=tok.save_pretrained,
    )


def _bidirectional(ckpt: Path | None, start: Path) -> BidirectionalLM:
    lm = load_lm(ckpt if ckpt is not None else start)
    return lm if isinstance(lm, BidirectionalLM) else BidirectionalLM(lm)


def _mntp(chain: _Chain) -> None:
    cfg, tok = chain.cfg, chain.teacher_tok
    start = chain.causal_teacher()
    collate = WordsCollator(tok, cfg.data.max_tokens, cfg.mntp.mask_probability, seed=cfg.mntp.run.seed)
    chain.stage(
        "mntp",
        cfg.mntp.run,
        cfg.mntp.optim,
        lambda c: MntpModel(_bidirectional(c, start)),
        chain.corpus.sequences(),
        collate,
        save_extra=tok.save_pretrained,
    )


def _simcse(chain: _Chain) -> None:
    cfg, tok = chain.cfg, chain.teacher_tok
    start = stage_output(chain.out, "mntp") or chain.causal_teacher()
    s = cfg.simcse
    chain.stage(
        "simcse",
        s.run,
        s.optim,
        lambda c: SimcseModel(_bidirectional(c, start), s.dropout, s.scale),
        chain.corpus.sentences(),
        WordsCollator(tok, cfg.data.max_tokens),
        save_extra=tok.save_pretrained,
    )


def _fresh_student(chain: _Chain) -> BertForMaskedLM:
    s = chain.cfg.student
    return student_bert(chain.student_tok, s.hidden_size, s.layers, s.heads, s.intermediate_size, s.max_positions)


def _distill(chain: _Chain) -> None:
    cfg = chain.cfg
    teacher_dir = chain.final_teacher()
    log.info("stage distill: teacher %s", teacher_dir)

    def build(ckpt: Path | None) -> Distiller:
        teacher = _bidirectional(None, teacher_dir)
        student = BertForMaskedLM.from_pretrained(ckpt) if ckpt is not None else _fresh_student(chain)
        model = Distiller(teacher, student, cfg.distill.hidden_weight, cfg.distill.pooled_weight)
        if ckpt is not None:
            model.load_projection(ckpt)
        return model

    collate = PairCollator(chain.student_tok, chain.teacher_tok, cfg.data.max_tokens)
    chain.stage(
        "distill",
        cfg.distill.run,
        cfg.distill.optim,
        build,
        chain.corpus.sequences(),
        collate,
        save_extra=chain.student_tok.save_pretrained,
    )


class _MaskedLM(nn.Module):
    """BertForMaskedLM with ``forward(batch)`` → losses, for the shared loop; with a ``distiller`` (sharing the
    same student) the distillation loss on the unmasked words is added with weight ``weight``."""

    def __init__(self, bert: BertForMaskedLM, distiller: Distiller | None = None, weight: float = 0.0) -> None:
        super().__init__()
        self.bert, self.distiller, self.weight = bert, distiller, weight

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.named_parameters() if not n.startswith("distiller.teacher.")]

    def forward(self, batch: dict) -> dict:
        out = self.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        labels = batch["labels"]
        hit = (out.logits.argmax(-1) == labels)[labels != -100]
        losses = {"mlm": out.loss, "acc": hit.float().mean()}
        loss = out.loss
        if self.distiller is not None:
            d = self.distiller(batch)
            loss = loss + self.weight * d.pop("loss")
            losses.update(d)
        return {"loss": loss, **losses}

    def save_pretrained(self, path: Path) -> None:
        if self.distiller is not None:
            self.distiller.save_pretrained(path)  # the student (= self.bert) and the projection
        else:
            self.bert.save_pretrained(path)


class _MlmPairCollator:
    """MLM-masked student tokens plus the unmasked words for both tokenizers (MLM with distillation)."""

    def __init__(self, masked: WordsCollator, pair: PairCollator) -> None:
        self.masked, self.pair = masked, pair

    def __call__(self, items):
        m, p = self.masked(items), self.pair(items)
        return None if m is None else {**m, **p}


def _mlm(chain: _Chain, name: str, start: Path | None, steps: int, distill_weight: float = 0.0) -> Path:
    cfg = chain.cfg
    run = dataclasses.replace(cfg.mlm.run, steps=steps)
    teacher_dir = chain.final_teacher() if distill_weight > 0 else None

    def build(ckpt: Path | None) -> nn.Module:
        src = ckpt or start
        bert = BertForMaskedLM.from_pretrained(src) if src is not None else _fresh_student(chain)
        if teacher_dir is None:
            return _MaskedLM(bert)
        distiller = Distiller(
            _bidirectional(None, teacher_dir), bert, cfg.distill.hidden_weight, cfg.distill.pooled_weight
        )
        if src is not None and (Path(src) / PROJECTION).is_file():
            distiller.load_projection(src)
        return _MaskedLM(bert, distiller, distill_weight)

    collate = WordsCollator(chain.student_tok, cfg.data.max_tokens, cfg.mlm.mask_probability, seed=run.seed)
    if teacher_dir is not None:
        collate = _MlmPairCollator(collate, PairCollator(chain.student_tok, chain.teacher_tok, cfg.data.max_tokens))
    return chain.stage(
        name, run, cfg.mlm.optim, build, chain.corpus.ocr, collate, save_extra=chain.student_tok.save_pretrained
    )


def _final_mlm(chain: _Chain) -> None:
    cfg = chain.cfg
    start = Path(cfg.mlm.init) if cfg.mlm.init else stage_output(chain.out, "distill")
    if start is None:
        raise FileNotFoundError("the mlm stage needs a distilled student: run the distill stage or set mlm.init")
    model_dir = _mlm(chain, "mlm", start, cfg.mlm.run.steps, cfg.mlm.distill_weight)
    for f in model_dir.iterdir():  # the result, loadable from OUT itself
        if f.is_file() and f.name != PROJECTION:
            shutil.copy2(f, chain.out / f.name)
    log.info("text encoder written to %s", chain.out)


def _baseline(chain: _Chain) -> None:
    _mlm(chain, "baseline", None, chain.cfg.distill.run.steps + chain.cfg.mlm.run.steps)


def _evaluate(chain: _Chain) -> dict:
    cfg, out = chain.cfg, chain.out
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rs = ev.retrieval_set(cfg.eval.data, cfg.split, cfg.eval.max_pages)
    texts = ev.agreement_texts(rs, cfg.eval.agreement_texts)
    mt, bs = cfg.data.max_tokens, cfg.eval.batch_size
    teacher_dir = chain.final_teacher()
    reference = ev.model_embedder(
        _bidirectional(None, teacher_dir), chain.teacher_tok, "bidirectional", mt, bs, device
    )(texts)
    embedders: dict[str, ev.Embedder] = {"lexical (hashed content words)": ev.lexical_embedder()}
    causal = chain.causal_teacher()
    lm = load_lm(causal)
    if not isinstance(lm, BidirectionalLM):
        embedders["teacher: causal LM"] = ev.model_embedder(lm, chain.teacher_tok, "causal", mt, bs, device)
        embedders["teacher: bidirectional, untrained"] = ev.model_embedder(
            BidirectionalLM(load_lm(causal)), chain.teacher_tok, "bidirectional", mt, bs, device
        )
    for stage, label in (("mntp", "teacher: + MNTP"), ("simcse", "teacher: + MNTP + SimCSE (LLM2Vec)")):
        path = stage_output(out, stage)
        if path is not None:
            embedders[label] = ev.model_embedder(
                _bidirectional(None, path), chain.teacher_tok, "bidirectional", mt, bs, device
            )
    torch.manual_seed(cfg.distill.run.seed)
    embedders["BERT: random init"] = ev.model_embedder(_fresh_student(chain), chain.student_tok, "bert", mt, bs, device)
    for stage, label in (
        ("distill", "BERT: distilled"),
        ("mlm", "BERT: distilled + MLM (final)"),
        ("baseline", "BERT: MLM only"),
    ):
        path = stage_output(out, stage)
        if path is not None:
            embedders[label] = ev.model_embedder(
                BertForMaskedLM.from_pretrained(path), chain.student_tok, "bert", mt, bs, device
            )
    results = {}
    for label, embed in embedders.items():
        r = ev.retrieval_scores(embed, rs)
        r["agreement"] = ev.agreement(embed(texts), reference)
        results[label] = r
        log.info("%s: %s", label, {k: round(v, 3) for k, v in r.items()})
    report = {
        "questions": len(rs),
        "held_out_questions": sum(rs.held_out),
        "pages": len(rs.lines),
        "mean_lines_per_page": sum(map(len, rs.lines)) / len(rs.lines),
        "teacher": str(teacher_dir),
        "results": results,
    }
    (out / "eval.json").write_text(json.dumps(report, indent=1))
    (out / "eval.md").write_text(ev.markdown_table(results) + "\n")
    ev.plot_results(results, out / "eval.png")
    return report


def run_chain(cfg: TextEncoderConfig, out: Path, resume: bool = False, progress: bool = True) -> dict:
    """Run the configured stages into ``out``; the evaluation report (or {} when ``eval`` is not run)."""
    cfg.stages = [s.strip() for item in cfg.stages for s in item.split(",") if s.strip()]
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; stages are {', '.join(STAGES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "text_encoder.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    chain = _Chain(cfg, out, resume, progress)
    runners = {
        "teacher": _teacher,
        "mntp": _mntp,
        "simcse": _simcse,
        "distill": _distill,
        "mlm": _final_mlm,
        "baseline": _baseline,
    }
    report: dict = {}
    for stage in STAGES:
        if stage not in cfg.stages:
            continue
        log.info("stage %s", stage)
        if stage == "eval":
            report = _evaluate(chain)
        else:
            runners[stage](chain)
    return report
