"""``docjepa engine retrain``: one retraining round.

Export the accepted annotations by document into train / validation shards, fine-tune from the serving model
with the ``finetune`` command in a child process (a server started the round and keeps serving), score the
serving model and the new one on the same held-out annotated pages, and promote the new one only when it is better
(the serving model setting changes; a running server picks it up before its next proposal). Each round is a row.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from sqlalchemy import select

from ...core.errors import UsageError
from . import store
from .db import Database
from .export import export
from .model import DEFAULT_CONFIG, EngineModel, model_version
from .tables import Annotation, Round, now


def serving_checkpoint(db: Database) -> str:
    """The serving model; UsageError when none was set."""
    checkpoint = store.serving_model(db)
    if checkpoint is None:
        raise UsageError("no serving model: run `docjepa engine init --checkpoint RUN` first")
    return checkpoint


def work_with(db: Database, version: str) -> dict:
    """Seconds and edits per mask of people's annotations proposed by a model version."""
    with db.read() as s:
        rows = list(
            s.execute(
                select(Annotation.seconds, Annotation.edits, Annotation.outcome).where(
                    Annotation.model_version == version, Annotation.source == "human"
                )
            )
        )
    if not rows:
        return {"annotations": 0}
    sec, edits, outcome = zip(*rows)
    return {
        "annotations": len(rows),
        "seconds_per_mask": float(np.mean(sec)),
        "edits_per_mask": float(np.mean(edits)),
        "accepted_as_is": float(np.mean([o == "accepted" for o in outcome])),
    }


def retrain(
    db: Database,
    out: Path,
    steps: int = 200,
    include_machine: bool = False,
    val_fraction: float = 0.2,
    min_gain: float = 0.0,
    config: str | None = DEFAULT_CONFIG,
    threads: int | None = None,
    train: Callable[[str, Path, Path], Path] | None = None,
) -> dict:
    """Run one round into ``out`` (``data/``, ``model/``); returns its report (also in the ``rounds`` table).
    ``train(serving, train_dir, run_dir)``: how the new model is made (default: ``docjepa finetune`` in a child
    process, :meth:`EngineModel.fine_tune`)."""
    from ...modeling.files import resolve_model_dir

    serving = serving_checkpoint(db)
    base_version = model_version(resolve_model_dir(serving))
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty: give each round its own folder")
    with db.write() as s:
        row = Round(
            started_at=now(),
            status="running",
            out=str(out),
            base_checkpoint=serving,
            base_version=base_version,
            promoted=False,
        )
        s.add(row)
        s.flush()
        round_id = row.id
    report: dict = {"round": round_id, "serving": serving, "base_version": base_version}
    try:
        sources = ("human", "machine") if include_machine else ("human",)
        data = export(db, "shards", out / "data", val_fraction=val_fraction, sources=sources)
        report["data"] = {"train": data["train"], "val": data["val"], "sources": list(sources)}
        if not data["train"]["questions"] or not data["val"]["questions"]:
            raise UsageError(
                "too few annotated documents for a round: both the training and the validation part "
                f"need annotations (train {data['train']['questions']}, val {data['val']['questions']})"
            )
        report["work_with_serving_model"] = work_with(db, base_version)
        base, val = EngineModel(serving, device="cpu"), out / "data" / "val"
        report["before"] = base.score(val)
        new, report["after"] = base.improve(
            out / "data" / "train", out / "model", steps, val, train=train, config=config, threads=threads, child=True
        )
        report["new_version"] = new.version
        promoted = report["after"]["mIoU"] > report["before"]["mIoU"] + min_gain
        report["promoted"] = promoted
        with db.write() as s:
            row = s.get(Round, round_id)
            row.status, row.finished_at, row.report = "done", now(), report
            row.new_checkpoint, row.new_version, row.promoted = (
                str(Path(new.checkpoint).resolve()),
                new.version,
                promoted,
            )
            if promoted:
                s.merge(store.serving_setting(new.checkpoint))
    except BaseException as err:
        with db.write() as s:
            row = s.get(Round, round_id)
            row.status, row.finished_at = "failed", now()
            row.report = report | {"error": f"{type(err).__name__}: {err}"}
        raise
    return report


def list_rounds(db: Database) -> list[dict]:
    with db.read() as s:
        return [
            {
                "id": r.id,
                "status": r.status,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "base_version": r.base_version,
                "new_version": r.new_version,
                "promoted": r.promoted,
                "report": r.report,
            }
            for r in s.scalars(select(Round).order_by(Round.id))
        ]
