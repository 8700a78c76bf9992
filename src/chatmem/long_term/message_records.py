"""The memory records ``LongTermMemory.add`` stores a message as: its type, provenance,
metadata and context (its speaker and neighbours), and the call's TTL.

A text longer than ``MAX_TEXT_CHARS`` (a pasted document) is stored as several memories of
at most ``text.PART_CHARS`` characters, cut between paragraphs or sentences
(``text.memory_texts``), with the message's provenance and context and ``PART_KEY``,
``PARTS_KEY`` and ``PART_OF_KEY`` in their metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pydantic

from chatmem import text as textlib
from chatmem.long_term.inputs import InputMessage
from chatmem.records import MemoryRecord, MemoryType, TimeInfo, new_id, utcnow, validation_error

#: Metadata of the memories a text too long for one is stored as: the part's number (from
#: 1), how many parts there are, and what they are parts of (the message id, else a new id
#: they share). ``Filter(metadata={PART_OF_KEY: id})`` finds them all.
PART_KEY, PARTS_KEY, PART_OF_KEY = "part", "parts", "part_of"


@dataclass(frozen=True)
class AddOptions:
    """What every memory of one ``add`` call shares."""

    #: The owner's ids: ``tenant_id``, ``user_id``, ``agent_id``, ``project_id``, ``session_id``.
    owner: Mapping[str, Any]
    #: The caller's metadata, under each message's own.
    metadata: Mapping[str, Any] | None
    #: The memories' type; None: semantic for a plain text, episodic for a chat message.
    type: MemoryType | None
    #: ``importance`` and ``tags`` (None where not given).
    extras: Mapping[str, Any]
    #: ``{"allowed_roles": [...]}``, or None when every reader of the user may see them.
    access: Mapping[str, Any] | None


def call_records(
    heard: Sequence[InputMessage], options: AddOptions, earlier: Sequence[str], window: int
) -> list[MemoryRecord]:
    """The records of every message of ``heard`` that has a text (a plain text always);
    ``earlier`` is what the session said before ``heard[0]`` (oldest first), as context,
    and ``window`` how many neighbours on each side a message's context holds."""
    return [
        record
        for index, message in enumerate(heard)
        if message.role is None or message.content.strip()
        for record in message_records(heard, index, options, earlier, window)
    ]


def message_records(
    said: Sequence[InputMessage],
    index: int,
    options: AddOptions,
    earlier: Sequence[str],
    window: int,
) -> list[MemoryRecord]:
    """The memory ``said[index]`` is stored as, or its parts when it is too long."""
    message = said[index]
    created = message.timestamp or utcnow()
    fields = {
        **options.owner,
        "type": options.type
        or (MemoryType.SEMANTIC if message.role is None else MemoryType.EPISODIC),
        "metadata": _metadata(message, options),
        "time": {"created_at": created, "updated_at": created},
        "provenance": [message.id] if message.id else [],
        "context": turn_context(said, index, earlier, window),
    }
    if options.access:
        fields["access_control"] = options.access
    texts = textlib.memory_texts(message.content)
    structured = message.structured()
    return [
        MemoryRecord.checked(
            {**fields, "content": {"raw": text, "structured": structured}, "user_metadata": m},
            message.field,
        )
        for text, m in zip(texts, _user_metadata(message, options, len(texts)), strict=True)
    ]


def _metadata(message: InputMessage, options: AddOptions) -> dict[str, Any]:
    """The record's own metadata: where it came from, and the call's importance and tags."""
    meta: dict[str, Any] = {"source": message.source}
    meta.update({k: v for k, v in options.extras.items() if v is not None})
    return meta


def _user_metadata(message: InputMessage, options: AddOptions, parts: int) -> list[dict[str, Any]]:
    """The free-form metadata of each of the message's ``parts`` memories: the call's, the
    message's, its role and name, and (for several parts) ``PART_KEY`` and the others."""
    user_metadata = {**(options.metadata or {}), **message.metadata}
    if message.role is not None:
        user_metadata.setdefault("role", message.role)
    if message.name is not None:
        user_metadata.setdefault("name", message.name)
    if parts == 1:
        return [user_metadata]
    whole = {PARTS_KEY: parts, PART_OF_KEY: message.id or new_id()}
    return [{**user_metadata, PART_KEY: n, **whole} for n in range(1, parts + 1)]


def turn_context(
    said: Sequence[InputMessage], index: int, earlier: Sequence[str], window: int
) -> dict[str, Any] | None:
    """A chat message's speaker and neighbours (``earlier``, then the call's messages
    before it; the call's messages after it), ``window`` on each side; None for plain
    text."""
    message = said[index]
    if message.role is None:
        return None
    before = [*earlier, *(m.spoken(before=True) for m in said[:index])][-window:]
    later = said[index + 1 : index + 1 + window]
    return {
        "speaker": message.name or message.role,
        "before": "\n".join(before) or None,
        "after": "\n".join(m.spoken() for m in later) or None,
    }


def expiring(record: MemoryRecord, expires_at: datetime | None) -> MemoryRecord:
    """``record`` with the TTL ``expires_at`` (UTC, whole milliseconds), if one is given."""
    if expires_at is None:
        return record
    try:
        time_info = TimeInfo.model_validate({**record.time.model_dump(), "expires_at": expires_at})
    except pydantic.ValidationError as exc:
        raise validation_error(exc, "time") from None
    return record.model_copy(update={"time": time_info})
