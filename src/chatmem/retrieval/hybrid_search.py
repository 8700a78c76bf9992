"""The search (SPEC R3): a hybrid search of one user's current memories in long-term
memory, narrowed by a filter, then the rerank of ``chatmem.retrieval.reranking``, a memory that
repeats one above it set after the rest (``chatmem.ranking.Repeats``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from chatmem.errors import ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.ranking import Repeats
from chatmem.records import Filter, MemoryType, utcnow
from chatmem.retrieval.query import Query
from chatmem.retrieval.reranking import (
    DEFAULT_WEIGHTS,
    RELEVANCE_REFERENCE,
    RerankWeights,
    RetrievedMemory,
    mark_updated,
    rank,
    superseded_at,
)

#: How many more candidates than ``k`` are read from long-term memory before the rerank.
CANDIDATE_FACTOR = 4


def search(
    long_term: LongTermMemory,
    query: Query | str,
    *,
    user_id: str,
    tenant_id: str = "default",
    k: int = 5,
    threshold: float = 0.6,
    types: Collection[MemoryType] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    include_superseded: bool = False,
    project_id: str | None = None,
    session_id: str | None = None,
    roles: Collection[str] | None = None,
) -> list[RetrievedMemory]:
    """Hybrid search of one user's memories, reranked (R3): the best ``k`` whose
    normalised relevance (not the final score; see ``chatmem.retrieval.reranking``) is at
    least ``threshold``. ``types`` keeps those types, ``project_id`` and ``session_id`` that
    project's or session's memories, ``roles`` those a reader holding them may see
    (``Filter.reader_roles``; None: all);
    ``since`` / ``until`` bound ``created_at`` (``since`` <= created_at < ``until``).

    Memories superseded by ``now`` (``valid_to`` passed) are left out, as long-term memory
    does, unless ``include_superseded``: then they are kept and marked. Either way the
    earlier value comes back through the ``updates`` link of the current one (``expand``).

    A memory whose speaker said the same words in one ranked above it (the ranking's
    ``repeats_last``) is returned only when too few others pass: the same remark said on
    three days takes one place of the ``k``, not three.
    """
    check_search(k, threshold)
    moment = now or utcnow()
    narrow = _narrowing(types, project_id, session_id, since, until, roles)
    found = long_term.search(
        query.text if isinstance(query, Query) else query,
        user_id=user_id,
        tenant_id=tenant_id,
        k=k * CANDIDATE_FACTOR,
        # A relevance of at least t needs a fused score of at least t x the reference:
        # what scores less can never pass, so it is not even read from the store.
        threshold=threshold * RELEVANCE_REFERENCE,
        filter=narrow,
        # Judged here against ``now`` (long-term memory would use the clock), and before
        # the rerank, so relevance is relative to the best memory that can be shown.
        include_superseded=True,
    )
    if not include_superseded:
        found = [r for r in found if superseded_at(r.record, moment) is None]
    ranked = rank(found, threshold=threshold, weights=weights, now=moment)
    if long_term.ranking.repeats_last:
        ranked = _repeats_last(ranked, k)
    return mark_updated(ranked[:k], moment)


def _narrowing(
    types: Collection[MemoryType] | None,
    project_id: str | None,
    session_id: str | None,
    since: datetime | None,
    until: datetime | None,
    roles: Collection[str] | None,
) -> Filter:
    """The filter of ``search``'s narrowing arguments."""
    return Filter.checked(
        {
            "types": frozenset(types) if types is not None else None,
            "project_id": project_id,
            "session_id": session_id,
            "created_after": since,
            "created_before": until,
            "reader_roles": frozenset(roles) if roles is not None else None,
        },
        "filter",
    )


def _repeats_last(ranked: list[RetrievedMemory], k: int) -> list[RetrievedMemory]:
    """``ranked`` with its first ``k`` that repeat none above them (``Repeats``) first, then
    the repeats passed on the way; what follows is not read."""
    repeats = Repeats()
    kept: list[RetrievedMemory] = []
    aside: list[RetrievedMemory] = []
    for n, memory in enumerate(ranked):
        if len(kept) == k:
            return kept + aside + ranked[n:]
        (aside if repeats.seen(memory.record) else kept).append(memory)
    return kept + aside


def check_search(k: int, threshold: float) -> None:
    """Raise ``ValidationError`` unless ``k`` is at least 1 and ``threshold`` in [0, 1]."""
    if k < 1:
        raise ValidationError("must be at least 1", field="k")
    if not 0.0 <= threshold <= 1.0:
        raise ValidationError("must be between 0 and 1", field="threshold")
