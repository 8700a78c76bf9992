"""The offline extractor (SPEC X1): facts from first-person user statements, with no LLM.

Patterns (``chatmem.extraction.rules``) read what users say of themselves: who they are
(name, age, job, home), what they like, what they plan and did, what they have, the people in
their life, and "my X is Y". Each match becomes a :class:`Fact` in the third person with its
context ("User loves hiking in the Alps"), a subject, a type chosen by the pattern, modest
confidence (0.5-0.7: a pattern is surer of the wording than of the meaning) and the message id
as provenance. Dates said relatively ("yesterday", "next week") are resolved against the
message's timestamp.

Only user messages are read. Questions, hypotheticals, reported speech and messages aimed at
the model (SPEC L9) yield nothing; what the user asks the assistant to do for them ("remind me
of my meds at 8pm") is a procedural memory, and an accusation of someone else is kept only as
the user's attributed claim. An LLM (:class:`~chatmem.extraction.LLMExtractor`) reads
more; this one is the default because it needs nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from chatmem.extraction.base import Fact
from chatmem.extraction.poisoning import as_claim, is_instruction_to_model
from chatmem.extraction.rules import Draft, Sentence, drafts
from chatmem.messages import Message, Role
from chatmem.records import Source, from_ms

logger = logging.getLogger("chatmem.extraction")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|[;\n]+|\s+[-–—]+\s+(?=[A-Z])")
# Their dots would end a sentence or an object early ("I work at St. Mary's hospital").
_ABBREVIATION = re.compile(r"\b(St|Dr|Mr|Mrs|Ms|Mt|Jr|Sr|Prof|vs|etc|approx)\.")
_IMAGE_NOTE = re.compile(r"\[(?:shares|image|photo)[^\]]*\]")
# The filters below run on the lowercased sentence: case-blind patterns are slow in ``re``.
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|i'll|i'd|me|my|we|we're|we've|our)\b")
_QUESTION = re.compile(
    r"^\W*(?:do|does|did|are|is|was|were|can|could|would|will|should|shall|have|has|had|"
    r"what|why|how|when|where|who|whom|which|whose|may|might|am|anyone|any\s+idea)\b|\?\s*$"
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|unless|imagine|suppose|supposing|hypothetically|pretend|what\s+if|wish|"
    r"in\s+theory|let's\s+say|lets\s+say|dream(?:ed|t)?\s+(?:of|about|that)|in\s+a\s+game)\b"
)
_REPORTED = re.compile(
    r"\b(?:said|says|told\s+(?:me|him|her|them|us)|asked\s+(?:me|him|her)|thinks?\s+that)\b"
)


class OfflineExtractor:
    """An :class:`~chatmem.extraction.Extractor` that needs no model (the default).

    ``min_confidence`` drops facts below it (the patterns give 0.5 to 0.7).
    """

    def __init__(self, *, min_confidence: float = 0.0) -> None:
        self.min_confidence = min_confidence

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Facts from the user messages of ``messages``, in order, without duplicates."""
        facts: list[Fact] = []
        seen: set[str] = set()
        for message in messages:
            for fact in self.extract_message(message):
                if fact.text.lower() not in seen:
                    seen.add(fact.text.lower())
                    facts.append(fact)
        return facts

    def extract_message(self, message: Message) -> list[Fact]:
        """Facts from one message; none unless it is a user message."""
        if message.role is not Role.USER or not message.content.strip():
            return []
        reason = is_instruction_to_model(message.content)
        if reason is not None:
            logger.warning("no facts from message %s: it %s", message.id, reason)
            return []
        anchor = from_ms(message.timestamp).date()
        found = [d for s in sentences(message.content) for d in drafts(Sentence(s, anchor))]
        return [
            _fact(draft, message.id)
            for draft in _unique(found)
            if draft.confidence >= self.min_confidence
        ]


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` that could state a fact about the speaker."""
    text = _IMAGE_NOTE.sub(" ", text.replace("’", "'").replace("‘", "'"))
    text = _ABBREVIATION.sub(r"\1", text)
    pieces = (" ".join(piece.split()) for piece in _SENTENCE_END.split(text))
    return [piece for piece in pieces if len(piece) > 3 and _may_state_a_fact(piece.lower())]


def _may_state_a_fact(lower: str) -> bool:
    return (
        _FIRST_PERSON.search(lower) is not None
        and _QUESTION.search(lower) is None
        and _HYPOTHETICAL.search(lower) is None
        and _REPORTED.search(lower) is None
    )


def _unique(found: list[Draft]) -> list[Draft]:
    """Drop a draft whose text is another's or inside another's (the longer one says more)."""
    texts = [d.text.lower() for d in found]
    kept: list[Draft] = []
    for index, draft in enumerate(found):
        if any(
            texts[index] in other and (texts[index] != other or other_index < index)
            for other_index, other in enumerate(texts)
            if other_index != index
        ):
            continue
        kept.append(draft)
    return kept


def _fact(draft: Draft, message_id: str) -> Fact:
    valid_from = None
    if draft.when is not None:
        day = draft.when.start
        valid_from = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return as_claim(
        Fact(
            text=draft.text,
            type=draft.type,
            importance=draft.importance,
            confidence=draft.confidence,
            tags=draft.tags,
            structured=dict(draft.structured),
            source=Source.EXPLICIT_USER_INPUT,
            provenance=(message_id,),
            subject=draft.subject,
            valid_from=valid_from,
        )
    )


__all__ = ["OfflineExtractor", "sentences"]
