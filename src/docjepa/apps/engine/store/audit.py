"""The audit log: every change of an annotation, and every refused one."""

from __future__ import annotations

from sqlalchemy import select

from ..db import Database
from ..tables import AuditEntry, now


def audit_change(
    s, user_id: int | None, action: str, entity_id: int | None, before: dict | None, after: dict | None
) -> None:
    """Log a change of an annotation in the session ``s`` (so in the transaction that makes the change)."""
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
