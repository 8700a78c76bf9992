"""SQLite-specific behaviour: concurrent writers, durability options, URIs, migrations."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from chatmem.errors import ConfigError, StoreError, ValidationError
from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore, open_store
from chatmem.stores.base import SearchQuery
from chatmem.stores.sqlite import FTS_SHARDS, INDEXED_METADATA, MIGRATIONS
from chatmem.stores.sqlite.filters import where as _where

EMBEDDING = EmbeddingInfo(model="test", dimension=4)
WRITES = 40


def _write_many(path: str, writer: str) -> None:
    store = SQLiteStore(path)
    store.bind_embedding(EMBEDDING)
    rng = np.random.default_rng(abs(hash(writer)) % 2**32)
    for i in range(WRITES):
        record = MemoryRecord(user_id=writer, content={"raw": f"{writer} fact {i}"})
        store.put([Entry(record, rng.random(4, dtype=np.float32))])
        if i % 10 == 0:
            store.delete(Filter(user_id=writer, ids=("nothing",)))
    store.close()


def test_many_processes_and_threads_write_at_once_without_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    SQLiteStore(path).close()
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_write_many, args=(path, f"p{i}")) for i in range(3)]
    errors: list[BaseException] = []

    def thread_writer(name: str) -> None:
        try:
            _write_many(path, name)
        except BaseException as exc:  # boundary: collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=thread_writer, args=(f"t{i}",)) for i in range(4)]
    for worker in [*processes, *threads]:
        worker.start()
    for worker in [*processes, *threads]:
        worker.join(timeout=120)
    assert errors == []
    assert [p.exitcode for p in processes] == [0, 0, 0]
    store = SQLiteStore(path)
    for writer in [*(f"p{i}" for i in range(3)), *(f"t{i}" for i in range(4))]:
        assert store.count(Filter(user_id=writer)) == WRITES
    store.close()


def test_one_store_shared_by_threads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "threads.db")
    store.bind_embedding(EMBEDDING)

    def work(user: str) -> None:
        for i in range(25):
            record = MemoryRecord(user_id=user, content={"raw": f"note {i}"})
            store.put([Entry(record, np.ones(4, dtype=np.float32))])

    threads = [threading.Thread(target=work, args=(f"u{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(store.count(Filter(user_id=f"u{i}")) for i in range(6)) == 150
    store.close()


def test_uris_choose_the_backend_and_options(tmp_path: Path) -> None:
    absolute = open_store(f"sqlite:///{tmp_path}/a.db?synchronous=full")
    assert isinstance(absolute, SQLiteStore) and absolute.path == f"{tmp_path}/a.db"
    absolute.close()
    bare = open_store(str(tmp_path / "b.db"))
    assert isinstance(bare, SQLiteStore)
    bare.close()
    with pytest.raises(ConfigError, match="unknown store scheme"):
        open_store("redis://localhost")
    with pytest.raises(ConfigError, match="three slashes"):
        open_store("sqlite://host/x.db")
    with pytest.raises(ValidationError, match="synchronous"):
        open_store(f"sqlite:///{tmp_path}/c.db?synchronous=sometimes")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    import pysqlite3.dbapi2 as sqlite3

    conn = sqlite3.connect(str(path))
    conn.execute("INSERT INTO chatmem_schema VALUES ('chatmem', ?, 0)", (len(MIGRATIONS) + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path)


def test_an_unreadable_path_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError):
        SQLiteStore(blocker / "x.db")


def _unit(*weights: float) -> np.ndarray:
    vector = np.zeros(4, dtype=np.float32)
    vector[: len(weights)] = weights
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def _nearest(store: SQLiteStore, vector: np.ndarray, **narrow: object) -> list[tuple[str, float]]:
    from chatmem.stores import SearchQuery

    found = store.search(SearchQuery(Filter(user_id="u", **narrow), vector=vector, candidates=10))
    ranked = sorted(found, key=lambda c: -(c.vector_score or 0))
    return [(c.id, round(c.vector_score or 0, 4)) for c in ranked]


@pytest.mark.parametrize("budget", [512 * 1024 * 1024, 1])
def test_vector_cache_follows_writes_from_another_connection(tmp_path: Path, budget: int) -> None:
    from chatmem.stores.base import Change

    reader = SQLiteStore(tmp_path / "shared.db", vector_cache_bytes=budget)
    writer = SQLiteStore(tmp_path / "shared.db")
    for store in (reader, writer):
        store.bind_embedding(EMBEDDING)
    first = MemoryRecord(user_id="u", content={"raw": "first"})
    writer.put([Entry(first, _unit(1))])
    assert _nearest(reader, _unit(1)) == [(first.id, 1.0)]

    second = MemoryRecord(user_id="u", content={"raw": "second"})
    writer.put([Entry(second, _unit(0, 1))])  # an append: loaded incrementally
    assert _nearest(reader, _unit(0, 1)) == [(second.id, 1.0), (first.id, 0.0)]

    moved = first.model_copy(update={"metadata": first.metadata.model_copy(update={"version": 2})})
    writer.update([Change(moved, _unit(0, 1), expected_version=1)])  # a changed vector
    assert sorted(_nearest(reader, _unit(0, 1))) == sorted([(first.id, 1.0), (second.id, 1.0)])

    writer.delete(Filter(user_id="u", ids=(second.id,)))
    assert _nearest(reader, _unit(0, 1)) == [(first.id, 1.0)]
    other = MemoryRecord(user_id="v", content={"raw": "another user"})
    writer.put([Entry(other, _unit(0, 1))])
    assert _nearest(reader, _unit(0, 1)) == [(first.id, 1.0)]
    assert _nearest(reader, _unit(0, 1), ids=(other.id,)) == []
    reader.close()
    writer.close()


def _search_ids(store: SQLiteStore, user: str, text: str, vector: np.ndarray) -> list[str]:
    found = store.search(
        SearchQuery(filter=Filter(user_id=user), text=text, vector=vector, candidates=10)
    )
    return sorted(c.id for c in found if c.keyword_score is not None)


def test_a_store_from_before_the_keyword_shards_is_migrated_in_place(tmp_path: Path) -> None:
    """Version 1 kept every user's words in one FTS table; opening it moves each row to its
    user's shard, and keyword search finds exactly what it found before."""
    rng = np.random.default_rng(7)
    users = [f"user-{i}" for i in range(40)]  # enough to fill most of the 16 shards
    texts = ["My budget for the trip is ${n}", "I walk my dog at {n}", "My sister lives in {n}"]
    entries = [
        Entry(MemoryRecord(user_id=user, content={"raw": text.format(n=n)}), rng.random(4))
        for n, user in enumerate(users)
        for text in texts
    ]
    new_store = SQLiteStore(tmp_path / "new.db")
    new_store.bind_embedding(EMBEDDING)
    new_store.put([Entry(e.record, e.vector.astype(np.float32)) for e in entries])
    old = sqlite3.connect(tmp_path / "old.db")
    for statement in MIGRATIONS[0].split(";"):
        if statement.strip():
            old.execute(statement)
    old.execute("CREATE TABLE chatmem_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER)")
    old.execute("INSERT INTO chatmem_migrations VALUES (1, 0)")
    new = sqlite3.connect(tmp_path / "new.db")
    for table in ("chatmem_meta", "memories", "memory_vectors", "user_versions", "memory_history"):
        # The columns of version 1 (later migrations add some).
        columns = ", ".join(row[1] for row in old.execute(f"PRAGMA table_info({table})"))
        rows = new.execute(f"SELECT {columns} FROM {table}").fetchall()
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            old.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    for digit in FTS_SHARDS:
        old.executemany(
            "INSERT INTO memory_fts (rowid, ukey, said, prev, nxt, day) VALUES (?, ?, ?, ?, ?, ?)",
            new.execute(f"SELECT rowid, ukey, said, prev, nxt, day FROM memory_fts_{digit}"),
        )
    old.commit()
    old.close()
    new.close()
    migrated = SQLiteStore(tmp_path / "old.db")
    check = sqlite3.connect(tmp_path / "old.db")
    tables = {name for (name,) in check.execute("SELECT name FROM sqlite_master")}
    check.close()
    assert "memory_fts" not in tables
    assert {f"memory_fts_{digit}" for digit in FTS_SHARDS} <= tables
    vector = np.ones(4, dtype=np.float32) / 2
    for user in users[:12]:
        assert _search_ids(migrated, user, "trip budget dog sister", vector) == _search_ids(
            new_store, user, "trip budget dog sister", vector
        )
        assert len(_search_ids(migrated, user, "trip budget dog sister", vector)) == 3
    migrated.close()
    new_store.close()


