"""The text-encoder chain: decoder-only LLM → LLM2Vec (bidirectional, MNTP, SimCSE) → distilled BERT → MLM."""

from .config import STAGES, TextEncoderConfig
from .corpus import Corpus, CorpusConfig, build_corpus, page_lines
from .distill import Distiller, student_bert
from .llm2vec import BidirectionalLM, load_lm, mean_pool, mntp_loss, simcse_loss, tiny_llama, word_pool
from .pipeline import run_chain

__all__ = [
    "STAGES",
    "BidirectionalLM",
    "Corpus",
    "CorpusConfig",
    "Distiller",
    "TextEncoderConfig",
    "build_corpus",
    "load_lm",
    "mean_pool",
    "mntp_loss",
    "page_lines",
    "run_chain",
    "simcse_loss",
    "student_bert",
    "tiny_llama",
    "word_pool",
]
