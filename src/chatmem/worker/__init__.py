"""The durable extraction queue and its worker (SPEC L3, L8, F3, F5, X5).

Extraction never runs on the request path. A request only *enqueues* a batch of messages
into an **outbox** (a table, in the same SQLite file as the stores or another): one short
write. A :class:`Worker`, in a background thread or another process, claims batches, runs
the extractor and the write policy, and marks them done.

The outbox's guarantees:

- **Nothing acknowledged is lost** (F5): ``enqueue`` returns after its row is committed; a
  batch leaves the queue only by ``complete`` (done) or by running out of attempts (dead,
  kept for inspection and ``requeue``).
- **Idempotent enqueue**: a batch's id is derived from its messages' ids, so handing the
  same messages over twice makes one batch.
- **Leases**: ``claim`` leases a batch for ``lease_s``; a worker killed mid-batch leaves
  its lease to expire, and the batch is claimed again. Every claim counts as an attempt,
  so a batch that kills its worker each time ends up dead instead of looping.
- **Per-user order**: a user's batch is claimed only when every earlier batch of that user
  is done or dead, so one user's batches never run at once, whatever the number of workers
  (16 sessions of one user cannot race each other into duplicate memories).
- **Bounded retries**: ``fail`` puts a batch back with exponential backoff, until
  ``max_attempts``.

Applying a batch twice (a crash between the writes and ``complete``) writes nothing twice:
the write policy derives memory ids from (batch id, fact index) and marks what each batch
wrote (see :mod:`chatmem.write_policy`), since the memories may live in another database
than the outbox and cannot share its transaction.

:class:`ExtractionScheduler` decides *when* to enqueue (SPEC L3 triggers): every N user
turns, an explicit preference or instruction in one message, a change of topic, the end of
a session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

import numpy as np

from chatmem.decay import enforce_quota
from chatmem.embeddings.base import Embedder
from chatmem.errors import ChatmemError, LLMError, ValidationError
from chatmem.extraction.base import Extractor
from chatmem.long_term import LongTermMemory
from chatmem.messages import Message, Role, SessionKey
from chatmem.records import Vector
from chatmem.stores.gate import ClosingLock
from chatmem.stores.sqlite import SQLiteFile
from chatmem.write_policy import WritePolicy, WriteReport

try:  # the same module the stores use, so they share one file's locking
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - exercised only where pysqlite3 is absent
    import sqlite3

logger = logging.getLogger("chatmem.worker")

Clock = Callable[[], float]


class BatchState(StrEnum):
    """Where a batch is: waiting, claimed by a worker, applied, or out of attempts."""

    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"


@dataclass(frozen=True)
class RetryPolicy:
    """Leases and retries of the outbox.

    A failed batch waits ``backoff_s * 2 ** (attempts - 1)`` seconds (at most
    ``max_backoff_s``) before its next attempt; after ``max_attempts`` attempts it is dead.
    """

    max_attempts: int = 5
    backoff_s: float = 2.0
    max_backoff_s: float = 600.0
    #: How long a claimed batch is a worker's unless renewed; past it, another worker may
    #: claim it. A running worker renews its leases every third of this, so a slow model
    #: keeps its batch, and a dead worker's batches come back within this time.
    lease_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValidationError("must be at least 1", field="max_attempts")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValidationError("must not be negative", field="backoff_s")
        if self.lease_s <= 0:
            raise ValidationError("must be positive", field="lease_s")


@dataclass(frozen=True)
class Batch:
    """A batch of one session's messages, as the outbox holds it. ``lease`` identifies the
    claim that holds it (None when it is not leased)."""

    batch_id: str
    key: SessionKey
    messages: list[Message]
    state: BatchState = BatchState.PENDING
    attempts: int = 0
    #: When the batch may next be claimed, in milliseconds since the epoch.
    next_attempt_at: int = 0
    last_error: str | None = None
    lease: str | None = None
    enqueued_at: int = 0


# -- pure queue logic ------------------------------------------------------------------------


def batch_id_for(key: SessionKey, messages: Sequence[Message]) -> str:
    """The id of the batch of ``messages``: the same messages in the same session give the
    same id, so enqueuing them twice makes one batch."""
    if not messages:
        raise ValidationError("a batch needs at least one message", field="messages")
    parts = [*key, *(m.id for m in messages)]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


def backoff_s(attempts: int, retry: RetryPolicy) -> float:
    """The wait before the next attempt after ``attempts`` attempts."""
    return float(min(retry.max_backoff_s, retry.backoff_s * 2.0 ** max(attempts - 1, 0)))


def after_failure(attempts: int, now_ms: int, retry: RetryPolicy) -> tuple[BatchState, int]:
    """Where a batch goes after its ``attempts``-th attempt failed: back to pending with a
    backoff, or dead."""
    if attempts >= retry.max_attempts:
        return BatchState.DEAD, now_ms
    return BatchState.PENDING, now_ms + int(backoff_s(attempts, retry) * 1000)


def claimable(batches: Sequence[Batch], now_ms: int, lease_until: dict[str, int]) -> list[Batch]:
    """The batches a claim may take, oldest first: each user's earliest unfinished batch,
    when it is pending and due, or leased with its lease expired. ``batches`` are in
    enqueue order; ``lease_until`` maps leased batch ids to their lease's end."""
    heads: dict[tuple[str, str], Batch] = {}
    for batch in batches:
        if batch.state in (BatchState.PENDING, BatchState.LEASED):
            heads.setdefault((batch.key.tenant_id, batch.key.user_id), batch)
    ready = [
        b
        for b in heads.values()
        if (b.state is BatchState.PENDING and b.next_attempt_at <= now_ms)
        or (b.state is BatchState.LEASED and lease_until.get(b.batch_id, 0) <= now_ms)
    ]
    return sorted(ready, key=lambda b: b.next_attempt_at)


