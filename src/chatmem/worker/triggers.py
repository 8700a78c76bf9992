"""When a session's messages go to extraction (SPEC L3): the triggers and the pure test of
them.

A session's buffer goes after every N user turns, on an explicit preference or instruction
in one message, on a change of topic (the cosine distance between two user turns), at the
end of the session, or when it holds too many messages. :func:`trigger_reason` says which,
from counts the scheduler (:mod:`chatmem.worker.scheduler`) keeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from chatmem import checks
from chatmem.records import Vector

#: A user message that states a preference or gives a standing instruction about themselves.
EXPLICIT_PATTERN = re.compile(
    r"\b(?:remember\s+(?:that|this|my|me|i)|don'?t\s+forget|note\s+that|keep\s+in\s+mind|"
    r"i\s+(?:really\s+)?(?:prefer|hate|love|dislike|can'?t\s+stand)|i'?m\s+allergic|"
    r"i\s+am\s+allergic|my\s+name\s+is|call\s+me|always|never|from\s+now\s+on)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Triggers:
    """When a session's messages go to extraction (SPEC L3, seed 002 sections 6 and 14).

    ``every_turns``: after this many user turns (None: never). ``explicit``: a user message
    matching :data:`EXPLICIT_PATTERN`. ``topic_change``: the cosine distance between the
    last two user turns of at least ``min_topic_words`` words passes it (needs an embedder;
    None: off). ``session_end``: when the session ends. ``max_buffer``: a session holding
    this many unextracted messages goes anyway.
    """

    every_turns: int | None = 10
    explicit: bool = True
    topic_change: float | None = 0.8
    min_topic_words: int = 4
    session_end: bool = True
    max_buffer: int = 60

    def __post_init__(self) -> None:
        if self.every_turns is not None:
            checks.whole(self.every_turns, "every_turns", low=1)
        if self.topic_change is not None:
            checks.number(self.topic_change, "topic_change", positive=True, high=2)
        checks.whole(self.min_topic_words, "min_topic_words")
        checks.whole(self.max_buffer, "max_buffer", low=1)


def is_explicit(text: str) -> bool:
    """Whether a user message states a preference or an instruction about the user."""
    return EXPLICIT_PATTERN.search(text) is not None


def cosine_distance(a: Vector, b: Vector) -> float:
    """1 - cosine similarity (0 for the same direction, 2 for opposite ones)."""
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 1.0 - (float(np.dot(a, b)) / norms if norms else 0.0)


def trigger_reason(
    triggers: Triggers,
    *,
    turns: int,
    buffered: int,
    explicit: bool,
    distance: float | None,
    session_end: bool,
) -> str | None:
    """Why a session's buffer goes to extraction now, or None (pure)."""
    if buffered == 0:
        return None
    if session_end and triggers.session_end:
        return "session end"
    if explicit and triggers.explicit:
        return "explicit"
    topic = triggers.topic_change
    if distance is not None and topic is not None and distance >= topic:
        return "topic change"
    if triggers.every_turns is not None and turns >= triggers.every_turns:
        return f"every {triggers.every_turns} turns"
    if buffered >= triggers.max_buffer:
        return "buffer full"
    return None


__all__ = ["EXPLICIT_PATTERN", "Triggers", "cosine_distance", "is_explicit", "trigger_reason"]
