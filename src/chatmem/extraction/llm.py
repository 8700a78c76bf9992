"""Extraction by a language model (SPEC L3): a batch of turns in, validated facts out.

The model sees each message with its id and date, answers JSON (read leniently, repaired
once), and every fact is checked before it leaves: unknown types become semantic, scores are
clamped to [0, 1], provenance is limited to the batch's message ids, and facts without text
or aimed at the model are dropped. Failures raise ``LLMError`` subclasses; the caller decides
to skip or retry the batch, and nothing is stored here (SPEC F3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

from chatmem.extraction.base import Fact
from chatmem.extraction.poisoning import as_claim, is_instruction_to_model
from chatmem.extraction.prompts import EXTRACTION_PROMPT, MESSAGE_LINE, WITHHELD
from chatmem.llm.base import ChatModel
from chatmem.llm.jsonfix import complete_json
from chatmem.messages import Message, Role
from chatmem.records import MAX_TEXT_CHARS, MemoryType, Source, from_ms

logger = logging.getLogger("chatmem.extraction")

#: Longest message text shown to the model, in characters; a batch must fit its context.
MAX_SHOWN_CHARS = 4000
#: Types a model may give a fact; anything else is read as semantic.
EXTRACTED_TYPES = frozenset(
    {
        MemoryType.SEMANTIC,
        MemoryType.EPISODIC,
        MemoryType.PROCEDURAL,
        MemoryType.PREFERENCE,
        MemoryType.PROFILE,
    }
)
_TEXT_KEYS = ("text", "content", "fact", "memory")
_ID_KEYS = ("source_ids", "provenance", "message_ids", "sources", "ids")
_MAX_TAGS = 10


class ParsedFacts(NamedTuple):
    """Facts that passed validation, and how many items were dropped."""

    facts: list[Fact]
    dropped: int


@dataclass(frozen=True)
class Batch:
    """What validation needs to know of the messages a model was shown."""

    #: Ids of the messages shown, in order.
    message_ids: tuple[str, ...]
    #: Ids of user messages withheld as instructions to the model (SPEC L9).
    withheld: frozenset[str] = frozenset()
    #: Provenance for a fact that names no valid id: the batch's (shown) user messages.
    default_ids: tuple[str, ...] = ()


class LLMExtractor:
    """An :class:`~chatmem.extraction.Extractor` that asks ``model`` for facts.

    ``prompt`` replaces :data:`EXTRACTION_PROMPT` (the system message). Raises
    ``LLMUnavailableError`` or ``LLMResponseError`` when the model gives no usable answer.
    """

    def __init__(self, model: ChatModel, *, prompt: str = EXTRACTION_PROMPT) -> None:
        self.model = model
        self.prompt = prompt

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Facts about the user in ``messages``; no model call when no user message is left
        to read (none at all, or all withheld as instructions to the model)."""
        shown = [m for m in messages if m.role in (Role.USER, Role.ASSISTANT) and m.content]
        withheld = _withheld(shown)
        if not any(m.role is Role.USER and m.id not in withheld for m in shown):
            return []
        request = [
            {"role": "system", "content": self.prompt},
            {"role": "user", "content": format_messages(shown, withheld)},
        ]
        items = complete_json(self.model, request, expect="array")
        user_ids = tuple(m.id for m in shown if m.role is Role.USER and m.id not in withheld)
        batch = Batch(tuple(m.id for m in shown), frozenset(withheld), user_ids)
        parsed = facts_from_json(items, batch)
        logger.info(
            "extracted %d fact(s) from %d message(s); %d item(s) dropped",
            len(parsed.facts),
            len(shown),
            parsed.dropped,
        )
        return parsed.facts


def format_messages(messages: Sequence[Message], withheld: Collection[str] = ()) -> str:
    """The messages as the model reads them: ``[id] (date) role: text``, one per line."""
    lines = ["Messages:"]
    for message in messages:
        content = WITHHELD if message.id in withheld else _shown_text(message.content)
        lines.append(
            MESSAGE_LINE.format(
                id=message.id,
                date=from_ms(message.timestamp).strftime("%a %Y-%m-%d %H:%M UTC"),
                role=message.role.value,
                content=content,
            )
        )
    return "\n".join(lines)


