"""The outbox interface, and the outbox kept in this process's memory.

:class:`Outbox` is what the worker and the service see of the durable queue (its guarantees
are in :mod:`chatmem.worker`); :class:`InMemoryOutbox` keeps the same rules
(:mod:`chatmem.worker.rules`) without durability, for tests and a library used without a
durable store. The durable ones keep their batches in SQL (:mod:`chatmem.worker.sql_outbox`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Self

from chatmem.errors import ValidationError
from chatmem.messages import Message, SessionKey
from chatmem.stores.gate import ClosingLock
from chatmem.worker.batch import Batch, BatchState, RetryPolicy, batch_id_for
from chatmem.worker.rules import (
    claimable,
    claimed,
    failed,
    lease_end,
    lease_is_orphaned,
    new_lease,
)

Clock = Callable[[], float]


class Outbox(ABC):
    """A durable queue of extraction batches (see :mod:`chatmem.worker`). Thread-safe."""

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
            taken: list[Batch] = []
            for batch in ready:
                if len(taken) >= limit:
                    break
                slot = self._slots[batch.batch_id]
                slot.batch = claimed(batch, new_lease(), self.retry)
                if slot.batch.state is BatchState.LEASED:
                    slot.lease_until = lease_end(now, self.retry)
                    slot.updated_at = now
                    taken.append(slot.batch)
            return taken

    def renew(self, leases: Mapping[str, str]) -> int:
        until = lease_end(self._now(), self.retry)
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
            after = failed(slot.batch, error, lease=lease, now_ms=now, retry=self.retry)
            if after is None:
                return slot.batch.state
            slot.batch, slot.updated_at = after, now
            return after.state

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


__all__ = ["Clock", "InMemoryOutbox", "Outbox"]
