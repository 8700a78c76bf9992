"""The rules a batch moves by, written once for every outbox (pure functions).

- **Per-user order**: :func:`claimable` offers only each user's earliest unfinished batch.
- **Leases**: :func:`claimed` leases a batch for :func:`lease_end`; a lease names its process
  (:func:`new_lease`), so one whose process is gone can be taken back at once
  (:func:`lease_is_orphaned`) instead of after it runs out.
- **Dead batches**: a batch whose lease ran out on its last attempt (its worker died or hung
  every time) is dead, not claimed again; so is one that failed its last attempt
  (:func:`failed`, :func:`after_failure`). Dead batches are kept, with their last error.

The in-memory outbox applies these to its records, the SQL outboxes
(:mod:`chatmem.worker.sql_outbox`) to rows; they differ only in where the batch is kept.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import replace

from chatmem.worker.batch import Batch, BatchState, RetryPolicy

#: Kept of a failure's message; the rest is in the worker's log.
ERROR_CHARS = 2000
#: The last error of a batch that ran out of attempts while leased.
LOST = "lease expired on the last attempt (the worker died or hung)"

#: This process, as its leases name it: a pid can be reused (a container's pid 1 is), so a
#: random token of this run goes with it.
PROCESS = f"{os.getpid()}.{secrets.token_hex(4)}"


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


def claimed(batch: Batch, lease: str, retry: RetryPolicy) -> Batch:
    """What a claim makes of a claimable ``batch``: leased under ``lease`` for one more
    attempt, or dead when its lease ran out on its last attempt."""
    if batch.state is BatchState.LEASED and batch.attempts >= retry.max_attempts:
        return replace(batch, state=BatchState.DEAD, lease=None, last_error=LOST)
    return replace(batch, state=BatchState.LEASED, attempts=batch.attempts + 1, lease=lease)


def failed(
    batch: Batch, error: str, *, lease: str | None, now_ms: int, retry: RetryPolicy
) -> Batch | None:
    """What a failed attempt makes of ``batch``: pending again after a backoff, or dead
    after its last attempt. None when the failure no longer counts: the batch is not
    leased, or (with ``lease``) is leased under another claim."""
    if batch.state is not BatchState.LEASED or (lease and batch.lease != lease):
        return None
    state, due = after_failure(batch.attempts, now_ms, retry)
    return replace(
        batch, state=state, next_attempt_at=due, last_error=error[:ERROR_CHARS], lease=None
    )


def lease_end(now_ms: int, retry: RetryPolicy) -> int:
    """When a lease taken or renewed at ``now_ms`` runs out, in milliseconds."""
    return now_ms + int(retry.lease_s * 1000)


def new_lease() -> str:
    """A lease id that names its process: ``pid.token:random``."""
    return f"{PROCESS}:{secrets.token_hex(8)}"


def lease_is_orphaned(lease: str | None, *, this_process: str | None = None) -> bool:
    """Whether ``lease`` was taken by a process of this machine that is gone: another run
    under this pid, or a pid that no longer exists. Leases of other machines (or of an
    older format) are left to expire."""
    owner, sep, _ = (lease or "").partition(":")
    pid_text, dot, token = owner.partition(".")
    if not (sep and dot and pid_text.isdigit() and token):
        return False
    me = this_process or PROCESS
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


__all__ = [
    "ERROR_CHARS",
    "LOST",
    "PROCESS",
    "after_failure",
    "backoff_s",
    "claimable",
    "claimed",
    "failed",
    "lease_end",
    "lease_is_orphaned",
    "new_lease",
]