def test_a_sessions_span_is_read_by_the_session_index(tmp_path: Path) -> None:
    """``add`` reads a session's latest turns in a span of time (``SessionTails``): by the
    session's own index, never by every row of the user in the span; and it finds what
    the span holds."""
    store = SQLiteStore(tmp_path / "m.db")
    store.bind_embedding(EMBEDDING)
    rng = np.random.default_rng(5)
    records = [
        MemoryRecord(user_id="alice", session_id=f"s{i % 3}", content={"raw": f"turn {i}"})
        for i in range(30)
    ]
    store.put([Entry(r, rng.random(4, dtype=np.float32)) for r in records])
    when = records[0].time.created_at
    span = Filter(
        user_id="alice",
        session_id="s1",
        created_after=when - timedelta(days=7),
        created_before=when + timedelta(days=1),
    )
    assert [r.id for r in store.list(span, limit=100).records] == [
        r.id for r in records if r.session_id == "s1"
    ]
    plan = _list_plan(tmp_path / "m.db", span)
    assert any("memories_by_session" in str(step) for step in plan), plan
    store.close()


def _list_plan(path: Path, scope: Filter) -> list[tuple[object, ...]]:
    """SQLite's plan for a page of ``list`` within ``scope``."""
    where, params = _where(scope)
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            f"EXPLAIN QUERY PLAN SELECT m.body FROM memories AS m WHERE {where}"
            " ORDER BY m.created_at, m.rowid LIMIT 65",
            params,
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("key", sorted(INDEXED_METADATA))
def test_the_write_policys_metadata_lookups_use_their_index(tmp_path: Path, key: str) -> None:
    """The write policy lists a user's memories by these keys on every extraction batch: the
    filter must be answered from the index (it parsed all of a user's rows before), and
    answer what the same filter on an unindexed key answers."""
    store = SQLiteStore(tmp_path / "m.db")
    store.bind_embedding(EMBEDDING)
    rng = np.random.default_rng(3)
    records = [
        MemoryRecord(
            user_id="alice",
            content={"raw": f"fact {i}"},
            user_metadata={key: f"v{i % 3}", "plain": f"v{i % 3}"},
        )
        for i in range(30)
    ]
    store.put([Entry(r, rng.random(4, dtype=np.float32)) for r in records])
    indexed = Filter(user_id="alice", metadata={key: "v1"})
    plain = Filter(user_id="alice", metadata={"plain": "v1"})
    first = store.list(indexed, limit=4)
    assert first.next_cursor is not None
    rest = store.list(indexed, limit=100, cursor=first.next_cursor)
    found = [r.id for r in first.records + rest.records]
    assert found == [r.id for r in store.list(plain, limit=100).records]
    assert found == [r.id for r in records if r.user_metadata[key] == "v1"]
    plan = _list_plan(tmp_path / "m.db", indexed)
    assert any(f"memories_by_{key}" in str(step) for step in plan), plan
    store.close()
