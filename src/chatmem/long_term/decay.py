"""Decay and quotas (SPEC L5, L8): forgetting what is no longer worth keeping.

``sweep_decay`` pages through a tenant's (or one user's) memories, computes each one's
:func:`chatmem.ranking.decay_score` at ``now`` from its age (since ``created_at``), its last
access, its access count and its importance, stores the new score when it moved by at least
``min_change`` (a usage-only write, ``MemoryStore.touch``: no new version, no history row;
small drifts are not worth a write), and deletes the memories under ``threshold`` (default
0.2) with the score in their history's reason. First it deletes the memories whose TTL
(``time.expires_at``) has run out, pinned or not, with the reason ``EXPIRED_REASON``; no read
returned them since that moment anyway.

``enforce_quota`` keeps a user at ``limit`` memories at most: past it, the lowest-scoring
memories are deleted, each with a ``quota`` reason in its history.

Pinned memories are never rescored nor deleted by either: a memory is pinned when
``user_metadata["pinned"] is True`` or when it has the tag ``"pinned"`` (both work, so a
client can pin through the metadata or through tags).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from chatmem import checks
from chatmem.foreground import FOREGROUND
from chatmem.long_term.facade import LongTermMemory
from chatmem.ranking import DEFAULT_ACCESS_HALF_LIFE_S, DEFAULT_HALF_LIFE_S, decay_score
from chatmem.records import Filter, MemoryRecord, check_count, utcnow
from chatmem.stores.base import MemoryStore, Usage

logger = logging.getLogger("chatmem.decay")

#: Memories under this decay score are deleted by a sweep (SPEC L5, seed 000).
DEFAULT_THRESHOLD = 0.2
#: A score that moved less than this is not written back.
DEFAULT_MIN_CHANGE = 0.05
#: The history reason of a memory the sweep deleted because its TTL ran out.
EXPIRED_REASON = "expired"
PINNED_KEY = "pinned"
PINNED_TAG = "pinned"


@dataclass(frozen=True)
class HalfLives:
    """The half-lives of :func:`chatmem.ranking.decay_score`, in seconds."""

    age_s: float = DEFAULT_HALF_LIFE_S
    access_s: float = DEFAULT_ACCESS_HALF_LIFE_S


@dataclass(frozen=True)
class _Rules:
    """How one sweep judges a memory."""

    threshold: float
    now: datetime
    half_lives: HalfLives
    min_change: float


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did: memories read, scores written, memories deleted (decayed),
    pinned skipped, and expired memories deleted."""

    scanned: int = 0
    rescored: int = 0
    deleted: int = 0
    pinned: int = 0
    expired: int = 0


def is_pinned(record: MemoryRecord) -> bool:
    """Whether ``record`` is exempt from decay and quotas (see the module docstring)."""
    return record.user_metadata.get(PINNED_KEY) is True or PINNED_TAG in record.metadata.tags


def score_of(record: MemoryRecord, now: datetime, half_lives: HalfLives = HalfLives()) -> float:
    """``record``'s decay score at ``now``."""
    since_access = None
    if record.time.last_accessed is not None:
        since_access = (now - record.time.last_accessed).total_seconds()
    return decay_score(
        (now - record.time.created_at).total_seconds(),
        since_access,
        record.access_count,
        record.metadata.importance,
        half_life_s=half_lives.age_s,
        access_half_life_s=half_lives.access_s,
    )


def sweep_decay(
    long_term: LongTermMemory,
    *,
    tenant_id: str = "default",
    user_id: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    now: datetime | None = None,
    half_lives: HalfLives = HalfLives(),
    min_change: float = DEFAULT_MIN_CHANGE,
    page_size: int = 100,
) -> SweepReport:
    """Rescore every memory of a tenant (or of one user) and delete those under
    ``threshold``; pinned memories are left alone. Safe to run while others write: a
    score is written over whatever else changed meanwhile, and a memory deleted meanwhile
    is skipped."""
    checks.number(threshold, "threshold", low=0, high=1)
    min_change = checks.number(min_change, "min_change", low=0)
    page_size = check_count(page_size, "page_size")
    rules = _Rules(threshold, now or utcnow(), half_lives, min_change)
    scope = Filter(tenant_id=tenant_id, user_id=user_id)
    expired = long_term.store.delete(scope.model_copy(update={"expired": True}), EXPIRED_REASON)
    totals = SweepReport(expired=len(expired))
    for page in _pages(long_term.store, scope, page_size):
        FOREGROUND.pause()  # searches in flight go first (``chatmem.foreground``)
        totals = _add(totals, _sweep_page(long_term.store, scope, page, rules))
    logger.info(
        "decay sweep of tenant %s%s: %d expired, %d scanned, %d rescored, %d deleted, %d pinned",
        tenant_id,
        f", user {user_id}" if user_id else "",
        totals.expired,
        totals.scanned,
        totals.rescored,
        totals.deleted,
        totals.pinned,
    )
    return totals


