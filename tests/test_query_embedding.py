"""Where a search's query vector is computed (issue 14): once, in the caller's thread
unless the store starts it first, and the SQLite store starts it only before FTS5's
full-text search, which leaves the interpreter lock free. Before the keyword postings
held in memory (Python and numpy) a thread of its own would compete with the search for
the lock and the cores (docs/benchmarks.md, "The query embedded where it is used")."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from chatmem.embeddings import LocalEmbedder, embed_queries
from chatmem.long_term import LongTermMemory
from chatmem.records import EmbeddingInfo, Entry, Filter, Vector
from chatmem.stores import SQLiteStore
from chatmem.stores.base import SearchQuery
from chatmem.threads import Prefetched
from tests.stores.helpers import record, unit_vector

DIM = 4
BIG = 5  # keyword_cache_rows: a user of this many memories has postings in memory


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1, thread_name_prefix="test-pool") as made:
        yield made


class Counted:
    """A computation that counts its calls and says in which thread each ran."""

    def __init__(self, value: object = "vector", error: Exception | None = None) -> None:
        self.value, self.error = value, error
        self.threads: list[str] = []

    def __call__(self) -> object:
        self.threads.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        return self.value


def test_a_value_never_started_is_computed_in_the_callers_thread_once() -> None:
    asked: list[int] = []
    compute = Counted()
    value = Prefetched(compute, lambda: asked.append(1) or ThreadPoolExecutor(1))
    assert value() == "vector" and value() == "vector"
    assert compute.threads == [threading.current_thread().name]
    assert asked == []  # the pool was never even made


def test_a_started_value_is_computed_in_the_pool_once(pool: ThreadPoolExecutor) -> None:
    compute = Counted()
    value = Prefetched(compute, lambda: pool)
    value.start()
    value.start()
    assert value() == "vector" and value() == "vector"
    value.start()  # done: nothing more to run
    pool.shutdown(wait=True)
    assert len(compute.threads) == 1 and compute.threads[0].startswith("test-pool")


@pytest.mark.parametrize("started", [False, True])
def test_an_error_reaches_whoever_asks(pool: ThreadPoolExecutor, started: bool) -> None:
    value = Prefetched(Counted(error=RuntimeError("model gone")), lambda: pool)
    if started:
        value.start()
    with pytest.raises(RuntimeError, match="model gone"):
        value()


class Recorded:
    """A query's ``embed`` and ``prefetch``, recording in which order the store used them."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def embed(self) -> Vector:
        self.events.append("embed")
        return unit_vector(DIM, 1.0)

    def prefetch(self) -> None:
        self.events.append("prefetch")


def _store(path: Path, users: dict[str, int]) -> SQLiteStore:
    store = SQLiteStore(path, keyword_cache_rows=BIG)
    store.bind_embedding(EmbeddingInfo(model="test", dimension=DIM))
    entries = [
        Entry(record("t", user, f"garden note {i} of {user}"), unit_vector(DIM, 1.0, i / 10))
        for user, count in users.items()
        for i in range(count)
    ]
    store.put(entries)
    return store


def test_the_sqlite_store_starts_the_embedding_only_before_fts5(tmp_path: Path) -> None:
    store = _store(tmp_path / "m.db", {"small": 2, "big": 3 * BIG})
    store.preload(Filter(tenant_id="t", user_id="big"))
    try:
        seen = {}
        for user in ("small", "big"):
            calls = Recorded()
            found = store.search(
                SearchQuery(
                    filter=Filter(tenant_id="t", user_id=user),
                    text="garden note",
                    embed=calls.embed,
                    prefetch=calls.prefetch,
                )
            )
            assert found and all(c.vector_score is not None for c in found)
            seen[user] = calls.events
        assert seen["small"] == ["prefetch", "embed"]  # started, then waited for
        assert seen["big"] == ["embed"]  # asked for where the vector half needs it
    finally:
        store.close()


class Watched:
    """The real MiniLM, noting in which thread each query was embedded."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.model, self.dimension = inner.model, inner.dimension
        self.threads: list[str] = []

    def embed(self, texts: Sequence[str]) -> Vector:
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        self.threads.append(threading.current_thread().name)
        return np.asarray(embed_queries(self.inner, texts))


def test_a_big_users_query_is_embedded_in_the_searching_thread(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    watched = Watched(embedder)
    store = SQLiteStore(tmp_path / "m.db", keyword_cache_rows=BIG)
    with LongTermMemory(store, watched) as memory:
        for user, count in (("small", 2), ("big", 3 * BIG)):
            for i in range(count):
                memory.add(f"I water the garden on day {i}.", user_id=user)
        store.preload(Filter(tenant_id="default", user_id="big"))
        threads = {}
        for user in ("small", "big"):
            watched.threads.clear()
            found = memory.search("When do I water the garden?", user_id=user, k=3)
            assert found and "garden" in found[0].record.content.raw
            threads[user] = list(watched.threads)
    assert len(threads["small"]) == 1 and threads["small"][0].startswith("chatmem-embed")
    assert threads["big"] == [threading.current_thread().name]
