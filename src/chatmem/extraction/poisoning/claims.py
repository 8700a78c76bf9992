"""Claims of wrongdoing by someone else, kept only as the user's word.

"My neighbour Tom is a thief" is about the user's life only as the user's claim:
:func:`as_claim` keeps such a fact attributed to the user ("User claims their neighbour Tom
is a thief (unverified)"), with low confidence and the ``claim`` tag.
"""

from __future__ import annotations

import re
from dataclasses import replace

from chatmem.extraction.base import Fact
from chatmem.records import MemoryType

#: The tag of a memory kept as the user's claim about someone else.
CLAIM_TAG = "claim"
#: The confidence of such a claim: the write policy's default floor, so it is kept, and
#: below anything the user says of themselves.
CLAIM_CONFIDENCE = 0.4

_WRONGDOING_NOUN = (
    r"thie(?:f|ves)|liars?|frauds?|fraudsters?|criminals?|crooks?|scammers?|con\s+artists?|"
    r"cheats?|tax\s+cheats?|drug\s+dealers?|dealers?|murderers?|killers?|rapists?|"
    r"p(?:a)?edophiles?|predators?|abusers?|terrorists?|terrorist\s+sympathi[sz]ers?|"
    r"racists?|bigots?|shoplifters?|embezzlers?|alcoholics?|junkies?|addicts?|stalkers?|"
    r"psychopaths?|sociopaths?|traitors?|spies|spy|illegal(?:\s+\w+)?|corrupt(?:\s+\w+)?|"
    r"violent(?:\s+\w+)?|dangerous|guilty|voleur|voleuse|escroc|menteur|dieb|diebin|"
    r"betrüger\w*|lügner\w*|verbrecher|ladr[oó]n\w*|ladr[aã]o|ladra|ladro|estafador\w*|"
    r"golpista|truffatore|dief|oplichter|leugenaar|złodziej\w*|oszust\w*"
)
_WRONGDOING_VERB = (
    r"steals?|stole|is\s+stealing|has\s+stolen|cheats?|cheated|is\s+cheating|lies|lied|"
    r"takes?\s+bribes|took\s+bribes|embezzle[sd]?|faked|fakes|forged|poisoned|beats|beat\s+"
    r"(?:his|her|their)|abuses|abused|sells\s+(?:stolen|drugs)|deals\s+drugs|plagiari[sz]ed|"
    r"leaks|leaked|scams|scammed|cooks\s+the\s+books|was\s+arrested|has\s+been\s+arrested|"
    r"is\s+having\s+an\s+affair|has\s+a\s+criminal\s+record|was\s+convicted|murdered|killed|"
    r"assaulted|molested|harass(?:es|ed)|is\s+under\s+investigation|launders"
)
_ACCUSATION = re.compile(
    r"^(?P<who>.{2,80}?)\s+(?:(?:is|was|are|were|has\s+been|have\s+been|ist|war|est|était|es"
    r"|fue|è|era|é|foi|jest|był|była)\s+(?:also\s+|really\s+|actually\s+|secretly\s+|"
    r"basically\s+)?(?:an?\s+|the\s+|being\s+|ein\s+|eine\s+|un\s+|une\s+|uno\s+|una\s+|"
    r"um\s+|uma\s+|een\s+)?(?:\w+\s+)?"
    rf"(?:{_WRONGDOING_NOUN})\b|(?:{_WRONGDOING_VERB})\b)",
    re.IGNORECASE,
)
_SELF = re.compile(r"^(?:the\s+)?(?:user|i|je|ich|yo|io|eu|ik|ja)$", re.IGNORECASE)
_USERS = re.compile(r"^(?:the\s+)?user's\s+", re.IGNORECASE)


def claims_wrongdoing_by_others(text: str) -> bool:
    """Whether ``text`` accuses someone other than the user ("User's neighbour Tom is a
    thief"), as opposed to a fact about the user or their things ("User's bike was
    stolen")."""
    match = _ACCUSATION.match(text.strip())
    if match is None:
        return False
    who = match.group("who").strip(" ,")
    return _SELF.match(who) is None and not who.lower().startswith(("user says", "user claims"))


def as_claim(fact: Fact) -> Fact:
    """``fact`` kept as the user's attributed, low-confidence claim when it accuses someone
    else; unchanged otherwise (and when it is one already)."""
    if CLAIM_TAG in fact.tags or not claims_wrongdoing_by_others(fact.text):
        return fact
    said = _USERS.sub("their ", fact.text.strip(), count=1).rstrip(".")
    subject = f"claim: {fact.subject}" if fact.subject else None
    return replace(
        fact,
        text=f"User claims {said[:1].lower() + said[1:] if said.startswith('The ') else said}"
        " (unverified)",
        type=MemoryType.SEMANTIC,
        confidence=min(fact.confidence, CLAIM_CONFIDENCE),
        tags=(*fact.tags, CLAIM_TAG),
        structured={**fact.structured, "claim_by": "user"},
        subject=subject,
    )


__all__ = ["CLAIM_CONFIDENCE", "CLAIM_TAG", "as_claim", "claims_wrongdoing_by_others"]
