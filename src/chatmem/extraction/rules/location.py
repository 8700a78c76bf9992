"""Rules for where the user lives, moved, grew up and comes from, and where and when they
were born."""

from __future__ import annotations

import re

from chatmem.extraction.dates import find_date
from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import IM, OBJECT
from chatmem.extraction.rules.wording import skippable
from chatmem.records import MemoryType

#: How each verb is said in a fact, and the subject it gives.
_HOME_VERBS = {
    "live": ("lives", "home"),
    "living": ("lives", "home"),
    "reside": ("lives", "home"),
    "moved": ("moved", "home"),
    "relocated": ("moved", "home"),
    "grew up": ("grew up", "childhood home"),
    "from": ("is from", "origin"),
    "come from": ("comes from", "origin"),
    "came from": ("comes from", "origin"),
}

_HOME = Kind(MemoryType.PROFILE, ("identity", "location"), confidence=0.65, importance=0.8)
_BIRTH_DATE = Kind(MemoryType.PROFILE, ("identity", "birthday"), confidence=0.7, importance=0.7)
_BIRTHPLACE = Kind(MemoryType.PROFILE, ("identity", "location"), confidence=0.65, importance=0.7)


def _home(match: re.Match[str], sentence: Sentence) -> Draft | None:
    verb = " ".join(match.group("verb").lower().split())
    moved = verb in ("moved", "relocated")
    place = sentence.obj(match, future=False if moved else None)
    if skippable(place) or (verb.endswith("from") and not place[:1].isupper()):
        return None
    said, subject = _HOME_VERBS[verb]
    preposition = match.group("prep").lower() if match.group("prep") else ""
    text = " ".join(filter(None, ("User", said, preposition, place)))
    draft = _HOME.draft(text, subject, {"place": place})
    return sentence.event(draft, future=False) if moved else draft


def _born(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    when = find_date(what, sentence.anchor) or find_date(f"in {what}", sentence.anchor)
    if when is not None:
        return _BIRTH_DATE.draft(
            f"User was born {match.group('prep').lower()} {what}",
            "birth date",
            {"born": when.start.isoformat()},
        )
    if not what[:1].isupper():
        return None
    return _BIRTHPLACE.draft(f"User was born in {what}", "birthplace", {"place": what})


# fmt: off
#: The location rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("location", rf"(?:\bi\s+|{IM})(?:currently\s+|still\s+|now\s+)?(?P<verb>live|"
         rf"reside|living)\s+(?P<prep>in|near|at|on|outside|by)\s+{OBJECT}", _home,
         "live", "living", "reside"),
    rule("location", rf"\bi\s+(?:just\s+|recently\s+|finally\s+)?(?P<verb>moved|relocated)"
         rf"\s+(?P<prep>to|into)\s+{OBJECT}", _home, "moved", "relocated"),
    rule("location", rf"\bi\s+(?P<verb>grew\s+up)\s+(?P<prep>in|near|on)\s+{OBJECT}", _home,
         "grew"),
    rule("location", rf"(?:{IM}|\bi\s+)(?:originally\s+)?(?P<verb>from|come\s+from|came\s+"
         rf"from)(?P<prep>)\s+{OBJECT}", _home, "from"),
    rule("identity", rf"\bi\s+was\s+born\s+(?P<prep>in|on)\s+{OBJECT}", _born, "born"),
)
# fmt: on

__all__ = ["RULES"]
