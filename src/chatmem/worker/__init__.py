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
wrote (see :mod:`chatmem.long_term.write_policy`), since the memories may live in another database
than the outbox and cannot share its transaction.

:class:`ExtractionScheduler` decides *when* to enqueue (SPEC L3 triggers): every N user
turns, an explicit preference or instruction in one message, a change of topic, the end of
a session.

The package, one concept a module:

- :mod:`~chatmem.worker.batch`: what the outbox holds (``Batch``, ``BatchState``,
  ``RetryPolicy``, the batch id);
- :mod:`~chatmem.worker.rules`: how a batch moves (per-user order, leases, retries, dead
  batches), pure functions every outbox uses;
- :mod:`~chatmem.worker.outbox`: the ``Outbox`` interface and ``InMemoryOutbox``;
- :mod:`~chatmem.worker.sql_outbox`: the outbox over an SQL table, written once;
  :mod:`~chatmem.worker.sqlite` (``SQLiteOutbox``) and :mod:`chatmem.worker.postgres`
  give it their SQL;
- :mod:`~chatmem.worker.loop`: the ``Worker``;
- :mod:`~chatmem.worker.triggers` and :mod:`~chatmem.worker.scheduler`: when to enqueue.
"""

from chatmem.worker.batch import Batch, BatchState, RetryPolicy, batch_id_for
from chatmem.worker.loop import Worker, WorkerStats, project_of
from chatmem.worker.outbox import InMemoryOutbox, Outbox
from chatmem.worker.rules import (
    after_failure,
    backoff_s,
    claimable,
    lease_is_orphaned,
)
from chatmem.worker.scheduler import ExtractionScheduler
from chatmem.worker.sqlite import MIGRATIONS, MIGRATIONS_TABLE, SQLiteOutbox
from chatmem.worker.triggers import (
    EXPLICIT_PATTERN,
    Triggers,
    cosine_distance,
    is_explicit,
    trigger_reason,
)

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
    "project_of",
    "trigger_reason",
]
