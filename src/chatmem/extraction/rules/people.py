"""Rules for the people and pets in the user's life: their names ("my dog Pixel", "my sister
is called Ines") and what the user says of them ("my brother lives in Lyon")."""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import (
    FAMILY_WORDS,
    NOT_NAMES,
    OBJECT,
    PET_WORDS,
    PRONOUN_OBJECTS,
    RELATION,
)
from chatmem.extraction.rules.wording import skippable
from chatmem.records import MemoryType

#: A name as the value of "my X is Y" or "called Y": a word, and maybe a capitalised second.
NAME_VALUE = re.compile(r"[^\W\d_][\w'-]*(?:\s+[A-Z][\w'-]*)?")
_CALLED = re.compile(rf"(?i:called|named)\s+(?P<name>{NAME_VALUE.pattern})")


def named(relation: str, name: str) -> Draft | None:
    """The one fact a relation's name makes, whichever rule read it ("my dog's name is
    Pixel", "my dog is called Pixel", "my dog Pixel"), so that they write it alike."""
    relation = " ".join(relation.lower().split())
    name = name[:1].upper() + name[1:]
    if name.lower() in NOT_NAMES or name.lower() in PRONOUN_OBJECTS:
        return None
    return Draft(
        f"User's {relation} is named {name}",
        MemoryType.PROFILE,
        f"{relation} name",
        ("relationship", _relation_tag(relation)),
        confidence=0.65,
        importance=0.8,
        structured={"relation": relation, "name": name},
    )


def _relation_name(match: re.Match[str], _: Sentence) -> Draft | None:
    return named(match.group("rel"), match.group("name"))


def _relation_fact(match: re.Match[str], sentence: Sentence) -> Draft | None:
    relation = " ".join(match.group("rel").lower().split())
    verb = match.group("verb").lower()
    future = verb == "will" or match.group("obj").lower().startswith("going to")
    what = sentence.obj(match, future=future)
    if skippable(what):
        return None
    called = _CALLED.fullmatch(what)
    if verb == "is" and called is not None:  # "my sister is called Ines": a name, said once
        return named(relation, called.group("name"))
    name = match.group("name")
    who = f"User's {relation} {name}" if name else f"User's {relation}"
    first_word = what.split()[0].lower()
    return Draft(
        f"{who} {verb} {what}",
        MemoryType.SEMANTIC,
        f"{relation} {verb} {first_word}",
        ("relationship", _relation_tag(relation)),
        confidence=0.55,
        importance=0.6,
        structured={"relation": relation, "fact": f"{verb} {what}"},
    )


def _relation_tag(relation: str) -> str:
    head = relation.split()[-1].split("-")[-1]
    if head in PET_WORDS:
        return "pet"
    return "family" if head in FAMILY_WORDS else "people"


# fmt: off
#: The people rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("people", rf"\bmy\s+{RELATION}(?:'s\s+name\s+is|\s+is\s+(?:called|named)|,?\s+)"
         rf"\s*(?P<name>(?-i:[A-Z][a-z]+))\b", _relation_name, "my"),
    rule("people", rf"\bmy\s+{RELATION}(?:\s+(?P<name>(?-i:[A-Z][a-z]+)))?\s+(?P<verb>is|was|"
         rf"has|had|loves|likes|works|lives|got|went|started|plays|wants|will|studies|"
         rf"teaches|hates|enjoys|just\s+\w+)\s+{OBJECT}", _relation_fact, "my"),
)
# fmt: on

__all__ = ["NAME_VALUE", "RULES", "named"]
