"""The memories the write policy writes: the one a fact creates (its id derived from the
batch and the fact, so a second run of a batch finds it), one a fact restates (updated), and
one a fact supersedes (closed); with the ``user_metadata`` keys that say which batch wrote
them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chatmem import text as textlib
from chatmem.extraction.base import Fact
from chatmem.long_term.write_policy.decision import subject_key
from chatmem.messages import SessionKey
from chatmem.records import MemoryRecord, RelationType

#: ``user_metadata`` keys the policy writes: what the memory is about (normalised), and the
#: batch that last wrote it with the indexes of that batch's facts it holds.
SUBJECT_KEY = "subject"
BATCH_KEY = "write_batch"
FACTS_KEY = "write_facts"
_MAX_TAGS = 64


def memory_id(batch_id: str, index: int) -> str:
    """The id of the memory that fact ``index`` of batch ``batch_id`` creates: the same on
    every run of the batch, so a second run finds what the first one wrote."""
    return hashlib.blake2b(f"{batch_id}\x1f{index}".encode(), digest_size=16).hexdigest()


def close_time(old: MemoryRecord, new_from: datetime) -> datetime:
    """When a superseded memory stops being valid: where the new one starts, but never
    before the old one started (a record's interval cannot end before it begins)."""
    started = old.time.valid_from
    return new_from if started is None or started <= new_from else started


def created_record(
    fact: Fact,
    key: SessionKey,
    index: int,
    batch_id: str,
    now: datetime,
    supersedes: Sequence[str] = (),
    project_id: str | None = None,
) -> MemoryRecord:
    """The memory fact ``index`` creates (in ``project_id`` when given); with ``supersedes``,
    it links to the memories it replaces and starts being valid when the fact says (at the
    latest, now)."""
    valid_from = fact.valid_from
    if supersedes:
        valid_from = now if valid_from is None or valid_from > now else valid_from
    user_metadata: dict[str, Any] = {BATCH_KEY: batch_id, FACTS_KEY: [index]}
    subject = subject_key(fact.subject)
    if subject is not None:
        user_metadata[SUBJECT_KEY] = subject
    return MemoryRecord.checked(
        {
            "id": memory_id(batch_id, index),
            "tenant_id": key.tenant_id,
            "user_id": key.user_id,
            "session_id": key.session_id,
            "project_id": project_id,
            "type": fact.type,
            "content": {
                "raw": textlib.clip(fact.text),
                "structured": dict(fact.structured) or None,
            },
            "metadata": {
                "importance": fact.importance,
                "confidence": fact.confidence,
                "tags": list(dict.fromkeys(fact.tags))[:_MAX_TAGS],
                "source": fact.source,
            },
            "time": {"created_at": now, "updated_at": now, "valid_from": valid_from},
            "relations": [{"type": RelationType.UPDATES, "target_id": t} for t in supersedes],
            "provenance": list(dict.fromkeys(fact.provenance)),
            "user_metadata": user_metadata,
        },
        "fact",
    )


def updated_record(
    old: MemoryRecord, fact: Fact, index: int, batch_id: str, now: datetime
) -> MemoryRecord:
    """``old`` restated by ``fact``: the newer wording and values, the stronger scores, the
    union of tags and provenance, version + 1."""
    same_batch = old.user_metadata.get(BATCH_KEY) == batch_id
    earlier = old.user_metadata.get(FACTS_KEY) if same_batch else None
    facts = sorted({*(earlier if isinstance(earlier, list) else []), index})
    user_metadata = {**old.user_metadata, BATCH_KEY: batch_id, FACTS_KEY: facts}
    subject = subject_key(fact.subject)
    if subject is not None:
        user_metadata[SUBJECT_KEY] = subject
    structured = {**(old.content.structured or {}), **fact.structured}
    return MemoryRecord.checked(
        {
            **old.model_dump(),
            # A restatement across types moves the memory to the fact's (more specific) type.
            "type": fact.type,
            "content": {"raw": textlib.clip(fact.text), "structured": structured or None},
            "metadata": {
                "importance": max(old.metadata.importance, fact.importance),
                "confidence": max(old.metadata.confidence, fact.confidence),
                "tags": list(dict.fromkeys([*old.metadata.tags, *fact.tags]))[:_MAX_TAGS],
                "source": fact.source,
                "version": old.metadata.version + 1,
            },
            "time": {**old.time.model_dump(), "updated_at": now},
            "provenance": list(dict.fromkeys([*old.provenance, *fact.provenance])),
            "user_metadata": user_metadata,
        },
        "fact",
    )


def closed_record(old: MemoryRecord, at: datetime, now: datetime) -> MemoryRecord:
    """``old`` no longer valid from ``at`` on (superseded), version + 1."""
    return MemoryRecord.checked(
        {
            **old.model_dump(),
            "metadata": {**old.metadata.model_dump(), "version": old.metadata.version + 1},
            "time": {**old.time.model_dump(), "updated_at": now, "valid_to": at},
        }
    )


def is_current(record: MemoryRecord, now: datetime) -> bool:
    """Not superseded at ``now``. A memory that starts in the future (a plan) counts."""
    return record.time.valid_to is None or record.time.valid_to > now
