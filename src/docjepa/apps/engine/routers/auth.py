"""Signing in and out, who am I, health."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from .. import store
from ..csrf import token_for
from ..dependencies import COOKIE, DB, Config, Model, Token, User
from ..schemas import Login, PasswordChange

router = APIRouter(prefix="/api", tags=["auth"])


@router.get("/health")
def health(who: User, db: DB, proposer: Model) -> dict:
    return {"ok": True, "model": proposer.version if proposer else None, "schema": db.revision()}


@router.post("/login")
def login(body: Login, request: Request, response: Response, db: DB, cfg: Config) -> dict:
    """A session (cookie and token) for a correct name and password; 403 otherwise, 429 while throttled (failures
    counted per account and per client address)."""
    address = request.client.host if request.client else None
    token, who = store.login(db, body.name, body.password, address, cfg.throttle())
    response.set_cookie(
        COOKIE, token, max_age=store.SESSION_SECONDS, httponly=True, samesite="strict", secure=cfg.secure_cookie
    )
    return {"token": token, "user": who, "csrf_token": token_for(token)}


@router.post("/logout")
def logout(response: Response, who: User, db: DB, token: Token) -> dict:
    """End the session and give back every task the user holds."""
    store.release_all(db, who["id"])
    store.logout(db, token or "")
    response.delete_cookie(COOKIE)
    return {"ok": True}


@router.get("/me")
def me(who: User, db: DB, proposer: Model, token: Token) -> dict:
    counts = store.counts(db)
    return who | {"model": proposer.version if proposer else None, "counts": counts, "csrf_token": token_for(token)}


@router.post("/me/password")
def change_password(body: PasswordChange, who: User, db: DB, token: Token) -> dict:
    """Change one's own password (the current one is checked, 403 when wrong); one's other sessions end."""
    return store.change_own_password(db, who["id"], body.old, body.new, token)