def facts_from_json(items: Sequence[Any], batch: Batch) -> ParsedFacts:
    """Validate a model's fact objects against the batch it was shown (pure)."""
    facts: list[Fact] = []
    seen: set[str] = set()
    dropped = 0
    for item in items:
        fact = _fact(item, batch)
        if fact is None or fact.text in seen:
            dropped += 1
            continue
        seen.add(fact.text)
        facts.append(fact)
    return ParsedFacts(facts, dropped)


def _fact(item: Any, batch: Batch) -> Fact | None:
    """One validated fact, or None (logged) when the item cannot be one."""
    if not isinstance(item, Mapping):
        logger.debug("dropped a fact that is not an object: %r", item)
        return None
    text = _text(item)
    if text is None:
        logger.debug("dropped a fact without text: %r", item)
        return None
    reason = is_instruction_to_model(text)
    if reason is not None:
        logger.warning("dropped a fact that %s: %r", reason, text)
        return None
    provenance = _provenance(item, batch)
    if provenance is None:
        logger.warning("dropped a fact drawn only from withheld messages: %r", text)
        return None
    return as_claim(
        Fact(
            text=text,
            type=_type(item.get("type")),
            importance=_unit(item.get("importance"), 0.5),
            confidence=_unit(item.get("confidence"), 0.5),
            tags=_tags(item.get("tags")),
            structured=_structured(item.get("structured")),
            source=Source.IMPLICIT_INFERENCE,
            provenance=provenance,
            subject=_subject(item.get("subject")),
            valid_from=_valid_from(item.get("valid_from")),
        )
    )


def _withheld(messages: Sequence[Message]) -> dict[str, str]:
    """User messages aimed at the model, by id, with the reason (logged)."""
    withheld: dict[str, str] = {}
    for message in messages:
        if message.role is not Role.USER:
            continue
        reason = is_instruction_to_model(message.content)
        if reason is not None:
            logger.warning("withheld message %s from extraction: it %s", message.id, reason)
            withheld[message.id] = reason
    return withheld


def _shown_text(content: str) -> str:
    text = " ".join(content.split())  # one line per message, whatever its newlines
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"


def _text(item: Mapping[str, Any]) -> str | None:
    for key in _TEXT_KEYS:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:MAX_TEXT_CHARS]
    return None


def _type(value: Any) -> MemoryType:
    try:
        kind = MemoryType(str(value).strip().lower())
    except ValueError:
        return MemoryType.SEMANTIC
    return kind if kind in EXTRACTED_TYPES else MemoryType.SEMANTIC


def _unit(value: Any, default: float) -> float:
    """A score in [0, 1]: numbers and numeric strings clamped, anything else the default."""
    if isinstance(value, bool):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(number) else min(1.0, max(0.0, number))


def _tags(value: Any) -> tuple[str, ...]:
    raw = value.split(",") if isinstance(value, str) else value
    if not isinstance(raw, list | tuple):
        return ()
    tags = dict.fromkeys(t.strip().lower() for t in raw if isinstance(t, str) and t.strip())
    return tuple(tags)[:_MAX_TAGS]


def _structured(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _subject(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split())[:256]


def _valid_from(value: Any) -> datetime | None:
    """An ISO date or datetime, as an aware UTC datetime; None when absent or unreadable."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        try:
            day = date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None
        moment = datetime(day.year, day.month, day.day)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _provenance(item: Mapping[str, Any], batch: Batch) -> tuple[str, ...] | None:
    """The item's message ids that are in the batch; the batch's user messages when it names
    none; None when it names only withheld messages (drawn from an injection)."""
    named = _named_ids(item)
    valid = tuple(i for i in named if i in batch.message_ids and i not in batch.withheld)
    if valid:
        return valid
    if named and all(i in batch.withheld for i in named):
        return None
    return batch.default_ids


def _named_ids(item: Mapping[str, Any]) -> tuple[str, ...]:
    for key in _ID_KEYS:
        value = item.get(key)
        values = [value] if isinstance(value, str | int) else value
        if isinstance(values, list | tuple):
            return tuple(dict.fromkeys(str(v).strip() for v in values if isinstance(v, str | int)))
    return ()


__all__ = [
    "EXTRACTED_TYPES",
    "MAX_SHOWN_CHARS",
    "Batch",
    "LLMExtractor",
    "ParsedFacts",
    "facts_from_json",
    "format_messages",
]
