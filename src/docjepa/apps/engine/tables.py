"""The data engine's tables (SQLAlchemy 2 declarative models); :mod:`.db` holds the connections and migrations.

Times are seconds since the epoch (UTC) as floats: the same on SQLite and PostgreSQL, and easy to bucket by day.
"""

from __future__ import annotations

import time

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ROLES = ("annotator", "reviewer", "admin")
"""Account roles, each allowed what the one before it is and more."""
REVIEW = ("pending", "approved", "rejected")


def now() -> float:
    return time.time()


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str] = mapped_column(String(255))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[float] = mapped_column(Float, default=now)


class LoginSession(Base):
    """A signed-in browser or client: the SHA-256 of its token (the token itself is never stored)."""

    __tablename__ = "sessions"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[float] = mapped_column(Float, default=now)
    expires_at: Mapped[float] = mapped_column(Float)


class PageRow(Base):
    """One document page: image (PNG bytes), size and OCR / text-layer words ``[{"text", "box"}]``."""

    __tablename__ = "pages"
    __table_args__ = (UniqueConstraint("doc_id", "page_no", name="uq_pages_doc_page"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    doc_id: Mapped[str] = mapped_column(String(512))
    page_no: Mapped[int] = mapped_column(Integer)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    image: Mapped[bytes] = mapped_column(LargeBinary)
    words: Mapped[list] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(1024), default="")
    layout: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float, default=now)


class Task(Base):
    """A (page, question) to annotate; ``question`` None: the annotator writes the question. Handed out under a
    lease (``lease_user_id`` until ``lease_expires``); ``claims`` counts hand-outs (the claim's version)."""

    __tablename__ = "tasks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    page_id: Mapped[int] = mapped_column(ForeignKey("pages.id", ondelete="CASCADE"), index=True)
    question: Mapped[str | None] = mapped_column(Text, nullable=True)
    kind: Mapped[str] = mapped_column("qtype", String(64), default="")
    """The question's kind (``data.kinds``); the column keeps the name it was created with."""
    status: Mapped[str] = mapped_column(String(16), default="open", index=True)
    lease_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)
    claims: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=now)
    priority: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    """Tasks with a higher priority are handed out first (the semi-automatic stage ranks by uncertainty)."""


class Annotation(Base):
    """A task's answer: the mask (COCO RLE at page resolution) or "not answerable", who made it, how long it took,
    how many edits, which model candidate (if any) was accepted as-is and which model proposed it; ``version``
    grows by one with every change (optimistic concurrency), and every change is in the audit log."""

    __tablename__ = "annotations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), unique=True)
    page_id: Mapped[int] = mapped_column(ForeignKey("pages.id", ondelete="CASCADE"), index=True)
    question: Mapped[str] = mapped_column(Text)
    answerable: Mapped[bool] = mapped_column(Boolean, default=True)
    mask: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    word_ids: Mapped[list] = mapped_column(JSON, default=list)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    model_version: Mapped[str | None] = mapped_column(String(128), nullable=True)
    candidate: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    edits: Mapped[int] = mapped_column(Integer, default=0)
    review: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    review_reason: Mapped[str] = mapped_column(Text, default="")
    reviewer_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[float] = mapped_column(Float, default=now)
    updated_at: Mapped[float] = mapped_column(Float, default=now)
    source: Mapped[str] = mapped_column(String(16), default="human", server_default="human", index=True)
    """``human``, or ``machine`` for automatic labels (``docjepa engine autolabel``)."""
    proposal_id: Mapped[int | None] = mapped_column(
        ForeignKey("proposals.id", ondelete="SET NULL", name="fk_annotations_proposal"), nullable=True
    )
    """The model's proposal the answer started from (recorded by the server when it proposed); None: drawn."""
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """What became of the proposal, decided by the server from the saved mask: one of :data:`OUTCOMES`."""
    clicks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Clicks sent to the model (refinement) in the proposal the answer came from."""
    edited_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", name="fk_annotations_edited_by"), nullable=True
    )
    """Who made the current content (the author, or the last person who changed the mask): never its reviewer."""


OUTCOMES = ("accepted", "refined", "edited", "drawn", "not-answerable", "machine")
"""What became of an annotation's proposal: a candidate saved as proposed (``accepted``), a candidate of an answer
refined with clicks saved as the model gave it (``refined``), a candidate changed by hand (``edited``), an answer
drawn without a proposal (``drawn``), the question marked not answerable, or an automatic label."""


class Proposal(Base):
    """One answer of the model to a person's request (``kind`` ``propose``, or ``refine`` with ``clicks`` clicks):
    its version, the candidates as word-snapped COCO RLE masks, their scores and the best. Saves refer to it, so
    an annotation's provenance is what the server saw, never what a client says."""

    __tablename__ = "proposals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(16))
    model_version: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float, default=now)
    scores: Mapped[list] = mapped_column(JSON)
    best: Mapped[int] = mapped_column(Integer)
    candidates: Mapped[list] = mapped_column(JSON)
    clicks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class AuditEntry(Base):
    """One change or refused change (``action`` "conflict": a save against a stale version, with what it would
    have written, so no one's work is lost)."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float, default=now)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(32))
    entity: Mapped[str] = mapped_column(String(32))
    entity_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    before: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    after: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class Upload(Base):
    """A file uploaded through the service, stored under a generated name in the media folder."""

    __tablename__ = "uploads"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    stored_name: Mapped[str] = mapped_column(String(64), unique=True)
    original_name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    pages: Mapped[int] = mapped_column(Integer, default=0)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=now)


class Round(Base):
    """One retraining round: export, fine-tune from the serving model, evaluate both on the same held-out
    annotated pages, promote the new model only when it is better. ``report`` holds the counts and scores."""

    __tablename__ = "rounds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[float] = mapped_column(Float, default=now)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="running")
    out: Mapped[str] = mapped_column(String(1024))
    base_checkpoint: Mapped[str] = mapped_column(String(1024))
    base_version: Mapped[str] = mapped_column(String(128))
    new_checkpoint: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    new_version: Mapped[str | None] = mapped_column(String(128), nullable=True)
    promoted: Mapped[bool] = mapped_column(Boolean, default=False)
    report: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class Setting(Base):
    """A named setting of the service (``checkpoint``: the model ``serve`` loads when none is given)."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class SignInFailures(Base):
    """Failed sign-ins counted per account (``user:NAME``) and per client address (``addr:IP``): sign-in is refused
    until ``blocked_until`` once a key has more failures than the throttle allows for free. ``pending``: an
    account's password checks in flight (since ``pending_at``), which bound how many guesses run at once."""

    __tablename__ = "sign_in_failures"
    key: Mapped[str] = mapped_column(String(320), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_at: Mapped[float] = mapped_column(Float, default=now)
    blocked_until: Mapped[float] = mapped_column(Float, default=0.0)
    pending: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pending_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class Skip(Base):
    """A task a user passed over (skip / next): not handed to that user again until ``until``, when the lease they
    gave back would have ended."""

    __tablename__ = "skips"
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    until: Mapped[float] = mapped_column(Float)
