"""Where a saved model lies: a run folder (its newest complete checkpoint), a checkpoint folder, or a model folder.

Training runs write ``RUN/checkpoints/step-NNNNNNN/model`` (see ``docjepa.train.checkpoint``); every command
that loads a model accepts any of the three levels.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..core.errors import UsageError

# A saved model's kind is the class recorded in its config.json ("architectures", written by save_pretrained).
PRETRAINING, SEGMENTATION, BACKBONE = "DocJepaForPretraining", "DocJepaForSegmentation", "DocJepaModel"
KIND_NAMES = {
    PRETRAINING: "a pre-training checkpoint (docjepa pretrain)",
    SEGMENTATION: "a fine-tuned segmentation model (docjepa finetune)",
    BACKBONE: "a Document-JEPA backbone",
    "CLIPTextModel": "a question tower (docjepa pretrain-clip)",
    "BertModel": "a BERT text encoder (docjepa text-encoder)",
}


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    root = out / "checkpoints"
    for p in root.glob(".tmp-step-*"):  # leftovers of a run killed while writing
        shutil.rmtree(p, ignore_errors=True)
    pointer = root / "latest"
    if pointer.is_file():
        path = root / pointer.read_text().strip()
        if (path / "state.pt").is_file():
            return path
    done = sorted(p for p in root.glob("step-*") if (p / "state.pt").is_file())
    return done[-1] if done else None


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder from a run folder (its latest checkpoint), a checkpoint folder, or a model folder."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / "model" / "config.json").is_file():
        return path / "model"
    ckpt = latest_checkpoint(path) if (path / "checkpoints").is_dir() else None
    if ckpt is not None:
        return ckpt / "model"
    raise UsageError(f"no model at {path} (expected a run, checkpoint or model folder)")


def model_kind(model_dir: Path) -> str:
    """The class a model folder was saved from (``architectures`` of its config.json), else its ``model_type``."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{model_dir}/config.json cannot be read: {err}") from None
    arch = config.get("architectures") or []
    return arch[0] if arch else str(config.get("model_type", "unknown"))


def require_model(path: str | Path, kinds: tuple[str, ...], purpose: str) -> Path:
    """The model folder under ``path`` (see :func:`resolve_model_dir`), refused with one line unless it holds one
    of ``kinds``: a checkpoint of the wrong kind would otherwise load with random weights and give silent wrong
    answers."""
    model_dir = resolve_model_dir(path)
    kind = model_kind(model_dir)
    if kind not in kinds:
        found = KIND_NAMES.get(kind, f"a {kind} model")
        wanted = " or ".join(KIND_NAMES.get(k, k) for k in kinds)
        raise UsageError(f"{path} holds {found}; {purpose} needs {wanted}")
    return model_dir
