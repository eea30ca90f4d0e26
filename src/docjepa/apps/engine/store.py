"""What the service does to its database, one transaction per operation: accounts and sign-in, pages and
tasks, leases, annotations with optimistic concurrency, reviews, and the audit log.

Every function takes a :class:`~docjepa.apps.engine.db.Database` and opens its own transaction, so a killed
server loses at most the operation in flight. Conflicts raise :class:`Conflict` carrying the current value.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import delete, or_, select, update

from ...data.record import Page, Word
from . import masks
from .db import ROLES, Annotation, AuditEntry, Database, LoginSession, PageRow, Task, User, now

LEASE_SECONDS = 15 * 60
"""How long a task stays with the annotator it was handed to (renewed while the page is open)."""
SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts."""
MAX_SECONDS = 24 * 3600
"""Longest time an annotation may report (a tab left open overnight is capped, not trusted)."""


class Conflict(Exception):
    """A save against a stale version (HTTP 409); ``current`` is the value that is there now."""

    def __init__(self, message: str, current: dict) -> None:
        super().__init__(message)
        self.current = current


class NotFound(LookupError):
    """No such row (HTTP 404)."""


class Forbidden(PermissionError):
    """The caller may not do this (HTTP 403)."""


class Invalid(ValueError):
    """A request that cannot be carried out as asked (HTTP 400 / 422)."""


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()  # argon2id with the library's (RFC 9106 low-memory) parameters


def rank(role: str) -> int:
    return ROLES.index(role)


# --- accounts -------------------------------------------------------------------------------------------------


def add_user(db: Database, name: str, role: str, password: str) -> int:
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    name = name.strip()
    if not name or len(name) > 64 or any(c.isspace() for c in name):
        raise Invalid("a user name is 1 to 64 characters without spaces")
    if len(password) < 8:
        raise Invalid("a password has at least 8 characters")
    with db.write() as s:
        if s.scalar(select(User.id).where(User.name == name)) is not None:
            raise Invalid(f"user {name!r} exists")
        user = User(name=name, role=role, password_hash=_hasher().hash(password), active=True, created_at=now())
        s.add(user)
        s.flush()
        s.add(
            AuditEntry(at=now(), action="create", entity="user", entity_id=user.id, after={"name": name, "role": role})
        )
        return user.id


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def login(db: Database, name: str, password: str) -> tuple[str, dict]:
    """A new session token for a correct name and password; Forbidden otherwise, with the same message and about
    the same time either way. The hash is checked outside any write transaction (it takes tens of ms)."""
    from argon2.exceptions import VerificationError

    with db.read() as s:
        user = s.scalar(select(User).where(User.name == name))
    try:
        if user is None or not user.active:
            _hasher().hash(password)  # the same work for an unknown name: no timing oracle
            raise VerificationError
        _hasher().verify(user.password_hash, password)
    except VerificationError:
        raise Forbidden("wrong user name or password") from None
    rehash = _hasher().hash(password) if _hasher().check_needs_rehash(user.password_hash) else None
    token, t = secrets.token_urlsafe(32), now()
    with db.write() as s:
        if rehash:
            s.execute(update(User).where(User.id == user.id).values(password_hash=rehash))
        s.execute(delete(LoginSession).where(LoginSession.user_id == user.id, LoginSession.expires_at < t))
        s.add(
            LoginSession(token_hash=_token_hash(token), user_id=user.id, created_at=t, expires_at=t + SESSION_SECONDS)
        )
    return token, user_json(user)


def logout(db: Database, token: str) -> None:
    with db.write() as s:
        row = s.get(LoginSession, _token_hash(token))
        if row is not None:
            s.delete(row)


def session_user(db: Database, token: str | None) -> dict | None:
    if not token:
        return None
    with db.read() as s:
        row = s.get(LoginSession, _token_hash(token))
        if row is None or row.expires_at < now():
            return None
        user = s.get(User, row.user_id)
        return user_json(user) if user is not None and user.active else None


def user_json(user: User) -> dict:
    return {"id": user.id, "name": user.name, "role": user.role}


def list_users(db: Database) -> list[dict]:
    with db.read() as s:
        return [user_json(u) | {"active": u.active} for u in s.scalars(select(User).order_by(User.id))]


# --- pages and tasks ------------------------------------------------------------------------------------------


