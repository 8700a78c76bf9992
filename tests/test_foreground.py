"""Background jobs give way to searches in flight (``chatmem.foreground``, issue 14)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from chatmem import Filter, LocalEmbedder, LongTermMemory, MemoryRecord, sweep_decay
from chatmem.foreground import FOREGROUND, Foreground
from chatmem.records import EmbeddingInfo, Entry
from chatmem.retrieval.search_pool import SearchPool
from chatmem.stores import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _paused_in_thread(foreground: Foreground, longest_s: float) -> threading.Event:
    returned = threading.Event()

    def pause() -> None:
        foreground.pause(longest_s)
        returned.set()

    threading.Thread(target=pause, daemon=True).start()
    return returned


def _search_running(foreground: Foreground) -> threading.Event:
    """A search in flight in another thread until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def search() -> None:
        with foreground.unit():
            held.set()
            release.wait(30)

    threading.Thread(target=search, daemon=True).start()
    held.wait(5)
    return release


def test_a_pause_waits_for_the_work_in_flight_and_no_longer() -> None:
    foreground = Foreground()
    foreground.pause(30)  # nothing runs: returns at once (else the test would hang)
    assert foreground.waited == 0
    release = _search_running(foreground)
    returned = _paused_in_thread(foreground, 30)
    assert not returned.wait(0.3)  # the search still runs
    release.set()
    assert returned.wait(5)
    assert foreground.waited == 1 and foreground.running == 0
    # A pause under constant load still ends, after longest_s.
    with foreground.unit():
        assert _paused_in_thread(foreground, 0.05).wait(5)


def test_the_search_pool_counts_its_searches_as_foreground() -> None:
    pool = SearchPool(1)
    seen: list[int] = []
    try:
        pool.run(lambda _: seen.append(FOREGROUND.running), budget_ms=5000, queue_ms=5000)
    finally:
        pool.close()
    assert seen == [1] and FOREGROUND.running == 0


class _Store(SQLiteStore):
    """Counts delete transactions."""

    deletes = 0

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        self.deletes += 1
        return super().delete(scope, reason)


def test_a_sweep_deletes_a_page_in_few_transactions_and_pauses_for_searches(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    store = _Store(tmp_path / "sweep.db")
    store.bind_embedding(EmbeddingInfo(model=embedder.model, dimension=embedder.dimension))
    old = NOW - timedelta(days=400)
    records = [
        MemoryRecord.checked(
            {
                "user_id": "u",
                "content": {"raw": f"stale note {n}"},
                "metadata": {"importance": 0.2},
                "time": {"created_at": old, "updated_at": old},
            }
        )
        for n in range(60)
    ]
    unit = np.full(embedder.dimension, embedder.dimension**-0.5, dtype=np.float32)
    store.put([Entry(r, unit) for r in records])
    memory = LongTermMemory(store, embedder)
    release = _search_running(FOREGROUND)
    waited = FOREGROUND.waited
    threading.Timer(0.5, release.set).start()
    report = sweep_decay(memory, user_id="u", now=NOW)
    assert report.deleted == 60
    assert store.deletes <= 3  # the expired ones, then one per reason (all score under 0.01)
    assert FOREGROUND.waited > waited  # it paused while the search ran
    assert store.count(Filter(user_id="u")) == 0


def test_usage_writes_pause_for_searches(tmp_path: Path, embedder: LocalEmbedder) -> None:
    from chatmem.retrieval import UsageRecorder

    with LongTermMemory(SQLiteStore(tmp_path / "usage.db"), embedder) as memory:
        stored = memory.add([{"role": "user", "content": "I drink green tea."}], user_id="u")
        with UsageRecorder(memory, flush_every_s=60) as recorder:
            recorder.record([r.id for r in stored], user_id="u")
            release = _search_running(FOREGROUND)
            waited = FOREGROUND.waited
            threading.Timer(0.3, release.set).start()
            assert recorder.flush() == len(stored)
            assert FOREGROUND.waited > waited
        assert memory.get(stored[0].id, user_id="u").access_count == 1
