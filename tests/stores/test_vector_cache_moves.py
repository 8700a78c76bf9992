"""The vector cache follows deletes and new vectors by reading only what moved (issue 14).

A reader with the cache and a writer on the same file take turns: after every write the
reader's cosines must equal those of a reader without a cache, and a delete or an update
must never make the reader read the whole user again."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore
from chatmem.stores.base import Change, SearchQuery
from chatmem.stores.sqlite import search as halves
from chatmem.stores.sqlite import writes
from tests.stores.helpers import Snapshot, forget, rewrite

DIMENSION = 8
EMBEDDING = EmbeddingInfo(model="test", dimension=DIMENSION)


def _vector(rng: np.random.Generator) -> np.ndarray:
    vector = rng.standard_normal(DIMENSION).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _cosines(store: SQLiteStore, query: np.ndarray, user: str = "u") -> dict[str, float]:
    found = store.search(SearchQuery(Filter(user_id=user), vector=query, candidates=1000))
    return {c.id: round(c.vector_score or 0.0, 5) for c in found}


def _store(path: Path, budget: int = 512 * 1024 * 1024) -> SQLiteStore:
    store = SQLiteStore(path, vector_cache_bytes=budget)
    store.bind_embedding(EMBEDDING)
    return store


class _Reads:
    """Counts the cache's reads of the whole user (``after(0)``) and of moved rows."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.whole = 0
        self.edited: list[int] = []
        after, edited = halves._UserRows.after, halves._UserRows.edited_since
        reads = self

        def counted_after(rows: halves._UserRows, rowid: int) -> list[tuple[int, bytes, str]]:
            reads.whole += rowid == 0
            return after(rows, rowid)

        def counted_edited(rows: halves._UserRows, since: int) -> list[tuple[int, bytes, str]]:
            found = edited(rows, since)
            reads.edited.append(len(found))
            return found

        monkeypatch.setattr(halves._UserRows, "after", counted_after)
        monkeypatch.setattr(halves._UserRows, "edited_since", counted_edited)


@pytest.mark.parametrize("kept", [writes.REMOVALS_KEPT, 2])
def test_random_writes_from_another_store_keep_the_cached_cosines_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    """With a removal log of 2 it is trimmed often: a reader that looked last before the
    trim reads which rows are left instead, and is as exact."""
    monkeypatch.setattr(writes, "REMOVALS_KEPT", kept)
    path = tmp_path / "moves.db"
    writer, reader, uncached = _store(path), _store(path), _store(path, budget=1)
    rng, pick = np.random.default_rng(3), random.Random(3)
    held: dict[str, MemoryRecord] = {}
    for step in range(160):
        action = pick.choice(["add", "add", "delete", "vector", "fields"]) if held else "add"
        if action == "add":
            records = [
                MemoryRecord(user_id="u", content={"raw": f"memory {step}.{n}"})
                for n in range(pick.randint(1, 3))
            ]
            writer.put([Entry(r, _vector(rng)) for r in records])
            held.update((r.id, r) for r in records)
        elif action == "delete":
            forget(writer, held, pick.sample(sorted(held), k=min(len(held), pick.randint(1, 3))))
        else:
            memory_id, importance = pick.choice(sorted(held)), pick.random()
            rewrite(
                writer, held, memory_id, importance, _vector(rng) if action == "vector" else None
            )
        if pick.random() < 0.6:  # the reader does not search after every write
            query = _vector(rng)
            assert _cosines(reader, query) == _cosines(uncached, query), (step, action)
    query = _vector(rng)
    assert _cosines(reader, query) == _cosines(uncached, query)
    assert set(_cosines(reader, query)) == set(held)
    for store in (writer, reader, uncached):
        store.close()


