"""Cross-site request forgery defence for every state-changing request (POST, PUT, PATCH, DELETE under ``/api/``).

Two checks, as OWASP recommends for a cookie session:

- **Origin**: a browser names the page a request comes from (``Origin``, else ``Referer``); a request from any other
  origin than the one served (``scheme://host:port``, or one of ``ServerConfig.allowed_origins``) is refused. This
  covers pages of the same site on another port, which ``SameSite=Strict`` lets through.
- **Token**: a request that carries the session cookie must also carry ``X-CSRF-Token``, a value derived from the
  session token that only a page of this origin can read (it comes with the sign-in and ``GET /api/me``). A form
  or a cross-origin script cannot set that header.

Requests authenticated by ``Authorization: Bearer`` (scripts; a browser never adds it by itself) need no token.
A refused request is answered 403 before it reaches the route.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse

HEADER = "X-CSRF-Token"
STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


def token_for(session_token: str) -> str:
    """The CSRF token of a session (a digest of its token: nothing more to store)."""
    return hashlib.sha256(b"csrf:" + session_token.encode()).hexdigest()


def _origin(headers: Headers) -> str | None:
    if headers.get("origin"):
        return headers["origin"]
    referer = headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"
    return None


def problem(scope, cookie: str, allowed: set[str]) -> str | None:
    """Why a request must be refused, or None."""
    headers = Headers(scope=scope)
    origin = _origin(headers)
    served = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
    if origin is not None and origin != served and origin not in allowed:
        return f"cross-origin request refused (from {origin[:100]})"
    if headers.get("authorization", "").lower().startswith("bearer "):
        return None
    session = cookie_parser(headers.get("cookie", "")).get(cookie)
    if session and scope["path"] != "/api/login":
        sent = headers.get(HEADER.lower(), "")
        if not hmac.compare_digest(sent.encode(), token_for(session).encode()):
            return f"missing or wrong {HEADER} header (reload the page)"
    return None


class CSRFGuard:
    """ASGI middleware applying :func:`problem` to every state-changing API request."""

    def __init__(self, app, cookie: str, allowed_origins=()) -> None:
        self.app, self.cookie, self.allowed = app, cookie, {o.rstrip("/") for o in allowed_origins}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in STATE_CHANGING and scope["path"].startswith("/api/"):
            why = problem(scope, self.cookie, self.allowed)
            if why is not None:
                return await JSONResponse({"detail": why}, status_code=403)(scope, receive, send)
        await self.app(scope, receive, send)
