"""The extraction outbox in PostgreSQL (issue 15): the queue that several replicas share.

The same guarantees as the SQLite outbox (see :mod:`chatmem.worker`), kept by PostgreSQL
instead of one file's write lock:

- **Per-user order.** A claim takes each user's earliest unfinished batch only, with
  ``SELECT … FOR UPDATE SKIP LOCKED``: a head another worker is claiming at that moment is
  skipped, never the batch behind it (it is not its user's head), so one user's batches
  never run at once on any replica.
- **Leases.** A claim leases a batch for ``retry.lease_s``; live workers renew theirs, and a
  lease that runs out (its replica died) lets any replica claim the batch again. A lease
  names its host (``host/pid.token:random``), so ``reclaim_orphaned`` expires at once only
  the leases of this host's dead processes; another machine's pids mean nothing here.
- **Idempotent batches** (the id derives from the session and the message a batch starts at,
  ``ON CONFLICT DO NOTHING``: replicas racing to queue from one mark make one batch),
  **dead batches kept** for ``requeue``.

Times are the workers' clocks (milliseconds), as in SQLite, so replicas' clocks should agree
to well under a lease.

The outbox itself is :class:`~chatmem.worker.sql_outbox.SQLOutbox`, as for SQLite; this
module gives it PostgreSQL's schema, its statements (``%s`` parameters, rows locked), its
transactions, and leases that name their host.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

from chatmem.stores.postgres_db import PostgresDatabase, PostgresTables
from chatmem.worker.batch import RetryPolicy
from chatmem.worker.outbox import Clock
from chatmem.worker.rules import lease_is_orphaned, new_lease
from chatmem.worker.sql_outbox import Connection, OutboxSQL, SQLOutbox

T = TypeVar("T")

MIGRATIONS_TABLE = "outbox_migrations"
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.extraction_batches (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        batch_id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        messages TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease TEXT,
        lease_until BIGINT,
        last_error TEXT,
        enqueued_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX extraction_batches_open ON {schema}.extraction_batches
        (tenant_id, user_id, seq) WHERE state IN ('pending', 'leased');
    CREATE INDEX extraction_batches_by_state ON {schema}.extraction_batches (state, seq);
    """,
)

#: This host, as the leases taken here name it.
HOST = socket.gethostname().replace("/", "_") or "localhost"


def host_lease() -> str:
    """A lease id naming this host and process: ``host/pid.token:random``."""
    return f"{HOST}/{new_lease()}"


def lease_of_dead_local_process(lease: str | None) -> bool:
    """Whether ``lease`` was taken on this host by a process that is gone."""
    host, sep, rest = (lease or "").partition("/")
    return bool(sep) and host == HOST and lease_is_orphaned(rest)


class PostgresOutbox(SQLOutbox):
    """An outbox in PostgreSQL, shared by every replica (see the module docstring).

    ``database`` is a conninfo (the outbox opens and closes its own pool) or a
    :class:`PostgresDatabase` shared with the rest of the service state.
    """

    def __init__(
        self,
        database: PostgresDatabase | str,
        *,
        retry: RetryPolicy | None = None,
        clock: Clock = time.time,
    ) -> None:
        tables = PostgresTables(
            database, MIGRATIONS, table=MIGRATIONS_TABLE, what="PostgreSQL outbox"
        )
        sql = OutboxSQL.for_table(f"{tables.schema}.extraction_batches", mark="%s", lock_rows=True)
        super().__init__(sql, retry=retry, clock=clock)
        self._tables = tables

    def close(self) -> None:
        self._tables.close()

    def __repr__(self) -> str:
        return f"PostgresOutbox({self._tables.database!r})"

    def _write(self, work: Callable[[Connection], T]) -> T:
        with self._tables.transaction() as conn:
            return work(conn)

    def _read(self, work: Callable[[Connection], T]) -> T:
        return self._write(work)

    def _new_lease(self) -> str:
        return host_lease()

    def _orphaned(self, lease: str | None) -> bool:
        return lease_of_dead_local_process(lease)


__all__ = [
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "PostgresOutbox",
    "host_lease",
    "lease_of_dead_local_process",
]
