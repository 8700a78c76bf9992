"""Sessions in a SQLite file: durable, shared by threads and processes (SPEC S3).

Layout (its own migrations table, so it can share a file with the long-term ``SQLiteStore``):
- ``session_states``: one row per session: log length, last turn id, when it was last
  appended to, and the state. ``revision`` and ``ended_at`` are columns (the state JSON holds
  the rest) so that an append can reopen a session without parsing the JSON.
- ``session_messages``: the log, one row per message, numbered by ``seq`` from 0.
- ``session_texts``: named texts per tenant.

Every write is one ``BEGIN IMMEDIATE`` transaction, so the turn-order check and the insert
hold together even with other processes appending to the same session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from chatmem.errors import ConflictError
from chatmem.messages import Message, SessionKey, check_turn_order, last_turn_id, now_ms
from chatmem.sessions.base import SessionInfo, SessionState, SessionStore
from chatmem.stores.sqlite import SQLiteFile

try:  # the same module the long-term store uses, so both share one file's locking
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - exercised only where pysqlite3 is absent
    import sqlite3

#: The migrations table of the session tables (the long-term store uses ``chatmem_migrations``).
MIGRATIONS_TABLE = "chatmem_session_migrations"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE session_states (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        length INTEGER NOT NULL,
        last_turn INTEGER,
        updated_at INTEGER NOT NULL,
        ended_at INTEGER,
        revision INTEGER NOT NULL,
        state TEXT,
        PRIMARY KEY (tenant_id, user_id, session_id)
    );
    CREATE INDEX session_states_idle ON session_states (updated_at)
        WHERE ended_at IS NULL AND length > 0;
    CREATE TABLE session_messages (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id, seq)
    );
    CREATE TABLE session_texts (
        tenant_id TEXT NOT NULL,
        name TEXT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (tenant_id, name)
    );
    """,
    # Sessions written before the extraction mark were queued by the scheduler of the
    # process that served them: count them as queued, so an upgrade extracts nothing twice.
    """
    UPDATE session_states
        SET state = json_set(COALESCE(state, '{}'), '$.extracted_upto', length)
    """,
)

_KEY = "tenant_id = ? AND user_id = ? AND session_id = ?"
_USER = "tenant_id = ? AND user_id = ?"


def _state_json(state: SessionState) -> str:
    # revision and ended_at live in their own columns, the only copy, so they cannot disagree.
    return state.model_dump_json(exclude={"revision", "ended_at"})


def _load_state(body: str | None, revision: int, ended_at: int | None) -> SessionState:
    state = SessionState.model_validate_json(body) if body else SessionState()
    return state.model_copy(update={"revision": revision, "ended_at": ended_at})


