"""Record and vector builders shared by the store tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from chatmem.records import Entry, Filter, MemoryRecord, Vector
from chatmem.stores import MemoryStore, SearchQuery
from chatmem.stores.base import Change
from chatmem.stores.vector_cache import Row


def unit_vector(dimension: int, *weights: float) -> Vector:
    """A unit vector of ``dimension`` whose first components are ``weights``."""
    vector = np.zeros(dimension, dtype=np.float32)
    vector[: len(weights)] = weights
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def record(tenant: str, user: str, text: str, **fields: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {"tenant_id": tenant, "user_id": user, "content": {"raw": text}, **fields}
    )


def forget(writer: MemoryStore, held: dict[str, MemoryRecord], gone: Sequence[str]) -> None:
    """Delete the memories ``gone`` of user "u" through ``writer``, and from ``held``."""
    writer.delete(Filter(user_id="u", ids=tuple(gone)))
    for memory_id in gone:
        del held[memory_id]


def rewrite(
    writer: MemoryStore,
    held: dict[str, MemoryRecord],
    memory_id: str,
    importance: float,
    vector: Vector | None,
) -> None:
    """Update ``held[memory_id]`` through ``writer`` to a new version with ``importance``,
    and ``vector`` where one is given (else its vector stays)."""
    old = held[memory_id]
    meta = old.metadata.model_copy(update={"version": old.metadata.version + 1})
    new = old.model_copy(update={"metadata": meta, "importance": importance})
    writer.update([Change(new, vector, expected_version=old.metadata.version)])
    held[new.id] = new


class Snapshot:
    """A user's rows as one snapshot holds them (``vector_cache.UserRows``), none edited."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def after(self, rowid: int) -> list[Row]:
        return [row for row in self.rows if row[0] > rowid]

    def still_there(self, rowids: np.ndarray, changed: int) -> np.ndarray:
        return np.isin(rowids, [row[0] for row in self.rows])

    def edited_since(self, edited: int) -> list[Row]:
        return []

    def kept(self) -> None:
        return None

    def keep(self, vectors: object, kept: object) -> None:
        return None


#: Six loud memories, a strong one (at least half the best BM25) and a weak one: the word
#: once at the end of 60 others (a shorter weak text scored 0.68-0.74 of the best in
#: Qdrant's term weights, whose length normalisation is mild).
BM25_TEXTS = (
    "garden garden garden garden garden garden note {i}",
    "garden garden garden and more",
    " ".join(f"word{n}" for n in range(60)) + " garden",
)


def keyword_score_past_the_cut(
    put: Callable[[Sequence[Entry]], None],
    store: MemoryStore,
    texts: tuple[str, str, str],
    ready: Callable[[], None] | None = None,
) -> None:
    """A memory the vector half finds gets its keyword score when it is at least half the
    best, whether or not it made the keyword half's own best ``candidates``; a weaker match
    (the word once in a long text) stays out, as the cut left it (``COMPLETED_SHARE``).
    ``texts``: six loud memories (a template of ``{i}``), the strong one and the weak one,
    which rank so in the store's keyword formula (checked first). ``put`` writes to
    ``store``'s file or database; ``ready`` runs before the searches."""
    dim, tenant, user = 4, "t", "u"
    loud = [record(tenant, user, texts[0].format(i=i)) for i in range(6)]
    strong = record(tenant, user, texts[1])
    weak = record(tenant, user, texts[2])
    entries = [Entry(r, unit_vector(dim, 1.0, 0.1 * i)) for i, r in enumerate(loud)]
    near, nearer = unit_vector(dim, 0.0, 0.0, 0.3, 1.0), unit_vector(dim, 0.0, 0.0, 0.0, 1.0)
    put([*entries, Entry(strong, nearer), Entry(weak, near)])
    if ready is not None:
        ready()
    scope = Filter(tenant_id=tenant, user_id=user)
    wide = store.search(SearchQuery(scope, vector=nearer, text="garden", candidates=50))
    scores = {c.id: c.keyword_score or 0.0 for c in wide}
    best = max(scores.values())
    assert scores[weak.id] < 0.5 * best <= scores[strong.id] < best  # the premise
    narrow = store.search(SearchQuery(scope, vector=nearer, text="garden", candidates=2))
    found = {c.id: c for c in narrow}
    assert {strong.id, weak.id} <= found.keys()  # the vector half's best two
    assert found[strong.id].keyword_score == pytest.approx(scores[strong.id]), (
        found[strong.id],
        scores[strong.id],
    )
    assert found[weak.id].keyword_score is None
    assert sum(c.keyword_score is not None for c in narrow) == 3  # two loud, and the strong
