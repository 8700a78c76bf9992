"""What the SQL stores (SQLite, PostgreSQL) write and read alike: a record to its columns
and back, history rows, the parts of a ``Filter`` that are plain column tests, and pages.

Pure functions over values; each store writes its own SQL around them (placeholders and
time types differ: SQLite stores milliseconds, PostgreSQL ``timestamptz``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from chatmem.records import Filter, HistoryEntry, HistoryEvent, MemoryRecord, Page
from chatmem.stores.base import Head, write_cursor

At = TypeVar("At")

#: Columns a filter tests for equality (``Filter`` field of the same name).
EQUAL_COLUMNS = ("user_id", "agent_id", "project_id", "session_id")
#: The columns mirrored from a record, in the order of ``columns``.
RECORD_COLUMNS = (
    "id, tenant_id, user_id, agent_id, project_id, session_id, type, scope, created_at,"
    " valid_from, valid_to, version, expires_at"
)
#: The columns of a history row, in the order of ``history_row``.
HISTORY_COLUMNS = "memory_id, tenant_id, user_id, version, event, old, new, reason, at"


def record_of(body: str) -> MemoryRecord:
    """The record a row's JSON ``body`` holds."""
    return MemoryRecord.stored(body)


#: Where in a record's JSON body each field of a ``Head`` is, in the order of ``head_of``.
HEAD_PATHS = (
    ("context", "speaker"),
    ("content", "raw"),
    ("metadata", "importance"),
    ("time", "created_at"),
    ("time", "valid_from"),
    ("time", "valid_to"),
    ("access_control", "allowed_roles"),
)


def head_of(
    speaker: str | None,
    text: str,
    importance: float | str,
    created_at: str,
    valid_from: str | None,
    valid_to: str | None,
    roles: Sequence[str] | None,
) -> Head:
    """The ``Head`` of the values at ``HEAD_PATHS`` of a body the store wrote (times as
    JSON writes them, ISO 8601 in UTC; importance a number, or its text)."""
    return Head(
        speaker,
        text,
        float(importance),
        datetime.fromisoformat(created_at),
        datetime.fromisoformat(valid_from) if valid_from else None,
        datetime.fromisoformat(valid_to) if valid_to else None,
        bool(roles),
    )


def columns(record: MemoryRecord, moment: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """The values of ``RECORD_COLUMNS`` for ``record``, its times through ``moment``."""
    time = record.time

    def optional(value: datetime | None) -> Any:
        return moment(value) if value else None

    return (
        record.id,
        record.tenant_id,
        record.user_id,
        record.agent_id,
        record.project_id,
        record.session_id,
        record.type.value,
        record.scope.value,
        moment(time.created_at),
        optional(time.valid_from),
        optional(time.valid_to),
        record.metadata.version,
        optional(time.expires_at),
    )


def history_row(
    event: HistoryEvent,
    old: MemoryRecord | None,
    new: MemoryRecord | None,
    reason: str | None,
    at: At,
) -> tuple[Any, ...]:
    """The values of ``HISTORY_COLUMNS`` for one event."""
    subject = new or old
    assert subject is not None
    return (
        subject.id,
        subject.tenant_id,
        subject.user_id,
        subject.metadata.version,
        event.value,
        old.model_dump_json() if old else None,
        new.model_dump_json() if new else None,
        reason,
        at,
    )


def history_where(memory_id: str, scope: Filter, mark: str) -> tuple[str, list[Any]]:
    """Conditions on ``memory_history`` for one memory of ``scope`` (placeholder ``mark``)."""
    conditions = [f"memory_id = {mark}", f"tenant_id = {mark}"]
    params: list[Any] = [memory_id, scope.tenant_id]
    if scope.user_id is not None:
        conditions.append(f"user_id = {mark}")
        params.append(scope.user_id)
    return " AND ".join(conditions), params


#: The columns ``history_entry`` reads, in its order.
HISTORY_READ = "memory_id, version, event, old, new, reason, at"


def history_entry(row: Sequence[Any], at: Callable[[Any], datetime]) -> HistoryEntry:
    """A ``HISTORY_READ`` row as an entry, its time through ``at``."""
    return HistoryEntry(
        memory_id=row[0],
        version=row[1],
        event=HistoryEvent(row[2]),
        old=record_of(row[3]) if row[3] else None,
        new=record_of(row[4]) if row[4] else None,
        reason=row[5],
        at=at(row[6]),
    )


def page(rows: Sequence[Sequence[Any]], limit: int, created_ms: Callable[[Any], int]) -> Page:
    """A page of ``(created_at, sequence, body)`` rows, fetched ``limit + 1`` at a time so
    that one more row says whether another page follows."""
    records = [record_of(body) for _, _, body in rows[:limit]]
    if len(rows) <= limit:
        return Page(records, None)
    created, sequence, _ = rows[limit - 1]
    return Page(records, write_cursor(created_ms(created), sequence))


__all__ = [
    "EQUAL_COLUMNS",
    "HISTORY_COLUMNS",
    "HISTORY_READ",
    "RECORD_COLUMNS",
    "columns",
    "history_entry",
    "history_row",
    "history_where",
    "page",
    "record_of",
]
