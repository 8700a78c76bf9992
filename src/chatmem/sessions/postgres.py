"""Sessions in PostgreSQL (SPEC S3, issue 15): shared by every replica of a service.

The layout of the SQLite store, in one schema (default ``chatmem_service``) with its own
migrations table: ``session_states`` (one row per session: length, last turn, last append,
``ended_at``, ``revision``, ``extracted_upto`` and the state as JSON text),
``session_messages`` (the log, numbered by ``seq`` from 0) and ``session_texts``.

Every write is one transaction that first makes sure the session's state row exists and
then locks it (``SELECT … FOR UPDATE``), so the turn-order check, the insert and the
compare-and-set of the state hold together across replicas. JSON is kept as text, not
JSONB, because JSONB refuses the NUL characters a message may carry.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatmem.errors import ConflictError
from chatmem.messages import Message, SessionKey, check_turn_order, last_turn_id, now_ms
from chatmem.sessions.base import SessionInfo, SessionState, SessionStore
from chatmem.stores.postgres_db import (
    SERVICE_SCHEMA,
    Connection,
    PostgresDatabase,
    PostgresTables,
)

MIGRATIONS_TABLE = "session_migrations"
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.session_states (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        length BIGINT NOT NULL,
        last_turn BIGINT,
        updated_at BIGINT NOT NULL,
        ended_at BIGINT,
        revision BIGINT NOT NULL,
        extracted_upto BIGINT NOT NULL DEFAULT 0,
        state TEXT,
        PRIMARY KEY (tenant_id, user_id, session_id)
    );
    CREATE INDEX session_states_idle ON {schema}.session_states (updated_at)
        WHERE ended_at IS NULL AND length > 0;
    CREATE INDEX session_states_unextracted ON {schema}.session_states (updated_at)
        WHERE ended_at IS NULL AND length > extracted_upto;
    CREATE TABLE {schema}.session_messages (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id, seq)
    );
    CREATE TABLE {schema}.session_texts (
        tenant_id TEXT NOT NULL,
        name TEXT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (tenant_id, name)
    );
    """,
)

_KEY = "tenant_id = %s AND user_id = %s AND session_id = %s"
_USER = "tenant_id = %s AND user_id = %s"


def _state_json(state: SessionState) -> str:
    # revision and ended_at live in their own columns, the only copy.
    return state.model_dump_json(exclude={"revision", "ended_at"})


def _load_state(body: str | None, revision: int, ended_at: int | None) -> SessionState:
    state = SessionState.model_validate_json(body) if body else SessionState()
    return state.model_copy(update={"revision": int(revision), "ended_at": ended_at})


