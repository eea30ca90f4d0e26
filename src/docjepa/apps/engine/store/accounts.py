"""Accounts, roles and sign-in sessions (argon2id password hashes; only a token's SHA-256 is stored)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import delete, func, select, update

from ..db import Database
from ..tables import ROLES, AuditEntry, LoginSession, User, now
from . import throttle as throttling
from .errors import Forbidden, Invalid, NotFound
from .tasks import release_leases

SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts."""


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()  # argon2id with the library's (RFC 9106 low-memory) parameters


def rank(role: str) -> int:
    return ROLES.index(role)


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, not {role!r}")


def _check_password(password: str) -> None:
    if len(password) < 8:
        raise Invalid("a password has at least 8 characters")
    if len(password) > 1024:
        raise Invalid("a password has at most 1024 characters")


def add_user(db: Database, name: str, role: str, password: str) -> int:
    _check_role(role)
    name = name.strip()
    if not name or len(name) > 64 or any(c.isspace() for c in name):
        raise Invalid("a user name is 1 to 64 characters without spaces")
    _check_password(password)
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
    ``throttle``, the attempt first takes one of the account's check slots and is refused
    (:class:`~.throttle.Throttled`) while the account or the client ``address`` must wait after its failures; only
    a wrong password is counted."""
    from argon2.exceptions import VerificationError

    charged = throttling.keys(name, address)
    if throttle is not None:
        throttling.reserve(db, charged, throttle)
    outcome = None
    try:
        with db.read() as s:
            user = s.scalar(select(User).where(User.name == name))
        if user is None or not user.active:
            _hasher().hash(password)  # the same work for an unknown name: no timing oracle
            raise VerificationError
        _hasher().verify(user.password_hash, password)
        outcome = "ok"
    except VerificationError:
        outcome = "failed"
    finally:
        if throttle is not None:
            throttling.settle(db, charged, throttle, outcome)
    if outcome != "ok":
        raise Forbidden("wrong user name or password")
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


def user_id(db: Database, name: str) -> int:
    """The id of the account ``name``; NotFound when there is none."""
    with db.read() as s:
        uid = s.scalar(select(User.id).where(User.name == name))
    if uid is None:
        raise NotFound(f"no user {name!r}")
    return uid


def _account(s, uid: int) -> User:
    user = s.get(User, uid)
    if user is None or user.password_hash == "!":  # the automatic labels' account is nobody's to change
        raise NotFound(f"no user {uid}")
    return user


def _end_sessions(s, uid: int, keep_token: str | None = None) -> int:
    q = delete(LoginSession).where(LoginSession.user_id == uid)
    if keep_token:
        q = q.where(LoginSession.token_hash != _token_hash(keep_token))
    return s.execute(q.execution_options(synchronize_session=False)).rowcount


def _audit(s, by: int | None, action: str, uid: int, before: dict | None, after: dict | None) -> None:
    s.add(AuditEntry(at=now(), user_id=by, action=action, entity="user", entity_id=uid, before=before, after=after))


def _keeps_an_admin(s, user: User, role: str, active: bool) -> None:
    """Refuse a change that would leave no active admin (nobody could manage accounts from the service)."""
    if user.role == "admin" and user.active and (role != "admin" or not active):
        others = s.scalar(
            select(func.count()).select_from(User).where(User.role == "admin", User.active, User.id != user.id)
        )
        if not others:
            raise Invalid(f"{user.name} is the last active admin: make another admin first")


def set_password(db: Database, uid: int, password: str, by: int | None, keep_token: str | None = None) -> dict:
    """A new password for account ``uid`` (an admin's reset, or the person's own change): every session of the
    account ends but ``keep_token`` (the one that changed it), so an old password's sessions stop working."""
    _check_password(password)
    digest = _hasher().hash(password)
    with db.write() as s:
        user = _account(s, uid)
        user.password_hash = digest
        ended = _end_sessions(s, uid, keep_token)
        _audit(s, by, "password", uid, None, {"sessions_ended": ended})
        return user_json(user) | {"active": user.active, "sessions_ended": ended}


def change_own_password(db: Database, uid: int, old: str, new: str, token: str | None) -> dict:
    """The person's own change: the old password is checked first (Forbidden when wrong)."""
    from argon2.exceptions import VerificationError

    with db.read() as s:
        stored = _account(s, uid).password_hash
    try:
        _hasher().verify(stored, old)
    except VerificationError:
        raise Forbidden("the current password is wrong") from None
    return set_password(db, uid, new, by=uid, keep_token=token)


def set_role(db: Database, uid: int, role: str, by: int | None) -> dict:
    _check_role(role)
    with db.write() as s:
        user = _account(s, uid)
        _keeps_an_admin(s, user, role, user.active)
        before, user.role = user.role, role
        _audit(s, by, "role", uid, {"role": before}, {"role": role})
        return user_json(user) | {"active": user.active}


def set_active(db: Database, uid: int, active: bool, by: int | None) -> dict:
    """Enable or disable an account. Disabling ends its sessions and gives back the tasks it holds at once; its
    annotations stay (they are attributed work)."""
    with db.write() as s:
        user = _account(s, uid)
        _keeps_an_admin(s, user, user.role, active)
        before, user.active = user.active, active
        ended = released = 0
        if not active:
            ended = _end_sessions(s, uid)
            released = release_leases(s, uid)
        after = {"active": active, "sessions_ended": ended, "tasks_released": released}
        _audit(s, by, "enable" if active else "disable", uid, {"active": before}, after)
        return user_json(user) | after
