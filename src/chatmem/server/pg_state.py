"""The service's own state in PostgreSQL (issue 15): API keys, response chains and webhook
deliveries, shared by every replica of a deployment whose memory store is PostgreSQL.

Each is a table set of the ``chatmem_service`` schema (see
:mod:`chatmem.stores.postgres_db`) with its own append-only migrations table, and implements
the interface its SQLite twin does (``KeyTable``, ``ResponseTable``, ``Deliveries``). The
outbox (:mod:`chatmem.worker.postgres`) and sessions (:mod:`chatmem.sessions.postgres`) live
in the same schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatmem.server.auth import KeyInfo, row_info
from chatmem.server.response_store import StoredResponse, response_row, stored_response
from chatmem.server.webhooks import DeliveryClaim
from chatmem.stores.postgres_db import SERVICE_SCHEMA, PostgresDatabase, PostgresTables

if TYPE_CHECKING:
    from chatmem.sessions.postgres import PostgresSessionStore
    from chatmem.worker.postgres import PostgresOutbox

KEY_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.api_keys (
        key_id TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        roles TEXT NOT NULL,
        name TEXT,
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
    );
    CREATE INDEX api_keys_by_tenant ON {schema}.api_keys (tenant_id);
    """,
)

RESPONSE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.responses (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        response_id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT,
        session_id TEXT NOT NULL,
        messages TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX responses_by_tenant ON {schema}.responses (tenant_id, seq);
    CREATE INDEX responses_by_user ON {schema}.responses (tenant_id, user_id);
    """,
    # The ACL of SPEC L7, as in chatmem.server.response_store.MIGRATIONS ({{ is one brace).
    """
    ALTER TABLE {schema}.responses ADD COLUMN acl TEXT NOT NULL DEFAULT '[]';
    UPDATE {schema}.responses SET acl = '[["admin"]]' WHERE body LIKE '%"memories": [{{%'
    """,
)

WEBHOOK_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.webhook_deliveries (
        id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at BIGINT NOT NULL,
        leased_until BIGINT,
        state TEXT NOT NULL DEFAULT 'pending',
        error TEXT
    );
    CREATE INDEX webhook_deliveries_due ON {schema}.webhook_deliveries (state, url, next_at);
    """,
)

#: How long a claimed delivery stays with its sender beyond the request's own timeout.
_LEASE_MS = 30_000
_KEY_COLUMNS = "key_id, tenant_id, roles, name, created_at, revoked_at"
_RESPONSE_COLUMNS = "response_id, tenant_id, user_id, session_id, messages, body, created_at, acl"
_PLACES = ", ".join(["%s"] * len(_RESPONSE_COLUMNS.split(",")))


class PostgresKeyTable:
    """API-made keys (``chatmem.server.auth.KeyTable``) in PostgreSQL."""

    def __init__(self, database: PostgresDatabase | str) -> None:
        self._tables = PostgresTables(
            database, KEY_MIGRATIONS, table="key_migrations", what="PostgreSQL key store"
        )
        self._t = f"{self._tables.schema}.api_keys"

    def insert(self, info: KeyInfo, hashed: str) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"INSERT INTO {self._t} (key_id, digest, tenant_id, roles, name, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (info.key_id, hashed, info.tenant_id, ",".join(info.roles), info.name,
                 info.created_at),
            )  # fmt: skip

    def revoke(self, key_id: str, at_ms: int) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"UPDATE {self._t} SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (at_ms, key_id),
            )

    def rows(self) -> list[KeyInfo]:
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM {self._t} ORDER BY created_at, key_id"
            ).fetchall()
        return [row_info(row) for row in rows]

    def lookup(self, hashed: str) -> KeyInfo | None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM {self._t} WHERE digest = %s", (hashed,)
            ).fetchone()
        return None if row is None else row_info(row)

    def close(self) -> None:
        self._tables.close()


class PostgresResponses:
    """Response chains (``chatmem.server.response_store.ResponseTable``) in PostgreSQL, so
    a chain continues on whichever replica the balancer picks."""

    def __init__(self, database: PostgresDatabase | str) -> None:
        self._tables = PostgresTables(
            database,
            RESPONSE_MIGRATIONS,
            table="response_migrations",
            what="PostgreSQL response store",
        )
        self._t = f"{self._tables.schema}.responses"

    def put(self, response: StoredResponse, limit: int) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"INSERT INTO {self._t} ({_RESPONSE_COLUMNS}) VALUES ({_PLACES})",
                response_row(response),
            )
            conn.execute(
                f"DELETE FROM {self._t} WHERE tenant_id = %s AND seq IN (SELECT seq FROM"
                f" {self._t} WHERE tenant_id = %s ORDER BY seq DESC OFFSET %s)",
                (response.tenant_id, response.tenant_id, limit),
            )

    def get(self, tenant_id: str, response_id: str) -> StoredResponse | None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT {_RESPONSE_COLUMNS} FROM {self._t}"
                " WHERE response_id = %s AND tenant_id = %s",
                (response_id, tenant_id),
            ).fetchone()
        return None if row is None else stored_response(row)

    def delete(self, tenant_id: str, response_id: str) -> bool:
        with self._tables.transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._t} WHERE response_id = %s AND tenant_id = %s",
                (response_id, tenant_id),
            )
            return cursor.rowcount > 0

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._tables.transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._t} WHERE tenant_id = %s AND user_id = %s",
                (tenant_id, user_id),
            )
            return int(cursor.rowcount)

    def count(self, tenant_id: str) -> int:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {self._t} WHERE tenant_id = %s", (tenant_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._tables.close()


