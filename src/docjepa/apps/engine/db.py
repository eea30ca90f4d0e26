"""The data engine's database: connections and schema migrations (Alembic); the tables are in :mod:`.tables`.

One schema serves SQLite (the embedded default: one file, WAL journal, ``synchronous=FULL`` so an acknowledged
save survives a killed process and a power cut) and PostgreSQL (``postgresql+psycopg://…``). Writes run in
transactions that take the write lock when they begin (SQLite ``BEGIN IMMEDIATE``), so two writers never
deadlock on a lock upgrade; on PostgreSQL every conditional ``UPDATE … WHERE version = :v`` is atomic per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from ...core.errors import UsageError
from .tables import Annotation, AuditEntry, Task

MIGRATIONS = Path(__file__).with_name("migrations")


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
