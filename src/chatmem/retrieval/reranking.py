"""The rerank (SPEC R3) as pure functions: how the memories a search found become the
few a request is given, and the parts of their score.

``LongTermMemory.search`` gives each memory a fused score in [0, 1] (0.6 x cosine + 0.4 x
BM25 relative to the best keyword match, the latter scaled down under a cosine of 0.15: see
``chatmem.ranking``). On the local MiniLM
embedder that score separates badly at a fixed level: true hits that share a word with the
query score 0.54-0.90, true hits that share none (the question and the fact say it
differently: "Do I have any pets?" / "User lives in Berlin with two cats") only 0.17-0.24,
while unrelated memories score 0.08-0.25 and, when they share a word, up to 0.59. A fixed
0.6 on the fused score keeps half the true hits. So the threshold applies to the
**relevance**::

    relevance = fused / max(best fused score of this search, RELEVANCE_REFERENCE)

with ``RELEVANCE_REFERENCE = 1/3``. When the search found a good match (fused >= 1/3,
which in practice means a keyword match), relevance is relative to it and 0.6 keeps what
scores at least 60 % of the best: noise that merely shares a word with the query falls
away. When the best match is weak, the scale is absolute and 0.6 means a fused score of at
least 0.2: a paraphrase with a cosine of 0.34-0.37 passes ("Do I have any pets?" / "User
has two cats": 0.36), unrelated text (cosine under about 0.25) does not; one at 0.33 is on
the edge, where the fast query model's vectors (within about 0.01 of the exact ones) can
tip it either way. On 20 questions (and 8 with no answer stored) against 15 facts among
500 and 5,000 distractors, 0.6 kept 18-19 of the 20 true hits (with 11-16 unrelated
memories in the 140 slots of top-5), against 10-11 (and none unrelated) for 0.6 on the
fused score. Recency and importance only reorder what passed: an old but relevant fact is
never cut for its age. The final score is ``w_r x relevance + w_t x recency + w_i x importance``
(weights 0.7 / 0.15 / 0.15, summing to 1), recency ``0.5 ** (age / half-life)`` measured
from ``valid_from`` (else ``created_at``), half-life 30 days.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NamedTuple

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.ranking import repeats_last
from chatmem.records import MemoryRecord, RelationType, SearchResult
from chatmem.stores.base import Head

#: The fused score of a "good" match: relevance is measured against it when the search
#: found nothing better (see the module docstring).
RELEVANCE_REFERENCE = 1 / 3


@dataclass(frozen=True)
class RerankWeights:
    """How relevance, recency and importance make the final score (they sum to 1), and how
    fast recency fades (``0.5 ** (age / half_life_days)``)."""

    relevance: float = 0.7
    recency: float = 0.15
    importance: float = 0.15
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        weights = [
            checks.number(getattr(self, name), f"weights.{name}")
            for name in ("relevance", "recency", "importance")
        ]
        # A NaN sum is never near 1.
        if min(weights) < 0 or not abs(sum(weights) - 1.0) <= 1e-6:
            raise ValidationError("weights must be non-negative and sum to 1", field="weights")
        checks.number(self.half_life_days, "weights.half_life_days", positive=True)


DEFAULT_WEIGHTS = RerankWeights()


@dataclass(frozen=True)
class RetrievedMemory:
    """A memory chosen for a request, with the parts of its score.

    ``score`` is the final rerank score, ``relevance`` the normalised relevance the
    threshold applies to, ``fused`` long-term memory's own score (all three 0 for a memory
    reached by a link: ``via`` is then the link's type and ``linked_from`` its source).
    ``superseded_until`` is set when the memory is no longer true (it is rendered as
    earlier, never as current).
    """

    record: MemoryRecord
    score: float
    relevance: float
    recency: float
    fused: float
    superseded_until: datetime | None = None
    via: RelationType | None = None
    linked_from: str | None = None

    @property
    def current(self) -> bool:
        """Whether the memory is still true (not superseded)."""
        return self.superseded_until is None


def relevance_scores(fused: Sequence[float], reference: float = RELEVANCE_REFERENCE) -> list[float]:
    """Each fused score relative to the best of them, or to ``reference`` when the best is
    lower, in [0, 1] (see the module docstring)."""
    scale = max(max(fused, default=0.0), reference)
    return [min(max(f / scale, 0.0), 1.0) for f in fused]


def recency_score(record: MemoryRecord, now: datetime, half_life_days: float) -> float:
    """``0.5 ** (age / half-life)``, age from ``valid_from`` (else ``created_at``); a
    memory that starts in the future counts as new."""
    return _recency(record.time.valid_from or record.time.created_at, now, half_life_days)


def _recency(anchor: datetime, now: datetime, half_life_days: float) -> float:
    age_days = max((now - anchor).total_seconds(), 0.0) / 86_400.0
    return float(0.5 ** (age_days / half_life_days))


class Ranked(NamedTuple):
    """Where one memory stands in ``scored_order``: its position in the lists given, and
    the parts of its score."""

    position: int
    score: float
    relevance: float
    recency: float


def scored_order(
    fused: Sequence[float],
    heads: Sequence[Head],
    ids: Sequence[str],
    *,
    threshold: float,
    weights: RerankWeights,
    now: datetime,
    reference: float = RELEVANCE_REFERENCE,
) -> list[Ranked]:
    """The memories (their ``fused`` scores, ``heads`` and ``ids``, in one order) whose
    relevance is at least ``threshold``, best final score first (ties by id): what ``rank``
    computes, from the fields a store reads without parsing records
    (``MemoryStore.heads``)."""
    relevance = relevance_scores(fused, reference)
    out = []
    for index, (head, rel) in enumerate(zip(heads, relevance, strict=True)):
        if rel < threshold:
            continue
        recency = _recency(head.since, now, weights.half_life_days)
        score = (
            weights.relevance * rel
            + weights.recency * recency
            + weights.importance * head.importance
        )
        out.append(Ranked(index, score, rel, recency))
    out.sort(key=lambda r: (-r.score, ids[r.position]))
    return out


def superseded_at(record: MemoryRecord, now: datetime) -> datetime | None:
    """When ``record`` stopped being true, if it had by ``now`` (its ``valid_to``)."""
    ends = record.time.valid_to
    return ends if ends is not None and ends <= now else None


def rerank(
    found: Sequence[SearchResult],
    *,
    k: int,
    threshold: float,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime,
    reference: float = RELEVANCE_REFERENCE,
    repeats: bool = False,
) -> list[RetrievedMemory]:
    """The best ``k`` of ``found`` whose relevance is at least ``threshold``, by final
    score (pure; see the module docstring for the formula); with ``repeats``, a remark its
    speaker said again in one above it comes after the others (``ranking.repeats_last``, as
    ``chatmem.retrieval.search`` ranks when ``RankingConfig.repeats_last`` is on)."""
    ranked = rank(found, threshold=threshold, weights=weights, now=now, reference=reference)
    if repeats:
        ranked = repeats_last(ranked, k, lambda m: Head.of(m.record)[:2])
    return mark_updated(ranked[:k], now)


def rank(
    found: Sequence[SearchResult],
    *,
    threshold: float,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime,
    reference: float = RELEVANCE_REFERENCE,
) -> list[RetrievedMemory]:
    """Every one of ``found`` whose relevance is at least ``threshold``, best final score
    first (ties by id); ``rerank`` without the cut to ``k`` and the ``updates`` marks."""
    parts = scored_order(
        [r.score for r in found],
        [Head.of(r.record) for r in found],
        [r.record.id for r in found],
        threshold=threshold,
        weights=weights,
        now=now,
        reference=reference,
    )
    return [
        RetrievedMemory(
            found[p.position].record,
            p.score,
            p.relevance,
            p.recency,
            found[p.position].score,
            superseded_at(found[p.position].record, now),
        )
        for p in parts
    ]


def mark_updated(memories: Sequence[RetrievedMemory], now: datetime) -> list[RetrievedMemory]:
    """Mark as superseded the memories that another of ``memories`` ``updates`` (when the
    newer one has started by ``now``), even if their ``valid_to`` was never set."""
    by_id = {m.record.id: m for m in memories}
    ends: dict[str, datetime] = {}
    for newer in memories:
        start = newer.record.time.valid_from or newer.record.time.created_at
        if start > now:
            continue
        for relation in newer.record.relations:
            if relation.type is RelationType.UPDATES and relation.target_id in by_id:
                ends[relation.target_id] = min(start, ends.get(relation.target_id, start))
    return [
        replace(m, superseded_until=ends[m.record.id]) if m.current and m.record.id in ends else m
        for m in memories
    ]
