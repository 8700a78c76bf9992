"""The outbox kept in an SQL table, written once for SQLite and PostgreSQL.

:class:`SQLOutbox` keeps the batches as rows of ``extraction_batches`` and moves them by the
rules of :mod:`chatmem.worker.rules`. A backend gives it only what differs: its statements
(:class:`OutboxSQL`: the table's name, the parameter mark, and whether a claim locks the rows
it reads), its transactions, and how its leases name their process.

Times are the workers' clocks, in milliseconds since the epoch.
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from chatmem.errors import ValidationError
from chatmem.messages import Message, SessionKey
from chatmem.worker.batch import Batch, BatchState, RetryPolicy, batch_id_for
from chatmem.worker.outbox import Clock, Outbox
from chatmem.worker.rules import (
    claimed,
    failed,
    lease_end,
    lease_is_orphaned,
    new_lease,
)

logger = logging.getLogger("chatmem.worker")

T = TypeVar("T")

#: The columns a batch is read from, in the order :func:`batch_of` takes them.
COLUMNS = (
    "batch_id, tenant_id, user_id, session_id, messages, state, attempts, next_attempt_at,"
    " last_error, lease, enqueued_at"
)

# Each user's earliest unfinished batch, when it is due or its lease ran out (the SQL form
# of ``claimable``); ``{lock}`` lets a database that locks rows skip those another claim
# holds, never the batch behind them (it is not its user's head).
_CLAIMABLE = """
    SELECT {columns}, lease_until FROM {t} AS b
    WHERE b.state IN ('pending', 'leased')
      AND b.seq = (
          SELECT MIN(o.seq) FROM {t} AS o
          WHERE o.tenant_id = b.tenant_id AND o.user_id = b.user_id
            AND o.state IN ('pending', 'leased'))
      AND ((b.state = 'pending' AND b.next_attempt_at <= ?)
           OR (b.state = 'leased' AND b.lease_until <= ?))
    ORDER BY b.next_attempt_at, b.seq
    LIMIT ?
    {lock}"""


@dataclass(frozen=True)
class OutboxSQL:
    """The statements of an outbox table in one dialect. Written once, with ``?`` for a
    parameter: :meth:`for_table` gives them a table name and the dialect's mark."""

    insert: str
    claimable: str
    lease: str
    bury: str
    complete: str
    renew: str
    leased: str
    expire: str
    one: str
    one_to_fail: str
    fail: str
    requeue: str
    batches: str
    batches_in_state: str
    discard: str
    counts: str

    @classmethod
    def for_table(cls, table: str, *, mark: str = "?", lock_rows: bool = False) -> OutboxSQL:
        """The statements on ``table``, with ``mark`` for a parameter; ``lock_rows`` for a
        database where claims lock the rows they take (``FOR UPDATE``)."""
        claim_lock, row_lock = (
            ("FOR UPDATE OF b SKIP LOCKED", " FOR UPDATE") if lock_rows else ("", "")
        )
        one = f"SELECT {COLUMNS} FROM {table} WHERE batch_id = ?"
        statements = cls(
            insert=f"INSERT INTO {table} (batch_id, tenant_id, user_id, session_id, messages,"
            " state, attempts, next_attempt_at, enqueued_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?) ON CONFLICT (batch_id) DO NOTHING",
            claimable=_CLAIMABLE.format(columns=COLUMNS, t=table, lock=claim_lock),
            lease=f"UPDATE {table} SET state = 'leased', attempts = attempts + 1, lease = ?,"
            " lease_until = ?, updated_at = ? WHERE batch_id = ?",
            bury=f"UPDATE {table} SET state = 'dead', lease = NULL, last_error = ?,"
            " updated_at = ? WHERE batch_id = ?",
            complete=f"UPDATE {table} SET state = 'done', lease = NULL, lease_until = NULL,"
            " updated_at = ? WHERE batch_id = ?",
            renew=f"UPDATE {table} SET lease_until = ?"
            " WHERE batch_id = ? AND state = 'leased' AND lease = ?",
            leased=f"SELECT batch_id, lease FROM {table} WHERE state = 'leased'",
            expire=f"UPDATE {table} SET lease_until = 0"
            " WHERE batch_id = ? AND state = 'leased' AND lease = ?",
            one=one,
            one_to_fail=one + row_lock,
            fail=f"UPDATE {table} SET state = ?, next_attempt_at = ?, last_error = ?,"
            " lease = NULL, lease_until = NULL, updated_at = ? WHERE batch_id = ?",
            requeue=f"UPDATE {table} SET state = 'pending', attempts = 0, next_attempt_at = ?,"
            " updated_at = ? WHERE batch_id = ? AND state = 'dead'",
            batches=f"SELECT {COLUMNS} FROM {table} ORDER BY seq LIMIT ?",
            batches_in_state=f"SELECT {COLUMNS} FROM {table} WHERE state = ? ORDER BY seq LIMIT ?",
            discard=f"DELETE FROM {table} WHERE tenant_id = ? AND user_id = ?",
            counts=f"SELECT state, COUNT(*) FROM {table} GROUP BY state",
        )
        if mark == "?":
            return statements
        return cls(**{name: text.replace("?", mark) for name, text in vars(statements).items()})


def messages_json(messages: Sequence[Message]) -> str:
    """The ``messages`` column of a batch."""
    return json.dumps([m.model_dump(mode="json", exclude_none=True) for m in messages])


