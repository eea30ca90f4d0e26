"""What the routes depend on, as module-level FastAPI dependencies: the database, the service's config, the model,
the signed-in user and their role. Tests swap any of them through ``app.dependency_overrides``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request

from . import store
from .config import ServerConfig
from .db import Database
from .proposer import Proposer
from .schemas import MAX_INT

COOKIE = "docjepa_session"
"""The session cookie (HttpOnly, SameSite=Strict)."""


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_config(request: Request) -> ServerConfig:
    return request.app.state.cfg


def get_proposer(request: Request) -> Proposer | None:
    """The model's worker (None: the service runs without a model)."""
    return request.app.state.proposer


def session_token(request: Request) -> str | None:
    """The caller's session token: ``Authorization: Bearer TOKEN``, else the session cookie."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.cookies.get(COOKIE)


DB = Annotated[Database, Depends(get_db)]
Config = Annotated[ServerConfig, Depends(get_config)]
Model = Annotated[Proposer | None, Depends(get_proposer)]
Token = Annotated[str | None, Depends(session_token)]


def current_user(db: DB, token: Token) -> dict:
    """The signed-in user; 401 otherwise."""
    who = store.session_user(db, token)
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


require_reviewer = require("reviewer")
require_admin = require("admin")
User = Annotated[dict, Depends(current_user)]
Reviewer = Annotated[dict, Depends(require_reviewer)]
Admin = Annotated[dict, Depends(require_admin)]
Id = Annotated[int, Path(ge=1, le=MAX_INT)]
"""A row id in a path: 422 outside the column's range, never an overflow in the database."""
