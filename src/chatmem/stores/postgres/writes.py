"""The PostgreSQL store's write path: rows with their search vector and embedding, each
batch in the caller's transaction, the history of every change, and the binary form in
which vectors are sent."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format
from pydantic_core import to_json

from chatmem import text as textlib
from chatmem.errors import ConflictError, NotFoundError, ValidationError
from chatmem.records import Entry, HistoryEvent, MemoryRecord, utcnow
from chatmem.stores.base import Change
from chatmem.stores.postgres.schema import TEXT_SEARCH_CONFIG, index_text
from chatmem.stores.postgres_db import Connection
from chatmem.stores.sql_rows import (
    HISTORY_COLUMNS,
    RECORD_COLUMNS,
    columns,
    history_row,
    record_of,
)

#: One event of a batch's history: (event, old, new, reason).
Event = tuple[HistoryEvent, MemoryRecord | None, MemoryRecord | None, str | None]

_INSERT_COLUMNS = f"{RECORD_COLUMNS}, user_metadata, body, search, embedding"
SEARCH_VECTOR = (
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'A')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'B')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'C')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'D')"
)
#: Placeholders for ``_INSERT_COLUMNS``: ``_columns``, then ``_search_fields``, then the vector.
_INSERT_VALUES = ", ".join(["%s"] * 13 + ["%s::jsonb", "%s", SEARCH_VECTOR, "%s::vector"])


class VectorDumper(Dumper):
    """Sends a numpy vector in pgvector's binary form: the dimension, a reserved int16, then
    big-endian float32s (100x faster than its text form). The type oid is left to the
    server, so every parameter it fills is cast: ``%s::vector``."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        vector = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", len(vector), 0) + vector.tobytes()


def configure(conn: Connection) -> None:
    """Ready a new pooled connection to send vectors."""
    conn.adapters.register_dumper(np.ndarray, VectorDumper)


def _columns(record: MemoryRecord) -> tuple[Any, ...]:
    """The column values of ``record`` in ``_INSERT_COLUMNS`` order, up to ``body``."""
    return (
        *columns(record, lambda moment: moment),
        to_json(record.user_metadata).decode(),
        record.model_dump_json(),
    )


def _search_fields(record: MemoryRecord) -> tuple[str, ...]:
    return tuple(index_text(field) for field in textlib.index_fields(record))


def insert(conn: Connection, schema: str, entries: Sequence[Entry]) -> None:
    """Add new records; a taken id fails the whole batch."""
    rows = [(*_columns(record), *_search_fields(record), vector) for record, vector in entries]
    with conn.cursor() as cursor:
        # ON CONFLICT DO NOTHING: a taken id (even one a concurrent writer just took)
        # returns no row, and the whole batch rolls back.
        cursor.executemany(
            f"INSERT INTO {schema}.memories ({_INSERT_COLUMNS})"
            f" VALUES ({_INSERT_VALUES}) ON CONFLICT (id) DO NOTHING RETURNING id",
            rows,
            returning=True,
        )
        for record, _ in entries:
            if cursor.fetchone() is None:
                raise ValidationError(f"memory {record.id!r} already exists", field="id")
            cursor.nextset()
    add_history(conn, schema, [(HistoryEvent.ADD, None, record, None) for record, _ in entries])


def add_history(conn: Connection, schema: str, events: Sequence[Event]) -> None:
    at = utcnow()
    rows = [history_row(event, old, new, reason, at) for event, old, new, reason in events]
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {schema}.memory_history ({HISTORY_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            rows,
        )


def apply_change(conn: Connection, schema: str, change: Change) -> Event:
    """Replace a stored record by its new version (the row locked, its version checked);
    returns the history event to record."""
    new = change.record
    row = conn.execute(
        f"SELECT version, body FROM {schema}.memories"
        " WHERE id = %s AND tenant_id = %s AND user_id = %s FOR UPDATE",
        (new.id, new.tenant_id, new.user_id),
    ).fetchone()
    if row is None:
        raise NotFoundError(new.id)
    version, body = row
    if version != change.expected_version:
        raise ConflictError(
            f"memory {new.id!r} is at version {version}, not {change.expected_version}"
        )
    conn.execute(
        f"UPDATE {schema}.memories SET agent_id = %s, project_id = %s,"
        " session_id = %s, type = %s, scope = %s, created_at = %s, valid_from = %s,"
        " valid_to = %s, version = %s, expires_at = %s, user_metadata = %s::jsonb,"
        " body = %s,"
        f" search = {SEARCH_VECTOR}, embedding = COALESCE(%s::vector, embedding)"
        " WHERE id = %s",
        (*_columns(new)[3:], *_search_fields(new), change.vector, new.id),
    )
    if change.vector is not None:  # states of the old text
        conn.execute(
            f"DELETE FROM {schema}.memory_word_states"
            f" WHERE seq = (SELECT seq FROM {schema}.memories WHERE id = %s)",
            (new.id,),
        )
    return HistoryEvent.UPDATE, record_of(body), new, change.reason


__all__ = [
    "SEARCH_VECTOR",
    "Event",
    "VectorDumper",
    "add_history",
    "apply_change",
    "configure",
    "insert",
]
