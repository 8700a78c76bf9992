"""The words and regex pieces more than one family of rules is built from.

An object running to the end of its clause, a name, a relation ("my older sister"), who
speaks ("I", "we"), the adverbs a verb may carry, and the word lists that say what is a
family member, a pet, or no name at all. A word list only one family uses lives with it.
"""

from __future__ import annotations

import re

FLAGS = re.IGNORECASE
#: A word as a sentence's words and a fact's checks count them.
WORD = re.compile(r"[a-z0-9']+")


def word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


def words_of(words: str) -> tuple[str, ...]:
    """Phrases separated by spaces, with ``_`` for the spaces inside a phrase."""
    return tuple(word.replace("_", " ") for word in words.split())


def alternation(phrases: tuple[str, ...]) -> str:
    """A regex matching any of ``phrases`` (longest first, any whitespace inside)."""
    ordered = sorted(phrases, key=len, reverse=True)
    return "|".join(re.escape(phrase).replace(r"\ ", r"\s+") for phrase in ordered)


def first_words(phrases: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(phrase.split()[0] for phrase in phrases)


ADVERBS = (
    r"(?:(?:really|truly|absolutely|just|also|totally|so|still|actually|definitely|kinda|"
    r"kind\s+of|sort\s+of|honestly|especially|always|usually|generally|genuinely|deeply|"
    r"pretty\s+much|now|recently|finally|currently|seriously|literally)\s+)*"
)
IM = r"\bi(?:'m|\s+am|m)\s+"
WHO = r"(?P<who>i|we)"
WHO_BE = r"(?P<who>i(?:'m|\s+am|m)|we(?:'re|\s+are))\s+"
# An object runs to the end of its clause: punctuation, or a conjunction opening a new one.
BOUNDARY = (
    r"(?=\s*(?:$|,(?!\d)|\.(?!\w)|:(?!\d)|[;!?()\[\]\"]|\s[-–—]+\s|"
    r"\s(?:but|because|cause|cuz|since|so\s+(?!much)|although|though|while|which|who|"
    r"whenever|unless|lol|haha\w*|and\s+(?:i|i'm|i've|im|my|we|it|that|this|they|he|she|"
    r"you|then|also)\b)))"
)
# Dots inside words stay ("$10.50", "St.Louis"); sentence ends were split off already.
OBJECT = rf"(?P<obj>(?:[^.!?;]|\.(?=\w)){{2,100}}?){BOUNDARY}"
NAME = r"(?P<name>(?-i:[A-Z][a-zA-Z'-]+)(?:\s+(?-i:[A-Z][a-zA-Z'-]+))?)"
LOOSE_NAME = r"(?P<name>(?!not\b|a\b|an\b|the\b)[A-Za-z][A-Za-z'-]+)"

_RELATIONS = (
    r"wife|husband|partner|spouse|boyfriend|girlfriend|fianc[ée]e?|son|daughter|kids?|"
    r"children|child|baby|mom|mother|mum|mommy|dad|father|daddy|parents|brother|sister|"
    r"siblings?|grandma|grandmother|grandpa|grandfather|grandparents|grandson|granddaughter|"
    r"aunt|uncle|cousin|niece|nephew|friends?|bff|boss|manager|co-?workers?|colleagues?|"
    r"roommate|flatmate|neighbou?r|teacher|mentor|therapist|doctor|coach|dog|cat|pets?|"
    r"puppy|kitten|bird|horse|hamster|rabbit|bunny|turtle|twins|family|in-laws|"
    r"mother-in-law|father-in-law|stepmom|stepdad|stepson|stepdaughter"
)
RELATION = (
    r"(?P<rel>(?:(?:older|younger|little|big|baby|twin|eldest|oldest|youngest|best|"
    r"step|half|ex|late|new|old|childhood|close)[\s-]+)?(?:" + _RELATIONS + r"))"
)
FAMILY_WORDS = word_set(
    "wife husband partner spouse boyfriend girlfriend son daughter kid kids children child "
    "baby twins brother sister siblings sibling parents mother father mom dad grandchildren "
    "family"
)
PET_WORDS = word_set("dog cat pet pets puppy kitten bird horse hamster rabbit bunny turtle fish")
PRONOUN_OBJECTS = word_set(
    "it that this them you him her those these everything anything something nothing "
    "one ones stuff yours u ya here there they he she we what which who"
)
NOT_NAMES = word_set(
    "sorry fine good okay ok here back home glad happy sure just so also from not really "
    "very tired busy excited done new ready monday tuesday wednesday thursday friday saturday "
    "sunday christmas easter thanksgiving halloween english spanish french german"
)

__all__ = [
    "ADVERBS",
    "BOUNDARY",
    "FAMILY_WORDS",
    "FLAGS",
    "IM",
    "LOOSE_NAME",
    "NAME",
    "NOT_NAMES",
    "OBJECT",
    "PET_WORDS",
    "PRONOUN_OBJECTS",
    "RELATION",
    "WHO",
    "WHO_BE",
    "WORD",
    "alternation",
    "first_words",
    "word_set",
    "words_of",
]
