"""Rules for what the user likes and dislikes, their favourites, their diet and allergies,
and how they ask the assistant to treat them ("always use metric units for me")."""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import ADVERBS, BOUNDARY, FLAGS, IM, OBJECT, WORD
from chatmem.extraction.rules.wording import SECOND_PERSON, clean, skippable, uncapitalised
from chatmem.records import MemoryType

_PREFERENCE_VERBS = {
    "love": "loves",
    "like": "likes",
    "enjoy": "enjoys",
    "adore": "adores",
    "prefer": "prefers",
    "hate": "hates",
    "dislike": "dislikes",
    "detest": "detests",
    "despise": "despises",
    "loathe": "loathes",
    "can't stand": "can't stand",
    "cannot stand": "cannot stand",
}
_NEGATIVE_VERBS = frozenset({"hate", "dislike", "detest", "despise", "loathe"})
_FAVOURITE = ("favourite", "favorite", "fav", "fave")

# The request stops where a clause about something else begins ("… when you talk to me").
_REQUEST_CUT = re.compile(r"\s+(?:when|whenever|while|as|because|since|if)\b|,\s+", FLAGS)
_YOUR_WORD = re.compile(r"\byour\b", FLAGS)
_REMINDED = re.compile(r"^them\s+", FLAGS)
_REQUEST_VERBS = (
    "remind use give show answer reply write talk speak respond address keep explain "
    "translate check recommend suggest spell assume cite"
)

_FAVOURITE_FACT = Kind(
    MemoryType.PREFERENCE, ("preference", "favourite"), confidence=0.7, importance=0.7
)
_DIET = Kind(MemoryType.PREFERENCE, ("preference", "diet"), confidence=0.7, importance=0.8)
_ALLERGY = Kind(MemoryType.PROFILE, ("health", "allergy"), confidence=0.7, importance=0.9)
_REQUEST = Kind(MemoryType.PROCEDURAL, ("request",), confidence=0.6, importance=0.6)


def _opinion(text: str, what: str, *, negative: bool, confidence: float) -> Draft:
    """A like or a dislike of ``what``, as both the preference and the fan rules write it."""
    return Draft(
        text,
        MemoryType.PREFERENCE,
        what.lower()[:80],
        ("preference", "dislikes" if negative else "likes"),
        confidence=confidence,
        importance=0.6,
        structured={"object": what, "sentiment": "negative" if negative else "positive"},
    )


