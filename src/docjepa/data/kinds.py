"""Question kinds: the one vocabulary of what a question asks for.

Every question carries a ``kind`` (``Question.kind``): the generator's questions, the structure rules' questions on
real pages, the engine's proposals and the questions people add. Evaluation scores per kind, the real-page
benchmark lists its kinds in this registry's order, the structure rules ask the kinds marked ``structure`` and the
generator the kinds marked ``generator``; a kind that is not registered here is refused where a question is made.

Datasets and engine databases written before the field had its name call it ``qtype`` and use three older
labels for the engine's questions; :func:`canonical` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One kind of question."""

    name: str
    """The name stored with each question."""
    asks: str
    """What a question of this kind asks for."""
    askers: tuple[str, ...]
    """Who asks it: ``structure`` (rules over a real page's words, ``data.structure``), ``generator`` (synthetic
    pages, ``data.synth``), ``engine`` (the data engine's proposals), ``person`` (a person's own question)."""


REGISTRY: tuple[Kind, ...] = (
    Kind("title", "the document's title", ("structure",)),
    Kind("author", "the author's name under the title", ("structure",)),
    Kind("date", "the document's date", ("structure",)),
    Kind("version", "the version or release the document describes", ("structure",)),
    Kind("section", "where a named section begins", ("structure",)),
    Kind("contents", "the table of contents", ("structure",)),
    Kind("page-number", "the printed page number", ("structure",)),
    Kind("header", "the running header", ("structure",)),
    Kind("caption", "the caption of a figure or table", ("structure",)),
    Kind("field", "a described block: a form field, a party's name and address", ("structure", "generator")),
    Kind("key", "the value that belongs to a named key (invoice number, total, date)", ("generator", "engine")),
    Kind("table", "a cell, row or column of a table", ("generator",)),
    Kind("layout", "a structural element of a page: a paragraph, a column, a heading", ("generator",)),
    Kind("choice", "the ticked box of a group", ("generator",)),
    Kind("ambiguous", "one of several places that answer alike (any date of an invoice), all kept", ("generator",)),
    Kind("bank", "a question asked of every page (the engine's question bank)", ("engine",)),
    Kind("user", "a person's own question, imported or added in the engine", ("person",)),
)

KINDS: dict[str, Kind] = {k.name: k for k in REGISTRY}
"""Every kind by name, in the registry's order."""


def asked_by(asker: str) -> tuple[str, ...]:
    """The names of the kinds ``asker`` asks, in the registry's order."""
    return tuple(k.name for k in REGISTRY if asker in k.askers)


STRUCTURE_KINDS = asked_by("structure")
"""The kinds the structure rules ask, in the order the real-page benchmark reports them."""
GENERATED_KINDS = asked_by("generator")
"""The kinds the synthetic page generator asks."""

LEGACY = {"engine-key": "key", "engine-bank": "bank", "user-added": "user"}
"""Labels older engine databases and exports gave their questions, and the kind each is."""


def canonical(name: str) -> str:
    """A stored kind as this registry names it (older labels read as their kind); unknown names are kept as they
    are, so that data made elsewhere still reads (and is scored under its own name)."""
    return LEGACY.get(name, name)


def check_kind(name: str, asker: str | None = None) -> str:
    """``name`` when it is registered (and asked by ``asker``, when given); raises ValueError otherwise."""
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown question kind {name!r}; registered: {', '.join(KINDS)}")
    if asker is not None and asker not in kind.askers:
        raise ValueError(f"kind {name!r} is not one {asker} asks ({', '.join(asked_by(asker))})")
    return name


def row_kind(question: dict) -> str:
    """The kind of a question stored as a dict (a dataset row's or an export's): ``kind``, or the older
    ``qtype``; "user" when neither is there."""
    return canonical(question.get("kind") or question.get("qtype") or "user")