def _messages_json(messages: Sequence[Message]) -> str:
    return json.dumps([m.model_dump(mode="json", exclude_none=True) for m in messages])


def _messages_of(text: str) -> list[Message]:
    return [Message.model_validate(item) for item in json.loads(text)]


#: This process, as its leases name it: a pid can be reused (a container's pid 1 is), so a
#: random token of this run goes with it.
_PROCESS = f"{os.getpid()}.{secrets.token_hex(4)}"


def _new_lease() -> str:
    """A lease id that names its process: ``pid.token:random``."""
    return f"{_PROCESS}:{secrets.token_hex(8)}"


def lease_is_orphaned(lease: str | None, *, this_process: str | None = None) -> bool:
    """Whether ``lease`` was taken by a process of this machine that is gone: another run
    under this pid, or a pid that no longer exists. Leases of other machines (or of an
    older format) are left to expire."""
    owner, sep, _ = (lease or "").partition(":")
    pid_text, dot, token = owner.partition(".")
    if not (sep and dot and pid_text.isdigit() and token):
        return False
    me = this_process or _PROCESS
    if owner == me:
        return False
    pid = int(pid_text)
    if pid == int(me.partition(".")[0]):
        return True  # our own pid, another run: that run is over
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False
    return False


# -- the outbox ------------------------------------------------------------------------------


