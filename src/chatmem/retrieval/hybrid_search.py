"""The search (SPEC R3): a hybrid search of one user's current memories in long-term
memory, narrowed by a filter, then the rerank of ``chatmem.retrieval.reranking``, a memory that
repeats one above it set after the rest (``chatmem.ranking.Repeats``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from chatmem import checks
from chatmem.long_term import LongTermMemory, Shortlisted
from chatmem.ranking import repeats_last
from chatmem.records import Filter, MemoryType, utcnow
from chatmem.retrieval.query import Query
from chatmem.retrieval.reranking import (
    DEFAULT_WEIGHTS,
    RELEVANCE_REFERENCE,
    RerankWeights,
    RetrievedMemory,
    mark_updated,
    scored_order,
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
    late: bool = True,
    light: bool = False,
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
    three days takes one place of the ``k``, not three. ``late=False`` leaves out long-term
    memory's late rerank; ``light`` is a search under load (the retriever's), as
    ``LongTermMemory.search`` takes it: no late rerank, the query embedded once.
    """
    k, threshold = check_search(k, threshold)
    moment = now or utcnow()
    narrow = _narrowing(types, project_id, session_id, since, until, roles)
    text = query.text if isinstance(query, Query) else query
    found = _shortlisted(
        long_term, text, user_id, tenant_id, k, threshold, narrow, late=late, light=light
    )
    kept = reranked(
        long_term,
        found,
        user_id=user_id,
        tenant_id=tenant_id,
        filter=narrow,
        k=k,
        threshold=threshold,
        weights=weights,
        now=moment,
        include_superseded=include_superseded,
    )
    return [memory for memory, _ in kept]


def _shortlisted(
    long_term: LongTermMemory,
    text: str,
    user_id: str,
    tenant_id: str,
    k: int,
    threshold: float,
    narrow: Filter,
    *,
    late: bool,
    light: bool,
) -> list[Shortlisted]:
    """The ``CANDIDATE_FACTOR`` x k candidates the rerank chooses from, with what it needs
    (``Head``): only the k kept are read whole, where parsing all 4 x k records was the
    largest single cost of the interpreter lock under load (docs/benchmarks.md, "A rerank
    that reads what it ranks by")."""
    return long_term.shortlist(
        text,
        user_id=user_id,
        tenant_id=tenant_id,
        k=k * CANDIDATE_FACTOR,
        # A relevance of at least t needs a fused score of at least t x the reference:
        # what scores less can never pass, so it is not even read from the store.
        threshold=threshold * RELEVANCE_REFERENCE,
        filter=narrow,
        # Judged against the request's moment in ``reranked`` (long-term memory would use
        # the clock), and before the rerank, so relevance is relative to the best memory
        # that can be shown.
        include_superseded=True,
        late=late,
        light=light,
    )


def reranked(
    long_term: LongTermMemory,
    found: list[Shortlisted],
    *,
    user_id: str,
    tenant_id: str,
    filter: Filter,
    k: int,
    threshold: float,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime,
    include_superseded: bool = False,
) -> list[tuple[RetrievedMemory, Shortlisted]]:
    """The best ``k`` of a shortlist (``LongTermMemory.shortlist`` within ``filter``, with
    superseded facts) by the rerank, from their heads, repeats last; only those are read
    whole. Each comes with what the shortlist said of it (its cosine and BM25, for a caller
    that shows why it was found)."""
    if not include_superseded:
        found = [m for m in found if not m.head.ended_by(now)]
    order = scored_order(
        [m.score for m in found],
        [m.head for m in found],
        [m.id for m in found],
        threshold=threshold,
        weights=weights,
        now=now,
    )
    if long_term.ranking.repeats_last:
        order = repeats_last(order, k, lambda r: found[r.position].head[:2])
    kept = [(found[r.position], r) for r in order[:k]]
    records = long_term.records(
        [m.id for m, _ in kept], user_id=user_id, tenant_id=tenant_id, filter=filter
    )
    chosen = [
        (
            RetrievedMemory(
                records[m.id],
                r.score,
                r.relevance,
                r.recency,
                m.score,
                superseded_at(records[m.id], now),
            ),
            m,
        )
        for m, r in kept
        if m.id in records  # gone since the shortlist: a concurrent delete
    ]
    marked = mark_updated([memory for memory, _ in chosen], now)
    return [(memory, m) for memory, (_, m) in zip(marked, chosen, strict=True)]


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


def check_search(k: int, threshold: float) -> tuple[int, float]:
    """``k`` and ``threshold`` as Python's ``int`` and ``float``; a ``ValidationError``
    unless ``k`` is at least 1 and ``threshold`` in [0, 1]."""
    return checks.whole(k, "k", low=1), checks.number(threshold, "threshold", low=0, high=1)
