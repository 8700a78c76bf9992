"""All the rules in the order they are tried, and :func:`drafts`, which runs them on a
sentence.

The order is the families' order: who the user is, where they live, what they like, what
they plan, what they did, what they have, their people, and any other "my X is Y". Where two
rules read the same words alike, the earlier one's draft is the one the extractor keeps.
"""

from __future__ import annotations

from collections.abc import Iterator

from chatmem.extraction.rules import (
    events,
    facts,
    identity,
    location,
    people,
    plans,
    possessions,
    preferences,
)
from chatmem.extraction.rules.base import Draft, Rule, Sentence

#: The patterns, in the order they are tried.
RULES: tuple[Rule, ...] = (
    *identity.RULES,
    *location.RULES,
    *preferences.RULES,
    *plans.RULES,
    *events.RULES,
    *possessions.RULES,
    *people.RULES,
    *facts.RULES,
)


def drafts(sentence: Sentence) -> Iterator[Draft]:
    """What the rules whose needles are among the sentence's words read from it, in order."""
    words = sentence.words
    for rule in RULES:
        if rule.needles.isdisjoint(words):
            continue
        for match in rule.pattern.finditer(sentence.text):
            draft = rule.build(match, sentence)
            if draft is not None and draft.text:
                yield draft


__all__ = ["RULES", "drafts"]
