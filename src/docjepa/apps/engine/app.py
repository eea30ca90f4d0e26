"""``docjepa engine serve``: the annotation service (FastAPI), built by :func:`create_app`.

Every endpoint but ``/api/login`` and the page's static files needs a signed-in user (an HttpOnly,
SameSite=Strict session cookie, or ``Authorization: Bearer TOKEN``); roles are checked on the server, by the
dependencies of :mod:`.dependencies`. The routes live in :mod:`.routers`, one module per resource; the request
bodies in :mod:`.schemas`. Errors are JSON ``{"detail": …}`` with a 4xx status; an unexpected error is logged with
its traceback and answered 500 without one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from . import masks, store, uploads
from .config import ServerConfig
from .csrf import CSRFGuard
from .db import Database
from .dependencies import COOKIE, User
from .proposer import Busy
from .routers import ALL as ROUTERS

__all__ = ["ServerConfig", "create_app"]

log = logging.getLogger("docjepa.engine")
STATIC = Path(__file__).with_name("static")
MAX_JSON_BYTES = 16 * 2**20
"""Largest request body of every endpoint but uploads."""
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'",
}


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
        seen, answered = 0, False

        async def counted():
            # A body streamed past the limit (no or a false Content-Length): answer 413 now, and tell the app the
            # client has gone, so that whatever it does with the rest (a parse error, say) never reaches the client.
            nonlocal seen, answered
            message = await receive()
            if message["type"] == "http.request" and not answered:
                seen += len(message.get("body", b""))
                if seen > limit:
                    answered = True
                    await _too_large(limit, send)
                    return {"type": "http.disconnect"}
            return message

        async def unless_answered(message) -> None:
            if not answered:
                await send(message)

        try:
            await self.app(scope, counted, unless_answered)
        except Exception:
            if not answered:
                raise


async def _too_large(limit: int, send) -> None:
    await JSONResponse({"detail": f"request body larger than {limit} bytes"}, status_code=413)(
        {"type": "http"}, None, send
    )


def _error_handlers(app: FastAPI) -> None:
    """The store's and the upload checks' errors as their HTTP statuses; validation errors on one line."""
    for exc, status in ((store.NotFound, 404), (store.Forbidden, 403), (store.Invalid, 422), (masks.MaskError, 422)):
        app.add_exception_handler(
            exc, lambda _r, e, status=status: JSONResponse({"detail": str(e)}, status_code=status)
        )
    app.add_exception_handler(
        store.Conflict, lambda _r, e: JSONResponse({"detail": str(e), "current": e.current}, status_code=409)
    )
    app.add_exception_handler(uploads.UploadError, lambda _r, e: JSONResponse({"detail": str(e)}, status_code=e.status))
    for exc, status in ((store.Throttled, 429), (Busy, 503)):
        app.add_exception_handler(
            exc,
            lambda _r, e, status=status: JSONResponse(
                {"detail": str(e)}, status_code=status, headers={"Retry-After": str(e.retry_after)}
            ),
        )

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


def create_app(cfg: ServerConfig, proposer=None) -> FastAPI:
    """The app. ``proposer``: a ready :class:`~docjepa.apps.engine.proposer.Proposer` (default: loaded from
    ``cfg.checkpoint`` when one is given, which becomes the serving model)."""
    db = Database(cfg.db)
    db.require_schema()
    if proposer is None and cfg.checkpoint:
        from .proposer import Proposer

        proposer = Proposer(cfg.checkpoint, cfg.device, cfg.model_threads, queue=cfg.model_queue, batch=cfg.model_batch)
        store.set_serving_model(db, cfg.checkpoint)  # retraining rounds replace it
    # No interactive API pages: their scripts come from a CDN, which the page's CSP refuses. The description itself
    # is served to signed-in users only, and only when asked for (ServerConfig.api_docs).
    app = FastAPI(title="Document-JEPA data engine", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.db, app.state.proposer, app.state.cfg = db, proposer, cfg
    app.add_middleware(CSRFGuard, cookie=COOKIE, allowed_origins=cfg.allowed_origins)
    app.add_middleware(
        BodyLimit, limit_for=lambda p: cfg.max_upload_bytes + 2**20 if p == "/api/uploads" else MAX_JSON_BYTES
    )

    @app.middleware("http")
    async def headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    _error_handlers(app)

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in ROUTERS:
        app.include_router(router)
    if cfg.api_docs:

        @app.get("/api/openapi.json", include_in_schema=False)
        def openapi(who: User) -> dict:
            return app.openapi()

    return app


CONFIG_ENV = "DOCJEPA_ENGINE_CONFIG"
"""The environment variable through which ``serve --workers N`` hands its :class:`ServerConfig` (JSON) to each
worker process."""


def app_from_environment() -> FastAPI:
    """The app of one worker process of ``serve --workers N`` (uvicorn's factory): the configuration from
    :data:`CONFIG_ENV`, the model loaded in this process."""
    import json
    import os

    return create_app(ServerConfig(**json.loads(os.environ[CONFIG_ENV])))
