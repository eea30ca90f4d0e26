"""``docjepa export-model``: a finished demo run → the shipped model folder and its model card.

The card records how to make the model again and what it scores: the ``docjepa demo`` command that trained it
(rebuilt from the run's own configuration), the commit of the code, a digest of every data folder it was
trained, calibrated and evaluated on, the real documents' packages, and the run's held-out synthetic and
real-page results against the OCR-matching baseline. The weights are written by
:func:`docjepa.modeling.shipped.export_model`.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import fields
from pathlib import Path

from ..core.errors import UsageError
from ..modeling.files import SEGMENTATION, require_model
from ..modeling.shipped import data_digest, export_model
from .demo import DemoConfig

FLAGGED = (
    "train_pages",
    "pretrain_steps",
    "finetune_steps",
    "seed",
    "phrasings",
    "question_tower",
    "text_encoder",
    "real",
    "real_max_pages",
    "threads",
)
"""DemoConfig fields that ``docjepa demo`` takes as options (the rest keep their defaults in a recipe)."""


def demo_command(config: dict, out: str) -> str:
    """The ``docjepa demo`` command that runs ``config`` (a results.json ``config``) into ``out``."""
    default = DemoConfig()
    differs = {
        f.name for f in fields(DemoConfig) if config.get(f.name, getattr(default, f.name)) != getattr(default, f.name)
    }
    fixed = differs - set(FLAGGED)
    if fixed:
        raise UsageError(f"the run changed {sorted(fixed)}, which docjepa demo takes no option for")
    args = [f"--{name.replace('_', '-')} {config[name]}" for name in FLAGGED if name in differs]
    return " ".join(["docjepa demo --out", out, *args])


def git_commit(repo: Path) -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise UsageError(f"no git commit at {repo} ({err}); give --commit") from None


def _scores(part: dict) -> dict:
    keep = ("n", "mIoU", "gIoU", "cIoU", "per_type")
    return {who: {k: part[who][k] for k in keep if k in part[who]} for who in ("model", "baseline")}


def card_from_demo(run: Path, commit: str, name: str) -> dict:
    """The model card of a finished demo run (its ``results.json`` and data folders)."""
    results_file = run / "results.json"
    if not results_file.is_file():
        raise UsageError(f"{run} has no results.json: finish the demo run first (docjepa demo --out {run})")
    results = json.loads(results_file.read_text())
    if "model" not in results.get("real", {}):
        raise UsageError(f"{run}'s results have no real-page score: the shipped model is chosen on it")
    data = sorted(p for p in (run / "data").iterdir() if p.is_dir())
    return {
        "name": name,
        "recipe": {
            "command": demo_command(results["config"], str(run.name if run.is_absolute() else run)),
            "commit": commit,
            "config": results["config"],
            "question_tower": results["question_tower"],
        },
        "data": {
            "folders": [data_digest(p) | _generated(p) for p in data],
            "real_documents": results["real_pages"].get("fetched", {}),
        },
        "scores": {
            "heldout_synthetic": _scores(results["heldout"]),
            "real_pages": {**_scores(results["real"]), "questions": results["real"]["questions"]},
        },
    }


def _generated(folder: Path) -> dict:
    marker = folder / "generated.json"
    return {"generated": json.loads(marker.read_text())} if marker.is_file() else {}


def export_demo_model(run: Path, out: Path, commit: str | None = None, name: str = "docjepa-tiny") -> dict:
    """Write the shipped form of ``run``'s fine-tuned model and its card into ``out``; returns the card."""
    run = Path(run)
    model_dir = require_model(run / "finetune", (SEGMENTATION,), "export")
    card = card_from_demo(run, commit or git_commit(Path(__file__).parent), name)
    return export_model(model_dir, Path(out), card)
