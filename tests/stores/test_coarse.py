"""A big user's vectors shortlisted by a projection on fewer dimensions (issue 14,
``chatmem.stores.coarse``): the ranking sees exact cosines only, finds what an exact search
finds where the projection holds the vectors' spread, and the projection follows writes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore
from chatmem.stores import coarse as shortlisted
from chatmem.stores.base import SearchQuery
from chatmem.stores.sqlite.schema import user_key
from chatmem.stores.vector_cache import UserVectors
from tests.stores.helpers import forget, rewrite

DIMENSION = 32
EMBEDDING = EmbeddingInfo(model="test", dimension=DIMENSION)
#: The vectors lie near a space of this many dimensions, as sentence vectors do.
SPREAD = 6


class _Vectors:
    """Unit vectors near a random ``SPREAD``-dimensional space."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.axes = self.rng.standard_normal((SPREAD, DIMENSION))

    def __call__(self, n: int) -> np.ndarray:
        rows = self.rng.standard_normal((n, SPREAD)) @ self.axes
        rows += 0.02 * self.rng.standard_normal((n, DIMENSION))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _turns(count: int, start: int = 0) -> list[MemoryRecord]:
    """Chat turns of sessions of eight, every other one asking something (so that answers
    are scored with their questions)."""
    return [
        MemoryRecord(
            user_id="u",
            type="episodic",
            session_id=f"s{n // 8}",
            content={"raw": f"turn {n}?" if n % 2 == 0 else f"turn {n}."},
        )
        for n in range(start, start + count)
    ]


def _store(path: Path, budget: int = 512 * 1024 * 1024) -> SQLiteStore:
    store = SQLiteStore(path, vector_cache_bytes=budget)
    store.bind_embedding(EMBEDDING)
    return store


def _found(
    store: SQLiteStore, query: np.ndarray, candidates: int = 10, session: str | None = None
) -> dict[str, float]:
    scope = Filter(user_id="u", session_id=session)
    hits = store.search(SearchQuery(scope, vector=query, candidates=candidates))
    return {c.id: round(c.vector_score or 0.0, 5) for c in hits}


def _cached(store: SQLiteStore) -> UserVectors | None:
    return store._vector_cache._users.get(user_key("default", "u"))


@pytest.fixture
def small_shortlist(monkeypatch: pytest.MonkeyPatch) -> None:
    """Users of 64 rows are shortlisted, 40 rows at least scored exactly."""
    monkeypatch.setattr(shortlisted, "ROWS", 64)
    monkeypatch.setattr(shortlisted, "DIMENSIONS", SPREAD)
    monkeypatch.setattr(shortlisted, "SHORTLIST", 40)
    monkeypatch.setattr(shortlisted, "PER_CANDIDATE", 2)


def _filled(path: Path, vectors: _Vectors, count: int = 400) -> list[MemoryRecord]:
    store = _store(path)
    records = _turns(count)
    store.put([Entry(r, v) for r, v in zip(records, vectors(count), strict=True)])
    store.close()
    return records


def test_a_big_user_finds_what_an_exact_search_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vectors = tmp_path / "big.db", _Vectors(1)
    _filled(path, vectors)
    queries = vectors(30)
    searches = [None, "s7"]  # the whole user, and a filter's few rows
    exact = _store(path)
    expected = [_found(exact, q, session=s) for q in queries for s in searches]
    held = _cached(exact)
    assert held is not None and held.coarse is None
    exact.close()

    monkeypatch.setattr(shortlisted, "ROWS", 64)
    monkeypatch.setattr(shortlisted, "DIMENSIONS", SPREAD)
    monkeypatch.setattr(shortlisted, "SHORTLIST", 40)
    monkeypatch.setattr(shortlisted, "PER_CANDIDATE", 2)
    store = _store(path)
    assert [_found(store, q, session=s) for q in queries for s in searches] == expected
    held = _cached(store)
    assert held is not None and held.coarse is not None  # the shortlist was searched
    store.close()


def test_the_ranking_sees_only_exact_cosines_however_poor_the_projection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_shortlist: None
) -> None:
    """One axis of 32: many of the best are missed, but every cosine given is exact, an
    answer's lifted with its question's as an exact search lifts it."""
    monkeypatch.setattr(shortlisted, "DIMENSIONS", 1)
    path, vectors = tmp_path / "poor.db", _Vectors(2)
    _filled(path, vectors)
    monkeypatch.setattr(shortlisted, "ROWS", 10**9)
    exact = _store(path)
    queries = vectors(20)
    everything = [_found(exact, q, candidates=1000) for q in queries]
    exact.close()
    monkeypatch.setattr(shortlisted, "ROWS", 64)
    store = _store(path)
    for query, truth in zip(queries, everything, strict=True):
        found = _found(store, query)
        assert len(found) == 10
        assert found == {memory_id: truth[memory_id] for memory_id in found}
    store.close()


def test_the_projection_follows_another_store_s_writes(
    tmp_path: Path, small_shortlist: None
) -> None:
    """Appends, deletes and new vectors from a writer: the reader's projection stays that
    of its vectors, is fitted again once the user has doubled, and finds what a reader
    without a cache finds."""
    path, vectors = tmp_path / "moves.db", _Vectors(3)
    held = {r.id: r for r in _filled(path, vectors, count=100)}
    writer, reader, uncached = _store(path), _store(path), _store(path, budget=1)
    pick = random.Random(3)
    fits = set()
    for step in range(120):
        action = pick.choice(["add", "add", "add", "delete", "vector", "fields"])
        if action == "add":
            records = _turns(pick.randint(1, 4), start=1000 + 10 * step)
            writer.put([Entry(r, v) for r, v in zip(records, vectors(len(records)), strict=True)])
            held.update((r.id, r) for r in records)
        elif action == "delete":
            forget(writer, held, pick.sample(sorted(held), k=2))
        else:
            memory_id, importance = pick.choice(sorted(held)), pick.random()
            rewrite(
                writer, held, memory_id, importance, vectors(1)[0] if action == "vector" else None
            )
        query = vectors(1)[0]
        assert _found(reader, query) == _found(uncached, query), (step, action)
        cached = _cached(reader)
        assert cached is not None and cached.coarse is not None
        projected = cached.coarse.project(cached.matrix)
        np.testing.assert_allclose(cached.coarse.rows, projected, atol=1e-5)
        assert 2 * cached.coarse.fitted > len(cached.matrix)
        fits.add(cached.coarse.fitted)
    assert len(held) > 200 and len(fits) > 1  # the user doubled: the axes were fitted again
    for store in (writer, reader, uncached):
        store.close()


def test_a_user_below_the_size_is_scored_whole(tmp_path: Path, small_shortlist: None) -> None:
    path, vectors = tmp_path / "small.db", _Vectors(4)
    _filled(path, vectors, count=63)
    store = _store(path)
    found = _found(store, vectors(1)[0], candidates=1000)
    assert len(found) == 63
    held = _cached(store)
    assert held is not None and held.coarse is None
    store.close()
