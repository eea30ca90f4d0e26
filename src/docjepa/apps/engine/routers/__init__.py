"""The HTTP API, one router per resource; :func:`~docjepa.apps.engine.app.create_app` includes them all."""

from . import annotations, auth, pages, review, rounds, stats, tasks, uploads, users

ALL = [
    auth.router,
    tasks.router,
    pages.router,
    annotations.router,
    review.router,
    stats.router,
    rounds.router,
    users.router,
    uploads.router,
]
