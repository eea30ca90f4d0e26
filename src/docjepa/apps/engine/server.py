"""``docjepa engine serve``: the annotation service (FastAPI).

Every endpoint but ``/api/login`` and the page's static files needs a signed-in user (an HttpOnly,
SameSite=Strict session cookie, or ``Authorization: Bearer TOKEN``); roles are checked here, on the server.
Errors are JSON ``{"detail": …}`` with a 4xx status; an unexpected error is logged with its traceback and
answered 500 without one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, File, Form, HTTPException, Request, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from . import masks, stats, store, uploads
from .db import Database, Upload, now

log = logging.getLogger("docjepa.engine")
STATIC = Path(__file__).with_name("static")
COOKIE = "docjepa_session"
MAX_JSON_BYTES = 16 * 2**20
"""Largest request body of every endpoint but uploads."""


@dataclass
class ServerConfig:
    """How the service runs."""

    db: str
    """Database URL (``sqlite:///FILE`` or ``postgresql+psycopg://USER@HOST/DB``)."""
    checkpoint: str | None = None
    """Fine-tuned model (run folder, checkpoint or model folder) that proposes masks; None: no proposals."""
    media: str = "runs/engine/media"
    """Folder of uploaded files (stored under generated names)."""
    lease_seconds: float = store.LEASE_SECONDS
    """How long a task stays with the annotator it was handed to."""
    max_upload_bytes: int = uploads.MAX_UPLOAD_BYTES
    """Largest upload."""
    secure_cookie: bool = False
    """Mark the session cookie Secure (set when the service is behind HTTPS)."""
    device: str | None = None
    """Model device (default: CUDA when available)."""
    model_threads: int | None = None
    """PyTorch threads of the model worker (default: all cores but one)."""
    follow_seconds: float = 5.0
    """How often the server looks for a model promoted by a retraining round."""
    rounds_dir: str = "runs/engine/rounds"
    """Where retraining rounds started from the page write their runs."""


class Login(BaseModel):
    name: str = Field(max_length=64)
    password: str = Field(max_length=1024)


class AnswerIn(BaseModel):
    question: str = Field(max_length=1000)
    answerable: bool = True
    mask_png: str | None = None
    """The answer mask as a PNG of the page's size (data URL or base64); painted pixels are the mask."""
    seconds: float = 0.0
    edits: int = 0
    candidate: int | None = None
    """The model candidate accepted as-is (None: drawn or corrected)."""
    model_version: str | None = Field(default=None, max_length=128)


class AnswerUpdate(AnswerIn):
    version: int


class ReviewIn(BaseModel):
    version: int
    decision: Literal["approve", "reject", "fix"]
    reason: str = Field(default="", max_length=2000)
    fix: AnswerIn | None = None


class ProposeIn(BaseModel):
    question: str = Field(min_length=1, max_length=1000)


class NewUser(BaseModel):
    name: str
    role: Literal["annotator", "reviewer", "admin"]
    password: str = Field(max_length=1024)


class RetrainIn(BaseModel):
    steps: int = Field(default=200, ge=1, le=100_000)
    include_machine: bool = False


class NewTask(BaseModel):
    page_id: int
    question: str | None = Field(default=None, max_length=1000)


class BodyLimit:
    """ASGI middleware: refuse bodies over the limit (413) by header and by bytes received."""

    def __init__(self, app, limit_for) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope["path"])
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await _too_large(limit, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(limit, send)


class _TooLarge(Exception):
    pass


async def _too_large(limit: int, send) -> None:
    await JSONResponse({"detail": f"request body larger than {limit} bytes"}, status_code=413)(
        {"type": "http"}, None, send
    )


def _serving(db: Database) -> str | None:
    from .db import Setting

    with db.read() as s:
        row = s.get(Setting, "checkpoint")
        return row.value if row is not None else None


def current_user(request: Request) -> dict:
    """The signed-in user (session cookie or bearer token); 401 otherwise."""
    token = request.cookies.get(COOKIE)
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    who = store.session_user(request.app.state.db, token)
    if who is None:
        raise HTTPException(401, "sign in first")
    return who


def require(minimum: str):
    """A dependency: the signed-in user when its role is at least ``minimum``; 403 otherwise."""

    def check(who: Annotated[dict, Depends(current_user)]) -> dict:
        if store.rank(who["role"]) < store.rank(minimum):
            raise HTTPException(403, f"this needs the {minimum} role")
        return who

    return check


User = Annotated[dict, Depends(current_user)]
Reviewer = Annotated[dict, Depends(require("reviewer"))]
Admin = Annotated[dict, Depends(require("admin"))]


def _answer(a: AnswerIn, height: int, width: int) -> store.Answer:
    mask = masks.from_png(a.mask_png, height, width) if a.answerable and a.mask_png else None
    return store.Answer(a.question, a.answerable, mask, a.seconds, a.edits, a.candidate, a.model_version)


def create_app(cfg: ServerConfig, proposer=None) -> FastAPI:
    """The app. ``proposer``: a ready :class:`~docjepa.apps.engine.proposer.Proposer` (default: loaded from
    ``cfg.checkpoint`` when one is given)."""
    db = Database(cfg.db)
    db.require_schema()
    if proposer is None and cfg.checkpoint:
        from .proposer import Proposer

        proposer = Proposer(cfg.checkpoint, device=cfg.device, threads=cfg.model_threads)
        from .db import Setting

        with db.write() as s:  # the model served is the serving model; retraining rounds replace it
            s.merge(Setting(key="checkpoint", value=str(Path(cfg.checkpoint).resolve())))
    app = FastAPI(title="Document-JEPA data engine", docs_url="/api/docs", openapi_url="/api/openapi.json")
    app.state.db, app.state.proposer, app.state.cfg = db, proposer, cfg
    app.add_middleware(
        BodyLimit, limit_for=lambda p: cfg.max_upload_bytes + 2**20 if p == "/api/uploads" else MAX_JSON_BYTES
    )

    @app.middleware("http")
    async def headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'"
        )
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    for exc, status in ((store.NotFound, 404), (store.Forbidden, 403), (store.Invalid, 422), (masks.MaskError, 422)):
        app.add_exception_handler(
            exc, lambda _r, e, status=status: JSONResponse({"detail": str(e)}, status_code=status)
        )
    app.add_exception_handler(
        store.Conflict, lambda _r, e: JSONResponse({"detail": str(e), "current": e.current}, status_code=409)
    )
    app.add_exception_handler(uploads.UploadError, lambda _r, e: JSONResponse({"detail": str(e)}, status_code=e.status))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, err: RequestValidationError):
        parts = []
        for e in err.errors()[:5]:
            where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (logged on the server)"}, status_code=500)

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/health")
    def health(who: User) -> dict:
        return {"ok": True, "model": proposer.version if proposer else None, "schema": db.revision()}

    @app.post("/api/login")
    def login(body: Login, response: Response) -> dict:
        token, who = store.login(db, body.name, body.password)
        response.set_cookie(
            COOKIE, token, max_age=store.SESSION_SECONDS, httponly=True, samesite="strict", secure=cfg.secure_cookie
        )
        return {"token": token, "user": who}

    @app.post("/api/logout")
    def logout(request: Request, response: Response, who: User) -> dict:
        store.logout(db, request.cookies.get(COOKIE) or request.headers.get("authorization", "")[7:].strip())
        response.delete_cookie(COOKIE)
        return {"ok": True}

    @app.get("/api/me")
    def me(who: User) -> dict:
        return who | {"model": proposer.version if proposer else None, "counts": store.counts(db)}

    @app.post("/api/tasks/next")
    def next_task(who: User):
        task = store.claim_next(db, who["id"], cfg.lease_seconds)
        return task if task is not None else JSONResponse({"detail": "no open task"}, status_code=404)

    @app.get("/api/tasks/{task_id}")
    def get_task(task_id: int, who: User) -> dict:
        return store.task_for(db, task_id, who["id"])

    @app.post("/api/tasks/{task_id}/renew")
    def renew(task_id: int, who: User) -> dict:
        return store.renew(db, task_id, who["id"], cfg.lease_seconds)

    @app.post("/api/tasks/{task_id}/release")
    def release(task_id: int, who: User) -> dict:
        store.release(db, task_id, who["id"])
        return {"ok": True}

    @app.post("/api/tasks/{task_id}/missed")
    def add_missed(task_id: int, body: ProposeIn, who: User) -> dict:
        """A question the engine did not ask about the page of a task the caller holds: a new task on that page."""
        task = store.task_for(db, task_id, who["id"])
        return {"id": store.add_task(db, task["page_id"], body.question, qtype="user-added")}

    @app.post("/api/tasks")
    def add_task(body: NewTask, who: Admin) -> dict:
        return {"id": store.add_task(db, body.page_id, body.question)}

    @app.get("/api/pages/{page_id}")
    def page(page_id: int, who: User) -> dict:
        return store.page_info(db, page_id)

    @app.get("/api/pages/{page_id}/image")
    def page_image(page_id: int, who: User) -> Response:
        data = store.page_image(db, page_id)
        media = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
        return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=3600"})

    @app.post("/api/tasks/{task_id}/propose")
    async def propose(task_id: int, body: ProposeIn, who: User) -> dict:
        if proposer is None:
            raise HTTPException(503, "no model: the server was started without --checkpoint")
        task = await run_in_threadpool(store.task_for, db, task_id, who["id"])
        if task["question"] is not None and body.question.strip() != task["question"]:
            raise store.Invalid("the question of this task cannot be changed")
        if proposer.due(cfg.follow_seconds):  # a retraining round may have promoted another model
            proposer.follow(await run_in_threadpool(_serving, db))
        page = await run_in_threadpool(store.load_page, db, task["page_id"])
        return await proposer.propose(task["page_id"], page, body.question.strip())

    @app.post("/api/tasks/{task_id}/annotation")
    def annotate(task_id: int, body: AnswerIn, who: User) -> dict:
        task = store.task_for(db, task_id, who["id"])
        answer = _answer(body, task["page"]["height"], task["page"]["width"])
        return store.create_annotation(db, task_id, who["id"], answer)

    @app.get("/api/annotations/mine")
    def mine(who: User, limit: int = 50) -> list:
        return store.my_annotations(db, who["id"], max(1, min(limit, 500)))

    @app.get("/api/annotations/{annotation_id}")
    def get_annotation(annotation_id: int, who: User) -> dict:
        a = store.get_annotation(db, annotation_id)
        if a["user_id"] != who["id"] and store.rank(who["role"]) < store.rank("reviewer"):
            raise HTTPException(403, "this annotation is someone else's")
        return a | {"page": store.page_info(db, a["page_id"])}

    @app.get("/api/annotations/{annotation_id}/mask.png")
    def annotation_mask(annotation_id: int, who: User) -> Response:
        a = get_annotation(annotation_id, who)
        if not a["answerable"]:
            raise HTTPException(404, "this annotation says the question is not answerable on the page")
        return Response(masks.to_png(masks.decode(a["mask"])), media_type="image/png")

    @app.put("/api/annotations/{annotation_id}")
    def update(annotation_id: int, body: AnswerUpdate, who: User) -> dict:
        page = store.page_info(db, store.get_annotation(db, annotation_id)["page_id"])
        return store.update_annotation(
            db, annotation_id, body.version, who, _answer(body, page["height"], page["width"])
        )

    @app.get("/api/review/next")
    def review_next(who: Reviewer, source: Literal["human", "machine"] | None = None):
        a = store.next_for_review(db, who, source)
        return a if a is not None else JSONResponse({"detail": "nothing to review"}, status_code=404)

    @app.post("/api/annotations/{annotation_id}/review")
    def review(annotation_id: int, body: ReviewIn, who: Reviewer) -> dict:
        fix = None
        if body.fix is not None:
            page = store.page_info(db, store.get_annotation(db, annotation_id)["page_id"])
            fix = _answer(body.fix, page["height"], page["width"])
        return store.review_annotation(db, annotation_id, body.version, who, body.decision, body.reason, fix)

    @app.get("/api/annotations/{annotation_id}/audit")
    def audit(annotation_id: int, who: Reviewer) -> list:
        return store.audit_log(db, annotation_id)

    @app.get("/api/stats")
    def get_stats(who: Reviewer) -> dict:
        return stats.compute(db)

    @app.get("/api/stats/plot.png")
    def stats_plot(who: Reviewer) -> Response:
        return Response(stats.plot(stats.compute(db)), media_type="image/png")

    @app.get("/api/rounds")
    def rounds(who: Reviewer) -> list:
        from .retrain import list_rounds

        return list_rounds(db)

    @app.post("/api/retrain")
    def start_retrain(body: RetrainIn, who: Admin) -> dict:
        """Start a retraining round in a child process (``docjepa engine retrain``); the server keeps serving and
        follows the promoted model. Its progress is in ``GET /api/rounds``."""
        import subprocess
        import sys
        import time as _time

        out = Path(cfg.rounds_dir) / _time.strftime("round-%Y%m%d-%H%M%S")
        cmd = [
            sys.executable,
            "-m",
            "docjepa.cli",
            "engine",
            "retrain",
            "--db",
            cfg.db,
            "--out",
            str(out),
            "--steps",
            str(body.steps),
        ]
        if body.include_machine:
            cmd.append("--include-machine")
        Path(cfg.rounds_dir).mkdir(parents=True, exist_ok=True)
        log_file = open(str(out) + ".log", "w")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        return {"pid": proc.pid, "out": str(out), "log": str(out) + ".log"}

    @app.get("/api/users")
    def users(who: Admin) -> list:
        return store.list_users(db)

    @app.post("/api/users")
    def add_user(body: NewUser, who: Admin) -> dict:
        return {"id": store.add_user(db, body.name, body.role, body.password)}

    @app.post("/api/uploads")
    async def upload(
        who: Admin, file: Annotated[UploadFile, File()], dpi: Annotated[int, Form(ge=36, le=600)] = 150
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
        with db.write() as s:
            s.add(
                Upload(
                    stored_name=path.name,
                    original_name=name,
                    kind=kind,
                    size=len(data),
                    sha256=digest,
                    pages=len(pages),
                    user_id=who["id"],
                    created_at=now(),
                )
            )
        return {"stored_as": path.name, "name": name, "kind": kind, "pages": len(pages)} | added

    return app
