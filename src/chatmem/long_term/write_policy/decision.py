"""The rule decision of the write policy (SPEC L4), pure: whether a fact is stored at all
(``screen``), which facts of a batch restate each other (``duplicates``), and what a fact
does to the memories it is compared with (``decide``): update, supersede, create or skip.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from chatmem import checks
from chatmem.extraction.base import Fact
from chatmem.extraction.poisoning import is_instruction_to_model
from chatmem.long_term.details import agree, details_of
from chatmem.records import MemoryRecord, MemoryType, Vector

logger = logging.getLogger("chatmem.write_policy")

#: Structured keys that say *when*, not *what*: a differing date is not another value.
_TIME_KEYS = frozenset({"date", "when", "time"})
#: How specific each fact type is: of two memories of different types that say the same,
#: the more specific one is kept. Reflective memories (insights) are never compared.
SPECIFICITY = {
    MemoryType.PROFILE: 3,
    MemoryType.PREFERENCE: 2,
    MemoryType.EPISODIC: 2,
    MemoryType.PROCEDURAL: 2,
    MemoryType.SEMANTIC: 1,
}
_WORDS = re.compile(r"\w+")


class Action(StrEnum):
    """What a fact does to the user's memories."""

    CREATE = "create"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    SKIP = "skip"


@dataclass(frozen=True)
class WriteConfig:
    """Thresholds of the write policy (defaults from SPEC L4 and seed 002 section 6)."""

    min_importance: float = 0.3
    min_confidence: float = 0.4
    #: Cosine similarity above which a fact updates the existing memory.
    update_similarity: float = 0.9
    #: Nearest memories at or above this similarity are shown to the decision model.
    related_similarity: float = 0.6
    #: How many nearest memories a fact is compared with.
    candidates: int = 10

    def __post_init__(self) -> None:
        for name in ("min_importance", "min_confidence", "update_similarity"):
            checks.number(getattr(self, name), name, low=0, high=1)
        checks.number(self.related_similarity, "related_similarity", low=-1, high=1)
        checks.whole(self.candidates, "candidates", low=1)


@dataclass(frozen=True)
class Existing:
    """A current memory a fact may touch; ``similarity`` is the cosine (None when it was
    found by subject only)."""

    record: MemoryRecord
    similarity: float | None = None


@dataclass(frozen=True)
class Decision:
    """What one fact does: the action, the memories it touches, and why (for the logs)."""

    action: Action
    targets: tuple[str, ...] = ()
    reason: str = ""


def screen(fact: Fact, config: WriteConfig) -> str | None:
    """Why ``fact`` is not stored at all, or None when it goes on to the decision."""
    if fact.importance < config.min_importance:
        return "low importance"
    if fact.confidence < config.min_confidence:
        return "low confidence"
    reason = is_instruction_to_model(fact.text)
    if reason is not None:
        logger.warning("not storing a fact that %s: %r", reason, fact.text)
        return "instruction to the model"
    return None


def subject_key(subject: str | None) -> str | None:
    """A subject as it is stored and compared: lower case, single spaces."""
    if subject is None:
        return None
    key = " ".join(subject.lower().split())
    return key or None


def values_differ(fact: Fact, record: MemoryRecord) -> bool:
    """Whether ``fact`` gives its subject another value than ``record`` does.

    The structured values under their shared keys decide (dates aside); without shared keys,
    the texts do (case and spacing aside).
    """
    theirs = record.content.structured or {}
    shared = (set(fact.structured) & set(theirs)) - _TIME_KEYS
    if shared:
        return any(_norm(fact.structured[key]) != _norm(theirs[key]) for key in shared)
    return _norm(fact.text) != _norm(record.content.raw)


def _norm(value: Any) -> str:
    return " ".join(str(value).lower().split())


