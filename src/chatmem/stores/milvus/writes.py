"""The Milvus store's write path: put, update, touch and delete, each undone on failure.

A batch is written with one ``insert`` (or ``upsert``) call, then its history rows; if a step
fails, what may have been written is deleted (or the previous rows restored) before
StoreError is raised. A bulk delete works in chunks of ``ID_CHUNK`` records; each record is
deleted together with its history row, so a failed delete may have removed a prefix of the
records. The caller holds the store's write lock (``vectordb.writes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from chatmem.errors import StoreError, ValidationError
from chatmem.records import Entry, Filter, HistoryEvent, MemoryRecord, utcnow
from chatmem.stores.base import Change, Usage
from chatmem.stores.milvus.expressions import any_of, read_expression
from chatmem.stores.milvus.rows import MEMORY_FIELDS, history_row, memory_row, record_of
from chatmem.stores.milvus.schema import MilvusCollections
from chatmem.stores.vectordb.order import sort_key
from chatmem.stores.vectordb.writes import Stored, changed_vector, chunks, current, undo

Seq = Callable[[], int]


def _row(db: MilvusCollections, record: MemoryRecord, vector: Sequence[float]) -> dict[str, Any]:
    return memory_row(
        record, vector, expiry=db.expiry, collection=db.memories, keywords=db.keywords
    )


def _delete_rows(db: MilvusCollections, collection: str, ids: Sequence[str]) -> None:
    for chunk in chunks(ids):
        db.conn.write(db.conn.client.delete, collection, len(chunk), ids=list(chunk))


def _drop_history(db: MilvusCollections, history: Sequence[dict[str, Any]]) -> Callable[[], None]:
    return lambda: _delete_rows(db, db.history, [h["id"] for h in history])


def _replace(db: MilvusCollections, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` over the memories of their ids: an upsert, or where the server's
    upsert is unsound (``features``) a delete, then an insert."""
    if db.features.upsert:
        db.conn.write(db.conn.client.upsert, db.memories, len(rows), data=rows)
        return
    _delete_rows(db, db.memories, [str(row["id"]) for row in rows])
    db.conn.write(db.conn.client.insert, db.memories, len(rows), data=rows)


def _upserting(db: MilvusCollections, rows: list[dict[str, Any]]) -> Callable[[], object]:
    return lambda: _replace(db, rows)


def stored(db: MilvusCollections, ids: set[str]) -> dict[str, Stored]:
    """The stored memories of these ids, whoever owns them, with their vectors."""
    found: dict[str, Stored] = {}
    for chunk in chunks(sorted(ids)):
        for row in db.conn.query(db.memories, any_of("id", chunk), ["id", "body", "embedding"]):
            vector = [float(x) for x in row["embedding"]]
            found[str(row["id"])] = Stored(record_of(row["body"]), vector)
    return found


def put(db: MilvusCollections, entries: Sequence[Entry], seq: Seq) -> None:
    """Insert new memories and their ADD history; ValidationError for an id already taken."""
    now = utcnow()
    rows = [_row(db, record, vector.tolist()) for record, vector in entries]
    history = [history_row(HistoryEvent.ADD, None, r, None, now, seq()) for r, _ in entries]
    ids = [entry.record.id for entry in entries]
    taken = [
        str(row["id"])
        for chunk in chunks(ids)
        for row in db.conn.query(db.memories, any_of("id", chunk), ["id"])
    ]
    if taken:
        raise ValidationError(f"memory {taken[0]!r} already exists", field="id")
    try:
        db.conn.write(db.conn.client.insert, db.memories, len(rows), data=rows)
        db.conn.write(db.conn.client.insert, db.history, len(history), data=history)
    except StoreError as exc:
        undo(exc, lambda: _delete_rows(db, db.memories, ids))
        undo(exc, _drop_history(db, history))
        raise


def update(db: MilvusCollections, changes: Sequence[Change], seq: Seq) -> None:
    """Replace memories at their expected versions, with UPDATE history."""
    now = utcnow()
    originals = stored(db, {change.record.id for change in changes})
    state = dict(originals)
    rows: dict[str, dict[str, Any]] = {}
    history = []
    for change in changes:
        new = change.record
        found = current(state, change)
        vector = changed_vector(change, found)
        rows[new.id] = _row(db, new, vector)
        history.append(
            history_row(HistoryEvent.UPDATE, found.record, new, change.reason, now, seq())
        )
        state[new.id] = Stored(new, vector)
    try:
        _replace(db, list(rows.values()))
        db.conn.write(db.conn.client.insert, db.history, len(history), data=history)
    except StoreError as exc:
        restore = [_row(db, s.record, s.vector) for i, s in originals.items() if i in rows]
        undo(exc, _upserting(db, restore))
        undo(exc, _drop_history(db, history))
        raise


def touch(db: MilvusCollections, uses: Sequence[Usage], scope: Filter, user: str) -> list[str]:
    """Record the uses of the user's memories; the ids whose record changed."""
    originals = {
        memory_id: found
        for memory_id, found in stored(db, {use.id for use in uses}).items()
        if (found.record.tenant_id, found.record.user_id) == (scope.tenant_id, user)
    }
    changed = Usage.written([found.record for found in originals.values()], uses)
    if not changed:
        return []
    rows = [_row(db, r, originals[i].vector) for i, r in changed.items()]
    try:
        _replace(db, rows)
    except StoreError as exc:
        undo(exc, _upserting(db, [_row(db, s.record, s.vector) for s in originals.values()]))
        raise
    return list(changed)


def delete(db: MilvusCollections, scope: Filter, reason: str | None, seq: Seq) -> list[str]:
    """Delete the memories ``scope`` matches, oldest first, in chunks with DELETE history."""
    rows = db.conn.scan(db.memories, read_expression(scope, expiry=db.expiry), MEMORY_FIELDS)
    records = sorted(
        (r for r in (record_of(row["body"]) for row in rows) if scope.matches(r)),
        key=sort_key,
    )
    now = utcnow()
    for chunk in chunks(records):
        _delete_chunk(db, chunk, reason, now, seq)
    return [record.id for record in records]


def _delete_chunk(
    db: MilvusCollections,
    records: Sequence[MemoryRecord],
    reason: str | None,
    at: datetime,
    seq: Seq,
) -> None:
    history = [history_row(HistoryEvent.DELETE, r, None, reason, at, seq()) for r in records]
    db.conn.write(db.conn.client.insert, db.history, len(history), data=history)
    try:
        _delete_rows(db, db.memories, [record.id for record in records])
    except StoreError as exc:
        undo(exc, _drop_history(db, history))
        raise
