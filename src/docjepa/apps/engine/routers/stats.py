"""The dashboard's figures and plot."""

from __future__ import annotations

from fastapi import APIRouter, Response

from .. import stats
from ..dependencies import DB, Reviewer

router = APIRouter(prefix="/api/stats", tags=["stats"])


@router.get("")
def get_stats(who: Reviewer, db: DB) -> dict:
    return stats.compute(db)


@router.get("/plot.png")
def stats_plot(who: Reviewer, db: DB) -> Response:
    return Response(stats.plot(stats.compute(db)), media_type="image/png")
