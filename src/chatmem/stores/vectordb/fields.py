"""A memory record flattened into the fields a vector database stores and filters on.

Milvus and Qdrant hold a memory as one flat row (a payload in Qdrant): its ids, the partition
key of its user (tenant + ``\\x1f`` + user), its times in whole milliseconds (the open ends of
the validity interval as sentinels), and its metadata and readers' roles as terms in one
array. ``Filter.metadata`` compares like Python (``True == 1 == 1.0``, a missing key equals
None), so a record stores a canonical ``key=value`` term per scalar and a filter asks for the
term; a record that names roles (SPEC L7) stores a mark and one term per role.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from chatmem.records import HistoryEvent, MemoryRecord, to_ms

SEPARATOR = "\x1f"
#: Sentinels for the open ends of a validity interval, in milliseconds.
OPEN_START = -(2**62)
OPEN_END = 2**62
#: Longest metadata term before it is replaced by its hash.
TERM_BYTES = 512
#: Terms of a memory that names roles (SPEC L7): a mark, and one term per role. No metadata
#: key starts with "#", so these never meet a metadata term.
RESTRICTED_TERM, ROLE_TERM = "#restricted", "#role:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def user_key(tenant_id: str, user_id: str) -> str:
    """The partition of one user of one tenant."""
    return f"{tenant_id}{SEPARATOR}{user_id}"


#: Milliseconds since the epoch, rounded down, computed exactly (no float).
ms_floor = to_ms


def ms_ceil(moment: datetime) -> int:
    """Milliseconds since the epoch, rounded up."""
    return -((_EPOCH - moment) // _MS)


def _canonical(value: Any) -> str | None:
    """A form of a JSON value that two values share exactly when Python finds them equal.

    None for values no scalar equals (lists, objects, NaN).
    """
    if value is None:
        return "null"
    if isinstance(value, bool | int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return None


def value_term(key: str, value: Any) -> str | None:
    """The term of ``key=value`` that a record holds and a filter asks for; None for a value
    no scalar equals."""
    canonical = _canonical(value)
    if canonical is None:
        return None
    term = f"{key}={canonical}"
    if len(term.encode()) > TERM_BYTES:
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        term = f"{key}=#{digest}"
    return term


def access_terms(record: MemoryRecord) -> list[str]:
    """What a record stores for its readers' roles: nothing when it names none."""
    roles = record.access_control.allowed_roles
    return [RESTRICTED_TERM, *(ROLE_TERM + role for role in sorted(set(roles)))] if roles else []


def metadata_terms(metadata: dict[str, Any]) -> list[str]:
    """What a record stores for metadata filters: each key, and ``key=value`` for scalars."""
    terms = []
    for key, value in metadata.items():
        terms.append(key)
        if (term := value_term(key, value)) is not None:
            terms.append(term)
    return terms


def memory_fields(record: MemoryRecord, document: str) -> dict[str, Any]:
    """The filterable fields of a record whose JSON is ``document``, its terms included."""
    metadata = json.loads(document)["user_metadata"]  # as a reader will see it
    time_info = record.time
    return {
        "id": record.id,
        "user_key": user_key(record.tenant_id, record.user_id),
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "agent_id": record.agent_id or "",
        "project_id": record.project_id or "",
        "session_id": record.session_id or "",
        "type": record.type.value,
        "scope": record.scope.value,
        "created_at": ms_floor(time_info.created_at),
        "valid_from": ms_floor(time_info.valid_from) if time_info.valid_from else OPEN_START,
        "valid_to": ms_floor(time_info.valid_to) if time_info.valid_to else OPEN_END,
        "version": record.metadata.version,
        "user_metadata": metadata,
        "meta_terms": metadata_terms(metadata) + access_terms(record),
    }


def expires_ms(record: MemoryRecord) -> int:
    """When a record's TTL runs out, in milliseconds; ``OPEN_END`` when it has none."""
    expires_at = record.time.expires_at
    return ms_floor(expires_at) if expires_at else OPEN_END


def history_fields(
    event: HistoryEvent, subject: MemoryRecord, seq: int, at: datetime
) -> dict[str, Any]:
    """The fields of a history row of ``subject`` (the record after the change, or before a
    delete), besides the records and the reason."""
    return {
        "user_key": user_key(subject.tenant_id, subject.user_id),
        "memory_id": subject.id,
        "tenant_id": subject.tenant_id,
        "user_id": subject.user_id,
        "seq": seq,
        "version": subject.metadata.version,
        "event": event.value,
        "at": ms_floor(at),
    }