class Outbox(ABC):
    """A durable queue of extraction batches (see the module docstring). Thread-safe."""

    retry: RetryPolicy

    @abstractmethod
    def enqueue(self, key: SessionKey, messages: Sequence[Message]) -> str:
        """Queue ``messages`` of one session; returns the batch id (the same id, and no new
        batch, when these messages were queued before)."""

    def hand_over(self, key: SessionKey, messages: list[Message]) -> None:
        """A ``short_term.FlushTarget``: queue what leaves a session's window or an ended
        session."""
        if messages:
            self.enqueue(key, messages)

    @abstractmethod
    def discard_user(self, tenant_id: str, user_id: str) -> int:
        """Delete every batch of one user, whatever its state (a user forgotten leaves no
        messages behind in the queue); returns how many there were. A batch a worker holds
        at that moment may still be written."""

    @abstractmethod
    def claim(self, limit: int = 1) -> list[Batch]:
        """Lease up to ``limit`` batches that are due (see :func:`claimable`)."""

    @abstractmethod
    def complete(self, batch_id: str) -> None:
        """Mark a batch done: it will not run again."""

    @abstractmethod
    def renew(self, leases: Mapping[str, str]) -> int:
        """Extend the leases still held (batch id → lease) by ``retry.lease_s`` from now;
        returns how many were. A lease lost meanwhile is not renewed."""

    @abstractmethod
    def reclaim_orphaned(self) -> int:
        """Expire at once the leases whose process is gone (``lease_is_orphaned``), so
        their users' extraction goes on now instead of after the lease; returns how many."""

    @abstractmethod
    def fail(self, batch_id: str, error: str, *, lease: str | None = None) -> BatchState:
        """Record a failed attempt: back to pending after a backoff, or dead after the last
        attempt. With ``lease``, only when the batch is still under that claim. Returns the
        batch's state."""

    @abstractmethod
    def requeue(self, batch_id: str) -> None:
        """Give a dead batch a fresh set of attempts."""

    @abstractmethod
    def get(self, batch_id: str) -> Batch | None:
        """One batch, whatever its state."""

    @abstractmethod
    def batches(self, state: BatchState | None = None, limit: int = 100) -> list[Batch]:
        """Batches in enqueue order, of one state or all (to inspect dead ones)."""

    @abstractmethod
    def counts(self) -> dict[BatchState, int]:
        """How many batches are in each state."""

    def close(self) -> None:  # noqa: B027 - optional: an in-memory outbox holds nothing
        """Release what the outbox holds open."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Slot:
    batch: Batch
    lease_until: int = 0
    updated_at: int = 0


class InMemoryOutbox(Outbox):
    """An outbox in this process's memory: the same semantics, no durability (tests, and
    a library used without a durable store)."""

    def __init__(self, *, retry: RetryPolicy | None = None, clock: Clock = time.time) -> None:
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._slots: dict[str, _Slot] = {}  # insertion order is enqueue order
        self._lock = ClosingLock("in-memory outbox")

    def close(self) -> None:
        """Later calls raise StoreError, as on every backend."""
        self._lock.close()

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def enqueue(self, key: SessionKey, messages: Sequence[Message]) -> str:
        batch_id = batch_id_for(key, messages)
        now = self._now()
        with self._lock:
            if batch_id not in self._slots:
                batch = Batch(batch_id, key, list(messages), next_attempt_at=now, enqueued_at=now)
                self._slots[batch_id] = _Slot(batch, updated_at=now)
        return batch_id

    def claim(self, limit: int = 1) -> list[Batch]:
        now = self._now()
        with self._lock:
            leases = {i: s.lease_until for i, s in self._slots.items()}
            ready = claimable([s.batch for s in self._slots.values()], now, leases)
            claimed: list[Batch] = []
            for batch in ready:
                if len(claimed) >= limit:
                    break
                taken = self._take(batch, now)
                if taken is not None:
                    claimed.append(taken)
            return claimed

    def _take(self, batch: Batch, now: int) -> Batch | None:
        slot = self._slots[batch.batch_id]
        if batch.state is BatchState.LEASED and batch.attempts >= self.retry.max_attempts:
            slot.batch = replace(batch, state=BatchState.DEAD, lease=None, last_error=_LOST)
            return None
        slot.batch = replace(
            batch, state=BatchState.LEASED, attempts=batch.attempts + 1, lease=_new_lease()
        )
        slot.lease_until = now + int(self.retry.lease_s * 1000)
        slot.updated_at = now
        return slot.batch

    def renew(self, leases: Mapping[str, str]) -> int:
        until = self._now() + int(self.retry.lease_s * 1000)
        renewed = 0
        with self._lock:
            for batch_id, lease in leases.items():
                slot = self._slots.get(batch_id)
                if slot is not None and slot.batch.lease == lease:
                    slot.lease_until = until
                    renewed += 1
        return renewed

    def reclaim_orphaned(self) -> int:
        with self._lock:
            orphans = [
                s for s in self._slots.values()
                if s.batch.state is BatchState.LEASED and lease_is_orphaned(s.batch.lease)
            ]  # fmt: skip
            for slot in orphans:
                slot.lease_until = 0
        return len(orphans)

    def complete(self, batch_id: str) -> None:
        with self._lock:
            slot = self._slots.get(batch_id)
            if slot is not None:
                slot.batch = replace(slot.batch, state=BatchState.DONE, lease=None)
                slot.updated_at = self._now()

    def fail(self, batch_id: str, error: str, *, lease: str | None = None) -> BatchState:
        now = self._now()
        with self._lock:
            slot = self._slots.get(batch_id)
            if slot is None:
                raise ValidationError(f"no batch {batch_id!r}", field="batch_id")
            batch = slot.batch
            if batch.state is not BatchState.LEASED or (lease and batch.lease != lease):
                return batch.state
            state, due = after_failure(batch.attempts, now, self.retry)
            slot.batch = replace(
                batch, state=state, next_attempt_at=due, last_error=error[:_ERROR_CHARS], lease=None
            )
            slot.updated_at = now
            return state

    def requeue(self, batch_id: str) -> None:
        with self._lock:
            slot = self._slots.get(batch_id)
            if slot is not None and slot.batch.state is BatchState.DEAD:
                slot.batch = replace(
                    slot.batch, state=BatchState.PENDING, attempts=0, next_attempt_at=self._now()
                )

    def get(self, batch_id: str) -> Batch | None:
        with self._lock:
            slot = self._slots.get(batch_id)
            return slot.batch if slot is not None else None

    def batches(self, state: BatchState | None = None, limit: int = 100) -> list[Batch]:
        with self._lock:
            found = [
                s.batch for s in self._slots.values() if state is None or s.batch.state is state
            ]
        return found[:limit]

    def discard_user(self, tenant_id: str, user_id: str) -> int:
        with self._lock:
            gone = [
                batch_id
                for batch_id, slot in self._slots.items()
                if slot.batch.key.tenant_id == tenant_id and slot.batch.key.user_id == user_id
            ]
            for batch_id in gone:
                del self._slots[batch_id]
            return len(gone)

    def counts(self) -> dict[BatchState, int]:
        with self._lock:
            totals = dict.fromkeys(BatchState, 0)
            for slot in self._slots.values():
                totals[slot.batch.state] += 1
            return totals


#: Kept of a failure's message; the rest is in the worker's log.
_ERROR_CHARS = 2000
_LOST = "lease expired on the last attempt (the worker died or hung)"

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

_COLUMNS = (
    "batch_id, tenant_id, user_id, session_id, messages, state, attempts, next_attempt_at,"
    " last_error, lease, enqueued_at"
)
# Each user's earliest unfinished batch, when it is due or its lease ran out (the SQL form
# of ``claimable``).
_CLAIMABLE = f"""
    SELECT {_COLUMNS}, lease_until FROM extraction_batches AS b
    WHERE b.state IN ('pending', 'leased')
      AND b.seq = (
          SELECT MIN(o.seq) FROM extraction_batches AS o
          WHERE o.tenant_id = b.tenant_id AND o.user_id = b.user_id
            AND o.state IN ('pending', 'leased'))
      AND ((b.state = 'pending' AND b.next_attempt_at <= ?)
           OR (b.state = 'leased' AND b.lease_until <= ?))
    ORDER BY b.next_attempt_at, b.seq
    LIMIT ?
