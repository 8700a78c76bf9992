"""A question about the present ("Where does she live now?"), answered by the latest word.

A memory layer that stores chat turns as they were said holds both "I've lived in Lisbon for
six years" and, months later, "I moved to Porto". A search finds by relevance, and the older
turn is often the more relevant one: it names what the question names. Two steps put the
later word first, and both run only for a query that ``ranking.asks_now``:

1. ``ranking.latest_first``: the k found are reordered by how late each was said.
2. ``latest_word``: the memory found first is looked up again, this time among what its
   speaker said after it. A later memory that is nearer to it than the rest of the k found
   are, and whose own nearest memory of that speaker (whenever said) is the first, is
   what was said later about the same thing: the move after the old home, "I've gone off
   Moroccan food" after "I could eat Moroccan food every day". It goes right above the
   first, at the first's score. Where nothing passes, nothing moves: a question about the
   present whose answer never changed keeps its order, and a line that only shares the
   first's words ("Zara from book club swears Indian food is the best") is nearer to its
   own kind than to it.

What it costs, for such a query only: a read of the found memories' vectors, one
vector-only search among the memories said after the first, and one more for each
candidate that passes the first checks (1.1 searches a query at 10,000 memories;
docs/benchmarks.md, "The latest word on what was found first").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np

from chatmem import ranking
from chatmem.long_term.choosing import Reader
from chatmem.records import LATEST, Filter, Vector, shifted
from chatmem.stores.base import MemoryStore, SearchQuery

#: How many of the memories said after the first are looked at, nearest first.
LATER = 5


def latest_word(
    store: MemoryStore,
    ranked: list[ranking.Scored],
    scope: Filter,
    k: int,
    read: Reader,
    query_vector: Callable[[], Vector],
) -> list[ranking.Scored]:
    """``ranked`` with the latest word on its first memory put right above it, at the
    first's score, past any threshold the others met: of the ``LATER`` memories nearest
    the first among those said after it, taken nearest first, the first one that its
    speaker said (two memories of no speaker count as one speaker's: a user's own notes),
    that is nearer to it than the rest of ``ranked``'s first ``k`` are, and whose own
    nearest memory of that speaker is the first (see the module). ``scope`` (the search's
    filter) holds for every memory read; ``query_vector`` gives the query's vector,
    against which a memory from outside ``ranked`` is scored."""
    if not ranked or k < 2:
        return ranked
    first = ranked[0]
    found = [s.id for s in ranked[1:k]]
    head = read([first.id]).get(first.id)
    vectors = {i: _unit(v) for i, v in store.vectors([first.id, *found], scope).items()}
    if head is None or head.created_at >= LATEST or first.id not in vectors:
        return ranked  # (nothing is said after the calendar's last moment)
    anchor = vectors[first.id]
    after = _said_after(scope, head.created_at)
    near = [
        c
        for c in store.search(SearchQuery(filter=after, vector=anchor, candidates=LATER))
        if c.id != first.id and c.vector_score is not None
    ]
    near.sort(key=lambda c: -(c.vector_score or 0.0))
    heads = read([c.id for c in near])
    said = [c.id for c in near if c.id in heads and heads[c.id].speaker == head.speaker]
    if unread := [i for i in said if i not in vectors]:
        vectors.update((i, _unit(v)) for i, v in store.vectors(unread, scope).items())
    for memory_id in said:
        if memory_id not in vectors:
            continue
        closest = vectors[memory_id] @ anchor
        if any(vectors[i] @ anchor >= closest for i in found if i != memory_id and i in vectors):
            break  # and so are the ones after it, less near still
        mine = vectors[memory_id]
        if _nearest_said_by(store, scope, read, mine, memory_id, head.speaker) == first.id:
            moved = _moved(ranked, memory_id, first.score, mine, query_vector)
            return [moved, *(s for s in ranked if s.id != memory_id)]
    return ranked


def _nearest_said_by(
    store: MemoryStore,
    scope: Filter,
    read: Reader,
    vector: Vector,
    memory_id: str,
    speaker: str | None,
) -> str | None:
    """Of the ``LATER`` memories of ``scope`` nearest ``vector`` (``memory_id``'s own),
    whenever said, the nearest that ``speaker`` said, itself left out."""
    near = [
        c
        for c in store.search(SearchQuery(filter=scope, vector=vector, candidates=LATER + 1))
        if c.id != memory_id and c.vector_score is not None
    ]
    near.sort(key=lambda c: -(c.vector_score or 0.0))
    heads = read([c.id for c in near])
    return next((c.id for c in near if c.id in heads and heads[c.id].speaker == speaker), None)


def _said_after(scope: Filter, moment: datetime) -> Filter:
    """``scope`` narrowed to what was said after ``moment``, within any bound it holds."""
    after = shifted(moment, timedelta(milliseconds=1))
    return scope.model_copy(update={"created_after": max(after, scope.created_after or after)})


def _moved(
    ranked: list[ranking.Scored],
    memory_id: str,
    score: float,
    vector: Vector,
    query_vector: Callable[[], Vector],
) -> ranking.Scored:
    """The memory moved to the top, at ``score``: its own scores where the search found it,
    else its cosine with the query, within [0, 1] as ``ranking.fuse`` reports it (it
    matched no keyword the search counted)."""
    found = next((s for s in ranked if s.id == memory_id), None)
    if found is not None:
        return ranking.Scored(
            memory_id, max(score, found.score), found.vector_score, found.keyword_score
        )
    cosine = float(_unit(query_vector()) @ vector)
    return ranking.Scored(memory_id, score, min(max(cosine, 0.0), 1.0), None)  # as ``fuse``


def _unit(vector: Vector) -> Vector:
    """``vector`` at length 1: a store need not keep its vectors so."""
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v
