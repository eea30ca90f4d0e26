"""The request bodies of the HTTP API (pydantic models: a body that does not fit is answered 422 with the field)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from . import masks, store

MAX_INT = 2**31 - 1
"""The largest value of the databases' INTEGER columns (PostgreSQL's are 32-bit): ids, versions, counts."""


class Login(BaseModel):
    name: str = Field(max_length=64)
    password: str = Field(max_length=1024)


class AnswerIn(BaseModel):
    question: str = Field(max_length=1000)
    answerable: bool = True
    mask_png: str | None = None
    """The answer mask as a PNG of the page's size (data URL or base64); painted pixels are the mask."""
    seconds: float = Field(default=0.0, ge=0, le=store.MAX_SECONDS)
    edits: int = Field(default=0, ge=0, le=MAX_INT)
    candidate: int | None = Field(default=None, ge=0, le=15)
    """The model candidate accepted as-is (None: drawn or corrected, or not answerable)."""
    model_version: str | None = Field(default=None, max_length=128)

    def to_answer(self, height: int, width: int) -> store.Answer:
        """The answer for a page of this size (the PNG decoded to a mask; MaskError when it does not fit)."""
        mask = masks.from_png(self.mask_png, height, width) if self.answerable and self.mask_png else None
        return store.Answer(
            self.question, self.answerable, mask, self.seconds, self.edits, self.candidate, self.model_version
        )


class AnswerUpdate(AnswerIn):
    version: int = Field(ge=1, le=MAX_INT)


class ReviewIn(BaseModel):
    version: int = Field(ge=1, le=MAX_INT)
    decision: Literal["approve", "reject", "fix"]
    reason: str = Field(default="", max_length=2000)
    fix: AnswerIn | None = None


class ProposeIn(BaseModel):
    question: str = Field(min_length=1, max_length=1000)


class NewUser(BaseModel):
    name: str
    role: Literal["annotator", "reviewer", "admin"]
    password: str = Field(max_length=1024)


class RetrainIn(BaseModel):
    steps: int = Field(default=200, ge=1, le=100_000)
    include_machine: bool = False


class NewTask(BaseModel):
    page_id: int = Field(ge=1, le=MAX_INT)
    question: str | None = Field(default=None, max_length=1000)
