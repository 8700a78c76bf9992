"""Rules for who the user is: their name, age, job, employer and studies."""

from __future__ import annotations

import re

from chatmem.extraction.dates import day_phrase
from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import (
    IM,
    LOOSE_NAME,
    NAME,
    NOT_NAMES,
    OBJECT,
    PRONOUN_OBJECTS,
)
from chatmem.extraction.rules.wording import skippable
from chatmem.records import MemoryType

_JOBS = (
    r"teacher|engineer|developer|programmer|nurse|doctor|physician|surgeon|dentist|lawyer|"
    r"attorney|accountant|architect|designer|artist|painter|writer|author|journalist|editor|"
    r"chef|cook|baker|waiter|waitress|bartender|barista|pilot|driver|mechanic|electrician|"
    r"plumber|carpenter|farmer|firefighter|police\s+officer|officer|soldier|scientist|"
    r"researcher|professor|lecturer|student|consultant|analyst|manager|director|ceo|cto|"
    r"founder|entrepreneur|salesperson|marketer|musician|singer|actor|actress|photographer|"
    r"therapist|counsel(?:l)?or|psychologist|pharmacist|vet|veterinarian|librarian|"
    r"cashier|clerk|secretary|receptionist|technician|administrator|admin|freelancer|"
    r"streamer|gamer|coach|trainer|instructor|tutor|social\s+worker|paramedic|midwife|"
    r"scientist|biologist|chemist|physicist|economist|mathematician|statistician|"
    r"data\s+scientist|dancer|comedian|filmmaker|director|producer|illustrator|animator|"
    r"youtuber|blogger|influencer|intern|apprentice|volunteer|activist|nanny|housekeeper"
)

_NAME_FACT = Kind(MemoryType.PROFILE, ("identity", "name"), confidence=0.7, importance=0.9)
_AGE = Kind(MemoryType.PROFILE, ("identity", "age"), confidence=0.7, importance=0.7)
_JOB = Kind(MemoryType.PROFILE, ("identity", "job"), confidence=0.65, importance=0.8)
_STUDIES = Kind(MemoryType.PROFILE, ("identity", "education"), confidence=0.6, importance=0.7)


def _name(match: re.Match[str], _: Sentence) -> Draft | None:
    name = " ".join(part[:1].upper() + part[1:] for part in match.group("name").split())
    if name.lower() in PRONOUN_OBJECTS or name.lower() in NOT_NAMES:
        return None
    return _NAME_FACT.draft(f"User's name is {name}", "name", {"name": name})


def _age(match: re.Match[str], sentence: Sentence) -> Draft | None:
    age = int(match.group("age"))
    if not 1 <= age <= 120:
        return None
    as_of = day_phrase(sentence.anchor)
    return _AGE.draft(
        f"User is {age} years old (as of {as_of})",
        "age",
        {"age": age, "as_of": sentence.anchor.isoformat()},
    )


def _job(match: re.Match[str], sentence: Sentence) -> Draft | None:
    job = sentence.obj(match, "job")
    article = "an" if job[:1].lower() in "aeiou" else "a"
    return _JOB.draft(f"User is {article} {job}", "job", {"job": job})


def _works(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    preposition = match.group("prep").lower()
    subject = "job" if preposition == "as" else "employer"
    return _JOB.draft(f"User works {preposition} {what}", subject, {subject: what})


def _studies(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    return _STUDIES.draft(f"User studies {what}", "studies", {"studies": what})


# fmt: off
#: The identity rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("identity", rf"\bmy\s+name(?:'s|\s+is)\s+{LOOSE_NAME}", _name, "name"),
    rule("identity", rf"\b(?:call\s+me|i(?:'m|\s+am)\s+(?:called|named))\s+{NAME}", _name,
         "call", "called", "named"),
    rule("identity", rf"^\W*(?:hi|hello|hey)(?:\s+there|\s+all)?[,!.]?\s+(?:i'm|i\s+am|im|"
         rf"this\s+is)\s+{NAME}\b", _name, "hi", "hello", "hey"),
    rule("identity", rf"{IM}(?P<age>\d{{1,3}})\s*(?:years?\s+old|y/?o|yrs?\s+old)\b", _age,
         "old", "yo", "y", "yrs", "yr"),
    rule("identity", r"\bi\s+(?:just\s+)?turned\s+(?P<age>\d{1,3})\b", _age, "turned"),
    rule("identity", rf"{IM}(?:an?\s+)(?P<job>(?:[\w-]+\s+){{0,2}}(?:{_JOBS}))\b", _job,
         "a", "an"),
    rule("identity", rf"\bi\s+(?:currently\s+|now\s+)?work\s+(?P<prep>as|at|for)\s+{OBJECT}",
         _works, "work"),
    rule("identity", rf"(?:{IM}(?:currently\s+)?studying|\bi\s+(?:currently\s+)?study|"
         rf"{IM}(?:an?\s+)?(?:\w+\s+)?student\s+(?:of|in))\s+{OBJECT}", _studies,
         "study", "studying", "student"),
)
# fmt: on

__all__ = ["RULES"]
