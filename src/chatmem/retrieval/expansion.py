"""The expansion (SPEC L6): typed links followed from the hits, within the same tenant and
user, so an earlier value or a related memory comes along with the one found."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from chatmem import checks
from chatmem.long_term import LongTermMemory
from chatmem.records import Filter, MemoryRecord, RelationType, utcnow
from chatmem.retrieval.reranking import (
    DEFAULT_WEIGHTS,
    RetrievedMemory,
    recency_score,
    superseded_at,
)

#: The relation types followed by default.
LINK_TYPES = frozenset(RelationType)
#: Most memories ``expand`` adds by default.
MAX_LINKED = 10


def expand(
    long_term: LongTermMemory,
    results: Sequence[RetrievedMemory],
    *,
    user_id: str,
    tenant_id: str = "default",
    hops: int = 1,
    types: Collection[RelationType] = LINK_TYPES,
    now: datetime | None = None,
    limit: int = MAX_LINKED,
    roles: Collection[str] | None = None,
) -> list[RetrievedMemory]:
    """The memories that ``results`` link to (``types``), ``hops`` links away at most, read
    within the same tenant and user only; those not already in ``results``, at most
    ``limit``, and only those a reader holding ``roles`` may see (None: all). The target
    of an ``updates`` link, or of a ``contradicts`` link from a newer memory, is marked
    superseded."""
    hops = checks.whole(hops, "hops", low=0, message="must be 0 or more")
    limit = checks.whole(limit, "limit", low=0, message="must be 0 or more")
    moment = now or utcnow()
    readers = frozenset(roles) if roles is not None else None
    scope = Filter.checked(
        {"tenant_id": tenant_id, "user_id": user_id, "reader_roles": readers}, "filter"
    )
    seen = {m.record.id for m in results}
    frontier = list(results)
    linked: list[RetrievedMemory] = []
    for _ in range(hops):
        wanted = _targets(frontier, frozenset(types), seen)
        if not wanted or len(linked) >= limit:
            break
        records = long_term.store.get(list(wanted), scope)
        frontier = []
        for record in records:
            if not scope.matches(record):
                continue  # the store filtered already; never trust one layer alone (L7)
            source, kind = wanted[record.id]
            item = _linked(record, source, kind, moment)
            seen.add(record.id)
            frontier.append(item)
            linked.append(item)
    return linked[:limit]


def _targets(
    sources: Sequence[RetrievedMemory], types: frozenset[RelationType], seen: set[str]
) -> dict[str, tuple[MemoryRecord, RelationType]]:
    wanted: dict[str, tuple[MemoryRecord, RelationType]] = {}
    for source in sources:
        for relation in source.record.relations:
            if relation.type in types and relation.target_id not in seen:
                wanted.setdefault(relation.target_id, (source.record, relation.type))
    return wanted


def _linked(
    record: MemoryRecord, source: MemoryRecord, kind: RelationType, now: datetime
) -> RetrievedMemory:
    ends = superseded_at(record, now)
    started = source.time.valid_from or source.time.created_at
    replaced = kind is RelationType.UPDATES or (
        kind is RelationType.CONTRADICTS and record.time.created_at < source.time.created_at
    )
    if ends is None and replaced and started <= now:
        ends = started
    recency = recency_score(record, now, DEFAULT_WEIGHTS.half_life_days)
    return RetrievedMemory(record, 0.0, 0.0, recency, 0.0, ends, kind, source.id)
