"""Completed responses kept for ``previous_response_id`` chains (SPEC A2), per tenant.

Each stored response holds the whole conversation up to and including its answer (without
the request's ``instructions``, which OpenAI does not carry along a chain), so continuing a
chain reads one row, and dropping a tenant's oldest responses never breaks a newer chain.
A lookup always names the tenant: a response id from another tenant is simply not found.

The table lives in the service database (``service.db``, or PostgreSQL when the memory store
is there) with its own migrations table; a service without a usable database keeps
responses in memory, within ``memory_bytes`` across all tenants (the least recently used
dropped first), since each holds a whole conversation.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chatmem.caches import LRUCache, MiB, size_of
from chatmem.server.visibility import Acl, read_acl
from chatmem.stores.sqlite import SQLiteFile

MIGRATIONS_TABLE = "chatmem_responses_migrations"
#: A stored body whose ``memory.memories`` is not empty (``json.dumps``'s separators).
INJECTED_LIKE = '%"memories": [{%'
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE responses (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        response_id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT,
        session_id TEXT NOT NULL,
        messages TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX responses_by_tenant ON responses (tenant_id, seq);
    """,
    # SPEC L7: what a reader must hold (chatmem.server.visibility). A response kept before
    # this says memories were injected but not their roles: only the admin reads it.
    f"""
    ALTER TABLE responses ADD COLUMN acl TEXT NOT NULL DEFAULT '[]';
    UPDATE responses SET acl = '[["admin"]]' WHERE body LIKE '{INJECTED_LIKE}'
    """,
)


@dataclass(frozen=True)
class StoredResponse:
    """One completed response: whose it is, the conversation through its answer (chat
    messages, oldest first), and the Response object as it was returned."""

    response_id: str
    tenant_id: str
    user_id: str | None
    session_id: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    created_at: int
    #: What a reader must hold to see it or continue it (``chatmem.server.visibility``):
    #: the roles of the restricted memories its answer and its chain were built on.
    acl: Acl = field(default_factory=list)


class ResponseTable(Protocol):
    """Where responses are kept durably: the service's SQLite file, or PostgreSQL shared by
    every replica (:mod:`chatmem.server.pg_state`)."""

    def put(self, response: StoredResponse, limit: int) -> None: ...

    def get(self, tenant_id: str, response_id: str) -> StoredResponse | None: ...

    def delete(self, tenant_id: str, response_id: str) -> bool: ...

    def delete_user(self, tenant_id: str, user_id: str) -> int: ...

    def count(self, tenant_id: str) -> int: ...

    def close(self) -> None: ...


def response_row(response: StoredResponse) -> tuple[Any, ...]:
    """The row of ``response``: id, tenant, user, session, messages, body (JSON), time,
    ACL (JSON)."""
    return (
        response.response_id,
        response.tenant_id,
        response.user_id,
        response.session_id,
        json.dumps(response.messages),
        json.dumps(response.body),
        response.created_at,
        json.dumps(response.acl),
    )


def stored_response(row: Sequence[Any]) -> StoredResponse:
    """A response from a row in ``response_row``'s order."""
    return StoredResponse(
        row[0],
        row[1],
        row[2],
        row[3],
        json.loads(row[4]),
        json.loads(row[5]),
        int(row[6]),
        read_acl(json.loads(row[7])),
    )


