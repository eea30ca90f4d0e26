"""The model's proposals, recorded by the server as it makes them, and what a save that refers to one became.

A save names the proposal it started from (``proposal_id``) and the candidate (``candidate``); the server checks
that the proposal was made for this task and this person and that the candidate is one of its own, then decides
what the answer is from the saved mask itself: the candidate as proposed (``accepted``, or ``refined`` when the
model answered clicks), changed by hand (``edited``), or drawn with no proposal (``drawn``). The model version and
the clicks come from the proposal: a client cannot write them.
"""

from __future__ import annotations

from ..db import Database
from ..tables import Proposal, now
from .errors import Invalid


def record_proposal(
    db: Database,
    task_id: int,
    user_id: int,
    kind: str,
    model_version: str,
    candidates: list[dict],
    scores: list,
    best: int,
    clicks: int = 0,
) -> int:
    """Keep one answer of the model (``candidates``: the word-snapped masks as COCO RLE); its id."""
    with db.write() as s:
        p = Proposal(
            task_id=task_id,
            user_id=user_id,
            kind=kind,
            model_version=model_version,
            created_at=now(),
            scores=[float(v) for v in scores],
            best=int(best),
            candidates=candidates,
            clicks=int(clicks),
        )
        s.add(p)
        s.flush()
        return p.id


def provenance(s, proposal_id: int | None, candidate: int | None, task_id: int, user_id: int, rle, answerable: bool):
    """The provenance columns of a save, decided here: (proposal_id, model_version, candidate, outcome, clicks).
    Invalid when the proposal is not this task's and this person's, or the candidate is not one of its own."""
    if not answerable:
        p = _proposal(s, proposal_id, task_id, user_id) if proposal_id is not None else None
        return (p.id if p else None), (p.model_version if p else None), None, "not-answerable", (p.clicks if p else 0)
    if proposal_id is None:
        if candidate is not None:
            raise Invalid("a candidate needs the proposal it came from (proposal_id)")
        return None, None, None, "drawn", 0
    p = _proposal(s, proposal_id, task_id, user_id)
    if candidate is not None and not 0 <= candidate < len(p.candidates):
        raise Invalid(f"proposal {p.id} has {len(p.candidates)} candidates, not a candidate {candidate}")
    return p.id, p.model_version, candidate, _mask_outcome(p, candidate, rle), p.clicks


def _proposal(s, proposal_id: int, task_id: int, user_id: int) -> Proposal:
    p = s.get(Proposal, proposal_id)
    if p is None or p.task_id != task_id or p.user_id != user_id:
        raise Invalid(f"proposal {proposal_id} was not made for this task and this person")
    return p


def outcome_after_change(s, proposal_id: int | None, candidate: int | None, outcome: str | None, rle, answerable):
    """An annotation's outcome after its mask changed (a person's edit, a reviewer's fix): still the candidate as
    proposed only while the mask is that candidate's."""
    if not answerable:
        return "not-answerable"
    p = s.get(Proposal, proposal_id) if proposal_id is not None else None
    if p is None:
        return "machine" if outcome == "machine" else "drawn"
    return _mask_outcome(p, candidate, rle)


def origin_of_change(s, before: dict, proposal_id, candidate, user_id: int, rle, answerable: bool) -> dict:
    """The provenance columns of a change to the annotation ``before`` (an edit, a reviewer's fix): from the
    proposal it names when it names one (the Model tool on the saved annotation: made for its task and the person
    changing it, its clicks added to the ones already sent), else the annotation's own proposal, the outcome
    decided again from the new mask."""
    if proposal_id is None:
        return {
            "outcome": outcome_after_change(
                s, before["proposal_id"], before["candidate"], before["outcome"], rle, answerable
            )
        }
    pid, version, candidate, outcome, clicks = provenance(
        s, proposal_id, candidate, before["task_id"], user_id, rle, answerable
    )
    same = pid == before["proposal_id"]
    return {
        "proposal_id": pid,
        "model_version": version,
        "candidate": candidate,
        "outcome": outcome,
        "clicks": before["clicks"] if same else min(2**31 - 1, before["clicks"] + clicks),
    }


def _mask_outcome(p: Proposal, candidate: int | None, rle) -> str:
    """What a saved mask is to the proposal it started from: its candidate as proposed (``accepted``, or
    ``refined`` for an answer to clicks), that candidate changed (``edited``), or no candidate (``drawn``)."""
    if candidate is None or not 0 <= candidate < len(p.candidates):
        return "drawn"
    if p.candidates[candidate] == rle:
        return "refined" if p.kind == "refine" else "accepted"
    return "edited"