def add_pages(db: Database, pages: list[Page], with_questions: bool = True) -> dict:
    """Register pages (one transaction per page); a page already there (same document and number) is passed over.
    Each page's questions become tasks; a page without questions gets one task whose question the annotator
    writes. Returns counts."""
    added = passed = tasks = 0
    for page in pages:
        with db.write() as s:
            if s.scalar(select(PageRow.id).where(PageRow.doc_id == page.doc_id, PageRow.page_no == page.page)):
                passed += 1
                continue
            row = PageRow(
                doc_id=page.doc_id,
                page_no=page.page,
                width=page.width,
                height=page.height,
                image=page.image,
                words=[{"text": w.text, "box": [float(v) for v in w.box]} for w in page.words],
                source=page.source,
                layout=page.layout,
                created_at=now(),
            )
            s.add(row)
            s.flush()
            questions = [(q.text, q.qtype) for q in page.questions] if with_questions else []
            for text, qtype in dict.fromkeys(questions) or [(None, "")]:
                s.add(Task(page_id=row.id, question=text, qtype=qtype, status="open", claims=0, created_at=now()))
                tasks += 1
            added += 1
    return {"pages_added": added, "pages_already_there": passed, "tasks_added": tasks}


def add_task(db: Database, page_id: int, question: str | None, qtype: str = "user") -> int:
    with db.write() as s:
        if s.get(PageRow, page_id) is None:
            raise NotFound(f"no page {page_id}")
        task = Task(page_id=page_id, question=(question or "").strip() or None, qtype=qtype, status="open", claims=0)
        task.created_at = now()
        s.add(task)
        s.flush()
        return task.id


def load_page(db: Database, page_id: int) -> Page:
    with db.read() as s:
        row = s.get(PageRow, page_id)
        if row is None:
            raise NotFound(f"no page {page_id}")
        return page_record(row)


def page_record(row: PageRow, questions: list | None = None) -> Page:
    """A page row as the project's page record (what the model, the exports and the shards take)."""
    words = [Word(w["text"], tuple(w["box"])) for w in row.words]
    return Page(
        row.doc_id, row.page_no, row.width, row.height, row.image, words, row.source, row.layout, questions or []
    )


def page_json(row: PageRow) -> dict:
    return {
        "id": row.id,
        "doc_id": row.doc_id,
        "page": row.page_no,
        "width": row.width,
        "height": row.height,
        "words": row.words,
        "layout": row.layout,
    }


def page_info(db: Database, page_id: int) -> dict:
    with db.read() as s:
        row = s.get(PageRow, page_id)
        if row is None:
            raise NotFound(f"no page {page_id}")
        return page_json(row)


def page_image(db: Database, page_id: int) -> bytes:
    with db.read() as s:
        image = s.scalar(select(PageRow.image).where(PageRow.id == page_id))
        if image is None:
            raise NotFound(f"no page {page_id}")
        return image


def task_json(task: Task, page: PageRow | None = None) -> dict:
    out = {
        "id": task.id,
        "page_id": task.page_id,
        "question": task.question,
        "qtype": task.qtype,
        "status": task.status,
        "lease_expires": task.lease_expires,
    }
    if page is not None:
        out["page"] = page_json(page)
    return out


