"""Word normalisation and question terms, shared by the exact-match feature and the OCR baseline."""

from __future__ import annotations

import re

# Words that say what kind of question it is rather than what to look for.
_STOP_TEXT = """a an the is are was were be of for to in on at by this that these those what which who whom whose where
when how much many give find show me please it its does do did there here any some written field entry value"""
STOP = frozenset(_STOP_TEXT.split())
_TOKEN = re.compile(r"[\w'-]+", re.UNICODE)


def normalise(word: str) -> str:
    """Lower case, punctuation stripped ("No.:" → "no")."""
    return re.sub(r"[^\w'-]", "", word.lower())


def content_words(question: str) -> list[str]:
    """The question's words without stop words, normalised."""
    return [t for t in (m.group(0).lower() for m in _TOKEN.finditer(question)) if t not in STOP]


def word_matches(question: str, words: list[str]) -> list[bool]:
    """For each page word: does it equal one of the question's content words (after normalisation)?"""
    terms = set(content_words(question))
    return [bool(n) and n in terms for n in (normalise(w) for w in words)]
