"""The extraction outbox in a SQLite file: its schema, its migrations, its transactions.

One file's write lock keeps the outbox's guarantees (see :mod:`chatmem.worker`): a claim
runs in one ``BEGIN IMMEDIATE`` transaction, so two claims never take the same user's head.
Everything else is :class:`~chatmem.worker.sql_outbox.SQLOutbox`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from chatmem.stores.sqlite import SQLiteFile
from chatmem.worker.batch import RetryPolicy
from chatmem.worker.outbox import Clock
from chatmem.worker.sql_outbox import Connection, OutboxSQL, SQLOutbox

T = TypeVar("T")

#: The outbox's migrations table (the stores keep their own in the same file).
MIGRATIONS_TABLE = "chatmem_outbox_migrations"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE extraction_batches (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        batch_id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        messages TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        lease TEXT,
        lease_until INTEGER,
        last_error TEXT,
        enqueued_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX extraction_batches_open ON extraction_batches (tenant_id, user_id, seq)
        WHERE state IN ('pending', 'leased');
    CREATE INDEX extraction_batches_by_state ON extraction_batches (state, seq);
    """,
)

_SQL = OutboxSQL.for_table("extraction_batches")


class SQLiteOutbox(SQLOutbox):
    """An outbox in a SQLite file (WAL), safe for many threads and processes. It keeps its
    own tables and migrations table, so it may share the file of the SQLite stores."""

    def __init__(
        self,
        path: str | Path,
        *,
        retry: RetryPolicy | None = None,
        clock: Clock = time.time,
        synchronous: str = "NORMAL",
    ) -> None:
        super().__init__(_SQL, retry=retry, clock=clock)
        self.path = str(path)
        self._file = SQLiteFile(path, synchronous=synchronous)
        self._file.migrate(MIGRATIONS, table=MIGRATIONS_TABLE)

    def close(self) -> None:
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteOutbox({self.path!r})"

    def _write(self, work: Callable[[Connection], T]) -> T:
        return self._file.write(work)

    def _read(self, work: Callable[[Connection], T]) -> T:
        with self._file.read() as conn:
            return work(conn)


__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE", "SQLiteOutbox"]
