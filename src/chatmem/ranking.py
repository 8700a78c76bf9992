"""Hybrid ranking as pure functions: how vector and keyword candidates become one list.

The fused score of a memory is ``vector_weight * v + keyword_weight * k`` where

- ``v`` is the cosine similarity of the query and the memory, clipped to [0, 1];
- ``k`` is the keyword score: FTS5/BM25 divided by the best keyword score of the query,
  damped when that best score itself is weak (``k = s / max(best, keyword_floor)``), so a
  lone weak word match does not reach 1.

Both weights sum to 1, so the fused score lies in [0, 1] and a threshold means the same
thing for every backend and every query.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatmem.errors import ValidationError
from chatmem.records import Candidates, MemoryRecord, SearchResult


@dataclass(frozen=True)
class RankingConfig:
    """Weights of the hybrid ranking; see the module docstring for the formula."""

    vector_weight: float = 0.5
    keyword_weight: float = 0.5
    #: The keyword score that counts as a full match even when it is the best of the query.
    keyword_floor: float = 8.0
    #: How many candidates each half of the search returns before fusion.
    candidates: int = 50

    def __post_init__(self) -> None:
        if self.vector_weight < 0 or self.keyword_weight < 0:
            raise ValidationError("weights must be non-negative", field="ranking")
        if abs(self.vector_weight + self.keyword_weight - 1.0) > 1e-6:
            raise ValidationError("vector_weight + keyword_weight must be 1", field="ranking")
        if self.keyword_floor <= 0:
            raise ValidationError("must be positive", field="ranking.keyword_floor")
        if self.candidates < 1:
            raise ValidationError("must be at least 1", field="ranking.candidates")


DEFAULT_RANKING = RankingConfig()


def fuse(candidates: Candidates, config: RankingConfig = DEFAULT_RANKING) -> list[SearchResult]:
    """Merge both halves into one list, best first (ties broken by recency, then id)."""
    records: dict[str, MemoryRecord] = {}
    vector: dict[str, float] = {}
    keyword: dict[str, float] = {}
    for hit in candidates.vector:
        records[hit.record.id] = hit.record
        vector[hit.record.id] = min(max(hit.score, 0.0), 1.0)
    best = max((hit.score for hit in candidates.keyword), default=0.0)
    scale = max(best, config.keyword_floor)
    for hit in candidates.keyword:
        records[hit.record.id] = hit.record
        keyword[hit.record.id] = min(max(hit.score, 0.0) / scale, 1.0)
    results = [
        SearchResult(
            record=record,
            score=config.vector_weight * vector.get(memory_id, 0.0)
            + config.keyword_weight * keyword.get(memory_id, 0.0),
            vector_score=vector.get(memory_id),
            keyword_score=keyword.get(memory_id),
        )
        for memory_id, record in records.items()
    ]
    results.sort(key=lambda r: (-r.score, -r.record.time.created_at.timestamp(), r.record.id))
    return results


def select(
    results: list[SearchResult], k: int, threshold: float | None = None
) -> list[SearchResult]:
    """The best ``k`` results at or above ``threshold``."""
    kept = results if threshold is None else [r for r in results if r.score >= threshold]
    return kept[:k]
