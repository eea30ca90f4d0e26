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
from ..modeling.files import SEGMENTATION, require_model, resolve_model_dir
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


def card_from_continuation(run: Path, heldout: Path, real: Path, commit: str, real_model: str | None = None) -> dict:
    """The model card of a fine-tuning run that started from the shipped model (``model.init=shipped``): the card of
    the model it started from (``RUN/init/model_card.json``) with this run added to its recipe's ``continued`` (the
    ``docjepa finetune`` command, commit and config, the starting weights' SHA-256, digests of the folders it was
    trained and calibrated on), and the scores of ``docjepa evaluate --out HELDOUT`` and of ``docjepa benchmark real
    run`` (``REAL``: its ``real.json``; the model named ``real_model``, or its only one)."""
    import yaml

    from ..inference.calibration import Calibration

    config_file, start = run / "config.yaml", run / "init" / "model_card.json"
    if not config_file.is_file() or not start.is_file():
        raise UsageError(f"{run} is neither a finished demo run nor a fine-tuning run started with model.init=shipped")
    config = yaml.safe_load(config_file.read_text())
    config["model"] = _portable(config.get("model", {}))
    base = json.loads(start.read_text())
    model_dir = require_model(run, (SEGMENTATION,), "export")
    cal = Calibration.load(model_dir)
    if cal is None:
        raise UsageError(f"{model_dir} has no calibration.json (calibrate the model first: docjepa calibrate)")
    held, bench = json.loads(Path(heldout).read_text()), json.loads(Path(real).read_text())
    models = bench.get("models", {})
    name = real_model or (next(iter(models)) if len(models) == 1 else None)
    if name not in models:
        raise UsageError(f"{real} holds the models {sorted(models)}: name this run's with --real-model")
    calibrated = list(cal.fitted_on.get("data", []))
    folders = [*config["data"]["train"], *calibrated]
    step = {
        "command": f"docjepa finetune --config {run}/config.yaml --out {run}",
        "commit": commit,
        "config": config,
        "start_weights_sha256": base["weights"]["sha256"],
        "calibrated_on": calibrated,
        "data": [data_digest(Path(f)) | _generated(Path(f)) for f in folders],
    }
    return {
        "name": base["name"],
        "recipe": {**base["recipe"], "continued": [*base["recipe"].get("continued", []), step]},
        "data": base["data"],
        "scores": {
            "heldout_synthetic": _scores(held),
            "real_pages": {
                **_scores({"model": models[name], "baseline": bench["baseline"]}),
                "questions": models[name]["n"],
            },
        },
    }


def _portable(model: dict) -> dict:
    """A run's ``model`` settings as another machine would give them: the packaged sentence encoder's folder, which
    a run records as this machine's path, named ``packaged`` again."""
    from ..modeling.sentence_encoder import packaged_sentence_encoder

    packaged = packaged_sentence_encoder()
    out = dict(model)
    for key in ("question_tower", "text_encoder"):
        value = out.get(key)
        if value and packaged is not None and Path(value).resolve() == Path(packaged).resolve():
            out[key] = "packaged"
    return out


def export_continued_model(
    run: Path, out: Path, heldout: Path, real: Path, commit: str | None = None, real_model: str | None = None
) -> dict:
    """Write the shipped form of a fine-tuning run that started from the shipped model, with its card
    (:func:`card_from_continuation`), into ``out``; returns the card."""
    run = Path(run)
    card = card_from_continuation(run, heldout, real, commit or git_commit(Path(__file__).parent), real_model)
    return export_model(resolve_model_dir(run), Path(out), card)  # checked by card_from_continuation


def export_demo_model(run: Path, out: Path, commit: str | None = None, name: str = "docjepa-tiny") -> dict:
    """Write the shipped form of ``run``'s fine-tuned model and its card into ``out``; returns the card."""
    run = Path(run)
    model_dir = require_model(run / "finetune", (SEGMENTATION,), "export")
    card = card_from_demo(run, commit or git_commit(Path(__file__).parent), name)
    return export_model(model_dir, Path(out), card)
