"""The SQLite store's write path: a record's row, vector, keyword row and history, each
written inside the caller's ``BEGIN IMMEDIATE`` transaction, and the per-user counters that
tell every connection's vector and field caches a user's rows moved on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from chatmem import text as textlib
from chatmem.errors import ConflictError, NotFoundError, ValidationError
from chatmem.records import Entry, HistoryEvent, MemoryRecord, Vector, to_ms, utcnow
from chatmem.stores.base import Change
from chatmem.stores.sql_rows import HISTORY_COLUMNS, RECORD_COLUMNS, columns, record_of
from chatmem.stores.sqlite import vector_snapshots as snapshots
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.schema import FTS_COLUMNS, fts_of, fts_table, user_token

#: The columns an update may change: those ``columns`` mirrors after the ids and the owner.
_MIRRORED = tuple(name.strip() for name in RECORD_COLUMNS.split(","))[3:]
_READ_FOR_UPDATE = (
    f"SELECT rowid, version, body, {', '.join(_MIRRORED)} FROM memories"
    " WHERE id = ? AND tenant_id = ? AND user_id = ?"
)


def blob(vector: Vector) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def _columns(record: MemoryRecord) -> tuple[Any, ...]:
    return columns(record, to_ms)


def _bump(conn: sqlite3.Connection, record: MemoryRecord, counter: str) -> int:
    """Tell every reader's vector and field caches that this user's rows moved on; the
    counter's new value."""
    row = conn.execute(
        f"INSERT INTO user_versions (tenant_id, user_id, {counter}) VALUES (?, ?, 1)"
        f" ON CONFLICT (tenant_id, user_id) DO UPDATE SET {counter} = {counter} + 1"
        f" RETURNING {counter}",
        (record.tenant_id, record.user_id),
    ).fetchone()
    if counter == "changed":  # the user's whole copy may hold the old vector
        snapshots.drop(conn, record.tenant_id, record.user_id)
    return int(row[0])


def insert(conn: sqlite3.Connection, entries: Sequence[Entry]) -> list[int]:
    """Add new records (a taken id fails the whole batch: the caller's transaction rolls
    back on the error); their rowids."""
    rowids = []
    for record, vector in entries:
        body = record.model_dump_json()
        rowid = _insert_row(conn, record, body, vector)
        _index_text(conn, rowid, record)
        _add_history(conn, record, HistoryEvent.ADD, None, body, None)
        rowids.append(rowid)
    return rowids


def keep_states(conn: sqlite3.Connection, states: Sequence[tuple[int, bytes]]) -> None:
    """Write ``(rowid, blob)`` word-piece states, in place of any kept for those rows."""
    conn.executemany("INSERT OR REPLACE INTO memory_word_states VALUES (?, ?)", states)


def apply_all_or_none(conn: sqlite3.Connection, changes: Sequence[Change]) -> bool:
    """``apply_change`` of each of ``changes``, or of none where one's record changed or
    went (within the caller's transaction); whether they were applied. The versions are
    read first, not undone after: a savepoint would flush the keyword index's pending
    rows, a segment more each add."""
    for change in changes:
        new = change.record
        row = conn.execute(
            "SELECT version FROM memories WHERE id = ? AND tenant_id = ? AND user_id = ?",
            (new.id, new.tenant_id, new.user_id),
        ).fetchone()
        if row is None or row[0] != change.expected_version:
            return False
    for change in changes:
        apply_change(conn, change)
    return True


def _insert_row(conn: sqlite3.Connection, record: MemoryRecord, body: str, vector: Vector) -> int:
    try:
        cursor = conn.execute(
            f"INSERT INTO memories ({RECORD_COLUMNS}, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*_columns(record), body),
        )
    except sqlite3.IntegrityError as exc:
        # The id's UNIQUE index refuses a taken id: no SELECT of the batch's ids first.
        if "memories.id" in str(exc):
            raise ValidationError(f"memory {record.id!r} already exists", field="id") from None
        raise
    rowid = int(cursor.lastrowid or 0)
    conn.execute("INSERT INTO memory_vectors VALUES (?, ?)", (rowid, blob(vector)))
    _bump(conn, record, "appended")
    return rowid


def _index_text(conn: sqlite3.Connection, rowid: int, record: MemoryRecord) -> None:
    token = user_token(record.tenant_id, record.user_id)
    conn.execute(
        f"INSERT INTO {fts_table(token)} (rowid, {FTS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (rowid, token, *textlib.index_fields(record)),
    )


def _add_history(
    conn: sqlite3.Connection,
    subject: MemoryRecord,
    event: HistoryEvent,
    old: str | None,
    new: str | None,
    reason: str | None,
) -> None:
    """One history row; ``old`` and ``new`` are the record's JSON before and after (the
    rows' bodies as written, never parsed and dumped again)."""
    conn.execute(
        f"INSERT INTO memory_history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            subject.id,
            subject.tenant_id,
            subject.user_id,
            subject.metadata.version,
            event.value,
            old,
            new,
            reason,
            to_ms(utcnow()),
        ),
    )


