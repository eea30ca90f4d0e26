"""The store's errors, each with the HTTP status the service answers it with."""

from __future__ import annotations


class Conflict(Exception):
    """A save against a stale version (HTTP 409); ``current`` is the value that is there now."""

    def __init__(self, message: str, current: dict) -> None:
        super().__init__(message)
        self.current = current


class NotFound(LookupError):
    """No such row (HTTP 404)."""


class Forbidden(PermissionError):
    """The caller may not do this (HTTP 403)."""


class Invalid(ValueError):
    """A request that cannot be carried out as asked (HTTP 400 / 422)."""