class SQLiteResponses:
    """Responses in the service's SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self._file = SQLiteFile(path)
        self._file.migrate(MIGRATIONS, table=MIGRATIONS_TABLE)

    def put(self, response: StoredResponse, limit: int) -> None:
        row, tenant = response_row(response), response.tenant_id

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO responses (response_id, tenant_id, user_id, session_id, messages,"
                " body, created_at, acl) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            conn.execute(
                "DELETE FROM responses WHERE tenant_id = ? AND seq IN (SELECT seq FROM responses"
                " WHERE tenant_id = ? ORDER BY seq DESC LIMIT -1 OFFSET ?)",
                (tenant, tenant, limit),
            )

        self._file.write(insert)

    def get(self, tenant_id: str, response_id: str) -> StoredResponse | None:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT response_id, tenant_id, user_id, session_id, messages, body, created_at,"
                " acl FROM responses WHERE response_id = ? AND tenant_id = ?",
                (response_id, tenant_id),
            ).fetchone()
        return None if row is None else stored_response(row)

    def delete(self, tenant_id: str, response_id: str) -> bool:
        deleted: int = self._file.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM responses WHERE response_id = ? AND tenant_id = ?",
                    (response_id, tenant_id),
                ).rowcount
            )
        )
        return deleted > 0

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        deleted: int = self._file.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM responses WHERE tenant_id = ? AND user_id = ?",
                    (tenant_id, user_id),
                ).rowcount
            )
        )
        return deleted

    def count(self, tenant_id: str) -> int:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM responses WHERE tenant_id = ?", (tenant_id,)
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._file.close()


class ResponseStore:
    """Responses by tenant, at most ``limit`` per tenant (the oldest dropped first), in the
    SQLite file at ``path``, in ``table``, or in memory when both are None."""

    def __init__(
        self,
        path: str | Path | None,
        *,
        limit: int,
        memory_bytes: int = 64 * MiB,
        table: ResponseTable | None = None,
    ) -> None:
        self.limit = limit
        self._file: ResponseTable | None = table
        if table is None and path is not None:
            self._file = SQLiteResponses(path)
        #: In memory: the responses by (tenant, id) within the byte budget, and each
        #: tenant's ids oldest first for its count limit.
        self._memory: LRUCache[tuple[str, str], StoredResponse] = LRUCache(
            memory_bytes, on_evict=self._evicted
        )
        self._order: dict[str, OrderedDict[str, None]] = {}
        self._lock = threading.RLock()

    def _evicted(self, key: tuple[str, str], response: StoredResponse) -> None:
        with self._lock:
            self._forget_order(*key)

    def _forget_order(self, tenant_id: str, response_id: str) -> None:
        order = self._order.get(tenant_id)
        if order is not None:
            order.pop(response_id, None)
            if not order:
                del self._order[tenant_id]

    @property
    def durable(self) -> bool:
        return self._file is not None

    def put(self, response: StoredResponse) -> None:
        """Keep ``response``, then drop the tenant's oldest beyond the limit."""
        if self._file is None:
            tenant = response.tenant_id
            with self._lock:
                if self._memory.put((tenant, response.response_id), response, size_of(response)):
                    self._order.setdefault(tenant, OrderedDict())[response.response_id] = None
                order = self._order.get(tenant, OrderedDict())
                while len(order) > self.limit:
                    oldest, _ = order.popitem(last=False)
                    self._memory.pop((tenant, oldest))
            return
        self._file.put(response, self.limit)

    def get(self, tenant_id: str, response_id: str) -> StoredResponse | None:
        """The tenant's response ``response_id``; None when it has none by that id."""
        if self._file is None:
            return self._memory.get((tenant_id, response_id))
        return self._file.get(tenant_id, response_id)

    def delete(self, tenant_id: str, response_id: str) -> bool:
        """Forget the tenant's response ``response_id``; False when it had none."""
        if self._file is None:
            with self._lock:
                self._forget_order(tenant_id, response_id)
                return self._memory.pop((tenant_id, response_id)) is not None
        return self._file.delete(tenant_id, response_id)

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        """Forget every response of one user of the tenant (a user forgotten leaves no
        conversation behind); returns how many there were."""
        if self._file is None:
            with self._lock:
                gone = [
                    rid
                    for rid in list(self._order.get(tenant_id, ()))
                    if (kept := self._memory.get((tenant_id, rid))) is not None
                    and kept.user_id == user_id
                ]
                for rid in gone:
                    self._forget_order(tenant_id, rid)
                    self._memory.pop((tenant_id, rid))
                return len(gone)
        return self._file.delete_user(tenant_id, user_id)

    def count(self, tenant_id: str) -> int:
        """How many responses the tenant has kept."""
        if self._file is None:
            with self._lock:
                return len(self._order.get(tenant_id, ()))
        return self._file.count(tenant_id)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


__all__ = [
    "INJECTED_LIKE",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "ResponseStore",
    "ResponseTable",
    "SQLiteResponses",
    "StoredResponse",
    "response_row",
    "stored_response",
]
