"""Every in-process cache stays within a byte budget, whatever the size of what it holds:
the session logs of short-term memory, token counts, the embedder's vectors, the packer's
wire shapes, responses kept without a database, and the extraction scheduler's buffers.
Memory is measured with tracemalloc, not only with the caches' own counts."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem import LocalEmbedder
from chatmem.caches import ENTRY_OVERHEAD, LRUCache, MiB, size_of
from chatmem.formats import render_message
from chatmem.memory.context import Packer
from chatmem.messages import Message, Role, SessionKey
from chatmem.server import Runtime, ServiceConfig
from chatmem.server.response_store import ResponseStore, StoredResponse
from chatmem.sessions.sqlite import SQLiteSessionStore
from chatmem.short_term import LOG_CACHE_SESSIONS, OverflowPolicy, ShortTermMemory
from chatmem.tokens import default_counter
from chatmem.worker import ExtractionScheduler, Triggers

KB = 1024


def retained(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build()`` returns, and the bytes it left allocated (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return made, after - before


def text(n: int, size: int) -> str:
    """``size`` characters of distinct text."""
    seed = f"message {n}: I pasted a long document about my trip to Lisbon. "
    return (seed * (size // len(seed) + 1))[:size]


# -- the cache and the sizes ------------------------------------------------------------------


@pytest.mark.slow
def test_size_of_is_close_to_what_tracemalloc_measures() -> None:
    def build() -> list[Message]:
        return [
            Message(role=Role.USER, content=text(n, 20 * KB), metadata={"project_id": "p"})
            for n in range(200)
        ]

    messages, measured = retained(build)
    estimated = size_of(messages)
    assert 0.8 * measured <= estimated <= 1.3 * measured, (estimated, measured)


def test_the_cache_never_holds_more_than_its_budget() -> None:
    evicted: list[str] = []
    cache: LRUCache[str, str] = LRUCache(256 * KB, on_evict=lambda key, value: evicted.append(key))
    for n in range(500):
        cache.put(f"k{n}", text(n, (n % 40 + 1) * KB))
        assert cache.bytes <= cache.max_bytes
    assert len(cache) < 500 and evicted[0] == "k0"
    assert cache.get("k499") is not None  # the newest stay
    assert not cache.put("huge", "x" * (300 * KB))  # larger than the whole budget
    assert "huge" not in cache and cache.bytes <= cache.max_bytes
    kept = cache.bytes
    value = cache.get("k499")
    assert value is not None
    assert cache.pop("k499") == value
    assert cache.bytes == kept - size_of("k499") - size_of(value) - ENTRY_OVERHEAD


def test_the_cache_also_bounds_entries_and_counts_a_given_size() -> None:
    cache: LRUCache[int, int] = LRUCache(MiB, max_entries=3)
    for n in range(10):
        cache.put(n, n, size=100)
    assert list(cache.keys()) == [7, 8, 9]
    assert cache.bytes == 3 * (100 + ENTRY_OVERHEAD)
    cache.get(7)  # used: now the most recent
    cache.put(10, 10, size=100)
    assert list(cache.keys()) == [9, 7, 10]


# -- short-term memory: the per-session log cache ---------------------------------------------


def fill_sessions(memory: ShortTermMemory, sessions: int, per_session: int, size: int) -> None:
    for s in range(sessions):
        key = SessionKey("t", f"user{s % 7}", f"session{s}")
        for n in range(per_session):
            role = Role.USER if n % 2 == 0 else Role.ASSISTANT
            memory.append(key, [Message(role=role, content=text(s * 100 + n, size))])
        memory.window(key)


@pytest.mark.parametrize("budget_mib", [2, 6])
@pytest.mark.slow
def test_session_logs_stay_within_their_byte_budget(tmp_path: Path, budget_mib: int) -> None:
    store = SQLiteSessionStore(tmp_path / "sessions.db")
    memory = ShortTermMemory(
        store=store,
        policy=OverflowPolicy(strategy="trim", max_turns=40),
        state_every=None,
        log_cache_bytes=budget_mib * MiB,
    )
    # 200 sessions of 6 messages of 20 KB: about 24 MiB of logs, fewer than 256 sessions,
    # so a cache bounded only by sessions would keep them all.
    assert LOG_CACHE_SESSIONS + 100 > 200

    def build() -> ShortTermMemory:
        fill_sessions(memory, 200, 6, 20 * KB)
        return memory

    _, grown = retained(build)
    assert memory._logs.bytes <= budget_mib * MiB
    # What stays allocated (the logs, the token counts, SQLite's Python side) is within the
    # budget plus the token cache's and a little slack.
    assert grown <= budget_mib * MiB + 5 * MiB, grown / MiB
    key = SessionKey("t", "user0", "session0")
    assert [m.content for m in memory.history(key)] == [text(n, 20 * KB) for n in range(6)]
    store.close()


def test_a_session_longer_than_the_budget_is_read_from_the_store(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "sessions.db")
    memory = ShortTermMemory(store=store, state_every=None, log_cache_bytes=100 * KB)
    key = SessionKey("t", "u", "long")
    for n in range(6):
        memory.append(key, [Message(role=Role.USER, content=text(n, 30 * KB))])
    assert len(memory.history(key)) == 6
    assert memory._logs.bytes <= 100 * KB and key not in memory._logs
    store.close()


def test_token_counts_are_bounded_in_bytes() -> None:
    memory = ShortTermMemory(state_every=None)
    for n in range(12_000):  # ids of 256 characters: about 5 MiB of counts
        memory.tokens(Message(role=Role.USER, content="hi", id=f"{n:0>256}"))
    assert memory._token_cache.bytes <= memory._token_cache.max_bytes
    assert len(memory._token_cache) < 12_000


# -- the embedder, the packer, responses, the scheduler ---------------------------------------


def test_the_embedders_cache_is_bounded_in_bytes(embedder: LocalEmbedder) -> None:
    bounded = LocalEmbedder(cache_bytes=MiB, query_model="exact")
    bounded._loaded = embedder._model()  # share the loaded model (no second load)
    for n in range(30):
        bounded.embed_query(text(n, 100 * KB))
    assert bounded._cache.bytes <= MiB
    assert 0 < len(bounded._cache) < 30


def test_the_packers_caches_are_bounded_in_bytes() -> None:
    packer = Packer(default_counter(), 100_000, 0.5, render_message, cache_bytes=MiB)
    for n in range(100):
        packer.cost(Message(role=Role.USER, content=text(n, 50 * KB)))
    assert packer.rendered_cache.bytes <= MiB and packer.cost_cache.bytes <= MiB
    assert 0 < len(packer.rendered_cache) < 100


def response(tenant: str, n: int, size: int, user: str = "alice") -> StoredResponse:
    said = [{"role": "user", "content": text(n, size)}, {"role": "assistant", "content": "ok"}]
    return StoredResponse(f"resp_{n}", tenant, user, "s", said, {"id": f"resp_{n}"}, n)


@pytest.mark.slow
def test_responses_kept_in_memory_are_bounded_in_bytes_across_tenants() -> None:
    store = ResponseStore(None, limit=1000, memory_bytes=2 * MiB)

    def build() -> ResponseStore:
        for n in range(300):
            store.put(response(f"tenant{n % 5}", n, 40 * KB))
        return store

    _, grown = retained(build)
    assert store._memory.bytes <= 2 * MiB
    assert grown <= 3 * MiB, grown / MiB
    assert store.get("tenant4", "resp_299") is not None  # the newest are kept
    assert store.get("tenant0", "resp_0") is None
    kept = sum(store.count(f"tenant{t}") for t in range(5))
    assert kept == len(store._memory)
    before = store.count("tenant4")
    assert before > 0 and store.delete_user("tenant4", "alice") == before
    assert store.count("tenant4") == 0 and store.get("tenant4", "resp_299") is None


def test_the_per_tenant_count_limit_still_holds_in_memory() -> None:
    store = ResponseStore(None, limit=2)
    for n in range(5):
        store.put(response("t", n, 10))
    assert store.count("t") == 2
    assert store.get("t", "resp_2") is None and store.get("t", "resp_4") is not None
    assert store.delete("t", "resp_4") and store.count("t") == 1


def test_the_services_scheduler_keeps_counts_not_messages() -> None:
    scheduler = ExtractionScheduler(Triggers(every_turns=10), keep_messages=False)
    key = SessionKey("t", "u", "s")
    reason = None
    for n in range(10):
        reason = scheduler.check(key, [Message(role=Role.USER, content=text(n, 50 * KB))])
    assert reason is not None  # the trigger still counts the turns
    assert scheduler._sessions[key].buffer == [] and scheduler.take(key) == []


def test_the_service_configures_the_budgets(tmp_path: Path) -> None:
    config = ServiceConfig.parse(
        {
            "memory": {"enabled": False, "sessions": {"log_cache_mib": 3}},
            "server": {"data_dir": str(tmp_path), "responses_memory_mib": 5},
        }
    )
    runtime = Runtime.start(config)
    try:
        assert runtime.short_term._logs.max_bytes == 3 * MiB
        assert runtime.responses._memory.max_bytes == 5 * MiB
        assert not runtime.scheduler.keep_messages
    finally:
        runtime.close()


def test_the_query_cache_counts_an_entry_as_size_of_does_for_one_query_and_a_pair() -> None:
    from chatmem.embeddings.local import _entry_size

    one = np.ones(384, dtype=np.float32)
    pair = np.stack([one, one])
    for key, vector in (
        ((True, "where do I work?"), one),
        ((True, ("What does Caroline paint?", "What does paint?")), pair),
        ((True, ("a", "b")), pair[0]),  # a row of a stack: the buffer is not its own
    ):
        assert _entry_size(key, vector) == size_of(key) + size_of(vector)


def test_the_heads_a_search_ranks_by_are_held_within_their_budget(tmp_path: Path) -> None:
    """``SQLiteStore``'s heads (``stores.sqlite.head_cache``): two users' heads, read 50 at
    a time as a search reads them, keep to the budget as tracemalloc measures it, and the
    cache's own count of a user's heads is not below what they take."""
    from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
    from chatmem.stores import SQLiteStore

    store = SQLiteStore(tmp_path / "heads.db", head_cache_bytes=MiB)
    store.bind_embedding(EmbeddingInfo(model="test", dimension=4))
    users = {}
    for user in ("ana", "bo"):
        records = [
            MemoryRecord(user_id=user, content={"raw": text(n, 600)}, context={"speaker": user})
            for n in range(1_500)  # about 1.3 MiB of heads each
        ]
        store.put([Entry(r, np.ones(4, dtype=np.float32)) for r in records])
        users[user] = [r.id for r in records]

    def read(user: str, count: int) -> None:
        ids = users[user][:count]
        for start in range(0, len(ids), 50):
            store.heads(ids[start : start + 50], Filter(user_id=user))

    # One user's 600 heads, under the budget: what the cache counts covers what they take.
    _, taken = retained(lambda: read("ana", 600))
    held = store._head_cache._cache
    assert len(held) == 1 and taken <= held.bytes * 1.1
    # All of hers are more than the budget: those held stay held, the rest are read.
    read("ana", 1_500)
    kept = held.get(("default", "ana"))
    assert kept is not None and 600 < len(kept.heads) < 1_500 and held.bytes <= MiB
    # Another user's heads in full: the budget holds, as tracemalloc measures it too.
    _, taken = retained(lambda: read("bo", 1_500))
    assert held.bytes <= MiB and taken <= 1.2 * MiB
    store.close()