def batch_of(row: Sequence[Any]) -> Batch:
    """A batch from a row that starts with :data:`COLUMNS`."""
    batch_id, tenant, user, session, messages, state, attempts, due, error, lease, at = row[:11]
    return Batch(
        batch_id=batch_id,
        key=SessionKey(tenant, user, session),
        messages=[Message.model_validate(item) for item in json.loads(messages)],
        state=BatchState(state),
        attempts=int(attempts),
        next_attempt_at=int(due),
        last_error=error,
        lease=lease,
        enqueued_at=int(at),
    )


class Cursor(Protocol):
    """What the outbox reads of a statement's result (sqlite3's and psycopg's cursors)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """A connection in a transaction (sqlite3's and psycopg's)."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> Cursor: ...


class SQLOutbox(Outbox):
    """An outbox in the table of :attr:`sql` (see the module docstring)."""

    def __init__(self, sql: OutboxSQL, *, retry: RetryPolicy | None, clock: Clock) -> None:
        self.retry = retry or RetryPolicy()
        self.sql = sql
        self._clock = clock

    @abstractmethod
    def _write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction."""

    @abstractmethod
    def _read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on a connection that only reads."""

    def _new_lease(self) -> str:
        """A new lease id, naming this process."""
        return new_lease()

    def _orphaned(self, lease: str | None) -> bool:
        """Whether ``lease`` is held by a process known to be gone."""
        return lease_is_orphaned(lease)

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def enqueue(self, key: SessionKey, messages: Sequence[Message]) -> str:
        batch_id = batch_id_for(key, messages)
        now = self._now()
        row = (batch_id, *key, messages_json(messages), now, now, now)
        self._write(lambda conn: conn.execute(self.sql.insert, row))
        return batch_id

    def claim(self, limit: int = 1) -> list[Batch]:
        if limit < 1:
            return []
        now = self._now()

        def work(conn: Connection) -> list[Batch]:
            rows = conn.execute(self.sql.claimable, (now, now, limit)).fetchall()
            taken = (self._take(conn, batch_of(row), now) for row in rows)
            return [batch for batch in taken if batch is not None]

        return self._write(work)

    def _take(self, conn: Connection, batch: Batch, now: int) -> Batch | None:
        taken = claimed(batch, self._new_lease(), self.retry)
        if taken.state is BatchState.DEAD:
            conn.execute(self.sql.bury, (taken.last_error, now, batch.batch_id))
            logger.warning("batch %s is dead: %s", batch.batch_id, taken.last_error)
            return None
        until = lease_end(now, self.retry)
        conn.execute(self.sql.lease, (taken.lease, until, now, batch.batch_id))
        return taken

    def complete(self, batch_id: str) -> None:
        params = (self._now(), batch_id)
        self._write(lambda conn: conn.execute(self.sql.complete, params))

    def renew(self, leases: Mapping[str, str]) -> int:
        if not leases:
            return 0
        until = lease_end(self._now(), self.retry)

        def work(conn: Connection) -> int:
            renewed = 0
            for batch_id, lease in sorted(leases.items()):  # one order: no deadlock
                renewed += conn.execute(self.sql.renew, (until, batch_id, lease)).rowcount
            return renewed

        return self._write(work)

    def reclaim_orphaned(self) -> int:
        rows = self._read(lambda conn: conn.execute(self.sql.leased).fetchall())
        orphans = [(batch_id, lease) for batch_id, lease in rows if self._orphaned(lease)]

        def work(conn: Connection) -> int:
            for batch_id, lease in orphans:
                conn.execute(self.sql.expire, (batch_id, lease))
            return len(orphans)

        reclaimed = self._write(work) if orphans else 0
        if reclaimed:
            logger.info("reclaimed %d batches leased by workers that are gone", reclaimed)
        return reclaimed

    def fail(self, batch_id: str, error: str, *, lease: str | None = None) -> BatchState:
        now = self._now()

        def work(conn: Connection) -> BatchState:
            row = conn.execute(self.sql.one_to_fail, (batch_id,)).fetchone()
            if row is None:
                raise ValidationError(f"no batch {batch_id!r}", field="batch_id")
            batch = batch_of(row)
            after = failed(batch, error, lease=lease, now_ms=now, retry=self.retry)
            if after is None:
                return batch.state
            params = (after.state.value, after.next_attempt_at, after.last_error, now, batch_id)
            conn.execute(self.sql.fail, params)
            return after.state

        return self._write(work)

    def requeue(self, batch_id: str) -> None:
        now = self._now()
        self._write(lambda conn: conn.execute(self.sql.requeue, (now, now, batch_id)))

    def get(self, batch_id: str) -> Batch | None:
        row = self._read(lambda conn: conn.execute(self.sql.one, (batch_id,)).fetchone())
        return batch_of(row) if row else None

    def batches(self, state: BatchState | None = None, limit: int = 100) -> list[Batch]:
        query, params = (
            (self.sql.batches_in_state, (state.value, limit))
            if state
            else (self.sql.batches, (limit,))
        )
        rows = self._read(lambda conn: conn.execute(query, params).fetchall())
        return [batch_of(row) for row in rows]

    def discard_user(self, tenant_id: str, user_id: str) -> int:
        params = (tenant_id, user_id)
        return self._write(lambda conn: int(conn.execute(self.sql.discard, params).rowcount))

    def counts(self) -> dict[BatchState, int]:
        rows = self._read(lambda conn: conn.execute(self.sql.counts).fetchall())
        return {**dict.fromkeys(BatchState, 0), **{BatchState(s): int(n) for s, n in rows}}


__all__ = ["COLUMNS", "Connection", "Cursor", "OutboxSQL", "SQLOutbox", "batch_of", "messages_json"]
