"""Sign-in throttling: failed sign-ins are counted per account and per client address, and past a few free ones
each further attempt has to wait twice as long as the one before (exponential back-off, capped).

Only failures are counted: a correct password is never refused because others sign in at the same moment, from
the same address or through the same proxy, on one server or several sharing the database. Parallel guesses
cannot all pass a check made before any of them failed either: an account has at most as many checks in flight as
it has free failures left (one once it has none), and further attempts on it wait for a free slot instead of
being refused. A refused attempt does not hash the password: a throttled attacker costs the server nothing. Every
failure and every refusal is written to the audit log (entity ``sign-in``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from ..db import Database
from ..tables import AuditEntry, SignInFailures, now

STALE = 60.0
"""Seconds after which a check counted in flight is taken to have died with its process (a killed server)."""


@dataclass
class Throttle:
    """How sign-in failures slow further attempts (``docjepa engine serve --sign-in-…``)."""

    free: int = 5
    """Failures of one account that cost no wait."""
    free_per_address: int = 20
    """Failures from one client address that cost no wait (more: several people may share one)."""
    base: float = 1.0
    """Seconds to wait after the first failure past the free ones; each further failure doubles it."""
    most: float = 900.0
    """The longest wait."""
    forget: float = 3600.0
    """A key whose last failure is older than this starts again from zero."""
    queue: float = 30.0
    """Longest time an attempt waits for one of its account's check slots before it is refused (HTTP 429)."""

    def wait(self, key: str, failures: int) -> float:
        """Seconds the next attempt on ``key`` must wait after ``failures`` failures in a row."""
        if failures <= self.free_for(key):
            return 0.0
        return min(self.most, self.base * math.pow(2.0, min(failures - self.free_for(key) - 1, 60)))

    def free_for(self, key: str) -> int:
        return self.free if key.startswith("user:") else self.free_per_address

    def slots(self, failures: int) -> int:
        """Checks of one account's password that may run at once after ``failures`` failures."""
        return max(1, self.free - failures)


class Throttled(Exception):
    """Too many failed sign-ins (HTTP 429); ``retry_after`` seconds until the next attempt is heard."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many failed sign-ins: try again in {self.retry_after} s")


def keys(name: str, address: str | None) -> list[str]:
    """The counters an attempt is charged to: the account, and the client address when known."""
    return [f"user:{name[:300]}"] + ([f"addr:{address[:300]}"] if address else [])


def _row(s, key: str, t: float, throttle: Throttle) -> SignInFailures:
    row = s.get(SignInFailures, key, with_for_update=True)
    if row is None:
        row = SignInFailures(key=key, failures=0, last_at=t, blocked_until=0.0, pending=0, pending_at=t)
        s.add(row)
        s.flush()  # a concurrent first attempt on the same key: IntegrityError, retried
    elif row.failures and t - row.last_at > throttle.forget:
        row.failures, row.blocked_until = 0, 0.0
    if row.pending and t - row.pending_at > STALE:
        row.pending = 0
    return row


def _try(db: Database, charged: list[str], throttle: Throttle, t: float | None) -> Throttled | bool:
    """One look at the counters: a slot taken (True), no slot free yet (False), or a refusal (audited)."""
    with db.write() as s:
        t = now() if t is None else t  # read once the write lock is held: no other writer's time is later
        rows = [_row(s, key, t, throttle) for key in charged]
        waiting = max((row.blocked_until - t for row in rows), default=0.0)
        if waiting > 0:
            refused = Throttled(waiting)
            s.add(_entry("refused", charged, {"retry_after": refused.retry_after}, t))
            return refused
        account = rows[0]
        if account.pending >= throttle.slots(account.failures):
            return False
        account.pending += 1
        account.pending_at = t
        return True


def reserve(db: Database, charged: list[str], throttle: Throttle, t: float | None = None) -> None:
    """Take one of the account's check slots, waiting while all are taken; raise :class:`Throttled` (counting
    nothing) while the account or the address must wait after its failures, or when no slot frees in time."""
    deadline, pause = time.monotonic() + throttle.queue, 0.005
    while True:
        try:
            got = _try(db, charged, throttle, t)
        except IntegrityError:  # a concurrent first attempt made the row: look again
            got = False
        if isinstance(got, Throttled):
            raise got
        if got:
            return
        if time.monotonic() > deadline:
            refused = Throttled(1.0)
            with db.write() as s:
                s.add(_entry("refused", charged, {"retry_after": refused.retry_after, "busy": True}, now()))
            raise refused
        time.sleep(pause)
        pause = min(0.1, pause * 2)


def settle(db: Database, charged: list[str], throttle: Throttle, outcome: str | None) -> None:
    """End an attempt that :func:`reserve` let in, giving its check slot back: ``"ok"`` (the account starts again
    from zero; the address's count is left as it is), ``"failed"`` (counted on the account and the address, the
    waits they now need set, and audited), or None when the check itself broke (nothing counted)."""
    with db.write() as s:
        t = now()
        account = s.get(SignInFailures, charged[0], with_for_update=True)  # made by reserve, never deleted
        account.pending = max(0, account.pending - 1)
        if outcome == "ok":
            account.failures, account.blocked_until = 0, 0.0
        elif outcome == "failed":
            counts = {}
            for key in charged:
                row = _row(s, key, t, throttle)
                row.failures += 1
                wait = throttle.wait(key, row.failures)
                row.last_at, row.blocked_until = t, (t + wait if wait > 0 else 0.0)
                counts[key] = row.failures
            s.add(_entry("failed", charged, {"failures": counts}, t))


def _entry(action: str, charged: list[str], details: dict, t: float) -> AuditEntry:
    return AuditEntry(at=t, action=action, entity="sign-in", after={"keys": charged, **details})
