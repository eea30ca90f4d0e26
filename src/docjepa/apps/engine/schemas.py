"""The request bodies of the HTTP API (pydantic models: a body that does not fit is answered 422 with the field)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from . import masks, store

MAX_INT = 2**31 - 1
"""The largest value of the databases' INTEGER columns (PostgreSQL's are 32-bit): ids, versions, counts."""
MAX_COORD = 100_000.0
"""The largest page coordinate (pixels) a request may give: far beyond any page, far below float overflow."""
Coord = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_COORD, le=MAX_COORD)]
"""A finite page coordinate: NaN, ±inf and absurd magnitudes are 422, not a prompt that scores every candidate
``null``."""


class Login(BaseModel):
    name: str = Field(max_length=64)
    password: str = Field(max_length=1024)


class AnswerIn(BaseModel):
    question: str = Field(max_length=1000)
    answerable: bool = True
    mask_png: str | None = None
    """The answer mask as a PNG of the page's size (data URL or base64); painted pixels are the mask."""
    seconds: float = Field(default=0.0, ge=0, le=store.MAX_SECONDS, allow_inf_nan=False)
    edits: int = Field(default=0, ge=0, le=MAX_INT)
    proposal_id: int | None = Field(default=None, ge=1, le=MAX_INT)
    """The proposal (``propose`` / ``refine`` answered it with its id) the answer started from; None: drawn without
    one. The model version and clicks are taken from it: a client-sent ``model_version`` is ignored."""
    candidate: int | None = Field(default=None, ge=0, le=15)
    """The candidate of that proposal the answer started from; whether it was kept as proposed is decided by the
    server from the mask."""

    def to_answer(self, height: int, width: int) -> store.Answer:
        """The answer for a page of this size (the PNG decoded to a mask; MaskError when it does not fit)."""
        mask = masks.from_png(self.mask_png, height, width) if self.answerable and self.mask_png else None
        return store.Answer(
            self.question,
            self.answerable,
            mask,
            self.seconds,
            self.edits,
            self.candidate,
            self.proposal_id,
            reason=getattr(self, "reason", ""),
        )


class AnswerUpdate(AnswerIn):
    version: int = Field(ge=1, le=MAX_INT)
    reason: str = Field(default="", max_length=2000)
    """Why the annotation changes; required when it is someone else's (a reviewer's edit, reviewed by another)."""


class ReviewIn(BaseModel):
    version: int = Field(ge=1, le=MAX_INT)
    decision: Literal["approve", "reject", "fix"]
    reason: str = Field(default="", max_length=2000)
    fix: AnswerIn | None = None


class ProposeIn(BaseModel):
    question: str = Field(min_length=1, max_length=1000)


class RefineIn(ProposeIn):
    """A person's corrections of the current answer, for the model to answer again."""

    points: list[tuple[Coord, Coord]] = Field(default_factory=list, max_length=64)
    """Clicks in page pixels, oldest first."""
    labels: list[Literal[0, 1]] = Field(default_factory=list, max_length=64)
    """1: on the answer (a click); 0: not on it (an Alt- or right-click)."""
    box: tuple[Coord, Coord, Coord, Coord] | None = None
    """A dragged box (x0, y0, x1, y1) in page pixels."""
    mask_png: str | None = None
    """The current answer as a PNG of the page's size (as ``AnswerIn.mask_png``), refined rather than redrawn."""

    def prompts(self, height: int, width: int) -> dict:
        """The keyword arguments of ``EngineModel.refine`` for a page of this size (MaskError when the mask does
        not fit; store.Invalid when points and labels do not pair up)."""
        if len(self.points) != len(self.labels):
            raise store.Invalid(f"{len(self.points)} points but {len(self.labels)} labels")
        if not self.points and self.box is None and not self.mask_png:
            raise store.Invalid("nothing to refine with: give points, a box or the current mask")
        mask = masks.from_png(self.mask_png, height, width) if self.mask_png else None
        return {
            "points": [list(p) for p in self.points] or None,
            "labels": list(self.labels) or None,
            "box": list(self.box) if self.box is not None else None,
            "mask": mask,
        }


class NewUser(BaseModel):
    name: str
    role: Literal["annotator", "reviewer", "admin"]
    password: str = Field(max_length=1024)


class UserChange(BaseModel):
    """An admin's change of an account: its role, or enabled / disabled (disabling ends its sessions and leases)."""

    role: Literal["annotator", "reviewer", "admin"] | None = None
    active: bool | None = None


class PasswordReset(BaseModel):
    password: str = Field(max_length=1024)


class PasswordChange(BaseModel):
    """A person's change of their own password: the current one first."""

    old: str = Field(max_length=1024)
    new: str = Field(max_length=1024)


class RetrainIn(BaseModel):
    steps: int = Field(default=200, ge=1, le=100_000)
    include_machine: bool = False


class NewTask(BaseModel):
    page_id: int = Field(ge=1, le=MAX_INT)
    question: str | None = Field(default=None, max_length=1000)
