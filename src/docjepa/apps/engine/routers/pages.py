"""Pages: their words and size, and their image."""

from __future__ import annotations

from fastapi import APIRouter, Response

from .. import store
from ..dependencies import DB, Id, User

router = APIRouter(prefix="/api/pages", tags=["pages"])


@router.get("/{page_id}")
def page(page_id: Id, who: User, db: DB) -> dict:
    return store.page_info(db, page_id)


@router.get("/{page_id}/image")
def page_image(page_id: Id, who: User, db: DB) -> Response:
    data = store.page_image(db, page_id)
    media = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
    return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=3600"})
