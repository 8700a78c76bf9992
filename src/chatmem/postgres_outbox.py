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
- **Idempotent batches** (the id derives from the messages, ``ON CONFLICT DO NOTHING``),
  **dead batches kept** for ``requeue``.

Times are the workers' clocks (milliseconds), as in SQLite, so replicas' clocks should agree
to well under a lease.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from chatmem.errors import ValidationError
from chatmem.messages import Message, SessionKey
from chatmem.stores.postgres_db import Connection, PostgresDatabase, PostgresTables
from chatmem.worker import (
    _COLUMNS,
    _ERROR_CHARS,
    _LOST,
    Batch,
    BatchState,
    Clock,
    Outbox,
    RetryPolicy,
    _batch_of,
    _messages_json,
    _new_lease,
    after_failure,
    batch_id_for,
    lease_is_orphaned,
)

logger = logging.getLogger("chatmem.worker")

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

# Each user's earliest unfinished batch, when it is due or its lease ran out; a row another
# claim holds is skipped (the SQL form of ``claimable``).
_CLAIMABLE = """
    SELECT {columns}, lease_until FROM {schema}.extraction_batches AS b
    WHERE b.state IN ('pending', 'leased')
      AND b.seq = (
          SELECT MIN(o.seq) FROM {schema}.extraction_batches AS o
          WHERE o.tenant_id = b.tenant_id AND o.user_id = b.user_id
            AND o.state IN ('pending', 'leased'))
      AND ((b.state = 'pending' AND b.next_attempt_at <= %s)
           OR (b.state = 'leased' AND b.lease_until <= %s))
    ORDER BY b.next_attempt_at, b.seq
    LIMIT %s
    FOR UPDATE OF b SKIP LOCKED
"""

#: This host, as the leases taken here name it.
HOST = socket.gethostname().replace("/", "_") or "localhost"


def host_lease() -> str:
    """A lease id naming this host and process: ``host/pid.token:random``."""
    return f"{HOST}/{_new_lease()}"


def lease_of_dead_local_process(lease: str | None) -> bool:
    """Whether ``lease`` was taken on this host by a process that is gone."""
    host, sep, rest = (lease or "").partition("/")
    return bool(sep) and host == HOST and lease_is_orphaned(rest)


