"""What every rule shares: the sentence it reads, the draft it writes, and the rule itself.

A :class:`Rule` is a compiled pattern over one :class:`Sentence`, the builder that writes a
match as a :class:`Draft`, and the needles that say when the pattern is worth trying. A
:class:`Kind` holds what all facts of one kind share (type, tags, confidence, importance),
so that a builder only writes the words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import Any, NamedTuple

from chatmem.extraction.dates import ResolvedDate, find_date
from chatmem.extraction.rules.vocabulary import FLAGS, WORD
from chatmem.extraction.rules.wording import clean
from chatmem.records import MemoryType


@dataclass(frozen=True)
class Draft:
    """A fact before dates and provenance: what a rule saw."""

    text: str
    type: MemoryType
    subject: str
    tags: tuple[str, ...]
    confidence: float = 0.6
    importance: float = 0.5
    structured: dict[str, Any] = field(default_factory=dict)
    #: The resolved date the text should mention (an event or a plan), if any.
    when: ResolvedDate | None = None


class Kind(NamedTuple):
    """What the drafts of one kind of fact share; a builder adds the words."""

    type: MemoryType
    tags: tuple[str, ...]
    confidence: float
    importance: float

    def draft(self, text: str, subject: str, structured: dict[str, Any]) -> Draft:
        """A draft of this kind saying ``text`` about ``subject``."""
        return Draft(
            text,
            self.type,
            subject,
            self.tags,
            confidence=self.confidence,
            importance=self.importance,
            structured=structured,
        )


class Sentence:
    """One sentence of a user message, with the day it was said (for relative dates)."""

    def __init__(self, text: str, anchor: date) -> None:
        self.text = text
        self.anchor = anchor

    @cached_property
    def words(self) -> frozenset[str]:
        """The sentence's lowercased words, for a rule's needles."""
        return frozenset(WORD.findall(self.text.lower()))

    @cached_property
    def past_date(self) -> ResolvedDate | None:
        return find_date(self.text, self.anchor, future=False)

    @cached_property
    def future_date(self) -> ResolvedDate | None:
        return find_date(self.text, self.anchor, future=True)

    def obj(self, match: re.Match[str], group: str = "obj", *, future: bool | None = None) -> str:
        """A matched object, cleaned and in the third person, with a date inside it resolved.

        ``future`` (True or False) resolves a date expression that lies inside the object.
        """
        start, end = match.span(group)
        raw = self.text[start:end]
        when = self._date(future)
        if when is not None and start <= when.span[0] and when.span[1] <= end:
            if not (raw[: when.span[0] - start] + raw[when.span[1] - start :]).strip():
                return ""  # only a date: the thing was in a clause before ("a photo I took …")
            raw = raw[: when.span[0] - start] + when.phrase + raw[when.span[1] - start :]
        return clean(raw)

    def event(self, draft: Draft, *, future: bool) -> Draft:
        """``draft`` with the sentence's date: valid_from, and said in the text if it is not."""
        when = self._date(future)
        if when is None:
            return draft
        text = draft.text if when.phrase in draft.text else f"{draft.text} {when.phrase}"
        structured = {**draft.structured, "date": when.start.isoformat()}
        return replace(draft, text=text, structured=structured, when=when)

    def _date(self, future: bool | None) -> ResolvedDate | None:
        if future is None:
            return None
        return self.future_date if future else self.past_date


Builder = Callable[[re.Match[str], Sentence], Draft | None]


class Rule(NamedTuple):
    """A pattern and the builder that turns its matches into drafts."""

    family: str
    pattern: re.Pattern[str]
    build: Builder
    #: Words one of which must be in a sentence for the pattern to be tried on it.
    needles: frozenset[str]


def rule(family: str, pattern: str, build: Builder, *needles: str) -> Rule:
    """``pattern`` compiled (case-blind) into a rule of ``family``."""
    return Rule(family, re.compile(pattern, FLAGS), build, frozenset(needles))


__all__ = ["Builder", "Draft", "Kind", "Rule", "Sentence", "rule"]
