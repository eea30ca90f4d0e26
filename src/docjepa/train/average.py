"""Weight averaging: one model whose weights are the mean of several checkpoints of one training run.

A run that keeps its checkpoints (``--run.keep_checkpoints``) holds points along the end of its trajectory; their
mean (stochastic weight averaging's, taken after the run from the saved checkpoints) is a model of the same shape
that no single step reached. ``docjepa average RUN --out DIR`` writes it as a model folder every command loads:
the newest chosen checkpoint's files (config, tokenizers) with each weight file replaced by the mean of that file
over the chosen checkpoints, accumulated in float64 and stored in each tensor's own dtype. Integer tensors (counts,
indices) are not averaged: they must be equal in every checkpoint. The newest checkpoint's ``calibration.json`` is
left out, since it was fitted to other weights (calibrate the average with ``docjepa calibrate``); ``averaged.json``
records which checkpoints went in.

By default the checkpoints of the run's second half are averaged (those at or after half the newest step).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..core.errors import UsageError
from ..inference.calibration import FILE as CALIBRATION
from ..modeling.files import model_kind

RECORD = "averaged.json"
"""The file of an averaged model folder that names its run and the checkpoints averaged."""


def run_checkpoints(run: Path) -> list[tuple[int, Path]]:
    """A run's complete checkpoints (those with ``state.pt`` and a model folder), as (step, folder), oldest first."""
    root = Path(run) / "checkpoints"
    if not root.is_dir():
        raise UsageError(f"{run} is not a training run (it has no checkpoints/ folder)")
    found = []
    for path in root.glob("step-*"):
        if (path / "state.pt").is_file() and (path / "model" / "config.json").is_file():
            found.append((int(path.name.removeprefix("step-")), path))
    return sorted(found)


def choose(checkpoints: list[tuple[int, Path]], last: int | None = None, from_step: int | None = None):
    """The checkpoints to average: the ``last`` newest, or those at or after ``from_step``, or (neither given) those
    at or after half the newest step. At least two, else a :class:`UsageError` that says what the run holds."""
    if last is not None and from_step is not None:
        raise UsageError("give --last or --from-step, not both")
    if last is not None and last < 2:
        raise UsageError(f"--last must be at least 2 (one checkpoint is no average), got {last}")
    if not checkpoints:
        raise UsageError("the run has no complete checkpoint")
    if last is not None:
        chosen = checkpoints[-last:]
    else:
        start = checkpoints[-1][0] // 2 if from_step is None else from_step
        chosen = [(step, path) for step, path in checkpoints if step >= start]
    if len(chosen) < 2 or (last is not None and len(chosen) < last):
        steps = ", ".join(str(step) for step, _ in checkpoints)
        wanted = f"the last {last}" if last is not None else f"those from step {start}"
        raise UsageError(
            f"cannot average {wanted}: the run keeps checkpoints at steps {steps or 'none'} (train with "
            "--run.keep_checkpoints=N and a --run.checkpoint_every that leaves several in the part to average)"
        )
    return chosen


def _mean_file(files: list[Path]) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    """The mean of one weight file over its copies in several checkpoints (float64 sums), and its metadata."""
    sums: dict[str, torch.Tensor] = {}
    with safe_open(str(files[-1]), framework="pt") as f:
        names, metadata = set(f.keys()), f.metadata()
        newest = {name: f.get_tensor(name) for name in names}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != names:
                differ = sorted(set(f.keys()) ^ names)
                raise UsageError(f"{path} and {files[-1]} hold different tensors ({', '.join(differ[:3])}, …)")
            for name in names:
                t, ref = f.get_tensor(name), newest[name]
                if t.shape != ref.shape or t.dtype != ref.dtype:
                    here, there = f"{tuple(t.shape)} {t.dtype}", f"{tuple(ref.shape)} {ref.dtype}"
                    raise UsageError(f"{name} is {here} in {path}, {there} in {files[-1]}")
                if not t.is_floating_point():
                    if not torch.equal(t, ref):
                        raise UsageError(f"{name} (an integer tensor) differs between {path} and {files[-1]}")
                    continue
                sums[name] = sums[name] + t.double() if name in sums else t.double()
    mean = {n: (sums[n] / len(files)).to(newest[n].dtype) if n in sums else newest[n] for n in sorted(names)}
    return mean, metadata


def average_checkpoints(
    run: Path, out: Path, last: int | None = None, from_step: int | None = None
) -> dict[str, object]:
    """Write the mean of a run's chosen checkpoints (:func:`choose`) to the model folder ``out``; returns what
    ``averaged.json`` records. ``out`` must not exist yet; it is written under a temporary name and renamed."""
    run, out = Path(run), Path(out)
    if out.exists():
        raise UsageError(f"{out} already exists: give a new folder for the averaged model")
    chosen = choose(run_checkpoints(run), last, from_step)
    dirs = [path / "model" for _, path in chosen]
    kinds = {model_kind(d) for d in dirs}
    configs = {json.dumps(_architecture(d), sort_keys=True) for d in dirs}
    if len(kinds) > 1 or len(configs) > 1:
        raise UsageError(f"the checkpoints of {run} hold models of different architectures: they cannot be averaged")
    newest = dirs[-1]
    weights = sorted(p.name for p in newest.glob("*.safetensors"))
    if not weights:
        raise UsageError(f"{newest} has no .safetensors weights to average")
    tmp = out.parent / f".tmp-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    skip = {CALIBRATION, *weights}
    shutil.copytree(newest, tmp, ignore=lambda _dir, names: [n for n in names if _dir == str(newest) and n in skip])
    for name in weights:
        mean, metadata = _mean_file([d / name for d in dirs])
        save_file(mean, str(tmp / name), metadata=metadata)
    record = {"run": str(run), "steps": [step for step, _ in chosen], "weights": weights, "kind": kinds.pop()}
    (tmp / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    return record


def _architecture(model_dir: Path) -> dict:
    """A model folder's config without the fields that may differ between checkpoints of one architecture."""
    config = json.loads((model_dir / "config.json").read_text())
    return {k: v for k, v in config.items() if k not in ("transformers_version", "_name_or_path")}