"""


def _batch_of(row: Sequence[Any]) -> Batch:
    """A batch from a row that starts with ``_COLUMNS``."""
    batch_id, tenant, user, session, messages, state, attempts, due, error, lease, at = row[:11]
    return Batch(
        batch_id=batch_id,
        key=SessionKey(tenant, user, session),
        messages=_messages_of(messages),
        state=BatchState(state),
        attempts=int(attempts),
        next_attempt_at=int(due),
        last_error=error,
        lease=lease,
        enqueued_at=int(at),
    )


class SQLiteOutbox(Outbox):
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
        self.path = str(path)
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._file = SQLiteFile(path, synchronous=synchronous)
        self._file.migrate(MIGRATIONS, table=MIGRATIONS_TABLE)

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def enqueue(self, key: SessionKey, messages: Sequence[Message]) -> str:
        batch_id = batch_id_for(key, messages)
        body = _messages_json(messages)
        now = self._now()

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO extraction_batches (batch_id, tenant_id, user_id, session_id,"
                " messages, state, attempts, next_attempt_at, enqueued_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)"
                " ON CONFLICT (batch_id) DO NOTHING",
                (batch_id, *key, body, now, now, now),
            )

        self._file.write(work)
        return batch_id

    def claim(self, limit: int = 1) -> list[Batch]:
        if limit < 1:
            return []
        now = self._now()

        def work(conn: sqlite3.Connection) -> list[Batch]:
            rows = conn.execute(_CLAIMABLE, (now, now, limit)).fetchall()
            return [b for b in (self._take(conn, _batch_of(row), now) for row in rows) if b]

        return self._file.write(work)

    def _take(self, conn: sqlite3.Connection, batch: Batch, now: int) -> Batch | None:
        if batch.state is BatchState.LEASED and batch.attempts >= self.retry.max_attempts:
            conn.execute(
                "UPDATE extraction_batches SET state = 'dead', lease = NULL, last_error = ?,"
                " updated_at = ? WHERE batch_id = ?",
                (_LOST, now, batch.batch_id),
            )
            logger.warning("batch %s is dead: %s", batch.batch_id, _LOST)
            return None
        lease = _new_lease()
        conn.execute(
            "UPDATE extraction_batches SET state = 'leased', attempts = attempts + 1, lease = ?,"
            " lease_until = ?, updated_at = ? WHERE batch_id = ?",
            (lease, now + int(self.retry.lease_s * 1000), now, batch.batch_id),
        )
        return replace(batch, state=BatchState.LEASED, attempts=batch.attempts + 1, lease=lease)

    def complete(self, batch_id: str) -> None:
        now = self._now()

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE extraction_batches SET state = 'done', lease = NULL, lease_until = NULL,"
                " updated_at = ? WHERE batch_id = ?",
                (now, batch_id),
            )

        self._file.write(work)

    def renew(self, leases: Mapping[str, str]) -> int:
        if not leases:
            return 0
        until = self._now() + int(self.retry.lease_s * 1000)

        def work(conn: sqlite3.Connection) -> int:
            renewed = 0
            for batch_id, lease in leases.items():
                cursor = conn.execute(
                    "UPDATE extraction_batches SET lease_until = ?"
                    " WHERE batch_id = ? AND state = 'leased' AND lease = ?",
                    (until, batch_id, lease),
                )
                renewed += cursor.rowcount
            return renewed

        return self._file.write(work)

    def reclaim_orphaned(self) -> int:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT batch_id, lease FROM extraction_batches WHERE state = 'leased'"
            ).fetchall()
        orphans = [(batch_id, lease) for batch_id, lease in rows if lease_is_orphaned(lease)]

        def work(conn: sqlite3.Connection) -> int:
            for batch_id, lease in orphans:
                conn.execute(
                    "UPDATE extraction_batches SET lease_until = 0"
                    " WHERE batch_id = ? AND state = 'leased' AND lease = ?",
                    (batch_id, lease),
                )
            return len(orphans)

        reclaimed = self._file.write(work) if orphans else 0
        if reclaimed:
            logger.info("reclaimed %d batches leased by workers that are gone", reclaimed)
        return reclaimed

    def fail(self, batch_id: str, error: str, *, lease: str | None = None) -> BatchState:
        now = self._now()

        def work(conn: sqlite3.Connection) -> BatchState:
            row = conn.execute(
                "SELECT state, attempts, lease FROM extraction_batches WHERE batch_id = ?",
                (batch_id,),
            ).fetchone()
            if row is None:
                raise ValidationError(f"no batch {batch_id!r}", field="batch_id")
            state, attempts, held_by = BatchState(row[0]), int(row[1]), row[2]
            if state is not BatchState.LEASED or (lease and held_by != lease):
                return state
            state, due = after_failure(attempts, now, self.retry)
            conn.execute(
                "UPDATE extraction_batches SET state = ?, next_attempt_at = ?, last_error = ?,"
                " lease = NULL, lease_until = NULL, updated_at = ? WHERE batch_id = ?",
                (state.value, due, error[:_ERROR_CHARS], now, batch_id),
            )
            return state

        return self._file.write(work)

    def requeue(self, batch_id: str) -> None:
        now = self._now()

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE extraction_batches SET state = 'pending', attempts = 0,"
                " next_attempt_at = ?, updated_at = ? WHERE batch_id = ? AND state = 'dead'",
                (now, now, batch_id),
            )

        self._file.write(work)

    def get(self, batch_id: str) -> Batch | None:
        with self._file.read() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM extraction_batches WHERE batch_id = ?", (batch_id,)
            ).fetchone()
        return _batch_of(row) if row else None

    def batches(self, state: BatchState | None = None, limit: int = 100) -> list[Batch]:
        where, params = ("WHERE state = ?", [state.value]) if state else ("", [])
        with self._file.read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM extraction_batches {where} ORDER BY seq LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [_batch_of(row) for row in rows]

    def discard_user(self, tenant_id: str, user_id: str) -> int:
        def work(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM extraction_batches WHERE tenant_id = ? AND user_id = ?",
                (tenant_id, user_id),
            )
            return int(cursor.rowcount)

        return self._file.write(work)

    def counts(self) -> dict[BatchState, int]:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT state, COUNT(*) FROM extraction_batches GROUP BY state"
            ).fetchall()
        return {**dict.fromkeys(BatchState, 0), **{BatchState(s): int(n) for s, n in rows}}

    def close(self) -> None:
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteOutbox({self.path!r})"


# -- triggers (SPEC L3) ----------------------------------------------------------------------

#: A user message that states a preference or gives a standing instruction about themselves.
EXPLICIT_PATTERN = re.compile(
    r"\b(?:remember\s+(?:that|this|my|me|i)|don'?t\s+forget|note\s+that|keep\s+in\s+mind|"
    r"i\s+(?:really\s+)?(?:prefer|hate|love|dislike|can'?t\s+stand)|i'?m\s+allergic|"
    r"i\s+am\s+allergic|my\s+name\s+is|call\s+me|always|never|from\s+now\s+on)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Triggers:
    """When a session's messages go to extraction (SPEC L3, seed 002 sections 6 and 14).

    ``every_turns``: after this many user turns (None: never). ``explicit``: a user message
    matching :data:`EXPLICIT_PATTERN`. ``topic_change``: the cosine distance between the
    last two user turns of at least ``min_topic_words`` words passes it (needs an embedder;
    None: off). ``session_end``: when the session ends. ``max_buffer``: a session holding
    this many unextracted messages goes anyway.
    """

    every_turns: int | None = 10
    explicit: bool = True
    topic_change: float | None = 0.8
    min_topic_words: int = 4
    session_end: bool = True
    max_buffer: int = 60

    def __post_init__(self) -> None:
        if self.every_turns is not None and self.every_turns < 1:
            raise ValidationError("must be at least 1", field="every_turns")
        if self.topic_change is not None and not 0.0 < self.topic_change <= 2.0:
            raise ValidationError("must be in (0, 2]", field="topic_change")
        if self.max_buffer < 1:
            raise ValidationError("must be at least 1", field="max_buffer")


def is_explicit(text: str) -> bool:
    """Whether a user message states a preference or an instruction about the user."""
    return EXPLICIT_PATTERN.search(text) is not None


def cosine_distance(a: Vector, b: Vector) -> float:
    """1 - cosine similarity (0 for the same direction, 2 for opposite ones)."""
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 1.0 - (float(np.dot(a, b)) / norms if norms else 0.0)


def trigger_reason(
    triggers: Triggers,
    *,
    turns: int,
    buffered: int,
    explicit: bool,
    distance: float | None,
    session_end: bool,
) -> str | None:
    """Why a session's buffer goes to extraction now, or None (pure)."""
    if buffered == 0:
        return None
    if session_end and triggers.session_end:
        return "session end"
    if explicit and triggers.explicit:
        return "explicit"
    topic = triggers.topic_change
    if distance is not None and topic is not None and distance >= topic:
        return "topic change"
    if triggers.every_turns is not None and turns >= triggers.every_turns:
        return f"every {triggers.every_turns} turns"
    if buffered >= triggers.max_buffer:
        return "buffer full"
    return None