def _sweep_page(
    store: MemoryStore,
    scope: Filter,
    page: Sequence[MemoryRecord],
    rules: _Rules,
) -> SweepReport:
    pinned = [r for r in page if is_pinned(r)]
    scores = {r.id: score_of(r, rules.now, rules.half_lives) for r in page if not is_pinned(r)}
    doomed = [r for r in page if r.id in scores and scores[r.id] < rules.threshold]
    # One delete per user and reason: the score to two decimals, rounded down, so a page's
    # deletions take a few transactions, not one each (each makes every search cache of
    # the user catch up, issue 14).
    groups: dict[tuple[str, str], list[str]] = {}
    for record in doomed:
        score = math.floor(scores[record.id] * 100) / 100
        reason = f"decay: score {score:.2f} under the threshold {rules.threshold}"
        groups.setdefault((record.user_id, reason), []).append(record.id)
    for (user_id, reason), ids in groups.items():
        FOREGROUND.pause()
        store.delete(scope.model_copy(update={"user_id": user_id, "ids": tuple(ids)}), reason)
    FOREGROUND.pause()
    moved = [
        (r, scores[r.id])
        for r in page
        if r.id in scores
        and scores[r.id] >= rules.threshold
        and abs(scores[r.id] - r.time.decay_score) >= rules.min_change
    ]
    written = _write_scores(store, moved)
    return SweepReport(len(page), written, len(doomed), len(pinned))


def _write_scores(store: MemoryStore, scored: Sequence[tuple[MemoryRecord, float]]) -> int:
    """Store the new scores, one usage-only write per user; returns how many were written."""
    by_user: dict[tuple[str, str], list[Usage]] = {}
    for record, score in scored:
        owner = (record.tenant_id, record.user_id)
        by_user.setdefault(owner, []).append(Usage(record.id, decay_score=score))
    return sum(
        len(store.touch(uses, Filter(tenant_id=tenant_id, user_id=user_id)))
        for (tenant_id, user_id), uses in by_user.items()
    )


def enforce_quota(
    long_term: LongTermMemory,
    *,
    user_id: str,
    limit: int,
    tenant_id: str = "default",
    now: datetime | None = None,
    half_lives: HalfLives = HalfLives(),
) -> list[str]:
    """Delete a user's lowest-scoring memories past ``limit`` (SPEC L8); returns their ids.

    Pinned memories are never deleted and do not make room: a user with more pinned
    memories than ``limit`` keeps them all (a warning is logged).
    """
    checks.whole(limit, "max_memories_per_user", low=0)
    scope = Filter(tenant_id=tenant_id, user_id=user_id)
    excess = long_term.store.count(scope) - limit
    if excess <= 0:
        return []
    moment = now or utcnow()
    candidates = [
        (score_of(r, moment, half_lives), r.time.created_at, r)
        for page in _pages(long_term.store, scope, 500)
        for r in page
        if not is_pinned(r)
    ]
    if len(candidates) < excess:
        logger.warning("user %s has more pinned memories than the quota %d", user_id, limit)
    candidates.sort(key=lambda item: (item[0], item[1]))
    deleted = []
    for score, _, record in candidates[:excess]:
        FOREGROUND.pause()
        reason = f"quota: over {limit} memories; decay score {score:.3f} was among the lowest"
        deleted.extend(long_term.store.delete(_one(scope, record), reason))
    logger.info("quota: deleted %d memories of user %s (limit %d)", len(deleted), user_id, limit)
    return deleted


def _one(scope: Filter, record: MemoryRecord) -> Filter:
    return scope.model_copy(update={"user_id": record.user_id, "ids": (record.id,)})


def _pages(store: MemoryStore, scope: Filter, size: int) -> Iterator[list[MemoryRecord]]:
    """``scope``'s memories a page at a time. Deleting memories of a page already read does
    not move the cursor (it points past them)."""
    cursor: str | None = None
    while True:
        page = store.list(scope, size, cursor)
        if page.records:
            yield page.records
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def _add(a: SweepReport, b: SweepReport) -> SweepReport:
    return SweepReport(
        a.scanned + b.scanned,
        a.rescored + b.rescored,
        a.deleted + b.deleted,
        a.pinned + b.pinned,
        a.expired + b.expired,
    )


__all__ = [
    "DEFAULT_MIN_CHANGE",
    "DEFAULT_THRESHOLD",
    "EXPIRED_REASON",
    "PINNED_KEY",
    "PINNED_TAG",
    "HalfLives",
    "SweepReport",
    "enforce_quota",
    "is_pinned",
    "score_of",
    "sweep_decay",
]
