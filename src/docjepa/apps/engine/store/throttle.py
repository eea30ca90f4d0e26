"""Sign-in throttling: failures are counted per account and per client address, and past a few free ones each
further attempt has to wait twice as long as the one before (exponential back-off, capped).

An attempt is counted *before* the password is checked, in one transaction per key, so parallel guesses cannot all
pass a check made before any of them failed; a correct password gives the account's count back (and the address's
one attempt). A refused attempt does not hash the password: a throttled attacker costs the server nothing. Every
failure and every refusal is written to the audit log (entity ``sign-in``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from ..db import Database
from ..tables import AuditEntry, SignInFailures, now


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

    def wait(self, key: str, failures: int) -> float:
        """Seconds the next attempt on ``key`` must wait after ``failures`` failures in a row."""
        free = self.free if key.startswith("user:") else self.free_per_address
        if failures <= free:
            return 0.0
        return min(self.most, self.base * math.pow(2.0, min(failures - free - 1, 60)))


class Throttled(Exception):
    """Too many failed sign-ins (HTTP 429); ``retry_after`` seconds until the next attempt is heard."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many failed sign-ins: try again in {self.retry_after} s")


def keys(name: str, address: str | None) -> list[str]:
    """The counters an attempt is charged to: the account, and the client address when known."""
    return [f"user:{name[:300]}"] + ([f"addr:{address[:300]}"] if address else [])


def reserve(db: Database, charged: list[str], throttle: Throttle, t: float | None = None) -> None:
    """Count an attempt on every key, or raise :class:`Throttled` (counting nothing) while one of them must wait."""
    t = now() if t is None else t
    for _ in range(20):
        try:
            with db.write() as s:
                rows = []
                for key in charged:
                    row = s.get(SignInFailures, key, with_for_update=True)
                    if row is None:
                        row = SignInFailures(key=key, failures=0, last_at=t, blocked_until=0.0)
                        s.add(row)
                        s.flush()  # a concurrent first attempt on the same key: IntegrityError, retried
                    elif t - row.last_at > throttle.forget:
                        row.failures, row.blocked_until = 0, 0.0
                    rows.append(row)
                waiting = max((row.blocked_until - t for row in rows), default=0.0)
                if waiting > 0:
                    refused = Throttled(waiting)
                    s.add(_entry("refused", charged, {"retry_after": refused.retry_after}, t))
                else:
                    for row in rows:
                        row.failures += 1
                        row.last_at, row.blocked_until = t, t + throttle.wait(row.key, row.failures)
                    refused = None
            if refused is not None:
                raise refused
            return
        except IntegrityError:
            continue
    raise Throttled(1.0)


def succeeded(db: Database, charged: list[str], throttle: Throttle, t: float | None = None) -> None:
    """A correct password: the account starts again from zero; the address gets this attempt back."""
    t = now() if t is None else t
    with db.write() as s:
        for key in charged:
            row = s.get(SignInFailures, key, with_for_update=True)
            if row is None:
                continue
            if key.startswith("user:"):
                s.delete(row)
            else:
                row.failures = max(0, row.failures - 1)
                row.blocked_until = row.last_at + throttle.wait(key, row.failures)


def failed(db: Database, charged: list[str], t: float | None = None) -> None:
    """Write a failed attempt (already counted by :func:`reserve`) to the audit log, with its counts."""
    t = now() if t is None else t
    with db.write() as s:
        counts = {key: (s.get(SignInFailures, key) or SignInFailures(failures=0)).failures for key in charged}
        s.add(_entry("failed", charged, {"failures": counts}, t))


def _entry(action: str, charged: list[str], details: dict, t: float) -> AuditEntry:
    return AuditEntry(at=t, action=action, entity="sign-in", after={"keys": charged, **details})
