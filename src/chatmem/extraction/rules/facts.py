"""The rules for "my X is Y" and "Y is my X": any other thing the user says of their own
("my birthday is on 3 May", "Playing games is my hobby")."""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.people import NAME_VALUE, named
from chatmem.extraction.rules.vocabulary import (
    BOUNDARY,
    FLAGS,
    OBJECT,
    RELATION,
    WORD,
    word_set,
)
from chatmem.extraction.rules.wording import clean, skippable, uncapitalised
from chatmem.records import MemoryType

_GENERIC_SKIP = word_set(
    "point question guess bad pleasure turn concern bet apologies apology thoughts thought "
    "answer reply response opinion advice suggestion understanding impression hope hopes "
    "god goodness gosh heart head mind life day week name age"
)
_RELATION_RE = re.compile(RELATION, FLAGS)
# A relation's name said as a thing ("dog's name").
_RELATION_NAME = re.compile(rf"{RELATION}'s\s+name", FLAGS)
# In "my X is Y", an X holding these is a clause, not a thing ("my recipe and it was …").
_CLAUSE_WORDS = word_set("and or but it that which who he she they we i you")
# Things whose value is part of the user's profile, each its own tag.
_PROFILE_THINGS = ("birthday", "email", "phone", "address", "number", "pronouns")

_FACT = Kind(MemoryType.SEMANTIC, ("fact",), confidence=0.55, importance=0.5)


def _my_thing(match: re.Match[str], sentence: Sentence) -> Draft | None:
    thing = clean(match.group("thing"))
    words = WORD.findall(thing.lower())
    head = words[0] if words else ""
    if (
        not words
        or head in _GENERIC_SKIP
        or head.startswith(("fav", "name"))
        or _RELATION_RE.fullmatch(thing)
        or not _CLAUSE_WORDS.isdisjoint(words)
    ):
        return None
    value = uncapitalised(sentence.obj(match), match)
    if skippable(value):
        return None
    relation_name = _RELATION_NAME.fullmatch(thing)
    if relation_name is not None and NAME_VALUE.fullmatch(value):
        # "my dog's name is Pixel": the people rule's fact, written alike so it is said once.
        return named(relation_name.group("rel"), value)
    verb = match.group("verb").lower()
    kind = _FACT
    if head in _PROFILE_THINGS:
        kind = Kind(MemoryType.PROFILE, (head,), confidence=0.55, importance=0.7)
    return kind.draft(f"User's {thing} {verb} {value}", thing.lower(), {thing: value})


# fmt: off
#: The "my X is Y" rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("fact", rf"^\W*(?P<obj>[^,.!?;]{{2,60}}?)\s+(?P<verb>is|are)\s+my\s+(?P<thing>[a-z]"
         rf"[\w' -]{{1,40}}?){BOUNDARY}", _my_thing, "my"),
    rule("fact", rf"\bmy\s+(?P<thing>[a-z][\w' -]{{1,40}}?)\s+(?P<verb>is|are|was|were)\s+"
         rf"{OBJECT}", _my_thing, "my"),
)
# fmt: on

__all__ = ["RULES"]
