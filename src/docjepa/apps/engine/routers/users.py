"""Accounts (admins only): list, add, change a role, disable and enable, reset a password."""

from __future__ import annotations

from fastapi import APIRouter

from .. import store
from ..dependencies import DB, Admin, Id
from ..schemas import NewUser, PasswordReset, UserChange

router = APIRouter(prefix="/api/users", tags=["users"])


@router.get("")
def users(who: Admin, db: DB) -> list:
    return store.list_users(db)


@router.post("")
def add_user(body: NewUser, who: Admin, db: DB) -> dict:
    return {"id": store.add_user(db, body.name, body.role, body.password)}


@router.patch("/{user_id}")
def change_user(user_id: Id, body: UserChange, who: Admin, db: DB) -> dict:
    """A new role and/or enabled or disabled; each change audited. Disabling ends the account's sessions and gives
    back its tasks at once; the last active admin cannot be demoted or disabled (422)."""
    if body.role is None and body.active is None:
        raise store.Invalid("nothing to change: give role and/or active")
    user = None
    if body.role is not None:
        user = store.set_role(db, user_id, body.role, who["id"])
    if body.active is not None:
        user = store.set_active(db, user_id, body.active, who["id"])
    return user


@router.post("/{user_id}/password")
def reset_password(user_id: Id, body: PasswordReset, who: Admin, db: DB) -> dict:
    """An admin sets a new password; every session of the account ends."""
    return store.set_password(db, user_id, body.password, who["id"])
