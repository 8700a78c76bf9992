"""What an extractor returns: typed facts with their context and where they came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from chatmem.messages import Message
from chatmem.records import MemoryType, Source


@dataclass(frozen=True)
class Fact:
    """One fact about a user, stated with its context ("budget for the Hawaii trip is $10,000").

    ``subject`` names what the fact is about ("Hawaii trip budget"), so a later fact with the
    same subject and another value can supersede it. ``provenance`` holds message ids.
    """

    text: str
    type: MemoryType = MemoryType.SEMANTIC
    importance: float = 0.5
    confidence: float = 0.5
    tags: tuple[str, ...] = ()
    structured: dict[str, Any] = field(default_factory=dict)
    source: Source = Source.IMPLICIT_INFERENCE
    provenance: tuple[str, ...] = ()
    subject: str | None = None
    #: When the fact became true, if the messages said (relative dates resolved).
    valid_from: datetime | None = None


class Extractor(Protocol):
    """Turns a batch of messages into facts. Never stores anything itself."""

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """The facts that ``messages`` state about their user."""
        ...


__all__ = ["Extractor", "Fact"]