def apply_change(conn: sqlite3.Connection, change: Change) -> None:
    """Replace a stored record by its new version (optimistic: the version must match)."""
    new = change.record
    row = conn.execute(_READ_FOR_UPDATE, (new.id, new.tenant_id, new.user_id)).fetchone()
    if row is None:
        raise NotFoundError(new.id)
    rowid, version, old_body, *stored = row
    if version != change.expected_version:
        raise ConflictError(
            f"memory {new.id!r} is at version {version}, not {change.expected_version}"
        )
    # The row keeps the count it was updated at: field caches read what moved on since.
    edited = _bump(conn, new, "edited")
    body = new.model_dump_json()
    # Only the columns that changed are set: SQLite then rewrites no index entry of the
    # others (a turn told of the next one changes its version and body alone).
    changed = [
        (name, value)
        for name, value, was in zip(_MIRRORED, _columns(new)[3:], stored, strict=True)
        if value != was
    ]
    sets = "".join(f"{name} = ?, " for name, _ in changed)
    conn.execute(
        f"UPDATE memories SET {sets}body = ?, edited = ? WHERE rowid = ?",
        (*(value for _, value in changed), body, edited, rowid),
    )
    if change.vector is None and _turn_moved(changed, old_body, new):
        snapshots.drop(conn, new.tenant_id, new.user_id)  # its session or asking is stale
    if change.vector is not None:
        conn.execute(
            "UPDATE memory_vectors SET embedding = ? WHERE rowid = ?",
            (blob(change.vector), rowid),
        )
        conn.execute("DELETE FROM memory_word_states WHERE rowid = ?", (rowid,))
        _bump(conn, new, "changed")
    conn.execute(f"DELETE FROM {fts_of(new)} WHERE rowid = ?", (rowid,))
    _index_text(conn, rowid, new)
    _add_history(conn, new, HistoryEvent.UPDATE, old_body, body, change.reason)


#: Removals kept in a user's log (``memory_removals``) at least; twice as many at most.
REMOVALS_KEPT = 2000


def remove(conn: sqlite3.Connection, rows: Sequence[tuple[int, str]], reason: str | None) -> None:
    """Delete the ``(rowid, body)`` rows with their vectors, word-piece states and keyword
    rows, each logged
    in ``memory_removals`` at its user's new ``changed`` count."""
    for rowid, body in rows:
        gone = record_of(body)
        conn.execute("DELETE FROM memories WHERE rowid = ?", (rowid,))
        for table in ("memory_vectors", "memory_word_states", fts_of(gone)):
            conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
        _log_removal(conn, gone, rowid)
        _add_history(conn, gone, HistoryEvent.DELETE, body, None, reason)


def _turn_moved(changed: Sequence[tuple[str, Any]], old_body: str, new: MemoryRecord) -> bool:
    """Whether an update that keeps the vector changes what a user's vector copy holds of
    the row besides it: its session, its type (a chat turn or not), or its text (whether it
    asks something)."""
    if any(name in ("session_id", "type") for name, _ in changed):
        return True
    return bool(json.loads(old_body)["content"]["raw"] != new.content.raw)


def _log_removal(conn: sqlite3.Connection, gone: MemoryRecord, rowid: int) -> None:
    """Bump the user's ``changed``, log the row at it, and trim the log past twice
    ``REMOVALS_KEPT`` (the log is then complete after ``removals_from`` only)."""
    owner = (gone.tenant_id, gone.user_id)
    changed, start = conn.execute(
        "INSERT INTO user_versions (tenant_id, user_id, changed) VALUES (?, ?, 1)"
        " ON CONFLICT (tenant_id, user_id) DO UPDATE SET changed = changed + 1"
        " RETURNING changed, removals_from",
        owner,
    ).fetchone()
    conn.execute("INSERT INTO memory_removals VALUES (?, ?, ?, ?)", (*owner, changed, rowid))
    snapshots.drop(conn, *owner)  # a forgotten memory's vector is kept nowhere
    if changed - start > 2 * REMOVALS_KEPT:
        start = changed - REMOVALS_KEPT
        conn.execute(
            "DELETE FROM memory_removals WHERE tenant_id = ? AND user_id = ? AND changed <= ?",
            (*owner, start),
        )
        conn.execute(
            "UPDATE user_versions SET removals_from = ? WHERE tenant_id = ? AND user_id = ?",
            (start, *owner),
        )


def removed_since(
    conn: sqlite3.Connection, tenant: str, user: str, changed: int
) -> list[int] | None:
    """The rowids of the user's rows deleted after the ``changed`` count, in ``conn``'s
    snapshot; None when the log no longer reaches back that far."""
    row = conn.execute(
        "SELECT removals_from FROM user_versions WHERE tenant_id = ? AND user_id = ?",
        (tenant, user),
    ).fetchone()
    if row is None or changed < row[0]:
        return None
    found = conn.execute(
        "SELECT removed FROM memory_removals WHERE tenant_id = ? AND user_id = ? AND changed > ?",
        (tenant, user, changed),
    ).fetchall()
    return [rowid for (rowid,) in found]


def still_there(
    conn: sqlite3.Connection, tenant: str, user: str, changed: int, rowids: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Which of ``rowids``, the user's rows at the ``changed`` count, are still there in
    ``conn``'s snapshot: from the removal log, or where it no longer reaches back that far,
    from the rowids the user has now (an index: no row is read)."""
    gone = removed_since(conn, tenant, user, changed)
    if gone is not None:
        return ~np.isin(rowids, np.array(gone, dtype=np.int64))
    found = conn.execute(
        "SELECT rowid FROM memories WHERE tenant_id = ? AND user_id = ?", (tenant, user)
    ).fetchall()
    present = np.fromiter((rowid for (rowid,) in found), np.int64, len(found))
    return np.isin(rowids, present, assume_unique=True)


__all__ = [
    "REMOVALS_KEPT",
    "apply_change",
    "blob",
    "insert",
    "remove",
    "removed_since",
    "still_there",
]
