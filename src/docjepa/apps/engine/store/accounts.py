"""Accounts, roles and sign-in sessions (argon2id password hashes; only a token's SHA-256 is stored)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import delete, select, update

from ..db import Database
from ..tables import ROLES, AuditEntry, LoginSession, User, now
from . import throttle as throttling
from .errors import Forbidden, Invalid

SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts."""


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()  # argon2id with the library's (RFC 9106 low-memory) parameters


def rank(role: str) -> int:
    return ROLES.index(role)


def add_user(db: Database, name: str, role: str, password: str) -> int:
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    name = name.strip()
    if not name or len(name) > 64 or any(c.isspace() for c in name):
        raise Invalid("a user name is 1 to 64 characters without spaces")
    if len(password) < 8:
        raise Invalid("a password has at least 8 characters")
    with db.write() as s:
        if s.scalar(select(User.id).where(User.name == name)) is not None:
            raise Invalid(f"user {name!r} exists")
        user = User(name=name, role=role, password_hash=_hasher().hash(password), active=True, created_at=now())
        s.add(user)
        s.flush()
        s.add(
            AuditEntry(at=now(), action="create", entity="user", entity_id=user.id, after={"name": name, "role": role})
        )
        return user.id


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def login(
    db: Database, name: str, password: str, address: str | None = None, throttle: throttling.Throttle | None = None
) -> tuple[str, dict]:
    """A new session token for a correct name and password; Forbidden otherwise, with the same message and about
    the same time either way. The hash is checked outside any write transaction (it takes tens of ms). With a
    ``throttle``, the attempt is first counted against the account and the client ``address`` and refused
    (:class:`~.throttle.Throttled`) while either must wait."""
    from argon2.exceptions import VerificationError

    charged = throttling.keys(name, address)
    if throttle is not None:
        throttling.reserve(db, charged, throttle)
    with db.read() as s:
        user = s.scalar(select(User).where(User.name == name))
    try:
        if user is None or not user.active:
            _hasher().hash(password)  # the same work for an unknown name: no timing oracle
            raise VerificationError
        _hasher().verify(user.password_hash, password)
    except VerificationError:
        if throttle is not None:
            throttling.failed(db, charged)
        raise Forbidden("wrong user name or password") from None
    if throttle is not None:
        throttling.succeeded(db, charged, throttle)
    rehash = _hasher().hash(password) if _hasher().check_needs_rehash(user.password_hash) else None
    token, t = secrets.token_urlsafe(32), now()
    with db.write() as s:
        if rehash:
            s.execute(update(User).where(User.id == user.id).values(password_hash=rehash))
        s.execute(delete(LoginSession).where(LoginSession.user_id == user.id, LoginSession.expires_at < t))
        s.add(
            LoginSession(token_hash=_token_hash(token), user_id=user.id, created_at=t, expires_at=t + SESSION_SECONDS)
        )
    return token, user_json(user)


def logout(db: Database, token: str) -> None:
    with db.write() as s:
        row = s.get(LoginSession, _token_hash(token))
        if row is not None:
            s.delete(row)


def session_user(db: Database, token: str | None) -> dict | None:
    if not token:
        return None
    with db.read() as s:
        row = s.get(LoginSession, _token_hash(token))
        if row is None or row.expires_at < now():
            return None
        user = s.get(User, row.user_id)
        return user_json(user) if user is not None and user.active else None


def user_json(user: User) -> dict:
    return {"id": user.id, "name": user.name, "role": user.role}


def list_users(db: Database) -> list[dict]:
    with db.read() as s:
        return [user_json(u) | {"active": u.active} for u in s.scalars(select(User).order_by(User.id))]
