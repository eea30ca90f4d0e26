"""The data engine's database: tables (SQLAlchemy 2), connections and schema migrations (Alembic).

One schema serves SQLite (the embedded default: one file, WAL journal, ``synchronous=FULL`` so an acknowledged
save survives a killed process and a power cut) and PostgreSQL (``postgresql+psycopg://…``). Writes run in
transactions that take the write lock when they begin (SQLite ``BEGIN IMMEDIATE``), so two writers never
deadlock on a lock upgrade; on PostgreSQL every conditional ``UPDATE … WHERE version = :v`` is atomic per row.

Times are seconds since the epoch (UTC) as floats: the same on both databases, and easy to bucket by day.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from ...errors import UsageError

ROLES = ("annotator", "reviewer", "admin")
"""Account roles, each allowed what the one before it is and more."""
REVIEW = ("pending", "approved", "rejected")
MIGRATIONS = Path(__file__).with_name("migrations")


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
    qtype: Mapped[str] = mapped_column(String(64), default="")
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


def default_url(folder: Path | str = "runs/engine") -> str:
    return f"sqlite:///{Path(folder) / 'engine.db'}"


def _sqlite_engine(url, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # transactions are begun below, not by the driver
        cur = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON", "busy_timeout=60000"):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """Connections to the engine's database. ``write()`` and ``read()`` give a session inside one transaction,
    committed when the block ends and rolled back when it raises."""

    def __init__(self, url: str) -> None:
        try:
            parsed = make_url(url)
        except Exception as err:
            raise UsageError(f"not a database URL: {url!r} ({err})") from None
        self.url = url
        self.sqlite = parsed.get_backend_name() == "sqlite"
        if self.sqlite:
            path = parsed.database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.writer = _sqlite_engine(parsed, immediate=True)
            self.reader = _sqlite_engine(parsed, immediate=False)
        elif parsed.get_backend_name() == "postgresql":
            self.writer = self.reader = create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
        else:
            raise UsageError(
                f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql+psycopg://"
            )

    @contextmanager
    def write(self) -> Iterator[Session]:
        with Session(self.writer, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.reader, expire_on_commit=False) as s, s.begin():
            yield s

    def migrate(self, revision: str = "head") -> str:
        """Create or upgrade the schema to ``revision`` (default: the newest); returns the revision reached."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.writer.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        return self.revision() or ""

    def revision(self) -> str | None:
        """The schema revision the database is at (None: not created by this program)."""
        from alembic.runtime.migration import MigrationContext

        with self.reader.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def require_schema(self) -> None:
        """Refuse a database that ``docjepa engine init`` has not created or is behind this program's schema."""
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        have = self.revision()
        if have is None:
            raise UsageError(f"{self.url} has no engine schema: run `docjepa engine init --db {self.url}` first")
        if have != head:
            raise UsageError(f"{self.url} is at schema {have}, this program needs {head}: run `docjepa engine init`")

    def integrity_problems(self) -> list[str]:
        """The database's own check (SQLite ``integrity_check``) and the engine's invariants; empty when sound."""
        from sqlalchemy import func, select

        problems = []
        with self.read() as s:
            if self.sqlite:
                rows = [r[0] for r in s.connection().exec_driver_sql("PRAGMA integrity_check").fetchall()]
                problems += [f"sqlite: {r}" for r in rows if r != "ok"]
                problems += [
                    f"foreign key: {tuple(r)}" for r in s.connection().exec_driver_sql("PRAGMA foreign_key_check")
                ]
            done = set(s.scalars(select(Task.id).where(Task.status == "done")))
            annotated = set(s.scalars(select(Annotation.task_id)))
            problems += [f"task {t} is done without an annotation" for t in sorted(done - annotated)]
            problems += [f"annotation of task {t} whose task is not done" for t in sorted(annotated - done)]
            changes = dict(
                s.execute(
                    select(AuditEntry.entity_id, func.count())
                    .where(AuditEntry.entity == "annotation", AuditEntry.action.in_(("create", "update", "review")))
                    .group_by(AuditEntry.entity_id)
                ).all()
            )
            for a_id, version in s.execute(select(Annotation.id, Annotation.version)):
                if changes.get(a_id, 0) != version:
                    problems.append(
                        f"annotation {a_id} at version {version} has {changes.get(a_id, 0)} audited changes"
                    )
        return problems

    def dispose(self) -> None:
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()
