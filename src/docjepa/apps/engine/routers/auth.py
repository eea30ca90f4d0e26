"""Signing in and out, who am I, health."""

from __future__ import annotations

from fastapi import APIRouter, Response

from .. import store
from ..dependencies import COOKIE, DB, Config, Model, Token, User
from ..schemas import Login

router = APIRouter(prefix="/api", tags=["auth"])


@router.get("/health")
def health(who: User, db: DB, proposer: Model) -> dict:
    return {"ok": True, "model": proposer.version if proposer else None, "schema": db.revision()}


@router.post("/login")
def login(body: Login, response: Response, db: DB, cfg: Config) -> dict:
    token, who = store.login(db, body.name, body.password)
    response.set_cookie(
        COOKIE, token, max_age=store.SESSION_SECONDS, httponly=True, samesite="strict", secure=cfg.secure_cookie
    )
    return {"token": token, "user": who}


@router.post("/logout")
def logout(response: Response, who: User, db: DB, token: Token) -> dict:
    store.logout(db, token or "")
    response.delete_cookie(COOKIE)
    return {"ok": True}


@router.get("/me")
def me(who: User, db: DB, proposer: Model) -> dict:
    return who | {"model": proposer.version if proposer else None, "counts": store.counts(db)}
