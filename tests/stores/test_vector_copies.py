"""A big user's vectors kept whole in one row (issue 14): a new process's first search
reads the copy instead of the user's rows one by one, brings it to the current versions as
the vector cache brings any older entry, and finds exactly what a reader without any cache
finds. A removed memory's vector is never left in a copy."""

from __future__ import annotations

import random
import threading
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore, coarse
from chatmem.stores.base import Change, SearchQuery
from chatmem.stores.sqlite import search as halves
from chatmem.stores.sqlite import vector_snapshots as snapshots
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.vector_cache import UserVectors
from tests.stores.helpers import forget, rewrite

DIMENSION = 8
EMBEDDING = EmbeddingInfo(model="test", dimension=DIMENSION)
BIG = 40  # vector_copy_rows in these tests


def _vector(rng: np.random.Generator) -> np.ndarray:
    vector = rng.standard_normal(DIMENSION).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _store(path: Path, *, copies: int | None = BIG, budget: int = 512 * 1024 * 1024) -> SQLiteStore:
    store = SQLiteStore(path, vector_cache_bytes=budget, vector_copy_rows=copies)
    store.bind_embedding(EMBEDDING)
    return store


def _turns(rng: np.random.Generator, count: int, step: int) -> list[Entry]:
    """Chat turns of a few sessions, some asking something (their answers are scored with
    them), and a few memories that are not turns."""
    entries = []
    for n in range(count):
        turn = n % 5 != 4
        text = f"turn {step}.{n}" + ("?" if n % 3 == 0 else ".")
        record = MemoryRecord(
            user_id="u",
            type="episodic" if turn else "semantic",
            session_id=f"s{(step + n) % 4}" if turn else None,
            content={"raw": text},
        )
        entries.append(Entry(record, _vector(rng)))
    return entries


def _found(store: SQLiteStore, query: np.ndarray, candidates: int = 1000) -> dict[str, float]:
    found = store.search(SearchQuery(Filter(user_id="u"), vector=query, candidates=candidates))
    return {c.id: round(c.vector_score or 0.0, 5) for c in found}


def _held(store: SQLiteStore) -> UserVectors:
    """The user's vectors as ``store`` holds them (read now where it holds none)."""
    with store._file.read() as conn:
        versions = halves.user_versions(conn, "default", "u")
        cache = store._vector_cache
        return halves.user_vectors(conn, cache, DIMENSION, "default", "u", versions, store._copies)


def _filled(
    path: Path, seed: int, count: int
) -> tuple[SQLiteStore, np.random.Generator, list[Entry]]:
    """A store holding ``count`` turns of user "u", the draws that go on from them, and
    the turns."""
    rng = np.random.default_rng(seed)
    store = _store(path)
    entries = _turns(rng, count, 0)
    store.put(entries)
    return store, rng, entries


def _written(path: Path, seed: int, count: int) -> tuple[np.ndarray, dict[str, float]]:
    """A store of ``count`` turns of user "u", searched once and closed once its copy is
    written: the question and what it found."""
    store, rng, _ = _filled(path, seed, count)
    query = _vector(rng)
    expected = _found(store, query)
    store.wait_for_vector_copies()
    store.close()
    return query, expected


def _copies(path: Path) -> list[tuple[int, int, int]]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT appended, changed, edited FROM user_vector_snapshots")
        return [tuple(row) for row in rows]  # type: ignore[misc]