def claim_next(db: Database, user_id: int, lease: float = LEASE_SECONDS) -> dict | None:
    """The caller's task: the one it already holds, else the first open task whose lease is free or expired, leased
    to it now. Two callers never get the same task while its lease runs: the claim is a conditional UPDATE on the
    task's ``claims`` counter (and, on PostgreSQL, rows other claimers hold are skipped, not waited for)."""
    for _ in range(100):
        with db.write() as s:
            t = now()
            held = s.scalar(
                select(Task).where(Task.status == "open", Task.lease_user_id == user_id, Task.lease_expires > t)
            )
            if held is not None:
                held.lease_expires = t + lease
                return task_json(held, s.get(PageRow, held.page_id))
            free = s.scalar(
                select(Task)
                .where(Task.status == "open", or_(Task.lease_user_id.is_(None), Task.lease_expires <= t))
                .order_by(Task.priority.desc(), Task.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if free is None:
                return None
            res = s.execute(
                update(Task)
                .where(Task.id == free.id, Task.claims == free.claims, Task.status == "open")
                .values(lease_user_id=user_id, lease_expires=t + lease, claims=free.claims + 1)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:
                continue  # someone claimed it between our read and write: try the next one
            s.refresh(free)
            return task_json(free, s.get(PageRow, free.page_id))
    raise Conflict("too many competing claims; try again", {})


def _held_task(s, task_id: int, user_id: int) -> Task:
    task = s.get(Task, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    if task.status != "open":
        raise Conflict(f"task {task_id} is already annotated", task_json(task))
    if task.lease_user_id != user_id or (task.lease_expires or 0) <= now():
        raise Conflict(
            f"task {task_id} is not leased to you (the lease expired or went to someone else)", task_json(task)
        )
    return task


def renew(db: Database, task_id: int, user_id: int, lease: float = LEASE_SECONDS) -> dict:
    with db.write() as s:
        task = _held_task(s, task_id, user_id)
        task.lease_expires = now() + lease
        return task_json(task)


def release(db: Database, task_id: int, user_id: int) -> None:
    with db.write() as s:
        task = _held_task(s, task_id, user_id)
        task.lease_user_id, task.lease_expires = None, None


def task_for(db: Database, task_id: int, user_id: int) -> dict:
    """A task the caller holds, with its page."""
    with db.read() as s:
        task = _held_task(s, task_id, user_id)
        return task_json(task, s.get(PageRow, task.page_id))


# --- annotations ----------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """What an annotator submits."""

    question: str
    answerable: bool
    mask: np.ndarray | None
    seconds: float = 0.0
    edits: int = 0
    candidate: int | None = None
    model_version: str | None = None


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


def _audit(s, user_id: int | None, action: str, entity_id: int | None, before: dict | None, after: dict | None) -> None:
    s.add(
        AuditEntry(
            at=now(),
            user_id=user_id,
            action=action,
            entity="annotation",
            entity_id=entity_id,
            before=before,
            after=after,
        )
    )


def create_annotation(db: Database, task_id: int, user_id: int, answer: Answer) -> dict:
    """Save the answer of a task the caller holds, and close the task, in one transaction."""
    with db.write() as s:
        task = _held_task(s, task_id, user_id)
        page = s.get(PageRow, task.page_id)
        if task.question is not None and answer.question.strip() != task.question:
            raise Invalid("the question of this task cannot be changed")
        rle, words = check_answer(answer, page)
        t = now()
        a = Annotation(
            task_id=task.id,
            page_id=task.page_id,
            question=answer.question.strip(),
            answerable=answer.answerable,
            mask=rle,
            word_ids=words,
            user_id=user_id,
            model_version=answer.model_version,
            candidate=answer.candidate,
            seconds=float(answer.seconds),
            edits=int(answer.edits),
            review="pending",
            review_reason="",
            version=1,
            created_at=t,
            updated_at=t,
            source="human",
        )
        s.add(a)
        task.status, task.lease_user_id, task.lease_expires = "done", None, None
        s.flush()
        _audit(s, user_id, "create", a.id, None, annotation_json(a))
        return annotation_json(a)


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
        rle, words = check_answer(Answer(task.question or "", True, mask, model_version=model_version), page)
        t = now()
        a = Annotation(
            task_id=task.id,
            page_id=task.page_id,
            question=task.question,
            answerable=True,
            mask=rle,
            word_ids=words,
            user_id=uid,
            model_version=model_version,
            candidate=None,
            seconds=0.0,
            edits=0,
            review="pending",
            review_reason="",
            version=1,
            created_at=t,
            updated_at=t,
            source="machine",
        )
        s.add(a)
        task.status, task.lease_user_id, task.lease_expires = "done", None, None
        s.flush()
        _audit(s, None, "create", a.id, None, annotation_json(a))
        return annotation_json(a)


def set_priority(db: Database, task_id: int, priority: float) -> None:
    with db.write() as s:
        s.execute(update(Task).where(Task.id == task_id).values(priority=float(priority)))


def get_annotation(db: Database, annotation_id: int) -> dict:
    with db.read() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        return annotation_json(a)


def _conditional_update(db: Database, annotation_id: int, version: int, user: dict, values: dict, action: str) -> dict:
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
            _audit(s, user["id"], action, annotation_id, before, after)
            return after
    # Stale: nothing was written; keep what the caller tried, in its own transaction, then refuse.
    with db.write() as s:
        current = annotation_json(s.get(Annotation, annotation_id))
        attempt = {k: v for k, v in values.items()} | {"from_version": version}
        _audit(s, user["id"], "conflict", annotation_id, current, _jsonable(attempt))
    raise Conflict(
        f"annotation {annotation_id} changed (version {current['version']}, you had {version}); reload it", current
    )


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in d.items()}


def update_annotation(db: Database, annotation_id: int, version: int, user: dict, answer: Answer) -> dict:
    with db.read() as s:
        a = s.get(Annotation, annotation_id)
        if a is None:
            raise NotFound(f"no annotation {annotation_id}")
        page = s.get(PageRow, a.page_id)
    rle, words = check_answer(answer, page)
    values = {
        "question": answer.question.strip(),
        "answerable": answer.answerable,
        "mask": rle,
        "word_ids": words,
        "seconds": float(answer.seconds),
        "edits": int(answer.edits),
        "candidate": answer.candidate,
        "model_version": answer.model_version,
        "review": "pending",
    }
    return _conditional_update(db, annotation_id, version, user, values, "update")


def review_annotation(
    db: Database,
    annotation_id: int,
    version: int,
    user: dict,
    decision: str,
    reason: str = "",
    fix: Answer | None = None,
) -> dict:
    """approve / reject (a reason is required) / fix (a corrected answer and a reason; the fix is approved)."""
    if rank(user["role"]) < rank("reviewer"):
        raise Forbidden("reviewing needs the reviewer or admin role")
    if decision not in ("approve", "reject", "fix"):
        raise Invalid("decision must be approve, reject or fix")
    if decision != "approve" and not reason.strip():
        raise Invalid(f"{decision} needs a reason")
    values = {
        "review": "rejected" if decision == "reject" else "approved",
        "review_reason": reason.strip(),
        "reviewer_id": user["id"],
    }
    if decision == "fix":
        if fix is None:
            raise Invalid("fix needs the corrected answer")
        with db.read() as s:
            a = s.get(Annotation, annotation_id)
            if a is None:
                raise NotFound(f"no annotation {annotation_id}")
            page = s.get(PageRow, a.page_id)
        rle, words = check_answer(fix, page)
        values |= {"mask": rle, "word_ids": words, "answerable": fix.answerable, "question": fix.question.strip()}
    return _conditional_update(db, annotation_id, version, user, values, "review")


def next_for_review(db: Database, user: dict, source: str | None = None) -> dict | None:
    """The oldest pending annotation made by someone else; with ``source="machine"``, a random pending automatic
    label (reviewers audit a sample of them)."""
    from sqlalchemy import func

    with db.read() as s:
        q = select(Annotation).where(Annotation.review == "pending", Annotation.user_id != user["id"])
        if source is not None:
            q = q.where(Annotation.source == source)
        q = q.order_by(func.random()) if source == "machine" else q.order_by(Annotation.updated_at, Annotation.id)
        a = s.scalar(q.limit(1))
        if a is None:
            return None
        return annotation_json(a) | {"page": page_json(s.get(PageRow, a.page_id))}


def my_annotations(db: Database, user_id: int, limit: int = 50) -> list[dict]:
    with db.read() as s:
        rows = s.scalars(
            select(Annotation).where(Annotation.user_id == user_id).order_by(Annotation.created_at.desc()).limit(limit)
        )
        return [annotation_json(a) for a in rows]


def audit_log(db: Database, annotation_id: int | None = None, limit: int = 1000) -> list[dict]:
    with db.read() as s:
        q = select(AuditEntry).order_by(AuditEntry.id)
        if annotation_id is not None:
            q = q.where(AuditEntry.entity == "annotation", AuditEntry.entity_id == annotation_id)
        return [
            {
                "id": e.id,
                "at": e.at,
                "user_id": e.user_id,
                "action": e.action,
                "entity": e.entity,
                "entity_id": e.entity_id,
                "before": e.before,
                "after": e.after,
            }
            for e in s.scalars(q.limit(limit))
        ]


def counts(db: Database) -> dict:
    from sqlalchemy import func

    with db.read() as s:
        return {
            "pages": s.scalar(select(func.count()).select_from(PageRow)),
            "tasks_open": s.scalar(select(func.count()).select_from(Task).where(Task.status == "open")),
            "tasks_done": s.scalar(select(func.count()).select_from(Task).where(Task.status == "done")),
            "annotations": s.scalar(select(func.count()).select_from(Annotation)),
            "users": s.scalar(select(func.count()).select_from(User)),
        }
