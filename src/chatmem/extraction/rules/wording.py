"""How a matched object is written into a fact, and when it is not worth writing.

:func:`clean` takes fillers and stray punctuation off an object and puts it in the third
person ("my mum" becomes "their mum"); :func:`skippable` says when what is left is no clean
fact about the user; :func:`uncapitalised` undoes the capital a sentence's first word got;
:func:`who` writes the speaker ("User", or "User and others" for "we").
"""

from __future__ import annotations

import re

from chatmem.extraction.rules.vocabulary import FLAGS, PRONOUN_OBJECTS, WORD, word_set

_THIRD_PERSON = {
    "i": "they",
    "i'm": "they're",
    "im": "they're",
    "i've": "they've",
    "i'll": "they'll",
    "i'd": "they'd",
    "me": "them",
    "my": "their",
    "mine": "theirs",
    "myself": "themselves",
    "we": "they",
    "we're": "they're",
    "we've": "they've",
    "us": "them",
    "our": "their",
    "ours": "theirs",
}
_PERSON_WORD = re.compile(r"\b(?:" + "|".join(map(re.escape, _THIRD_PERSON)) + r")\b", FLAGS)
_TRAILING_FILLER = re.compile(
    r"(?:[\s,]+(?:so\s+much|a\s+lot|very\s+much|too|as\s+well|lol|haha\w*|though|actually|"
    r"really|right\s+now|anymore|btw|tbh|honestly|either|haha|lmao|originally|and|or|but|so|"
    r":\)|:D))+\s*$",
    FLAGS,
)
_EDGE_JUNK = re.compile(r"^[\s\"'“”‘’(]+|[\s\"'“”‘’),:\-–—]+$")

#: Words that make a clause about the listener, not the user.
SECOND_PERSON = word_set("you your yours yourself u ur ya")
# An object opening with one of these leans on words outside the sentence ("I got her in 2022").
_DANGLING_START = word_set(
    "it them her him you here there they he she we its and or but will would can could should "
    "is was are were has have had am"
)
# Words that say nothing on their own ("my pups are doing great", "I've been real busy").
_VAGUE_WORDS = word_set(
    "doing going fine good great okay ok well alright busy real pretty nice cool awesome "
    "amazing bad tired now then lately recently today again"
)
# "something I'd like to have with Toby": the thing was named before the verb.
_CLAUSE_GAP = re.compile(
    r"^(?:have|get|make|do|eat|buy|see|take|try|find|read|watch|keep|bring|share|show)\s+"
    r"(?:with|at|in|on|for|from|to|about|during)\b",
    FLAGS,
)
_FUNCTION_WORDS = word_set(
    "to a an the of in on at for with and or but so it that this them here there up out "
    "about too very really just more much all some one"
)


def clean(raw: str) -> str:
    """An object as a fact says it: fillers and stray punctuation off, in the third person."""
    text = _TRAILING_FILLER.sub("", " ".join(raw.split()))
    text = _EDGE_JUNK.sub("", text)
    return _PERSON_WORD.sub(_person_word, text)


def _person_word(match: re.Match[str]) -> str:
    return _THIRD_PERSON[match.group().lower()]


def skippable(text: str) -> bool:
    """Not one clean fact about the user: empty, too long, only pronouns and function words,
    leaning on a pronoun from elsewhere, or about the listener."""
    words = WORD.findall(text.lower())
    return (
        not words
        or len(words) > 18
        or all(w in _FUNCTION_WORDS or w in PRONOUN_OBJECTS or w in _VAGUE_WORDS for w in words)
        or words[0] in _DANGLING_START
        or _CLAUSE_GAP.match(text) is not None
        or (len(words) <= 2 and words[0] in PRONOUN_OBJECTS)
        or not SECOND_PERSON.isdisjoint(words)
    )


def uncapitalised(text: str, match: re.Match[str]) -> str:
    """An object that opened the sentence loses the capital the sentence gave it
    ("Playing games is my hobby"), unless it looks like a name."""
    if match.start("obj") > 2 or not text[:1].isupper():
        return text
    first = text.split()[0]
    if first.endswith("ing") or first.lower() in ("the", "a", "an", "my", "our", "their"):
        return text[:1].lower() + text[1:]
    return text


def who(match: re.Match[str]) -> str:
    """Who a match with a ``who`` group ("I", "we") is about, as a fact says it."""
    who = (match.groupdict().get("who") or "i").lower()
    return "User" if who.startswith("i") else "User and others"


__all__ = ["SECOND_PERSON", "clean", "skippable", "uncapitalised", "who"]
