"""An offline embedding benchmark for the text-encoder chain, built from the project's documents.

* **Field retrieval.** For each question of an evaluation page whose answer is made of OCR words, the page's
  visual lines are ranked by cosine similarity between the question's embedding and each line's; a hit at k
  is a line holding an answer word among the top k. Recall@1/@5 are reported over all questions and over the
  questions from held-out templates (never in the training corpus), with the exact chance level of a random
  ranking next to them.
* **Agreement with the teacher.** The Spearman correlation between the pairwise cosine similarities that a
  model and the final teacher give to the same texts (questions and lines): 1 when both order every pair of
  texts alike; it needs no projection, so it applies to every model, including an MLM-only BERT.

Every embedding is the mean of the last hidden states over the non-padding tokens.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.lexical import STOP, normalise
from ..data.record import Word
from ..data.shards import iter_pages
from ..data.split import SplitConfig, template_held_out
from .corpus import encode_words, page_lines
from .llm2vec import BidirectionalLM, causal_hidden, mean_pool

Embedder = Callable[[Sequence[str]], Tensor]  # texts → (N, D), rows of unit length


@dataclass
class EvalConfig:
    """The embedding benchmark."""

    data: list[str] = field(default_factory=lambda: ["data/synth-eval"])
    """Folders of evaluation pages (generate them with another seed than the training pages)."""
    max_pages: int = 0
    """Pages read at most (0 = all)."""
    agreement_texts: int = 400
    """Texts whose pairwise similarities are compared with the teacher's."""
    batch_size: int = 64
    """Texts per forward pass."""


@dataclass
class RetrievalSet:
    """Questions, the lines of their pages, and which lines answer them."""

    lines: list[list[str]]
    """Line texts of each page."""
    questions: list[str]
    page: list[int]
    """Page of each question."""
    gold: list[set[int]]
    """Lines of the question's page that hold an answer word."""
    held_out: list[bool]
    """Question from a held-out template."""

    def __len__(self) -> int:
        return len(self.questions)


def retrieval_set(roots: Sequence[str], split: SplitConfig | None = None, max_pages: int = 0) -> RetrievalSet:
    """Read the evaluation pages; questions whose answers have no OCR words (whole columns…) are left out."""
    split = split or SplitConfig()
    rs = RetrievalSet([], [], [], [], [])
    for root in roots:
        for row in iter_pages(Path(root), columns=["words", "questions"]):
            if max_pages and len(rs.lines) >= max_pages:
                break
            words = [Word(w["text"], tuple(w["box"])) for w in row["words"]]
            groups = page_lines(words)
            line_of = {i: n for n, g in enumerate(groups) for i in g}
            p = len(rs.lines)
            rs.lines.append([" ".join(words[i].text for i in g) for g in groups])
            for q in row["questions"]:
                gold = {line_of[i] for a in q["answers"] for i in a["word_ids"] if i in line_of}
                if not gold or len(groups) < 2:
                    continue
                rs.questions.append(q["text"])
                rs.page.append(p)
                rs.gold.append(gold)
                rs.held_out.append(template_held_out(q.get("template") or "", split))
    if not rs.questions:
        raise ValueError(f"no questions with OCR answers in {', '.join(roots)}")
    return rs


def chance_recall(n: int, gold: int, k: int) -> float:
    """Probability that a random ranking of n lines puts one of ``gold`` lines in its top k."""
    if k >= n:
        return 1.0
    return 1.0 - math.comb(n - gold, k) / math.comb(n, k)


def retrieval_scores(embed: Embedder, rs: RetrievalSet, ks: Sequence[int] = (1, 5)) -> dict[str, float]:
    """Recall@k over all questions and over held-out-template questions, and their chance levels."""
    q = embed(rs.questions)  # (Q, D)
    flat = [t for lines in rs.lines for t in lines]
    start = [0]
    for lines in rs.lines:
        start.append(start[-1] + len(lines))
    lines = embed(flat)  # (N, D)
    hits = {k: [] for k in ks}
    chance = {k: [] for k in ks}
    for i in range(len(rs)):
        p = rs.page[i]
        cand = lines[start[p] : start[p + 1]]  # (n, D)
        order = torch.argsort(cand @ q[i], descending=True).tolist()
        for k in ks:
            hits[k].append(bool(rs.gold[i] & set(order[:k])))
            chance[k].append(chance_recall(len(cand), len(rs.gold[i]), k))
    held = [i for i in range(len(rs)) if rs.held_out[i]]
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = sum(hits[k]) / len(rs)
        out[f"recall@{k}_heldout"] = sum(hits[k][i] for i in held) / len(held) if held else float("nan")
        out[f"chance@{k}"] = sum(chance[k]) / len(rs)
    return out


