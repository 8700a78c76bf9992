"""Rules for what the user did, has done, is doing, and usually does.

Events and ongoing activities are episodic and carry the date they happened, resolved back
from the day they were said ("last Saturday"); experiences ("I've been to Japan") and habits
("I usually run on Sundays") have none.
"""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import (
    FLAGS,
    OBJECT,
    WHO,
    WHO_BE,
    alternation,
    first_words,
    word_set,
    words_of,
)
from chatmem.extraction.rules.wording import skippable, who
from chatmem.records import MemoryType

_EVENT_VERBS = words_of(
    "went visited started began finished completed bought got ran attended graduated adopted "
    "joined met won lost took made painted wrote read watched saw traveled travelled "
    "celebrated received signed_up volunteered quit retired launched published released "
    "learned learnt tried cooked baked built created hosted organised organized participated "
    "competed performed gave donated married broke_up passed failed spent booked planted "
    "hiked climbed camped flew drove found discovered decided opened sold designed recorded "
    "played taught helped picked_up registered enrolled applied had did experienced returned "
    "came_back"
)
_PERFECT_VERBS = words_of(
    "been_to visited started finished completed bought adopted joined met won lost taken made "
    "painted written read watched seen traveled travelled learned learnt tried built created "
    "signed_up volunteered quit retired launched published decided always_wanted wanted "
    "gotten had never_been_to been"
)
_HABIT_VERBS = words_of(
    "play practice practise go run swim cook bake paint draw write read watch collect "
    "volunteer teach coach ride knit sing dance speak drink eat support follow meditate hike "
    "climb garden surf ski skate fish train lift mentor attend work_out take_care_of care_for use"
)
_ONGOING_SKIP = word_set(
    "going gonna planning thinking hoping trying looking feeling doing getting saying asking "
    "wondering kidding glad sorry happy sure talking telling curious excited willing able "
    "wishing guessing assuming starting sending sharing attaching studying living"
)
_TRANSITIVE = word_set(
    "took taken made got gotten bought found saw seen watched read wrote written painted built "
    "created received gave designed recorded sold had"
)
_PREPOSITION = re.compile(r"^(?:at|in|on|for|from|with|during|when|while|last|yesterday)\b")
_TRIVIAL_EVENT = re.compile(
    r"^(?:to\s+(?:say|admit|go|be|do|know|think)|it|that|this|them|a\s+(?:question|look|"
    r"feeling|chance|lot)|no\s+idea|back\s+to\s+you|what\s+you)\b",
    FLAGS,
)

_EVENT = Kind(MemoryType.EPISODIC, ("event",), confidence=0.6, importance=0.5)
_EXPERIENCE = Kind(MemoryType.EPISODIC, ("experience",), confidence=0.55, importance=0.5)
# "I've been a nurse for ten years": a state, not something that happened once.
_STATE = _EXPERIENCE._replace(type=MemoryType.SEMANTIC)
_ACTIVITY = Kind(MemoryType.EPISODIC, ("activity",), confidence=0.55, importance=0.5)
_HABIT = Kind(MemoryType.SEMANTIC, ("habit",), confidence=0.55, importance=0.5)


def _event(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=False)
    verb = " ".join(match.group("verb").lower().split())
    if skippable(what) or _TRIVIAL_EVENT.match(what) or _relative_clause(verb, what):
        return None
    draft = _EVENT.draft(
        f"{who(match)} {verb} {what}", f"{verb} {what.lower()[:60]}", {"event": f"{verb} {what}"}
    )
    return sentence.event(draft, future=False)


def _relative_clause(verb: str, what: str) -> bool:
    """ "the photo I took at the park": a transitive verb whose object came before it."""
    return verb in _TRANSITIVE and _PREPOSITION.match(what.lower()) is not None


def _experience(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=False)
    verb = " ".join(match.group("verb").lower().split())
    if skippable(what) or _relative_clause(verb, what) or (verb == "been" and " " not in what):
        return None  # "I've been busy" says too little to keep
    speaker = who(match)
    auxiliary = "have" if speaker != "User" else "has"
    return (_EXPERIENCE if verb != "been" else _STATE).draft(
        f"{speaker} {auxiliary} {verb} {what}",
        f"{verb} {what.lower()[:60]}",
        {"experience": f"{verb} {what}"},
    )


def _ongoing(match: re.Match[str], sentence: Sentence) -> Draft | None:
    verb = match.group("verb").lower()
    if verb in _ONGOING_SKIP:
        return None
    what = sentence.obj(match, future=False)
    if skippable(what):
        return None
    speaker = who(match)
    draft = _ACTIVITY.draft(
        f"{speaker} {'are' if speaker != 'User' else 'is'} {verb} {what}",
        f"{verb} {what.lower()[:60]}",
        {"activity": f"{verb} {what}"},
    )
    return sentence.event(draft, future=False)


def _habit(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    return _HABIT.draft(
        f"User {_third_person(verb)} {what}",
        f"{verb} {what.lower()[:60]}",
        {"activity": f"{verb} {what}"},
    )


def _third_person(verb: str) -> str:
    first, _, rest = verb.partition(" ")
    if first == "have":
        said = "has"
    elif first == "go":
        said = "goes"
    elif first.endswith(("s", "sh", "ch", "x", "z", "o")):
        said = first + "es"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        said = first[:-1] + "ies"
    else:
        said = first + "s"
    return f"{said} {rest}".strip()


# fmt: off
#: The event and habit rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("event", rf"\b{WHO}\s+(?:just\s+|recently\s+|finally\s+|also\s+|actually\s+|"
         rf"even\s+|once\s+)*(?P<verb>{alternation(_EVENT_VERBS)})\s+{OBJECT}", _event,
         *first_words(_EVENT_VERBS)),
    rule("event", rf"\b(?P<who>i|we)(?:'ve|\s+have)\s+(?:just\s+|recently\s+|finally\s+|"
         rf"already\s+|also\s+|always\s+)*(?P<verb>{alternation(_PERFECT_VERBS)})\s+"
         rf"{OBJECT}", _experience, "i've", "we've", "have"),
    rule("event", rf"\b{WHO_BE}(?:currently\s+|still\s+|now\s+|also\s+|really\s+)*"
         rf"(?P<verb>[a-z]{{3,}}ing)\s+{OBJECT}", _ongoing, "i'm", "im", "am", "we're",
         "are"),
    rule("habit", rf"\bi\s+(?:usually\s+|often\s+|always\s+|also\s+|regularly\s+|"
         rf"sometimes\s+)*(?P<verb>{alternation(_HABIT_VERBS)})\s+{OBJECT}", _habit,
         *first_words(_HABIT_VERBS)),
)
# fmt: on

__all__ = ["RULES"]