class PostgresSessionStore(SessionStore):
    """Sessions in PostgreSQL; safe for many threads, processes and machines at once.

    ``database`` is a conninfo (the store opens and closes its own pool, in ``schema``) or a
    :class:`PostgresDatabase` shared with the rest of the service state.
    """

    def __init__(self, database: PostgresDatabase | str, *, schema: str = SERVICE_SCHEMA) -> None:
        self._tables = PostgresTables(
            database,
            MIGRATIONS,
            table=MIGRATIONS_TABLE,
            what="PostgreSQL session store",
            schema=schema,
        )
        schema = self._tables.schema
        self._states = f"{schema}.session_states"
        self._messages = f"{schema}.session_messages"
        self._texts = f"{schema}.session_texts"

    def _locked(self, conn: Connection, key: SessionKey) -> tuple[int, int | None, int]:
        """The session's (length, last turn, revision), its row made if missing and locked
        until the transaction ends."""
        conn.execute(
            f"INSERT INTO {self._states} (tenant_id, user_id, session_id, length, updated_at,"
            " revision) VALUES (%s, %s, %s, 0, %s, 0) ON CONFLICT DO NOTHING",
            (*key, now_ms()),
        )
        row = conn.execute(
            f"SELECT length, last_turn, revision FROM {self._states} WHERE {_KEY} FOR UPDATE",
            key,
        ).fetchone()
        assert row is not None
        return int(row[0]), row[1], int(row[2])

    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        batch = list(messages)
        bodies = [message.model_dump_json() for message in batch]
        with self._tables.transaction() as conn:
            length, last, _ = self._locked(conn, key)
            check_turn_order(last, batch)
            if bodies:
                with conn.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO {self._messages} VALUES (%s, %s, %s, %s, %s)",
                        [(*key, length + i, body) for i, body in enumerate(bodies)],
                    )
            newest = last_turn_id(batch)
            conn.execute(
                f"UPDATE {self._states} SET length = %s, last_turn = %s, updated_at = %s,"
                " revision = revision + (ended_at IS NOT NULL)::int, ended_at = NULL"
                f" WHERE {_KEY}",
                (length + len(batch), last if newest is None else newest, now_ms(), *key),
            )
        return length + len(batch)

    def read(self, key: SessionKey, start: int = 0, stop: int | None = None) -> list[Message]:
        with self._tables.transaction() as conn:
            lo, hi = start, stop
            if start < 0 or (stop is not None and stop < 0):
                lo, hi, _ = slice(start, stop).indices(self._length(conn, key))
            rows = conn.execute(
                f"SELECT body FROM {self._messages} WHERE {_KEY} AND seq >= %s AND seq < %s"
                " ORDER BY seq",
                (*key, lo, hi if hi is not None else 2**63 - 1),
            ).fetchall()
        return [Message.model_validate_json(body) for (body,) in rows]

    def _length(self, conn: Connection, key: SessionKey) -> int:
        row = conn.execute(f"SELECT length FROM {self._states} WHERE {_KEY}", key).fetchone()
        return int(row[0]) if row else 0

    def length(self, key: SessionKey) -> int:
        with self._tables.transaction() as conn:
            return self._length(conn, key)

    def state(self, key: SessionKey) -> SessionState:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT state, revision, ended_at FROM {self._states} WHERE {_KEY}", key
            ).fetchone()
        return _load_state(*row) if row else SessionState()

    def save_state(self, key: SessionKey, state: SessionState) -> SessionState:
        saved = state.model_copy(update={"revision": state.revision + 1})
        with self._tables.transaction() as conn:
            _, _, current = self._locked(conn, key)
            if current != state.revision:
                raise ConflictError(
                    f"session {key.session_id!r} state changed (revision "
                    f"{current}, not {state.revision})"
                )
            conn.execute(
                f"UPDATE {self._states} SET ended_at = %s, revision = %s, state = %s,"
                f" extracted_upto = %s WHERE {_KEY}",
                (saved.ended_at, saved.revision, _state_json(saved), saved.extracted_upto, *key),
            )
        return saved

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionInfo]:
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT session_id, length, updated_at, ended_at FROM {self._states}"
                f" WHERE {_USER} ORDER BY updated_at DESC, session_id",
                (tenant_id, user_id),
            ).fetchall()
        return [SessionInfo(s, int(n), int(at), ended) for s, n, at, ended in rows]

    def idle(self, before_ms: int, limit: int = 100) -> list[SessionKey]:
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT tenant_id, user_id, session_id FROM {self._states}"
                " WHERE ended_at IS NULL AND length > 0 AND updated_at < %s"
                " ORDER BY updated_at, tenant_id, user_id, session_id LIMIT %s",
                (before_ms, limit),
            ).fetchall()
        return [SessionKey(*row) for row in rows]

    def unextracted(self, limit: int = 10_000) -> list[SessionKey]:
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT tenant_id, user_id, session_id FROM {self._states}"
                " WHERE ended_at IS NULL AND length > extracted_upto"
                " ORDER BY updated_at LIMIT %s",
                (limit,),
            ).fetchall()
        return [SessionKey(*row) for row in rows]

    def delete(self, key: SessionKey) -> bool:
        with self._tables.transaction() as conn:
            conn.execute(f"DELETE FROM {self._messages} WHERE {_KEY}", key)
            gone = conn.execute(f"DELETE FROM {self._states} WHERE {_KEY}", key)
            return gone.rowcount > 0

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._tables.transaction() as conn:
            conn.execute(f"DELETE FROM {self._messages} WHERE {_USER}", (tenant_id, user_id))
            gone = conn.execute(f"DELETE FROM {self._states} WHERE {_USER}", (tenant_id, user_id))
            return int(gone.rowcount)

    def get_text(self, tenant_id: str, name: str) -> str | None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT text FROM {self._texts} WHERE tenant_id = %s AND name = %s",
                (tenant_id, name),
            ).fetchone()
        return str(row[0]) if row else None

    def put_text(self, tenant_id: str, name: str, text: str) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"INSERT INTO {self._texts} VALUES (%s, %s, %s)"
                " ON CONFLICT (tenant_id, name) DO UPDATE SET text = excluded.text",
                (tenant_id, name, text),
            )

    def delete_text(self, tenant_id: str, name: str) -> bool:
        with self._tables.transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._texts} WHERE tenant_id = %s AND name = %s",
                (tenant_id, name),
            )
            return cursor.rowcount > 0

    def close(self) -> None:
        self._tables.close()

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self._tables.database!r})"


__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE", "PostgresSessionStore"]
