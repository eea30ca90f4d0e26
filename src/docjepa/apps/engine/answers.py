"""The model's answer to a question on a page, for the routers that ask it (a task's proposals and refinements, and
refining an annotation already saved)."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool

from . import store
from .schemas import ProposeIn, RefineIn


async def model_answer(proposer, cfg, db, page_id: int, body: ProposeIn | RefineIn, refine: bool) -> dict:
    """The candidates for ``body``'s question on page ``page_id`` (with its clicks, box and mask when ``refine``),
    each with its word-snapped mask as RLE under ``rle`` for the caller to keep or drop; 503 without a model."""
    if proposer is None:
        raise HTTPException(503, "no model: the server was started without --checkpoint")
    if proposer.due(cfg.follow_seconds):  # a retraining round may have promoted another model
        proposer.follow(await run_in_threadpool(store.serving_model, db))
    page = await run_in_threadpool(store.load_page, db, page_id)
    prompts = body.prompts(page.height, page.width) if refine else None
    return await proposer.propose(page_id, page, body.question.strip(), prompts)


async def recorded_answer(proposer, cfg, db, task_id: int, page_id: int, user_id: int, body, refine: bool) -> dict:
    """:func:`model_answer`, recorded as a proposal of task ``task_id`` made for ``user_id``: the answer carries
    its ``proposal_id``, which a save refers to (its provenance is read from the record, never from the client)."""
    answer = await model_answer(proposer, cfg, db, page_id, body, refine)
    clicks = len(body.points) if refine else 0
    answer["proposal_id"] = await run_in_threadpool(
        store.record_proposal,
        db,
        task_id,
        user_id,
        "refine" if refine else "propose",
        answer["model_version"],
        [c.pop("rle") for c in answer["candidates"]],
        [c["score"] for c in answer["candidates"]],
        answer["best"],
        clicks,
    )
    return answer
