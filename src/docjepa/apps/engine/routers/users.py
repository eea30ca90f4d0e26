"""Accounts (admins only)."""

from __future__ import annotations

from fastapi import APIRouter

from .. import store
from ..dependencies import DB, Admin
from ..schemas import NewUser

router = APIRouter(prefix="/api/users", tags=["users"])


@router.get("")
def users(who: Admin, db: DB) -> list:
    return store.list_users(db)


@router.post("")
def add_user(body: NewUser, who: Admin, db: DB) -> dict:
    return {"id": store.add_user(db, body.name, body.role, body.password)}
