"""Annotations: saving a task's answer, one's own recent answers, reading one (and its mask), changing one."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, HTTPException, Response
from starlette.concurrency import run_in_threadpool

from .. import masks, store
from ..answers import recorded_answer
from ..dependencies import DB, Config, Id, Model, User
from ..schemas import AnswerIn, AnswerUpdate, RefineIn

router = APIRouter(prefix="/api", tags=["annotations"])


@router.post("/tasks/{task_id}/annotation")
def annotate(task_id: Id, body: AnswerIn, who: User, db: DB) -> dict:
    task = store.task_for(db, task_id, who["id"])
    answer = body.to_answer(task["page"]["height"], task["page"]["width"])
    return store.create_annotation(db, task_id, who["id"], answer)


@router.get("/annotations/mine")
def mine(who: User, db: DB, limit: int = 50, review: Literal["pending", "approved", "rejected"] | None = None) -> list:
    """The caller's annotations, newest first (``review=rejected``: the ones to redo, with the reason)."""
    return store.my_annotations(db, who["id"], max(1, min(limit, 500)), review)


@router.get("/annotations/{annotation_id}")
def get_annotation(annotation_id: Id, who: User, db: DB) -> dict:
    a = store.get_annotation(db, annotation_id)
    if a["user_id"] != who["id"] and store.rank(who["role"]) < store.rank("reviewer"):
        raise HTTPException(403, "this annotation is someone else's")
    return a | {"page": store.page_info(db, a["page_id"])}


@router.get("/annotations/{annotation_id}/mask.png")
def annotation_mask(annotation_id: Id, who: User, db: DB) -> Response:
    a = get_annotation(annotation_id, who, db)
    if not a["answerable"]:
        raise HTTPException(404, "this annotation says the question is not answerable on the page")
    return Response(masks.to_png(masks.decode(a["mask"])), media_type="image/png")


@router.put("/annotations/{annotation_id}")
def update(annotation_id: Id, body: AnswerUpdate, who: User, db: DB) -> dict:
    page = store.page_info(db, store.get_annotation(db, annotation_id)["page_id"])
    return store.update_annotation(db, annotation_id, body.version, who, body.to_answer(page["height"], page["width"]))


@router.post("/annotations/{annotation_id}/refine")
async def refine(annotation_id: Id, body: RefineIn, who: User, db: DB, cfg: Config, proposer: Model) -> dict:
    """The Model tool on an annotation already saved (one's own earlier answer, or one under review): the model
    answers again from the person's clicks, box and current mask, and the server records that answer as a proposal
    of the annotation's task for the caller (``proposal_id``). Nothing is saved until the annotation is; a save
    naming the proposal is counted by the same rule as any other (its candidate unchanged: ``refined``)."""
    a = await run_in_threadpool(get_annotation, annotation_id, who, db)
    if body.question.strip() != a["question"]:
        raise store.Invalid("the question of this annotation cannot be changed")
    return await recorded_answer(proposer, cfg, db, a["task_id"], a["page_id"], who["id"], body, refine=True)