class SQLiteSessionStore(SessionStore):
    """Sessions in one SQLite file (WAL); safe for many threads and processes at once."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        self._file = SQLiteFile(path, synchronous=synchronous)
        self._file.migrate(MIGRATIONS, table=MIGRATIONS_TABLE)

    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        batch = list(messages)
        bodies = [message.model_dump_json() for message in batch]

        def work(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                f"SELECT length, last_turn FROM session_states WHERE {_KEY}", key
            ).fetchone()
            length, last = row if row else (0, None)
            check_turn_order(last, batch)
            conn.executemany(
                "INSERT INTO session_messages VALUES (?, ?, ?, ?, ?)",
                [(*key, length + i, body) for i, body in enumerate(bodies)],
            )
            newest = last_turn_id(batch)
            # The SET expressions see the row as it was, so an ended session gets its
            # revision bumped exactly when it is reopened.
            conn.execute(
                "INSERT INTO session_states VALUES (?, ?, ?, ?, ?, ?, NULL, 0, NULL)"
                " ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE SET"
                " length = excluded.length, last_turn = excluded.last_turn,"
                " updated_at = excluded.updated_at,"
                " revision = revision + (ended_at IS NOT NULL), ended_at = NULL",
                (*key, length + len(batch), last if newest is None else newest, now_ms()),
            )
            return int(length + len(batch))

        return self._file.write(work)

    def read(self, key: SessionKey, start: int = 0, stop: int | None = None) -> list[Message]:
        with self._file.read() as conn:
            if start >= 0 and (stop is None or stop >= 0):
                rows = self._rows(conn, key, start, stop)
            else:
                conn.execute("BEGIN")  # the length and the rows from one snapshot
                try:
                    lo, hi, _ = slice(start, stop).indices(self._length(conn, key))
                    rows = self._rows(conn, key, lo, hi)
                finally:
                    conn.execute("COMMIT")
        return [Message.model_validate_json(body) for (body,) in rows]

    @staticmethod
    def _rows(
        conn: sqlite3.Connection, key: SessionKey, lo: int, hi: int | None
    ) -> list[tuple[str]]:
        rows: list[tuple[str]] = conn.execute(
            f"SELECT body FROM session_messages WHERE {_KEY} AND seq >= ? AND seq < ? ORDER BY seq",
            (*key, lo, hi if hi is not None else 2**63 - 1),
        ).fetchall()
        return rows

    @staticmethod
    def _length(conn: sqlite3.Connection, key: SessionKey) -> int:
        row = conn.execute(f"SELECT length FROM session_states WHERE {_KEY}", key).fetchone()
        return int(row[0]) if row else 0

    def length(self, key: SessionKey) -> int:
        with self._file.read() as conn:
            return self._length(conn, key)

    def state(self, key: SessionKey) -> SessionState:
        with self._file.read() as conn:
            row = conn.execute(
                f"SELECT state, revision, ended_at FROM session_states WHERE {_KEY}", key
            ).fetchone()
        return _load_state(*row) if row else SessionState()

    def save_state(self, key: SessionKey, state: SessionState) -> SessionState:
        saved = state.model_copy(update={"revision": state.revision + 1})

        def work(conn: sqlite3.Connection) -> SessionState:
            row = conn.execute(f"SELECT revision FROM session_states WHERE {_KEY}", key).fetchone()
            current = row[0] if row else 0
            if current != state.revision:
                raise ConflictError(
                    f"session {key.session_id!r} state changed (revision "
                    f"{current}, not {state.revision})"
                )
            conn.execute(
                "INSERT INTO session_states VALUES (?, ?, ?, 0, NULL, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE SET"
                " ended_at = excluded.ended_at, revision = excluded.revision,"
                " state = excluded.state",
                (*key, now_ms(), saved.ended_at, saved.revision, _state_json(saved)),
            )
            return saved

        return self._file.write(work)

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionInfo]:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT session_id, length, updated_at, ended_at FROM session_states"
                f" WHERE {_USER} ORDER BY updated_at DESC, session_id",
                (tenant_id, user_id),
            ).fetchall()
        return [SessionInfo(*row) for row in rows]

    def idle(self, before_ms: int, limit: int = 100) -> list[SessionKey]:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT tenant_id, user_id, session_id FROM session_states"
                " WHERE ended_at IS NULL AND length > 0 AND updated_at < ?"
                " ORDER BY updated_at, tenant_id, user_id, session_id LIMIT ?",
                (before_ms, limit),
            ).fetchall()
        return [SessionKey(*row) for row in rows]

    def unextracted(self, limit: int = 10_000) -> list[SessionKey]:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT tenant_id, user_id, session_id FROM session_states"
                " WHERE ended_at IS NULL AND length >"
                " COALESCE(json_extract(state, '$.extracted_upto'), 0)"
                " ORDER BY updated_at LIMIT ?",
                (limit,),
            ).fetchall()
        return [SessionKey(*row) for row in rows]

    def delete(self, key: SessionKey) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            conn.execute(f"DELETE FROM session_messages WHERE {_KEY}", key)
            gone = conn.execute(f"DELETE FROM session_states WHERE {_KEY}", key)
            return bool(gone.rowcount > 0)

        return self._file.write(work)

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        def work(conn: sqlite3.Connection) -> int:
            conn.execute(f"DELETE FROM session_messages WHERE {_USER}", (tenant_id, user_id))
            gone = conn.execute(f"DELETE FROM session_states WHERE {_USER}", (tenant_id, user_id))
            return int(gone.rowcount)

        return self._file.write(work)

    def get_text(self, tenant_id: str, name: str) -> str | None:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT text FROM session_texts WHERE tenant_id = ? AND name = ?",
                (tenant_id, name),
            ).fetchone()
        return str(row[0]) if row else None

    def put_text(self, tenant_id: str, name: str, text: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO session_texts VALUES (?, ?, ?)"
                " ON CONFLICT (tenant_id, name) DO UPDATE SET text = excluded.text",
                (tenant_id, name, text),
            )

        self._file.write(work)

    def delete_text(self, tenant_id: str, name: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "DELETE FROM session_texts WHERE tenant_id = ? AND name = ?", (tenant_id, name)
            )
            return bool(cursor.rowcount > 0)

        return self._file.write(work)

    def close(self) -> None:
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteSessionStore({self.path!r})"


__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE", "SQLiteSessionStore"]
