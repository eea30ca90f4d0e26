"""Tasks (a page and a question) and their leases: who holds a task, until when."""

from __future__ import annotations

from sqlalchemy import delete, or_, select, update

from ....data.kinds import canonical
from ..db import Database
from ..tables import PageRow, Skip, Task, now
from .errors import Conflict, NotFound
from .pages import page_json

LEASE_SECONDS = 15 * 60
"""How long a task stays with the annotator it was handed to (renewed while the page is open)."""


def add_task(db: Database, page_id: int, question: str | None, kind: str = "user") -> int:
    with db.write() as s:
        if s.get(PageRow, page_id) is None:
            raise NotFound(f"no page {page_id}")
        task = Task(page_id=page_id, question=(question or "").strip() or None, kind=kind, status="open", claims=0)
        task.created_at = now()
        s.add(task)
        s.flush()
        return task.id


def task_json(task: Task, page: PageRow | None = None) -> dict:
    out = {
        "id": task.id,
        "page_id": task.page_id,
        "question": task.question,
        "kind": canonical(task.kind),
        "status": task.status,
        "lease_expires": task.lease_expires,
    }
    if page is not None:
        out["page"] = page_json(page)
    return out


def claim_next(db: Database, user_id: int, lease: float = LEASE_SECONDS) -> dict | None:
    """The caller's task: the one it already holds, else the first open task whose lease is free or expired and
    that the caller did not pass over (its skips, until they expire), leased to it now. Two callers never get the
    same task while its lease runs: the claim is a conditional UPDATE on the task's ``claims`` counter (and, on
    PostgreSQL, rows other claimers hold are skipped, not waited for)."""
    for _ in range(100):
        with db.write() as s:
            t = now()
            held = s.scalar(
                select(Task).where(Task.status == "open", Task.lease_user_id == user_id, Task.lease_expires > t)
            )
            if held is not None:
                held.lease_expires = t + lease
                return task_json(held, s.get(PageRow, held.page_id))
            skipped = select(Skip.task_id).where(Skip.user_id == user_id, Skip.until > t)
            free = s.scalar(
                select(Task)
                .where(Task.status == "open", or_(Task.lease_user_id.is_(None), Task.lease_expires <= t))
                .where(Task.id.not_in(skipped))
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


def held_task(s, task_id: int, user_id: int) -> Task:
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
        task = held_task(s, task_id, user_id)
        task.lease_expires = now() + lease
        return task_json(task)


def release(db: Database, task_id: int, user_id: int) -> None:
    """Give a held task back, for others; the caller passed it over, so it is not handed back to the caller until
    the lease would have ended (a skip)."""
    with db.write() as s:
        task = held_task(s, task_id, user_id)
        s.execute(delete(Skip).where(Skip.user_id == user_id, Skip.until <= now()))  # the ones that ran out
        s.merge(Skip(user_id=user_id, task_id=task_id, until=task.lease_expires))
        task.lease_user_id, task.lease_expires = None, None


def release_all(db: Database, user_id: int) -> int:
    """Give back every task the user holds (signing out); returns how many. These are not skips."""
    with db.write() as s:
        return release_leases(s, user_id)


def release_leases(s, user_id: int) -> int:
    """Give back every open task the user holds, in the caller's transaction; returns how many."""
    res = s.execute(
        update(Task)
        .where(Task.lease_user_id == user_id, Task.status == "open")
        .values(lease_user_id=None, lease_expires=None)
        .execution_options(synchronize_session=False)
    )
    return res.rowcount


def task_for(db: Database, task_id: int, user_id: int) -> dict:
    """A task the caller holds, with its page."""
    with db.read() as s:
        task = held_task(s, task_id, user_id)
        return task_json(task, s.get(PageRow, task.page_id))


def set_priority(db: Database, task_id: int, priority: float) -> None:
    with db.write() as s:
        s.execute(update(Task).where(Task.id == task_id).values(priority=float(priority)))