class PostgresOutbox(Outbox):
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
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._tables = PostgresTables(
            database, MIGRATIONS, table=MIGRATIONS_TABLE, what="PostgreSQL outbox"
        )
        self._t = f"{self._tables.schema}.extraction_batches"

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def enqueue(self, key: SessionKey, messages: Sequence[Message]) -> str:
        batch_id = batch_id_for(key, messages)
        body = _messages_json(messages)
        now = self._now()
        with self._tables.transaction() as conn:
            conn.execute(
                f"INSERT INTO {self._t} (batch_id, tenant_id, user_id, session_id, messages,"
                " state, attempts, next_attempt_at, enqueued_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, 'pending', 0, %s, %s, %s)"
                " ON CONFLICT (batch_id) DO NOTHING",
                (batch_id, *key, body, now, now, now),
            )
        return batch_id

    def claim(self, limit: int = 1) -> list[Batch]:
        if limit < 1:
            return []
        now = self._now()
        query = _CLAIMABLE.format(columns=_COLUMNS, schema=self._tables.schema)
        with self._tables.transaction() as conn:
            rows = conn.execute(query, (now, now, limit)).fetchall()
            taken = (self._take(conn, _batch_of(row), now) for row in rows)
            return [batch for batch in taken if batch is not None]

    def _take(self, conn: Connection, batch: Batch, now: int) -> Batch | None:
        if batch.state is BatchState.LEASED and batch.attempts >= self.retry.max_attempts:
            conn.execute(
                f"UPDATE {self._t} SET state = 'dead', lease = NULL, last_error = %s,"
                " updated_at = %s WHERE batch_id = %s",
                (_LOST, now, batch.batch_id),
            )
            logger.warning("batch %s is dead: %s", batch.batch_id, _LOST)
            return None
        lease = host_lease()
        conn.execute(
            f"UPDATE {self._t} SET state = 'leased', attempts = attempts + 1, lease = %s,"
            " lease_until = %s, updated_at = %s WHERE batch_id = %s",
            (lease, now + int(self.retry.lease_s * 1000), now, batch.batch_id),
        )
        return replace(batch, state=BatchState.LEASED, attempts=batch.attempts + 1, lease=lease)

    def complete(self, batch_id: str) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"UPDATE {self._t} SET state = 'done', lease = NULL, lease_until = NULL,"
                " updated_at = %s WHERE batch_id = %s",
                (self._now(), batch_id),
            )

    def renew(self, leases: Mapping[str, str]) -> int:
        if not leases:
            return 0
        until = self._now() + int(self.retry.lease_s * 1000)
        renewed = 0
        with self._tables.transaction() as conn:
            for batch_id, lease in sorted(leases.items()):
                cursor = conn.execute(
                    f"UPDATE {self._t} SET lease_until = %s"
                    " WHERE batch_id = %s AND state = 'leased' AND lease = %s",
                    (until, batch_id, lease),
                )
                renewed += cursor.rowcount
        return renewed

    def reclaim_orphaned(self) -> int:
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT batch_id, lease FROM {self._t} WHERE state = 'leased'"
            ).fetchall()
            orphans = [(i, lease) for i, lease in rows if lease_of_dead_local_process(lease)]
            for batch_id, lease in orphans:
                conn.execute(
                    f"UPDATE {self._t} SET lease_until = 0"
                    " WHERE batch_id = %s AND state = 'leased' AND lease = %s",
                    (batch_id, lease),
                )
        if orphans:
            logger.info("reclaimed %d batches leased by workers that are gone", len(orphans))
        return len(orphans)

    def fail(self, batch_id: str, error: str, *, lease: str | None = None) -> BatchState:
        now = self._now()
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT state, attempts, lease FROM {self._t} WHERE batch_id = %s FOR UPDATE",
                (batch_id,),
            ).fetchone()
            if row is None:
                raise ValidationError(f"no batch {batch_id!r}", field="batch_id")
            state, attempts, held_by = BatchState(row[0]), int(row[1]), row[2]
            if state is not BatchState.LEASED or (lease and held_by != lease):
                return state
            state, due = after_failure(attempts, now, self.retry)
            conn.execute(
                f"UPDATE {self._t} SET state = %s, next_attempt_at = %s, last_error = %s,"
                " lease = NULL, lease_until = NULL, updated_at = %s WHERE batch_id = %s",
                (state.value, due, error[:_ERROR_CHARS], now, batch_id),
            )
            return state

    def requeue(self, batch_id: str) -> None:
        now = self._now()
        with self._tables.transaction() as conn:
            conn.execute(
                f"UPDATE {self._t} SET state = 'pending', attempts = 0, next_attempt_at = %s,"
                " updated_at = %s WHERE batch_id = %s AND state = 'dead'",
                (now, now, batch_id),
            )

    def get(self, batch_id: str) -> Batch | None:
        with self._tables.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._t} WHERE batch_id = %s", (batch_id,)
            ).fetchone()
        return _batch_of(row) if row else None

    def batches(self, state: BatchState | None = None, limit: int = 100) -> list[Batch]:
        where, params = ("WHERE state = %s", [state.value]) if state else ("", [])
        with self._tables.transaction() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._t} {where} ORDER BY seq LIMIT %s",
                [*params, limit],
            ).fetchall()
        return [_batch_of(row) for row in rows]

    def discard_user(self, tenant_id: str, user_id: str) -> int:
        with self._tables.transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._t} WHERE tenant_id = %s AND user_id = %s",
                (tenant_id, user_id),
            )
            return int(cursor.rowcount)

    def counts(self) -> dict[BatchState, int]:
        with self._tables.transaction() as conn:
            rows = conn.execute(f"SELECT state, COUNT(*) FROM {self._t} GROUP BY state").fetchall()
        return {**dict.fromkeys(BatchState, 0), **{BatchState(s): int(n) for s, n in rows}}

    def close(self) -> None:
        self._tables.close()

    def __repr__(self) -> str:
        return f"PostgresOutbox({self._tables.database!r})"


__all__ = [
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "PostgresOutbox",
    "host_lease",
    "lease_of_dead_local_process",
]