def _ranks(x: Tensor) -> Tensor:
    return torch.argsort(torch.argsort(x)).double()


def agreement(a: Tensor, b: Tensor) -> float:
    """Spearman correlation of the pairwise cosine similarities of two embeddings (N, D₁), (N, D₂) of the same
    N texts (upper triangle, ties broken by position)."""
    iu = torch.triu_indices(len(a), len(a), offset=1)
    sa = (a.double() @ a.double().T)[iu[0], iu[1]]
    sb = (b.double() @ b.double().T)[iu[0], iu[1]]
    ra, rb = _ranks(sa), _ranks(sb)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra @ rb) / (ra.norm() * rb.norm()))


def lexical_embedder(dim: int = 4096) -> Embedder:
    """Bag of normalised content words, hashed into ``dim`` buckets: the no-learning reference."""

    def embed(texts: Sequence[str]) -> Tensor:
        out = torch.zeros(len(texts), dim)
        for i, text in enumerate(texts):
            for w in text.split():
                n = normalise(w)
                if n and n not in STOP:
                    out[i, zlib.crc32(n.encode()) % dim] += 1
        return F.normalize(out, dim=-1)

    return embed


def model_embedder(
    model: nn.Module, tokenizer, kind: str, max_tokens: int, batch_size: int = 64, device: torch.device | str = "cpu"
) -> Embedder:
    """Mean-pooled last hidden states of a ``causal`` LM, a ``bidirectional`` LM or a ``bert`` encoder."""
    if kind not in ("causal", "bidirectional", "bert"):
        raise ValueError(f"unknown embedder kind {kind!r}")
    model = model.to(device).eval()

    @torch.no_grad()
    def embed(texts: Sequence[str]) -> Tensor:
        chunks = []
        for s in range(0, len(texts), batch_size):
            enc = encode_words(tokenizer, [t.split() or ["."] for t in texts[s : s + batch_size]], max_tokens)
            ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
            if kind == "causal":
                h = causal_hidden(model, ids, mask)
            elif kind == "bidirectional":
                assert isinstance(model, BidirectionalLM)
                h = model.hidden(ids, mask)
            else:
                bert = getattr(model, "bert", model)
                h = bert(input_ids=ids, attention_mask=mask).last_hidden_state
            chunks.append(F.normalize(mean_pool(h, mask).float(), dim=-1).cpu())
        return torch.cat(chunks)

    return embed


def agreement_texts(rs: RetrievalSet, n: int) -> list[str]:
    """A fixed, spread-out sample of ``n`` question and line texts."""
    pool = list(dict.fromkeys(rs.questions + [t for lines in rs.lines for t in lines]))
    step = max(1, len(pool) // n)
    return pool[::step][:n]


def plot_results(results: dict[str, dict[str, float]], path: Path) -> None:
    """Horizontal bars of recall@1 and recall@5 per model, with the chance levels as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    y = torch.arange(len(names)).float()
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.5))
    ax.barh(y - 0.2, [results[n]["recall@1"] for n in names], height=0.4, label="recall@1")
    ax.barh(y + 0.2, [results[n]["recall@5"] for n in names], height=0.4, label="recall@5")
    any_row = next(iter(results.values()))
    ax.axvline(any_row["chance@1"], color="C0", ls=":", label="chance@1")
    ax.axvline(any_row["chance@5"], color="C1", ls=":", label="chance@5")
    ax.set_yticks(y.tolist(), names)
    ax.invert_yaxis()
    ax.set_xlabel("field-line retrieval from the question (evaluation pages)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    """The results as a markdown table."""
    rows = [
        "| model | recall@1 | recall@5 | recall@1 held-out templates | recall@5 held-out | agreement with teacher |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        agree = r.get("agreement", float("nan"))
        rows.append(
            f"| {name} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@1_heldout']:.3f} | "
            f"{r['recall@5_heldout']:.3f} | {'—' if math.isnan(agree) else f'{agree:.3f}'} |"
        )
    any_row = next(iter(results.values()))
    rows.append(f"| chance | {any_row['chance@1']:.3f} | {any_row['chance@5']:.3f} | | | |")
    return "\n".join(rows)
