"""Review: approve, reject or fix an annotation; what a reviewer sees next."""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select

from ..db import Database
from ..tables import Annotation, PageRow
from .accounts import rank
from .annotations import Answer, annotation_json, check_answer, same_question, versioned_update
from .errors import Forbidden, Invalid, NotFound
from .pages import page_json
from .proposals import origin_of_change


def review_annotation(
    db: Database,
    annotation_id: int,
    version: int,
    user: dict,
    decision: str,
    reason: str = "",
    fix: Answer | None = None,
) -> dict:
    """approve / reject (a reason is required) / fix (a corrected answer and a reason). Four eyes: nobody reviews
    an annotation they made or whose current content they changed, and a fix is not an approval: it becomes a
    new version, pending, that another reviewer (or an admin) reviews."""
    if rank(user["role"]) < rank("reviewer"):
        raise Forbidden("reviewing needs the reviewer or admin role")
    if decision not in ("approve", "reject", "fix"):
        raise Invalid("decision must be approve, reject or fix")
    if decision != "approve" and not reason.strip():
        raise Invalid(f"{decision} needs a reason")
    with db.read() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        author, editor, question, page = a.user_id, a.edited_by, a.question, s.get(PageRow, a.page_id)
        before = annotation_json(a)
    if author == user["id"]:
        raise Forbidden("an annotation is reviewed by someone other than its author")
    if editor == user["id"]:
        raise Forbidden("an annotation is reviewed by someone other than the person who last changed it")
    if decision == "fix":
        if fix is None:
            raise Invalid("fix needs the corrected answer")
        same_question(fix, question)
        rle, words = check_answer(fix, page)
        with db.read() as s:
            origin = origin_of_change(s, before, fix.proposal_id, fix.candidate, user["id"], rle, fix.answerable)
        values = {
            "mask": rle,
            "word_ids": words,
            "answerable": fix.answerable,
            **origin,
            "edited_by": user["id"],
            "review": "pending",
            "review_reason": reason.strip(),
            "reviewer_id": None,
        }
        return versioned_update(db, annotation_id, version, user, values, "review")
    values = {
        "review": "rejected" if decision == "reject" else "approved",
        "review_reason": reason.strip(),
        "reviewer_id": user["id"],
    }
    return versioned_update(db, annotation_id, version, user, values, "review")


def next_for_review(db: Database, user: dict, source: str | None = None, after: int | None = None) -> dict | None:
    """The oldest pending annotation made (and last changed) by someone else; with ``source="machine"``, a random
    pending automatic label (reviewers audit a sample of them). ``after``: the one the reviewer passes over (Next):
    the next after it in that order, wrapping around, and it again only when it is the only one left."""

    with db.read() as s:
        q = select(Annotation).where(
            Annotation.review == "pending",
            Annotation.user_id != user["id"],
            or_(Annotation.edited_by.is_(None), Annotation.edited_by != user["id"]),
        )
        if source is not None:
            q = q.where(Annotation.source == source)
        order = (func.random(),) if source == "machine" else (Annotation.updated_at, Annotation.id)
        a = None
        current = s.get(Annotation, after) if after is not None else None
        if current is not None:
            if source != "machine":
                later = or_(
                    Annotation.updated_at > current.updated_at,
                    and_(Annotation.updated_at == current.updated_at, Annotation.id > current.id),
                )
                a = s.scalar(q.where(later).order_by(*order).limit(1))
            if a is None:  # wrap around (or, for a random sample, any other)
                a = s.scalar(q.where(Annotation.id != current.id).order_by(*order).limit(1))
        if a is None:
            a = s.scalar(q.order_by(*order).limit(1))
        if a is None:
            return None
        return annotation_json(a) | {"page": page_json(s.get(PageRow, a.page_id))}
