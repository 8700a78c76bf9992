"""The usage record (SPEC R5): ``last_accessed`` and ``access_count`` of the memories a
request was given, counted in memory and written in batches off the request path."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from chatmem import checks
from chatmem.errors import StoreError, ValidationError
from chatmem.foreground import FOREGROUND
from chatmem.long_term import LongTermMemory
from chatmem.records import utcnow
from chatmem.stores.base import Usage

logger = logging.getLogger("chatmem.retrieval")


class _Use(NamedTuple):
    times: int
    last: datetime


_Key = tuple[str, str, str]  # tenant, user, memory id


class UsageRecorder:
    """Counts the uses of memories in memory and writes ``access_count`` and
    ``last_accessed`` in batches from a background thread (R5), so a read never waits on a
    write. ``record`` only touches a dict under a lock; ``flush`` writes now (for tests
    and shutdown); ``close`` stops the thread after a last flush.

    A flush is one usage-only store write per user (``MemoryStore.touch``): a use is not
    a new version and leaves no history row, and it never conflicts with a concurrent edit.
    A memory deleted meanwhile is dropped; when the store fails, the counts are kept for
    the next flush.
    """

    def __init__(
        self, long_term: LongTermMemory, *, flush_every_s: float = 5.0, max_batch: int = 500
    ) -> None:
        every_s = checks.number(flush_every_s, "flush_every_s")
        batch = checks.whole(max_batch, "max_batch")
        if not every_s > 0 or batch < 1:  # not > 0: NaN too
            raise ValidationError("flush_every_s and max_batch must be positive", field="usage")
        self.long_term = long_term
        self.flush_every_s = every_s
        self.max_batch = batch
        self._pending: dict[_Key, _Use] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chatmem-usage", daemon=True)
        self._thread.start()

    def record(
        self,
        ids: Iterable[str],
        *,
        user_id: str,
        tenant_id: str = "default",
        at: datetime | None = None,
    ) -> None:
        """Count one use of each of ``ids`` (memories of that user) at ``at`` (now)."""
        moment = at or utcnow()
        with self._lock:
            for memory_id in ids:
                key = (tenant_id, user_id, memory_id)
                _merge(self._pending, key, _Use(1, moment))
            full = len(self._pending) >= self.max_batch
        if full:
            self._wake.set()

    def pending(self) -> int:
        """How many memories have uses not yet written."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Write every pending use now; returns how many memories were written."""
        with self._flushing:
            with self._lock:
                taken, self._pending = self._pending, {}
            written = 0
            for (tenant_id, user_id), uses in _by_user(taken).items():
                for start in range(0, len(uses), self.max_batch):
                    chunk = dict(list(uses.items())[start : start + self.max_batch])
                    FOREGROUND.pause()  # a write parses and writes each record: searches first
                    written += self._write(tenant_id, user_id, chunk)
            return written

    def _write(self, tenant_id: str, user_id: str, uses: dict[str, _Use]) -> int:
        batch = [Usage(memory_id, use.times, use.last) for memory_id, use in uses.items()]
        try:
            # Memories deleted meanwhile, or not this user's, are skipped.
            written = self.long_term.record_access(batch, user_id=user_id, tenant_id=tenant_id)
            return len(written)
        except StoreError as exc:
            logger.warning("Memory: writing usage of %d memories failed: %s", len(uses), exc)
            with self._lock:
                for memory_id, use in uses.items():
                    _merge(self._pending, (tenant_id, user_id, memory_id), use)
            return 0

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.flush_every_s)
            self._wake.clear()
            if not self._stopped.is_set():
                self.flush()

    def close(self) -> None:
        """Stop the background thread and write what is pending."""
        self._stopped.set()
        self._wake.set()
        self._thread.join()
        self.flush()

    def __enter__(self) -> UsageRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge(pending: dict[_Key, _Use], key: _Key, use: _Use) -> None:
    known = pending.get(key)
    if known is None:
        pending[key] = use
    else:
        pending[key] = _Use(known.times + use.times, max(known.last, use.last))


def _by_user(uses: Mapping[_Key, _Use]) -> dict[tuple[str, str], dict[str, _Use]]:
    grouped: dict[tuple[str, str], dict[str, _Use]] = {}
    for (tenant_id, user_id, memory_id), use in uses.items():
        grouped.setdefault((tenant_id, user_id), {})[memory_id] = use
    return grouped