class _WholeReads:
    """Counts reads of a user's rows from the first (``after(0)``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        after = halves._UserRows.after

        def counted(rows: halves._UserRows, rowid: int) -> list[tuple[int, bytes, str]]:
            self.count += rowid == 0
            return after(rows, rowid)

        monkeypatch.setattr(halves._UserRows, "after", counted)


def test_a_new_process_reads_a_big_users_copy_instead_of_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copies.db"
    query, expected = _written(path, 5, 60)
    assert len(_copies(path)) == 1

    reads = _WholeReads(monkeypatch)
    fresh, plain = _store(path), _store(path, copies=None, budget=1)
    assert _found(fresh, query) == expected == _found(plain, query)
    assert reads.count == 1  # the reader without any cache; the fresh one took the copy
    # The copy's sessions and questions pair the same answers with their questions.
    copied, read = _held(fresh).replies(), _held(plain).replies()
    assert len(copied.answer) > 0
    assert copied.answer.tolist() == read.answer.tolist()
    assert copied.question.tolist() == read.question.tolist()
    fresh.close()
    plain.close()


def test_small_users_and_a_store_without_copies_write_none(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    small = _store(tmp_path / "small.db")
    small.put(_turns(rng, BIG - 1, 0))
    _found(small, _vector(rng))
    small.wait_for_vector_copies()
    assert _copies(tmp_path / "small.db") == []
    off = _store(tmp_path / "off.db", copies=None)
    off.put(_turns(rng, BIG * 2, 0))
    _found(off, _vector(rng))
    off.wait_for_vector_copies()
    assert _copies(tmp_path / "off.db") == []
    small.close()
    off.close()


def _moved(writer: SQLiteStore, held: dict[str, MemoryRecord], memory_id: str, step: int) -> None:
    """An update that keeps the vector but moves the turn to another session, or makes it
    ask something (or not)."""
    old = held[memory_id]
    meta = old.metadata.model_copy(update={"version": old.metadata.version + 1})
    text = old.content.raw.rstrip("?.") + ("." if old.content.raw.endswith("?") else "?")
    if step % 2:
        moved: dict[str, object] = {"session_id": f"s{step % 4}x"}
    else:
        moved = {"content": old.content.model_copy(update={"raw": text})}
    new = old.model_copy(update={"metadata": meta, **moved})
    writer.update([Change(new, None, expected_version=old.metadata.version)])
    held[new.id] = new


def test_random_writes_keep_a_fresh_readers_cosines_exact_and_no_removed_vector_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every write a new store (an empty cache, as a new process has) reads the user
    from its copy where there is one, and finds what a reader without any cache finds. A
    delete or a new vector leaves no copy behind; appends leave the copy behind by them."""
    path = tmp_path / "moves.db"
    writer = _store(path)
    uncached = _store(path, copies=None, budget=1)
    rng, pick = np.random.default_rng(7), random.Random(7)
    held: dict[str, MemoryRecord] = {}
    copied_after: list[str] = []
    reads, from_copy = _WholeReads(monkeypatch), 0
    for step in range(80):
        actions = ["add", "add", "delete", "vector", "fields", "turn"]
        action = pick.choice(actions) if held else "add"
        if action == "add":
            entries = _turns(rng, pick.randint(1, 12), step)
            writer.put(entries)
            held.update((e.record.id, e.record) for e in entries)
        elif action == "delete":
            forget(writer, held, pick.sample(sorted(held), min(len(held), pick.randint(1, 3))))
            assert _copies(path) == []  # dropped in the delete's own transaction
        elif action == "turn":
            _moved(writer, held, pick.choice(sorted(held)), step)
            assert _copies(path) == []  # what the copy says of the turn is stale
        else:
            gone = pick.choice(sorted(held))
            rewrite(writer, held, gone, pick.random(), _vector(rng) if action == "vector" else None)
            if action == "vector":
                assert _copies(path) == []
        query = _vector(rng)
        reader = _store(path)
        before = reads.count
        found = _found(reader, query)
        from_copy += reads.count == before
        assert found == _found(uncached, query), (step, action)
        reader.wait_for_vector_copies()
        if _copies(path):
            copied_after.append(action)
        reader.close()
    assert "add" in copied_after and len(held) >= BIG  # copies were made and read on
    assert from_copy >= 10  # readers that took a copy rather than the rows
    writer.close()
    uncached.close()


def test_a_copy_is_never_written_over_a_removal_made_since_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "late.db"
    store, _, entries = _filled(path, 8, 50)
    vectors = _held(store)
    store.delete(Filter(user_id="u", ids=(entries[0].record.id,)))
    store._copies.keep("default", "u", vectors)  # read before the delete, written after it
    store.wait_for_vector_copies()
    assert _copies(path) == []
    store.close()


@pytest.mark.parametrize(
    "breaking",
    [
        "UPDATE user_vector_snapshot_parts SET bytes = substr(bytes, 1, 100)",
        "DELETE FROM user_vector_snapshot_parts WHERE part = 1",
        "INSERT INTO user_vector_snapshot_parts"
        " SELECT tenant_id, user_id, field, part + 100, bytes FROM user_vector_snapshot_parts",
        "DELETE FROM user_vector_snapshot_parts WHERE field = 'vectors'",
    ],
    ids=["cut", "a part missing", "parts over", "no vectors"],
)
def test_a_copy_that_does_not_decode_is_read_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breaking: str
) -> None:
    monkeypatch.setattr(snapshots, "PART_BYTES", 256)
    path = tmp_path / "broken.db"
    query, expected = _written(path, 9, 50)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(breaking)
    reads = _WholeReads(monkeypatch)
    fresh = _store(path)
    assert _found(fresh, query) == expected
    assert reads.count == 1  # read from the rows, past the broken copy
    fresh.close()


