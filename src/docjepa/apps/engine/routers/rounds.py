"""Retraining rounds: the rounds so far, and a new one started in a child process."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter

from .. import launcher
from ..dependencies import DB, Admin, Config, Reviewer
from ..retrain import list_rounds
from ..schemas import RetrainIn

router = APIRouter(prefix="/api", tags=["rounds"])


@router.get("/rounds")
def rounds(who: Reviewer, db: DB) -> list:
    return list_rounds(db)


@router.post("/retrain")
def start_retrain(body: RetrainIn, who: Admin, cfg: Config) -> dict:
    """Start a retraining round in a child process (``docjepa engine retrain``); the server keeps serving and
    follows the promoted model. Its progress is in ``GET /api/rounds``."""
    out = Path(cfg.rounds_dir) / time.strftime("round-%Y%m%d-%H%M%S")
    args = ["engine", "retrain", "--db", cfg.db, "--out", out, "--steps", body.steps]
    proc = launcher.start(args + (["--include-machine"] if body.include_machine else []), Path(f"{out}.log"))
    return {"pid": proc.pid, "out": str(out), "log": f"{out}.log"}
