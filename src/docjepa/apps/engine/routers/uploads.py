"""Uploads of PDFs and images (admins only): stored, read in full, registered as pages with tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile
from starlette.concurrency import run_in_threadpool

from .. import store, uploads
from ..dependencies import DB, Admin, Config

router = APIRouter(prefix="/api/uploads", tags=["uploads"])


@router.post("")
async def upload(
    who: Admin,
    db: DB,
    cfg: Config,
    file: Annotated[UploadFile, File()],
    dpi: Annotated[int, Form(ge=36, le=600)] = 150,
) -> dict:
    data = await file.read(cfg.max_upload_bytes + 1)
    path, kind, digest = await run_in_threadpool(uploads.store, data, Path(cfg.media), cfg.max_upload_bytes)
    try:
        pages = await run_in_threadpool(uploads.read_pages, path, kind, f"upload/{path.stem}", dpi)
    except uploads.UploadError:
        path.unlink(missing_ok=True)
        raise
    added = await run_in_threadpool(store.add_pages, db, pages)
    name = uploads.safe_display_name(file.filename)
    store.record_upload(db, path.name, name, kind, len(data), digest, len(pages), who["id"])
    return {"stored_as": path.name, "name": name, "kind": kind, "pages": len(pages)} | added