def test_a_copy_read_back_from_many_parts_is_the_matrix_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshots, "PART_BYTES", 100)  # not a whole number of vectors
    path = tmp_path / "parts.db"
    store, _, _ = _filled(path, 13, 60)
    held = _held(store)
    store.wait_for_vector_copies()
    with store._file.read() as conn:
        (parts,) = conn.execute(
            "SELECT count(*) FROM user_vector_snapshot_parts WHERE field = 'vectors'"
        ).fetchone()
        kept = snapshots.read(conn, "default", "u", DIMENSION)
    assert parts == -(-60 * DIMENSION * 4 // 100)
    assert kept is not None
    assert np.array_equal(kept.matrix, held.matrix)
    assert np.array_equal(kept.rowids, held.rowids) and kept.ids == held.ids
    store.close()


def test_a_removal_deletes_the_copys_parts_too(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    store, _, entries = _filled(path, 14, 50)
    _held(store)
    store.wait_for_vector_copies()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM user_vector_snapshot_parts").fetchone()[0] > 0
    store.delete(Filter(user_id="u", ids=(entries[0].record.id,)))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM user_vector_snapshot_parts").fetchone() == (0,)
    assert _copies(path) == []
    store.close()


def test_a_copy_keeps_a_big_users_projection_so_a_new_process_fits_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user big enough to be shortlisted (``coarse``; its size lowered here) keeps its
    projection in the copy: a new process searches with it, fits no other, and finds what
    a reader without any cache finds."""
    monkeypatch.setattr(coarse, "ROWS", 30)
    monkeypatch.setattr(coarse, "DIMENSIONS", 4)
    monkeypatch.setattr(coarse, "SHORTLIST", 5)
    monkeypatch.setattr(coarse, "PER_CANDIDATE", 2)  # 6 of the 80 rows scored exactly
    path = tmp_path / "coarse.db"
    rng = np.random.default_rng(10)
    first = _store(path)
    first.put(_turns(rng, 80, 0))
    queries = [_vector(rng) for _ in range(5)]
    expected = [_found(first, q, candidates=3) for q in queries]
    projected = _held(first).coarse
    assert projected is not None
    first.wait_for_vector_copies()
    first.close()

    fits: list[int] = []
    fit = coarse.Coarse.fit.__func__  # type: ignore[attr-defined]

    def counted(cls: type[coarse.Coarse], matrix: np.ndarray) -> coarse.Coarse:
        fits.append(len(matrix))
        return fit(cls, matrix)  # type: ignore[no-any-return]

    monkeypatch.setattr(coarse.Coarse, "fit", classmethod(counted))
    fresh, plain = _store(path), _store(path, copies=None, budget=1)
    assert [_found(fresh, q, candidates=3) for q in queries] == expected
    assert fits == []  # the copy's projection, not a new one
    loaded = _held(fresh).coarse
    assert loaded is not None and loaded.fitted == projected.fitted
    for part in ("mean", "basis", "rows"):
        assert np.array_equal(getattr(loaded, part), getattr(projected, part)), part
    assert [_found(plain, q, candidates=3) for q in queries] == expected
    assert fits  # the reader of rows fitted its own
    fresh.close()
    plain.close()


def test_a_copy_read_in_an_older_snapshot_never_replaces_a_newer_one(tmp_path: Path) -> None:
    path = tmp_path / "older.db"
    store, rng, _ = _filled(path, 11, 50)
    older = _held(store)
    store.wait_for_vector_copies()  # the copy of the 50, written after they were read
    store.put(_turns(rng, 5, 1))
    newer = _held(store)  # brought on from the cache: offered again only when stale
    store._copies.keep("default", "u", newer)
    store.wait_for_vector_copies()
    assert [v[0] for v in _copies(path)] == [55]
    store._copies.keep("default", "u", older)  # a search that began before the 5 were put
    store.wait_for_vector_copies()
    assert [v[0] for v in _copies(path)] == [55]
    store.close()


def test_waiting_while_the_store_closes_returns_without_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy being written and one waiting behind it when the store closes: the first is
    finished, the second dropped, and a wait begun before the close returns quietly."""
    path = tmp_path / "closing.db"
    store, _, _ = _filled(path, 12, 50)
    vectors = _held(store)
    store.wait_for_vector_copies()
    write = store._copies._write

    def slow(tenant: str, user: str, held: UserVectors) -> None:
        time.sleep(0.4)
        write(tenant, user, held)

    monkeypatch.setattr(store._copies, "_write", slow)
    store._copies.keep("default", "u", vectors)
    store._copies.keep("default", "other", vectors)  # waits behind the first
    raised: list[BaseException] = []

    def waiting() -> None:
        try:
            store.wait_for_vector_copies()
        except BaseException as exc:  # noqa: BLE001  # boundary: the waiter reports it
            raised.append(exc)

    waiter = threading.Thread(target=waiting)
    waiter.start()
    time.sleep(0.1)
    store.close()
    waiter.join(5)
    assert not waiter.is_alive() and raised == []
