"""Annotations: people's answers and automatic labels, saved with optimistic concurrency (a version per row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select, update

from .. import masks
from ..db import Database
from ..tables import Annotation, PageRow, Task, User, now
from .accounts import rank
from .audit import audit_change
from .errors import Conflict, Forbidden, Invalid, NotFound
from .proposals import origin_of_change, provenance
from .tasks import held_task

MAX_EDITS = 2**31 - 1
"""The most edits an annotation may count (the column's range)."""
MAX_SECONDS = 24 * 3600
"""Longest time an annotation may report (a tab left open overnight is capped, not trusted)."""


@dataclass
class Answer:
    """What an annotator submits."""

    question: str
    answerable: bool
    mask: np.ndarray | None
    seconds: float = 0.0
    edits: int = 0
    candidate: int | None = None
    """The candidate of the proposal the answer started from (whether it was kept is decided from the mask)."""
    proposal_id: int | None = None
    """The proposal (recorded by the server) the answer started from; None: drawn without one."""
    model_version: str | None = None
    """Automatic labels only: the model that made it (people's saves take it from their proposal)."""
    reason: str = ""
    """Why someone changed another person's annotation (required then)."""


def check_answer(answer: Answer, page: PageRow) -> tuple[dict | None, list[int]]:
    if not answer.question.strip():
        raise Invalid("the question is empty")
    if len(answer.question) > 1000:
        raise Invalid("the question is longer than 1000 characters")
    if not 0 <= answer.seconds <= MAX_SECONDS:
        raise Invalid(f"seconds must be in [0, {MAX_SECONDS}]")
    if answer.edits < 0:
        raise Invalid("edits must be at least 0")
    if answer.candidate is not None and not 0 <= answer.candidate < 16:
        raise Invalid("candidate must be a candidate's index")
    if not answer.answerable:
        return None, []
    if answer.mask is None or not answer.mask.any():
        raise Invalid("the answer mask is empty: draw the answer, or mark the question not answerable on this page")
    if answer.mask.shape != (page.height, page.width):
        raise Invalid(f"the mask is {answer.mask.shape[1]}×{answer.mask.shape[0]}, the page {page.width}×{page.height}")
    return masks.encode(answer.mask), masks.words_inside(page.words, answer.mask)


def annotation_json(a: Annotation) -> dict:
    return {
        "id": a.id,
        "task_id": a.task_id,
        "page_id": a.page_id,
        "question": a.question,
        "answerable": a.answerable,
        "mask": a.mask,
        "word_ids": a.word_ids,
        "user_id": a.user_id,
        "model_version": a.model_version,
        "candidate": a.candidate,
        "proposal_id": a.proposal_id,
        "outcome": a.outcome,
        "clicks": a.clicks,
        "edited_by": a.edited_by,
        "seconds": a.seconds,
        "edits": a.edits,
        "review": a.review,
        "review_reason": a.review_reason,
        "reviewer_id": a.reviewer_id,
        "version": a.version,
        "source": a.source,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
    }


def create_annotation(db: Database, task_id: int, user_id: int, answer: Answer) -> dict:
    """Save the answer of a task the caller holds, and close the task, in one transaction."""
    with db.write() as s:
        task = held_task(s, task_id, user_id)
        page = s.get(PageRow, task.page_id)
        same_question(answer, task.question)
        rle, words = check_answer(answer, page)
        pid, version, candidate, outcome, clicks = provenance(
            s, answer.proposal_id, answer.candidate, task.id, user_id, rle, answer.answerable
        )
        origin = {"proposal_id": pid, "model_version": version, "candidate": candidate, "outcome": outcome}
        return _save_new(s, task, answer, rle, words, user_id, "human", user_id, {**origin, "clicks": clicks})


AUTOLABEL_USER = "autolabel"
"""The account automatic labels are made under (inactive: nobody signs in as it)."""


def machine_user(db: Database) -> int:
    with db.write() as s:
        uid = s.scalar(select(User.id).where(User.name == AUTOLABEL_USER))
        if uid is None:
            user = User(name=AUTOLABEL_USER, role="annotator", password_hash="!", active=False, created_at=now())
            s.add(user)
            s.flush()
            uid = user.id
        return uid


def create_machine_annotation(db: Database, task_id: int, mask: np.ndarray, model_version: str) -> dict | None:
    """An automatic label for an open task nobody holds; None when the task was taken or done meanwhile."""
    uid = machine_user(db)
    with db.write() as s:
        task = s.get(Task, task_id)
        if (
            task is None
            or task.status != "open"
            or (task.lease_user_id is not None and (task.lease_expires or 0) > now())
        ):
            return None
        page = s.get(PageRow, task.page_id)
        answer = Answer(task.question or "", True, mask)
        rle, words = check_answer(answer, page)
        origin = {"proposal_id": None, "model_version": model_version, "candidate": None, "outcome": "machine"}
        return _save_new(s, task, answer, rle, words, uid, "machine", None, origin)


def _save_new(
    s, task: Task, answer: Answer, rle, words: list[int], user_id: int, source: str, audit_user, origin: dict
) -> dict:
    """The first version of a task's annotation, audited, and the task closed, in the caller's transaction.
    ``origin``: where it came from (``proposal_id``, ``model_version``, ``candidate``, ``outcome``; ``clicks``)."""
    t = now()
    a = Annotation(
        task_id=task.id,
        page_id=task.page_id,
        question=answer.question.strip(),
        answerable=answer.answerable,
        mask=rle,
        word_ids=words,
        user_id=user_id,
        model_version=origin["model_version"],
        candidate=origin["candidate"],
        proposal_id=origin["proposal_id"],
        outcome=origin["outcome"],
        clicks=origin.get("clicks", 0),
        edited_by=user_id,
        seconds=float(answer.seconds),
        edits=int(answer.edits),
        review="pending",
        review_reason="",
        version=1,
        created_at=t,
        updated_at=t,
        source=source,
    )
    s.add(a)
    task.status, task.lease_user_id, task.lease_expires = "done", None, None
    s.flush()
    audit_change(s, audit_user, "create", a.id, None, annotation_json(a))
    return annotation_json(a)


def get_annotation(db: Database, annotation_id: int) -> dict:
    with db.read() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        return annotation_json(a)


def versioned_update(db: Database, annotation_id: int, version: int, user: dict, values: dict, action: str) -> dict:
    """Apply ``values`` when the row is still at ``version``; otherwise record the refused attempt and raise
    Conflict with the current row."""
    with db.write() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        before = annotation_json(a)
        if action == "update" and a.user_id != user["id"] and rank(user["role"]) < rank("reviewer"):
            raise Forbidden("only its author or a reviewer may change an annotation")
        res = s.execute(
            update(Annotation)
            .where(Annotation.id == annotation_id, Annotation.version == version)
            .values(**values, version=version + 1, updated_at=now())
            .execution_options(synchronize_session=False)
        )
        if res.rowcount == 1:
            s.expire(a)
            after = annotation_json(s.get(Annotation, annotation_id))
            audit_change(s, user["id"], action, annotation_id, before, after)
            return after
    # Stale: nothing was written; keep what the caller tried, in its own transaction, then refuse.
    with db.write() as s:
        current = annotation_json(s.get(Annotation, annotation_id))
        attempt = {k: v for k, v in values.items()} | {"from_version": version}
        audit_change(s, user["id"], "conflict", annotation_id, current, _jsonable(attempt))
    raise Conflict(
        f"annotation {annotation_id} changed (version {current['version']}, you had {version}); reload it", current
    )


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in d.items()}


