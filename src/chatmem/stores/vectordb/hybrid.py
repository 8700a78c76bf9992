"""A hybrid search's two halves merged into candidates with both raw scores.

A vector database answers the dense half (cosine similarity) and the keyword half (BM25) as
two top-k lists. A keyword hit missing from the dense list gets its cosine computed from its
stored vector, so every candidate the ranking layer fuses has a cosine when a vector was
given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatmem.records import Candidate, Vector


def candidates(
    cosine: dict[str, float],
    keyword: dict[str, float],
    vector: Vector | None,
    cosines: Callable[[Sequence[str], Vector], dict[str, float]],
) -> list[Candidate]:
    """The union of both halves by id; ``cosines(ids, vector)`` scores keyword-only hits."""
    missing = sorted(set(keyword) - set(cosine))
    if vector is not None and missing:
        cosine.update(cosines(missing, vector))
    return [
        Candidate(memory_id, cosine.get(memory_id), keyword.get(memory_id))
        for memory_id in sorted(set(cosine) | set(keyword))
    ]