def keeps_details(fact: Fact, record: MemoryRecord) -> bool:
    """Whether ``fact`` could restate ``record`` without losing or changing a number, code,
    name or date of it (:func:`chatmem.long_term.details.agree`)."""
    return agree(details_of(fact.text), details_of(record.content.raw))


def says_the_same(text: str, other: str, similarity: float | None, config: WriteConfig) -> bool:
    """Whether two texts state one fact: the same details, and a cosine above
    ``update_similarity`` or the same words (case and punctuation aside)."""
    if details_of(text) != details_of(other):
        return False
    if similarity is not None and similarity > config.update_similarity:
        return True
    return _WORDS.findall(text.lower()) == _WORDS.findall(other.lower())


def decide(
    fact: Fact,
    nearest: Sequence[Existing],
    same_subject: Sequence[Existing],
    config: WriteConfig,
    elsewhere: Sequence[Existing] = (),
) -> Decision:
    """The rule decision for one screened fact (see the module docstring). ``elsewhere``
    holds the nearest current memories of the other fact types."""
    if same_subject:
        agreeing = [
            e
            for e in same_subject
            if not values_differ(fact, e.record) and keeps_details(fact, e.record)
        ]
        if agreeing:
            return Decision(Action.UPDATE, (agreeing[0].record.id,), "same subject, same value")
        ids = tuple(e.record.id for e in same_subject)
        return Decision(Action.SUPERSEDE, ids, "same subject, another value")
    similar = [
        e
        for e in nearest
        if (e.similarity or 0.0) > config.update_similarity and keeps_details(fact, e.record)
    ]
    best = max(similar, key=lambda e: e.similarity or 0.0, default=None)
    if best is not None:
        return Decision(Action.UPDATE, (best.record.id,), f"similarity {best.similarity:.3f}")
    return restated_across_types(fact, elsewhere, config) or Decision(Action.CREATE, (), "new")


def restated_across_types(
    fact: Fact, elsewhere: Sequence[Existing], config: WriteConfig
) -> Decision | None:
    """What ``fact`` does when a memory of another type already says it: nothing (``SKIP``)
    when that memory's type is as specific, else ``UPDATE`` it to the fact's type. None when
    no memory of ``elsewhere`` says the same (:func:`says_the_same`)."""
    same = [
        e for e in elsewhere if says_the_same(fact.text, e.record.content.raw, e.similarity, config)
    ]
    if not same:
        return None
    best = max(same, key=lambda e: (_specificity(e.record.type), e.similarity or 0.0))
    reason = f"restates a {best.record.type} memory"
    if _specificity(fact.type) > _specificity(best.record.type):
        return Decision(Action.UPDATE, (best.record.id,), reason)
    return Decision(Action.SKIP, (best.record.id,), reason)


def duplicates(facts: Sequence[Fact], vectors: Sequence[Vector], config: WriteConfig) -> set[int]:
    """Positions of the facts of one batch that another fact of another type restates (see
    :func:`says_the_same`; the same subject with the same details counts too). Of two, the
    more specific type is kept, else the earlier fact."""
    dropped: set[int] = set()
    for i, j in itertools.combinations(range(len(facts)), 2):
        first, second = facts[i], facts[j]
        if i in dropped or j in dropped or first.type == second.type:
            continue
        if _restate_each_other(first, second, _cosine(vectors[i], vectors[j]), config):
            keep_second = _specificity(second.type) > _specificity(first.type)
            dropped.add(i if keep_second else j)
    return dropped


def _restate_each_other(first: Fact, second: Fact, cosine: float, config: WriteConfig) -> bool:
    if says_the_same(first.text, second.text, cosine, config):
        return True
    subject = subject_key(first.subject)
    return (
        subject is not None
        and subject == subject_key(second.subject)
        and details_of(first.text) == details_of(second.text)
    )


def _cosine(a: Vector, b: Vector) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms else 0.0


def _specificity(kind: MemoryType) -> int:
    return SPECIFICITY.get(kind, 0)