class PostgresDeliveries:
    """Pending webhook deliveries to one URL (``chatmem.server.webhooks.Deliveries``) in
    PostgreSQL: every replica's sender claims from one queue, a row at a time
    (``FOR UPDATE SKIP LOCKED``), so each event is sent by one of them."""

    def __init__(self, database: PostgresDatabase | str, url: str) -> None:
        self._tables = PostgresTables(
            database, WEBHOOK_MIGRATIONS, table="webhook_migrations", what="PostgreSQL webhooks"
        )
        self._t = f"{self._tables.schema}.webhook_deliveries"
        self._url = url

    def add(self, event_id: str, body: bytes, now: float) -> bool:
        with self._tables.transaction() as conn:
            conn.execute(
                f"INSERT INTO {self._t} (id, url, body, next_at) VALUES (%s, %s, %s, %s)",
                (event_id, self._url, body.decode(), int(now * 1000)),
            )
        return True

    def claim(self, now: float, lease_s: float) -> DeliveryClaim | None:
        moment = int(now * 1000)
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT id, body, attempts FROM {self._t} WHERE state = 'pending' AND url = %s"
                " AND next_at <= %s AND (leased_until IS NULL OR leased_until < %s)"
                " ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED",
                (self._url, moment, moment),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                f"UPDATE {self._t} SET leased_until = %s WHERE id = %s",
                (moment + int(lease_s * 1000) + _LEASE_MS, row[0]),
            )
        return DeliveryClaim(str(row[0]), str(row[1]).encode(), int(row[2]))

    def retry(self, claim: DeliveryClaim, at: float) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"UPDATE {self._t} SET attempts = %s, next_at = %s, leased_until = NULL"
                " WHERE id = %s",
                (claim.attempts + 1, int(at * 1000), claim.event_id),
            )

    def end(self, claim: DeliveryClaim, error: str | None) -> None:
        with self._tables.transaction() as conn:
            if error is None:
                conn.execute(f"DELETE FROM {self._t} WHERE id = %s", (claim.event_id,))
                return
            conn.execute(
                f"UPDATE {self._t} SET state = 'failed', attempts = %s, error = %s,"
                " leased_until = NULL WHERE id = %s",
                (claim.attempts + 1, error, claim.event_id),
            )

    def next_due(self) -> float | None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT MIN(next_at) FROM {self._t} WHERE state = 'pending' AND url = %s",
                (self._url,),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0]) / 1000

    def pending(self) -> int:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {self._t} WHERE state = 'pending' AND url = %s",
                (self._url,),
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._tables.close()


class PostgresState:
    """One replica's connection to the shared state: one pool, and each part of the state
    made on it. ``close`` after every part is closed."""

    def __init__(self, conninfo: str, *, schema: str = SERVICE_SCHEMA, pool_size: int = 8) -> None:
        self.database = PostgresDatabase(conninfo, schema=schema, pool_size=pool_size)

    def keys(self) -> PostgresKeyTable:
        return PostgresKeyTable(self.database)

    def responses(self) -> PostgresResponses:
        return PostgresResponses(self.database)

    def deliveries(self, url: str) -> PostgresDeliveries:
        return PostgresDeliveries(self.database, url)

    def outbox(self) -> PostgresOutbox:
        from chatmem.worker.postgres import PostgresOutbox

        return PostgresOutbox(self.database)

    def sessions(self) -> PostgresSessionStore:
        from chatmem.sessions.postgres import PostgresSessionStore

        return PostgresSessionStore(self.database)

    def close(self) -> None:
        self.database.close()

    def __repr__(self) -> str:
        return f"PostgresState({self.database!r})"


__all__ = [
    "KEY_MIGRATIONS",
    "RESPONSE_MIGRATIONS",
    "WEBHOOK_MIGRATIONS",
    "PostgresDeliveries",
    "PostgresKeyTable",
    "PostgresResponses",
    "PostgresState",
]
