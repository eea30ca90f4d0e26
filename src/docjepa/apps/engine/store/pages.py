"""Pages (image, size, words) and the files uploaded through the service."""

from __future__ import annotations

from sqlalchemy import select

from ....data.record import Page, Word
from ..db import Database
from ..tables import PageRow, Task, Upload, now
from .errors import NotFound


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
            questions = [(q.text, q.kind) for q in page.questions] if with_questions else []
            for text, kind in dict.fromkeys(questions) or [(None, "")]:
                s.add(Task(page_id=row.id, question=text, kind=kind, status="open", claims=0, created_at=now()))
                tasks += 1
            added += 1
    return {"pages_added": added, "pages_already_there": passed, "tasks_added": tasks}


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


def record_upload(
    db: Database, stored_name: str, original_name: str, kind: str, size: int, sha256: str, pages: int, user_id: int
) -> None:
    """Remember a file uploaded through the service (stored under ``stored_name`` in the media folder)."""
    with db.write() as s:
        s.add(
            Upload(
                stored_name=stored_name,
                original_name=original_name,
                kind=kind,
                size=size,
                sha256=sha256,
                pages=pages,
                user_id=user_id,
                created_at=now(),
            )
        )