def update_annotation(db: Database, annotation_id: int, version: int, user: dict, answer: Answer) -> dict:
    """Change an annotation (its author, or a reviewer with a reason) from ``version``: a new mask or "not
    answerable". The question stays, and so does the proposal it came from unless the change names a newer one
    (``proposal_id``: the Model tool on this annotation); the seconds and edits are added to the ones already
    spent; its outcome is decided again from the new mask (a candidate as proposed only while the mask is that
    candidate's). A changed mask makes the changer its editor, and the annotation waits for review by someone
    else."""
    with db.read() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        page = s.get(PageRow, a.page_id)
        before = annotation_json(a)
    same_question(answer, before["question"])
    someone_else = before["user_id"] != user["id"]
    if someone_else and rank(user["role"]) < rank("reviewer"):
        raise Forbidden("only its author or a reviewer may change an annotation")
    if someone_else and not answer.reason.strip():
        raise Invalid("changing someone else's annotation needs a reason (reason)")
    rle, words = check_answer(answer, page)
    changed = rle != before["mask"] or answer.answerable != before["answerable"]
    with db.read() as s:
        origin = origin_of_change(s, before, answer.proposal_id, answer.candidate, user["id"], rle, answer.answerable)
    values = {
        "answerable": answer.answerable,
        "mask": rle,
        "word_ids": words,
        "seconds": min(MAX_SECONDS, before["seconds"] + float(answer.seconds)),
        "edits": min(MAX_EDITS, before["edits"] + int(answer.edits)),
        **origin,
        "edited_by": user["id"] if changed else before["edited_by"],
        "review": "pending",
    }
    if someone_else:
        values["review_reason"] = answer.reason.strip()
    return versioned_update(db, annotation_id, version, user, values, "update")


def same_question(answer: Answer, question: str | None) -> None:
    """An annotation answers the question of its task: a save that changes it is refused (422)."""
    if question is not None and answer.question.strip() != question:
        raise Invalid("the question of this task cannot be changed")


def my_annotations(db: Database, user_id: int, limit: int = 50, review: str | None = None) -> list[dict]:
    """The user's annotations, newest first; ``review``: only those in that review state (``rejected``: what to
    redo, with the reviewer's reason)."""
    with db.read() as s:
        q = select(Annotation).where(Annotation.user_id == user_id)
        if review is not None:
            q = q.where(Annotation.review == review)
        rows = s.scalars(q.order_by(Annotation.created_at.desc(), Annotation.id.desc()).limit(limit))
        return [annotation_json(a) for a in rows]