@dataclass
class _SessionState:
    turns: int = 0
    last_vector: Vector | None = None
    buffer: list[Message] = field(default_factory=list)
    buffered: int = 0


class ExtractionScheduler:
    """Decides when a session's new messages are queued for extraction (SPEC L3).

    ``observe(key, messages)`` buffers a turn's messages and says whether to enqueue now;
    ``take(key)`` hands the buffered messages over (and empties the buffer)::

        if scheduler.observe(key, turn):
            outbox.enqueue(key, scheduler.take(key))

    The topic-change trigger embeds each user message of ``min_topic_words`` words or more
    (one embedding per turn); the other triggers are string and counter checks. State is
    kept for the ``max_sessions`` most recent sessions. Thread-safe.

    With ``keep_messages=False`` only the counts are kept and ``take`` hands over nothing:
    for a caller that reads what is pending from a durable log instead (the service), so
    a quiet session's turns are not held in memory twice.
    """

    def __init__(
        self,
        triggers: Triggers | None = None,
        *,
        embedder: Embedder | None = None,
        max_sessions: int = 10_000,
        keep_messages: bool = True,
    ) -> None:
        self.triggers = triggers or Triggers()
        self.keep_messages = keep_messages
        self.embedder = embedder
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[SessionKey, _SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def observe(
        self, key: SessionKey, messages: Sequence[Message], *, session_end: bool = False
    ) -> bool:
        """Buffer ``messages``; True when the buffer should be enqueued now."""
        return self.check(key, messages, session_end=session_end) is not None

    def check(
        self, key: SessionKey, messages: Sequence[Message], *, session_end: bool = False
    ) -> str | None:
        """Like :meth:`observe`, returning why (``"explicit"``, ``"topic change"``…)."""
        said = [m for m in messages if m.role is Role.USER and m.content.strip()]
        vectors = self._topic_vectors(said)
        with self._lock:
            state = self._state(key)
            if self.keep_messages:
                state.buffer.extend(messages)
            state.buffered += len(messages)
            state.turns += len(said)
            distance = None
            for vector in vectors:
                if state.last_vector is not None:
                    distance = cosine_distance(state.last_vector, vector)
                state.last_vector = vector
            reason = trigger_reason(
                self.triggers,
                turns=state.turns,
                buffered=state.buffered,
                explicit=any(is_explicit(m.content) for m in said),
                distance=distance,
                session_end=session_end,
            )
            if reason is not None:
                state.turns = 0
            if session_end:
                state.last_vector = None
        if reason is not None:
            logger.debug("extraction triggered for %s: %s", key, reason)
        return reason

    def take(self, key: SessionKey) -> list[Message]:
        """The buffered messages of ``key``, removed from the buffer."""
        with self._lock:
            state = self._sessions.get(key)
            if state is None:
                return []
            taken, state.buffer, state.buffered = state.buffer, [], 0
            return taken

    def forget(self, key: SessionKey) -> None:
        """Drop what is kept of a session."""
        with self._lock:
            self._sessions.pop(key, None)

    def forget_user(self, tenant_id: str, user_id: str) -> None:
        """Drop what is kept of every session of one user (buffered messages included)."""
        with self._lock:
            for key in [k for k in self._sessions if k[:2] == (tenant_id, user_id)]:
                del self._sessions[key]

    def _state(self, key: SessionKey) -> _SessionState:
        state = self._sessions.get(key)
        if state is None:
            state = self._sessions[key] = _SessionState()
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return state

    def _topic_vectors(self, said: Sequence[Message]) -> list[Vector]:
        if self.embedder is None or self.triggers.topic_change is None:
            return []
        long_enough = [
            m.content for m in said if len(m.content.split()) >= self.triggers.min_topic_words
        ]
        return list(self.embedder.embed(long_enough)) if long_enough else []


def project_of(messages: Sequence[Message]) -> str | None:
    """The project a batch's facts belong to: the ``project_id`` in the metadata of its last
    message that names one (the chat proxy writes it from ``memory_context``)."""
    for message in reversed(messages):
        named = (message.metadata.model_extra or {}).get("project_id")
        if isinstance(named, str) and named:
            return named
    return None


# -- the worker ------------------------------------------------------------------------------


@dataclass
class WorkerStats:
    """What a worker did since it was made."""

    completed: int = 0
    failed: int = 0
    facts: int = 0
    stored: int = 0
    updated: int = 0
    superseded: int = 0
    skipped: int = 0
    evicted: int = 0

    def add(self, report: WriteReport) -> None:
        """Count what one batch's write policy did."""
        self.stored += report.stored
        self.updated += report.updated
        self.superseded += report.superseded
        self.skipped += report.skipped


class Worker:
    """Claims batches from an outbox, extracts facts, applies the write policy.

    ``run_once`` does one round (claim up to ``batch_size`` batches and process them);
    ``start``/``stop`` run rounds in a background thread, waiting ``poll_s`` when the queue
    is empty (``notify`` wakes it at once); ``drain`` runs rounds until nothing is due.
    A model error during extraction fails the batch before anything is stored (it is
    retried with backoff, then dead); a store error fails it after some writes, which the
    next attempt does not repeat (the policy is idempotent per batch).
    ``max_memories_per_user`` enforces the quota after each batch (SPEC L8).
    """

    def __init__(
        self,
        outbox: Outbox,
        long_term: LongTermMemory,
        extractor: Extractor,
        policy: WritePolicy | None = None,
        *,
        batch_size: int = 8,
        poll_s: float = 0.5,
        max_memories_per_user: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValidationError("must be at least 1", field="batch_size")
        self.outbox = outbox
        self.long_term = long_term
        self.extractor = extractor
        self.policy = policy or WritePolicy()
        self.batch_size = batch_size
        self.poll_s = poll_s
        self.max_memories_per_user = max_memories_per_user
        self.stats = WorkerStats()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewer: threading.Thread | None = None
        #: The leases this worker holds now (batch id → lease), renewed while it works.
        self._held: dict[str, str] = {}
        self._held_lock = threading.Lock()

    def run_once(self) -> int:
        """Claim and process one round of batches; returns how many were claimed."""
        claimed = self.outbox.claim(self.batch_size)
        with self._held_lock:
            self._held.update({b.batch_id: b.lease for b in claimed if b.lease})
        for batch in claimed:
            try:
                self.process(batch)
            except Exception as exc:  # boundary: a bug in an extractor must not stop the worker
                logger.exception("batch %s failed unexpectedly", batch.batch_id)
                self._fail(batch, f"unexpected {type(exc).__name__}: {exc}")
            finally:
                with self._held_lock:
                    self._held.pop(batch.batch_id, None)
        return len(claimed)

    def renew_leases(self) -> int:
        """Extend the leases of the batches this worker holds now; returns how many."""
        with self._held_lock:
            held = dict(self._held)
        return self.outbox.renew(held) if held else 0

    def process(self, batch: Batch) -> bool:
        """Extract and store one claimed batch; True when it is done."""
        try:
            facts = self.extractor.extract(batch.messages)
        except LLMError as exc:
            logger.warning("Extraction failed, batch %s skipped: %s", batch.batch_id, exc)
            self._fail(batch, f"extraction: {exc}")
            return False
        try:
            report = self.policy.apply(
                self.long_term,
                batch.key,
                facts,
                batch_id=batch.batch_id,
                project_id=project_of(batch.messages),
            )
            evicted = self._enforce_quota(batch.key)
        except ChatmemError as exc:  # boundary: store or embedder trouble; retried later
            logger.warning("Storing batch %s failed: %s", batch.batch_id, exc)
            self._fail(batch, f"write: {exc}")
            return False
        self.outbox.complete(batch.batch_id)
        self.stats.completed += 1
        self.stats.facts += len(facts)
        self.stats.evicted += evicted
        self.stats.add(report)
        return True

    def _enforce_quota(self, key: SessionKey) -> int:
        if self.max_memories_per_user is None:
            return 0
        gone = enforce_quota(
            self.long_term,
            tenant_id=key.tenant_id,
            user_id=key.user_id,
            limit=self.max_memories_per_user,
        )
        return len(gone)

    def _fail(self, batch: Batch, error: str) -> None:
        self.stats.failed += 1
        state = self.outbox.fail(batch.batch_id, error, lease=batch.lease)
        if state is BatchState.DEAD:
            logger.error(
                "batch %s is dead after %d attempts: %s", batch.batch_id, batch.attempts, error
            )

    def drain(self, *, max_rounds: int = 10_000) -> int:
        """Run rounds until no batch is due; returns how many batches were claimed. Batches
        waiting out a backoff are left for later."""
        total = 0
        for _ in range(max_rounds):
            claimed = self.run_once()
            if claimed == 0:
                break
            total += claimed
        return total

    def start(self) -> None:
        """Run in a background (daemon) thread until :meth:`stop`."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        try:
            self.outbox.reclaim_orphaned()
        except ChatmemError as exc:  # boundary: their leases still expire on their own
            logger.warning("reclaiming the leases of dead workers failed: %s", exc)
        self._thread = threading.Thread(target=self._loop, name="chatmem-worker", daemon=True)
        self._thread.start()
        self._renewer = threading.Thread(
            target=self._renew_loop, name="chatmem-worker-leases", daemon=True
        )
        self._renewer.start()

    def notify(self) -> None:
        """Wake the background thread now (something was enqueued)."""
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the background thread after the round it is in."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._renewer is not None:
            self._renewer.join(timeout)
            self._renewer = None

    def _renew_loop(self) -> None:
        period = self.outbox.retry.lease_s / 3
        while not self._stopping.wait(period):
            try:
                self.renew_leases()
            except ChatmemError as exc:  # boundary: a lease lost is taken up by another worker
                logger.warning("renewing extraction leases failed: %s", exc)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                claimed = self.run_once()
            except ChatmemError as exc:  # boundary: the outbox is unreachable; try again later
                logger.warning("worker round failed: %s", exc)
                claimed = 0
            if claimed == 0:
                self._wake.wait(self.poll_s)
                self._wake.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "EXPLICIT_PATTERN",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "Batch",
    "BatchState",
    "ExtractionScheduler",
    "InMemoryOutbox",
    "Outbox",
    "RetryPolicy",
    "SQLiteOutbox",
    "Triggers",
    "Worker",
    "WorkerStats",
    "after_failure",
    "backoff_s",
    "batch_id_for",
    "claimable",
    "cosine_distance",
    "is_explicit",
    "lease_is_orphaned",
    "trigger_reason",
]