def _preference(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    negated = bool(match.groupdict().get("neg"))
    if negated:
        said, negative = f"does not {verb}", True
    else:
        said = _PREFERENCE_VERBS[verb]
        negative = verb in _NEGATIVE_VERBS or "stand" in verb
    return _opinion(f"User {said} {what}", what, negative=negative, confidence=0.65)


def _favourite(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = clean(match.group("what") or "thing")
    value = uncapitalised(sentence.obj(match), match)
    if skippable(value) or skippable(what):
        return None
    return _FAVOURITE_FACT.draft(
        f"User's favourite {what} is {value}",
        f"favourite {what.lower()}",
        {"category": what, "favourite": value},
    )


def _fan(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    phrase = " ".join(match.group("phrase").lower().split())
    negative = phrase.startswith("not")
    return _opinion(f"User is {phrase} {what}", what, negative=negative, confidence=0.6)


def _diet(match: re.Match[str], _: Sentence) -> Draft | None:
    diet = " ".join(match.group("diet").lower().split())
    return _DIET.draft(f"User is {diet}", "diet", {"diet": diet})


def _allergy(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    return _ALLERGY.draft(
        f"User is allergic to {what}", f"allergy to {what.lower()}", {"allergen": what}
    )


def _request(match: re.Match[str], sentence: Sentence) -> Draft | None:
    """How the user asks the assistant to treat them ("always use metric units for me",
    "remind me to take my meds at 8pm"): a preference of theirs (SPEC L9 keeps these)."""
    what = _REQUEST_CUT.split(sentence.obj(match))[0]
    what = _YOUR_WORD.sub("its", what).strip(" ,")
    words = WORD.findall(what.lower())
    if not words or len(words) > 18 or not SECOND_PERSON.isdisjoint(words):
        return None
    verb = match.group("verb").lower()
    if verb == "remind":
        text = f"User wants to be reminded {_REMINDED.sub('', what)}"
    else:
        never = "never " if match.group("neg") else ""
        text = f"User wants the assistant to {never}{verb} {what}"
    return _REQUEST.draft(text, f"request: {verb} {words[0]}", {"request": f"{verb} {what}"})


# fmt: off
#: The preference rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("preference", rf"\bmy\s+(?:all[- ]time\s+|absolute\s+)?(?:favou?rite|fav|fave)\s+"
         rf"(?P<what>[\w\s'-]{{2,40}}?)\s+(?:is|are|was|has\s+to\s+be|would\s+be)\s+"
         rf"{OBJECT}", _favourite, *_FAVOURITE),
    rule("preference", rf"^\W*(?P<obj>[^,.!?;]{{2,60}}?)\s+(?:is|are)\s+(?:definitely\s+|"
         rf"probably\s+|still\s+)?my\s+(?:all[- ]time\s+)?(?:favou?rite|fav|fave)\b\s*"
         rf"(?P<what>[\w\s-]{{0,30}}?){BOUNDARY}", _favourite, *_FAVOURITE),
    rule("preference", rf"\bi\s+{ADVERBS}(?P<verb>love|like|enjoy|adore|prefer|hate|"
         rf"dislike|detest|despise|loathe|can't\s+stand|cannot\s+stand)\s+{OBJECT}",
         _preference, "love", "like", "enjoy", "adore", "prefer", "hate", "dislike", "detest",
         "despise", "loathe", "stand"),
    rule("preference", rf"\bi\s+(?P<neg>do\s+not|don't|dont|never|didn't)\s+(?:really\s+|"
         rf"much\s+)?(?P<verb>like|love|enjoy)\s+{OBJECT}", _preference, "like", "love",
         "enjoy"),
    rule("preference", rf"{IM}(?P<phrase>(?:not\s+)?(?:a\s+)?(?:(?:big|huge|great|massive)"
         rf"\s+)?fan\s+of|(?:really\s+|very\s+|so\s+)?(?:into|interested\s+in|passionate\s+"
         rf"about|obsessed\s+with|keen\s+on|crazy\s+about))\s+{OBJECT}", _fan, "fan",
         "into", "interested", "passionate", "obsessed", "keen", "crazy"),
    rule("preference", rf"{IM}(?:an?\s+|strictly\s+)?(?P<diet>vegetarian|vegan|pescatarian|"
         rf"gluten[- ]free|lactose[- ]intolerant|teetotal|sober)\b", _diet, "vegetarian",
         "vegan", "pescatarian", "gluten", "lactose", "teetotal", "sober"),
    rule("profile", rf"(?:{IM}|\band\s+(?:also\s+|am\s+)?)(?:(?:very|severely|really|"
         rf"deathly)\s+)?allergic\s+to\s+{OBJECT}", _allergy, "allergic"),
    rule("request", r"^\W*(?:(?:from\s+now\s+on|going\s+forward|from\s+today\s+on)[,\s]+)?"
         r"(?:please[,\s]+)?(?:(?:you\s+(?:must|should|have\s+to|need\s+to|will)|i\s+want\s+"
         r"you\s+to|i'd\s+like\s+you\s+to)\s+)?(?:please\s+)?(?:always\s+|(?P<neg>never\s+|"
         r"(?:don't|do\s+not)\s+(?:ever\s+)?))?(?:please\s+)?(?P<verb>"
         + "|".join(_REQUEST_VERBS.split()) + rf")\s+{OBJECT}", _request,
         *_REQUEST_VERBS.split()),
)
# fmt: on

__all__ = ["RULES"]
