"""The service's settings (the serving model) and its counts."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from ..db import Database
from ..tables import Annotation, PageRow, Setting, Task, User

SERVING = "checkpoint"
"""The setting that names the serving model: the one ``serve`` loads and retraining rounds replace."""


def serving_model(db: Database) -> str | None:
    """The serving model's run, checkpoint or model folder; None when none was set."""
    with db.read() as s:
        row = s.get(Setting, SERVING)
        return row.value if row is not None else None


def serving_setting(checkpoint: str | Path) -> Setting:
    """The row that makes ``checkpoint`` (resolved to an absolute path) the serving model; merged in a transaction
    (a retraining round promotes its model in the transaction that records the round)."""
    return Setting(key=SERVING, value=str(Path(checkpoint).resolve()))


def set_serving_model(db: Database, checkpoint: str | Path) -> str:
    """Make ``checkpoint`` the serving model; returns the path stored."""
    row = serving_setting(checkpoint)
    with db.write() as s:
        s.merge(row)
    return row.value


def counts(db: Database) -> dict:

    with db.read() as s:
        return {
            "pages": s.scalar(select(func.count()).select_from(PageRow)),
            "tasks_open": s.scalar(select(func.count()).select_from(Task).where(Task.status == "open")),
            "tasks_done": s.scalar(select(func.count()).select_from(Task).where(Task.status == "done")),
            "annotations": s.scalar(select(func.count()).select_from(Annotation)),
            "users": s.scalar(select(func.count()).select_from(User)),
        }
