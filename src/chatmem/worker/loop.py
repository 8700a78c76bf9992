"""The worker: it claims batches from an outbox, extracts their facts, applies the write
policy, and marks them done or failed, in a background thread or in rounds on demand.

A model error fails a batch before anything is stored; a store error after some writes,
which the next attempt does not repeat (the write policy is idempotent per batch). While it
works, the worker renews the leases of the batches it holds, so a slow model keeps them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

from chatmem import checks
from chatmem.errors import ChatmemError, LLMError
from chatmem.extraction.base import Extractor
from chatmem.foreground import FOREGROUND
from chatmem.long_term import LongTermMemory
from chatmem.long_term.decay import enforce_quota
from chatmem.long_term.write_policy import WritePolicy, WriteReport
from chatmem.messages import Message, SessionKey, is_restricted
from chatmem.worker.batch import Batch, BatchState
from chatmem.worker.outbox import Outbox

logger = logging.getLogger("chatmem.worker")


def project_of(messages: Sequence[Message]) -> str | None:
    """The project a batch's facts belong to: the ``project_id`` in the metadata of its last
    message that names one (the chat proxy writes it from ``memory_context``)."""
    for message in reversed(messages):
        named = (message.metadata.model_extra or {}).get("project_id")
        if isinstance(named, str) and named:
            return named
    return None


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
        poll_s: float | None = 0.5,
        max_memories_per_user: int | None = None,
    ) -> None:
        batch_size = checks.whole(batch_size, "batch_size", low=1)
        if poll_s is not None:  # None: woken by notify() alone
            poll_s = checks.number(poll_s, "poll_s", low=0)
        if max_memories_per_user is not None:
            checks.whole(max_memories_per_user, "max_memories_per_user", low=0)
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
            FOREGROUND.pause()  # searches in flight go first (``chatmem.foreground``)
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
        # An answer built on restricted memories says their text: no memory open to other
        # readers may be made from it (SPEC L7); those memories are stored already.
        said = [m for m in batch.messages if not is_restricted(m)]
        try:
            facts = self.extractor.extract(said) if said else []
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


__all__ = ["Worker", "WorkerStats", "project_of"]
