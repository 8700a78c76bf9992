"""What the outbox holds: a batch of one session's messages, its state, its id, and the
retry policy that bounds its attempts.

Every outbox (in memory, SQLite, PostgreSQL) holds these same records; how a batch moves
from state to state is in :mod:`chatmem.worker.rules`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.messages import Message, SessionKey


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
        checks.whole(self.max_attempts, "max_attempts", low=1)
        for name in ("backoff_s", "max_backoff_s"):
            checks.number(getattr(self, name), name, low=0, message="must not be negative")
        checks.number(self.lease_s, "lease_s", positive=True)


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


def batch_id_for(key: SessionKey, messages: Sequence[Message]) -> str:
    """The id of the batch of ``messages``: a session's batch is named by the message it
    starts at. Enqueuing the same messages twice makes one batch, and so do two replicas
    that race to queue from the same extraction mark having read different ends of the log:
    the first range is kept, and no message is in two batches (extracted twice)."""
    if not messages:
        raise ValidationError("a batch needs at least one message", field="messages")
    parts = [*key, messages[0].id]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


__all__ = ["Batch", "BatchState", "RetryPolicy", "batch_id_for"]
