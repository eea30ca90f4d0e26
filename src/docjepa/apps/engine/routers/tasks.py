"""Tasks: the next one (under a lease), renewing and releasing the lease, questions added, the model's proposals."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from .. import store
from ..answers import recorded_answer
from ..dependencies import DB, Admin, Config, Id, Model, User
from ..schemas import NewTask, ProposeIn, RefineIn

router = APIRouter(prefix="/api/tasks", tags=["tasks"])


@router.post("/next")
def next_task(who: User, db: DB, cfg: Config):
    task = store.claim_next(db, who["id"], cfg.lease_seconds)
    return task if task is not None else JSONResponse({"detail": "no open task"}, status_code=404)


@router.get("/{task_id}")
def get_task(task_id: Id, who: User, db: DB) -> dict:
    return store.task_for(db, task_id, who["id"])


@router.post("/{task_id}/renew")
def renew(task_id: Id, who: User, db: DB, cfg: Config) -> dict:
    return store.renew(db, task_id, who["id"], cfg.lease_seconds)


@router.post("/{task_id}/release")
def release(task_id: Id, who: User, db: DB) -> dict:
    store.release(db, task_id, who["id"])
    return {"ok": True}


@router.post("/{task_id}/missed")
def add_missed(task_id: Id, body: ProposeIn, who: User, db: DB) -> dict:
    """A question the engine did not ask about the page of a task the caller holds: a new task on that page."""
    task = store.task_for(db, task_id, who["id"])
    return {"id": store.add_task(db, task["page_id"], body.question, kind="user")}


@router.post("")
def add_task(body: NewTask, who: Admin, db: DB) -> dict:
    return {"id": store.add_task(db, body.page_id, body.question)}


async def _answer(task_id: int, body: ProposeIn, who, db, cfg, proposer, refine: bool) -> dict:
    task = await run_in_threadpool(store.task_for, db, task_id, who["id"])
    if task["question"] is not None and body.question.strip() != task["question"]:
        raise store.Invalid("the question of this task cannot be changed")
    return await recorded_answer(proposer, cfg, db, task_id, task["page_id"], who["id"], body, refine)


@router.post("/{task_id}/propose")
async def propose(task_id: Id, body: ProposeIn, who: User, db: DB, cfg: Config, proposer: Model) -> dict:
    return await _answer(task_id, body, who, db, cfg, proposer, refine=False)


@router.post("/{task_id}/refine")
async def refine(task_id: Id, body: RefineIn, who: User, db: DB, cfg: Config, proposer: Model) -> dict:
    """The model answers again from the page's cached encoding, given the person's clicks, box and current mask."""
    return await _answer(task_id, body, who, db, cfg, proposer, refine=True)
