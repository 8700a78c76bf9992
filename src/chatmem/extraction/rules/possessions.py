"""The rule for what the user has: family ("I have two kids"), pets, things, and an
appointment when the sentence says when ("I have a dentist appointment tomorrow")."""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.plans import PLAN
from chatmem.extraction.rules.vocabulary import (
    BOUNDARY,
    FAMILY_WORDS,
    FLAGS,
    PET_WORDS,
    word_set,
)
from chatmem.extraction.rules.wording import skippable
from chatmem.records import MemoryType

_TRIVIAL_HEADS = word_set(
    "question questions idea ideas feeling feelings thought thoughts doubt doubts suggestion "
    "suggestions request requests minute moment second look chance clue point favor favour "
    "sense hunch guess concern concerns quick lot bit way time feeling day"
)
_DETERMINER = re.compile(r"^(?:an?|the|one|two|three|four|five|some|several|many|\d+)\s+", FLAGS)
# Words that come after the head of a noun phrase ("a dog named Rex", "a flat in Leeds").
_AFTER_HEAD = word_set(
    "named called who that with from in at for of there here now too again already lately "
    "recently to"
)

_FAMILY = Kind(MemoryType.PROFILE, ("family",), confidence=0.6, importance=0.7)
_PET = Kind(MemoryType.SEMANTIC, ("pet",), confidence=0.6, importance=0.7)
_THING = Kind(MemoryType.SEMANTIC, ("possession",), confidence=0.6, importance=0.5)


def _possession(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    head = _head_noun(what)
    if skippable(what) or head in _TRIVIAL_HEADS:
        return None
    if sentence.future_date is not None:  # "I have a dentist appointment tomorrow"
        draft = PLAN.draft(f"User has {what}", f"appointment: {what.lower()[:60]}", {"plan": what})
        return sentence.event(draft, future=True)
    said = "owns" if (match.group("verb") or "").lower() == "own" else "has"
    if head in FAMILY_WORDS:
        kind, subject = _FAMILY, "family"
    elif head in PET_WORDS:
        kind, subject = _PET, "pet"
    else:
        kind, subject = _THING, f"has {head}"
    return kind.draft(f"User {said} {what}", subject, {"item": what})


def _head_noun(phrase: str) -> str:
    words = _DETERMINER.sub("", phrase.lower()).split()
    for index, word in enumerate(words):
        if word in _AFTER_HEAD:
            return words[index - 1] if index else word
    return words[-1] if words else ""


# fmt: off
#: The possession rule.
RULES: tuple[Rule, ...] = (
    rule("possession", r"\bi(?:\s+(?:also\s+|still\s+|now\s+)?(?P<verb>have|own|have\s+got)|"
         r"'ve\s+(?:also\s+)?got)\s+(?P<obj>(?:an?|one|two|three|four|five|\d+|some|several|"
         r"many|(?:kids|children|pets|cats|dogs|siblings|twins|grandchildren)\b)[^.!?;]{0,100}?)"
         + BOUNDARY, _possession, "have", "own", "got"),
)
# fmt: on

__all__ = ["RULES"]
