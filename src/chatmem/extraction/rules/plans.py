"""Rules for what the user plans, has scheduled, and hopes to do one day.

Plans are episodic and carry the date they are for, resolved forward from the day they were
said ("next week"); a goal is a standing wish ("I want to learn Spanish").
"""

from __future__ import annotations

import re

from chatmem.extraction.rules.base import Draft, Kind, Rule, Sentence, rule
from chatmem.extraction.rules.vocabulary import ADVERBS, FLAGS, OBJECT, WHO, WHO_BE
from chatmem.extraction.rules.wording import skippable, who
from chatmem.records import MemoryType

#: A plan, an appointment or something the user has to do by a day.
PLAN = Kind(MemoryType.EPISODIC, ("plan",), confidence=0.6, importance=0.6)
# "thinking of …", "hoping to …": less sure to happen.
_TENTATIVE_PLAN = PLAN._replace(confidence=0.5)
_GOAL = Kind(MemoryType.SEMANTIC, ("goal",), confidence=0.5, importance=0.5)

_PLAN_PHRASES = {
    "going to": "is going to",
    "gonna": "is going to",
    "planning to": "is planning to",
    "planning on": "is planning on",
    "planning": "is planning",
    "about to": "is about to",
    "preparing to": "is preparing to",
    "thinking about": "is thinking about",
    "thinking of": "is thinking of",
    "hoping to": "is hoping to",
    "scheduled to": "is scheduled to",
    "looking forward to": "is looking forward to",
    "plan": "plans to",
    "intend": "intends to",
    "decided": "decided to",
}
_PLURAL_PLAN_PHRASES = {
    **{phrase: "are" + phrase[2:] for phrase in _PLAN_PHRASES.values() if phrase[:3] == "is "},
    "plans to": "plan to",
    "intends to": "intend to",
}
_TRIVIAL_PLAN = re.compile(
    r"^(?:to\s+)?(?:try|be\s+honest|say|ask|tell|go\s+now|do\s+it|do\s+that|check|think|"
    r"let|keep\s+(?:it|that)|see|figure|need|have\s+to|get\s+going)\b",
    FLAGS,
)


def _plan(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    if skippable(what) or _TRIVIAL_PLAN.match(what):
        return None
    speaker = who(match)
    verb = " ".join(match.group("verb").lower().split())
    phrase = _PLAN_PHRASES.get(verb, "plans to")
    if speaker != "User":
        phrase = _PLURAL_PLAN_PHRASES.get(phrase, phrase)
    kind = _TENTATIVE_PLAN if verb.startswith(("thinking", "hoping")) else PLAN
    draft = kind.draft(f"{speaker} {phrase} {what}", f"plan: {what.lower()[:60]}", {"plan": what})
    return sentence.event(draft, future=True)


def _scheduled(match: re.Match[str], sentence: Sentence) -> Draft | None:
    """ "I'll be in Paris next week", "I have to finish the report by Friday": plans only
    when the sentence says when."""
    if sentence.future_date is None:
        return None
    what = sentence.obj(match, future=True)
    if skippable(what) or _TRIVIAL_PLAN.match(what):
        return None
    aux = " ".join(match.group("aux").lower().replace("'ll", "will").split())
    plural = who(match) != "User"
    said = {
        "have to": "have to" if plural else "has to",
        "need to": "need to" if plural else "needs to",
    }.get(aux, aux)
    draft = PLAN.draft(f"{who(match)} {said} {what}", f"plan: {what.lower()[:60]}", {"plan": what})
    return sentence.event(draft, future=True)


def _wish(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    if skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    said = {"want": "wants", "hope": "hopes", "aim": "aims", "dream": "dreams"}.get(verb)
    said = said or f"would {verb}"  # "I'd love to …"
    draft = _GOAL.draft(f"User {said} to {what}", f"goal: {what.lower()[:60]}", {"goal": what})
    return sentence.event(draft, future=True)


# fmt: off
#: The plan and goal rules, in the order they are tried.
RULES: tuple[Rule, ...] = (
    rule("plan", rf"\b{WHO_BE}{ADVERBS}(?P<verb>going\s+to|gonna|planning(?:\s+to|\s+on)?|"
         rf"about\s+to|preparing\s+to|thinking\s+(?:about|of)|hoping\s+to|scheduled\s+to|"
         rf"looking\s+forward\s+to)\s+{OBJECT}", _plan, "going", "gonna", "planning",
         "about", "preparing", "thinking", "hoping", "scheduled", "forward"),
    rule("plan", rf"\b{WHO}\s+{ADVERBS}(?P<verb>plan|intend|decided)\s+to\s+{OBJECT}", _plan,
         "plan", "intend", "decided"),
    rule("plan", rf"\b(?P<who>i|we)(?P<aux>'ll\s+be|\s+will\s+be|\s+have\s+to|\s+need\s+to|"
         rf"\s+must)\s+{OBJECT}", _scheduled, "i'll", "we'll", "will", "have", "need",
         "must"),
    rule("goal", rf"\bi\s+{ADVERBS}(?P<verb>want|hope|aim|dream)\s+to\s+{OBJECT}", _wish,
         "want", "hope", "aim", "dream"),
    rule("goal", rf"\bi(?:'d|\s+would)\s+(?:really\s+)?(?P<verb>love|like)\s+to\s+{OBJECT}",
         _wish, "i'd", "would"),
)
# fmt: on

__all__ = ["PLAN", "RULES"]
