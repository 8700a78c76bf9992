"""Hybrid ranking as pure functions: how a store's candidates become one ranked list.

The fused score of a candidate is ``vector_weight * v + keyword_weight * k`` where

- ``v`` is the cosine similarity of query and memory, clipped to [0, 1]; every candidate has
  one, keyword-only finds included, so a word match on an unrelated memory is not enough;
- ``k`` is the candidate's BM25 score divided by the best BM25 score among the candidates
  (0 for memories the keyword half did not find).

The weights sum to 1, so the score lies in [0, 1]. Defaults (0.6 / 0.4, 50 candidates a half)
were tuned on LoCoMo conversations 0-4 and checked on 5-9 (docs/benchmarks.md): convex fusion
beat reciprocal rank fusion there (0.768 against 0.745 recall@10 on the tuning half).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from chatmem.errors import ValidationError
from chatmem.records import Candidate


@dataclass(frozen=True)
class RankingConfig:
    """Weights of the hybrid ranking; see the module docstring for the formula."""

    vector_weight: float = 0.6
    keyword_weight: float = 0.4
    #: How many candidates each half of the search returns before fusion.
    candidates: int = 50

    def __post_init__(self) -> None:
        if self.vector_weight < 0 or self.keyword_weight < 0:
            raise ValidationError("weights must be non-negative", field="ranking")
        if abs(self.vector_weight + self.keyword_weight - 1.0) > 1e-6:
            raise ValidationError("vector_weight + keyword_weight must be 1", field="ranking")
        if self.candidates < 1:
            raise ValidationError("must be at least 1", field="ranking.candidates")


DEFAULT_RANKING = RankingConfig()


class Scored(NamedTuple):
    """A candidate with its fused score and the two normalised parts it came from."""

    id: str
    score: float
    vector_score: float | None
    keyword_score: float | None


def fuse(candidates: list[Candidate], config: RankingConfig = DEFAULT_RANKING) -> list[Scored]:
    """Score every candidate, best first (ties broken by id, so the order is stable)."""
    best = max((c.keyword_score or 0.0 for c in candidates), default=0.0)
    scored = []
    for candidate in candidates:
        vector = None
        if candidate.vector_score is not None:
            vector = min(max(candidate.vector_score, 0.0), 1.0)
        keyword = None
        if candidate.keyword_score is not None and best > 0:
            keyword = max(candidate.keyword_score, 0.0) / best
        score = config.vector_weight * (vector or 0.0) + config.keyword_weight * (keyword or 0.0)
        scored.append(Scored(candidate.id, score, vector, keyword))
    scored.sort(key=lambda s: (-s.score, s.id))
    return scored


def select(scored: list[Scored], k: int, threshold: float | None = None) -> list[Scored]:
    """The best ``k`` at or above ``threshold``."""
    kept = scored if threshold is None else [s for s in scored if s.score >= threshold]
    return kept[:k]


#: Decay defaults (SPEC L5): a memory nobody uses loses half its freshness in 30 days; a use
#: is remembered with a half-life of 14 days.
DEFAULT_HALF_LIFE_S = 30 * 86_400.0
DEFAULT_ACCESS_HALF_LIFE_S = 14 * 86_400.0
#: An importance of 1 stretches the half-life of age to (1 + IMPORTANCE_STRETCH) times.
IMPORTANCE_STRETCH = 2.0
#: Each use multiplies the score by 1 + ACCESS_BOOST * ln(1 + uses).
ACCESS_BOOST = 0.25


def decay_score(
    age_s: float,
    since_access_s: float | None,
    access_count: int,
    importance: float,
    *,
    half_life_s: float = DEFAULT_HALF_LIFE_S,
    access_half_life_s: float = DEFAULT_ACCESS_HALF_LIFE_S,
) -> float:
    """How worth keeping a memory is, in [0, 1] (1 = fresh, under 0.2 = forgettable).

    ``score = min(1, freshness * (1 + ACCESS_BOOST * ln(1 + access_count)))`` where
    ``freshness = max(0.5 ** (age_s / (half_life_s * (1 + IMPORTANCE_STRETCH * importance))),
    0.5 ** (since_access_s / access_half_life_s))``: age decays exponentially, more slowly the
    more important the memory; a recent use refreshes it (``since_access_s`` None: never
    used); many uses slow the fall. With the defaults an unused memory of importance 0.5 falls
    under 0.2 after about 139 days, one of importance 0.9 after about 195 days.
    """
    if half_life_s <= 0 or access_half_life_s <= 0:
        raise ValidationError("half-lives must be positive", field="half_life_s")
    weight = min(max(importance, 0.0), 1.0)
    stretched = half_life_s * (1.0 + IMPORTANCE_STRETCH * weight)
    freshness: float = 0.5 ** (max(age_s, 0.0) / stretched)
    if since_access_s is not None:
        freshness = max(freshness, 0.5 ** (max(since_access_s, 0.0) / access_half_life_s))
    boost = 1.0 + ACCESS_BOOST * math.log1p(max(access_count, 0))
    return min(1.0, max(0.0, freshness * boost))
