"""Review: the next annotation to review (people's, or a sample of automatic labels), decisions, the audit log."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from .. import store
from ..dependencies import DB, Id, Reviewer
from ..schemas import MAX_INT, ReviewIn

router = APIRouter(prefix="/api", tags=["review"])


@router.get("/review/next")
def review_next(
    who: Reviewer,
    db: DB,
    source: Literal["human", "machine"] | None = None,
    after: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
):
    """The next annotation to review; ``after``: the one passed over (Next), so another comes."""
    a = store.next_for_review(db, who, source, after)
    return a if a is not None else JSONResponse({"detail": "nothing to review"}, status_code=404)


@router.post("/annotations/{annotation_id}/review")
def review(annotation_id: Id, body: ReviewIn, who: Reviewer, db: DB) -> dict:
    fix = None
    if body.fix is not None:
        page = store.page_info(db, store.get_annotation(db, annotation_id)["page_id"])
        fix = body.fix.to_answer(page["height"], page["width"])
    return store.review_annotation(db, annotation_id, body.version, who, body.decision, body.reason, fix)


@router.get("/annotations/{annotation_id}/audit")
def audit(annotation_id: Id, who: Reviewer, db: DB) -> list:
    """Every change of one annotation; 404 for an id no annotation has."""
    store.get_annotation(db, annotation_id)  # NotFound → 404
    return store.audit_log(db, annotation_id)