def test_a_delete_or_a_new_vector_reads_only_what_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reads.db"
    writer, reader = _store(path), _store(path)
    rng = np.random.default_rng(5)
    records = [MemoryRecord(user_id="u", content={"raw": f"memory {n}"}) for n in range(50)]
    writer.put([Entry(r, _vector(rng)) for r in records])
    reads = _Reads(monkeypatch)
    query = _vector(rng)
    _cosines(reader, query)
    assert reads.whole == 1  # the first search reads the user

    writer.delete(Filter(user_id="u", ids=(records[7].id, records[49].id)))
    found = _cosines(reader, query)
    assert records[7].id not in found and records[49].id not in found and len(found) == 48

    fields_only = records[5].model_copy(
        update={"metadata": records[5].metadata.model_copy(update={"version": 2})}
    )
    writer.update([Change(fields_only, None, expected_version=1)])
    _cosines(reader, query)  # the cache is then exact at this update's count

    moved = records[3].model_copy(
        update={"metadata": records[3].metadata.model_copy(update={"version": 2})}
    )
    new_vector = query.copy()  # the updated memory becomes the query's nearest
    writer.update([Change(moved, new_vector, expected_version=1)])
    writer.put([Entry(MemoryRecord(user_id="u", content={"raw": "late"}), _vector(rng))])
    found = _cosines(reader, query)
    assert found[records[3].id] == pytest.approx(1.0, abs=1e-5)
    assert len(found) == 49
    assert reads.whole == 1  # neither the delete nor the update read the user again
    assert reads.edited[-1] == 1  # only the vector updated since was read
    writer.close()
    reader.close()


def test_the_removal_log_answers_for_its_window_and_says_when_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "REMOVALS_KEPT", 3)
    path = tmp_path / "log.db"
    store = _store(path)
    rng = np.random.default_rng(8)
    records = [MemoryRecord(user_id="u", content={"raw": f"memory {n}"}) for n in range(12)]
    store.put([Entry(r, _vector(rng)) for r in records])
    store.delete(Filter(user_id="u", ids=(records[0].id, records[1].id)))
    conn = sqlite3.connect(path)
    rowids = dict(conn.execute("SELECT id, rowid FROM memories").fetchall())
    assert sorted(writes.removed_since(conn, "default", "u", 0) or []) == [1, 2]
    assert len(writes.removed_since(conn, "default", "u", 1) or []) == 1
    assert writes.removed_since(conn, "default", "u", 2) == []
    assert writes.removed_since(conn, "default", "other", 0) is None  # no such user
    for record in records[2:9]:  # past twice the log's size: trimmed
        store.delete(Filter(user_id="u", ids=(record.id,)))
    conn = sqlite3.connect(path)
    assert writes.removed_since(conn, "default", "u", 2) is None
    assert writes.removed_since(conn, "default", "u", 8) == [rowids[records[8].id]]
    for since in (2, 4):  # from the rows left, then from the log: the same answer
        held = np.array(sorted(rowids[r.id] for r in records[since:]), dtype=np.int64)
        there = writes.still_there(conn, "default", "u", since, held)
        assert held[there].tolist() == sorted(rowids[r.id] for r in records[9:])
    conn.close()
    store.close()


def test_warming_a_user_leaves_its_first_search_nothing_to_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "warm.db"
    writer = _store(path)
    rng = np.random.default_rng(9)
    for user, count in (("light", 5), ("heavy", 40), ("middle", 20)):
        records = [MemoryRecord(user_id=user, content={"raw": f"{user} {n}"}) for n in range(count)]
        writer.put([Entry(r, _vector(rng)) for r in records])
    assert writer.heaviest(2) == [("default", "heavy", 40), ("default", "middle", 20)]
    row_bytes = 4 * DIMENSION + 8 + 90
    # 3/4 of the budget holds the heavy user and the middle one, not the light one as well.
    reader = _store(path, budget=4 * row_bytes * 62 // 3)
    assert reader.warm_heaviest() == [("default", "heavy"), ("default", "middle")]
    stopped = _store(path)
    assert stopped.warm_heaviest(stop=lambda: True) == []
    reads = _Reads(monkeypatch)
    query = _vector(rng)
    for user in ("heavy", "middle"):
        assert len(_cosines(reader, query, user)) == {"heavy": 40, "middle": 20}[user]
    assert reads.whole == 0  # both were read at warming
    _cosines(reader, query, "light")
    assert reads.whole == 1
    for store in (writer, reader, stopped):
        store.close()


def test_a_snapshot_older_than_the_cache_reads_the_user_at_its_own_versions() -> None:
    from chatmem.stores.vector_cache import VectorCache

    rng = np.random.default_rng(11)
    rows = [(n, _vector(rng).tobytes(), f"m{n}", None, False) for n in (1, 2)]
    cache = VectorCache()
    newer = cache.vectors("u", (2, 0, 0), DIMENSION, Snapshot(rows))
    assert newer.rowids.tolist() == [1, 2]
    # A search whose snapshot began before the second row was added.
    older = cache.vectors("u", (1, 0, 0), DIMENSION, Snapshot(rows[:1]))
    assert older.rowids.tolist() == [1] and older.ids == ["m1"]
