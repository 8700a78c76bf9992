"""The ids of each session's latest turns that ``add`` keeps (``SessionTails``) are counted in
bytes as ``caches.size_of`` counts them, by a function that does not walk the objects
generically on every add; and a session's earlier turns not kept are read from the store,
once for a session that has none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.caches import ENTRY_OVERHEAD, size_of
from chatmem.long_term.session_tails import SESSION_LOOKBACK, _tail_size
from chatmem.records import MemoryRecord, Page
from chatmem.stores import SQLiteStore

S = TypeVar("S", bound=SQLiteStore)


def test_a_tails_size_is_what_size_of_counts() -> None:
    tails = [
        (("default", "ana", "s1", ()), (("a" * 32,),)),
        (("t", "ben", "s2", ("ops", "hr")), (("a" * 32,), ("b" * 32, "c" * 32, "d" * 32))),
        (("t", "José", "s3", ("ops",)), (("é" * 40,), ("f" * 32,))),
    ]
    for key, tail in tails:
        assert _tail_size(key, tail) == size_of(key) + size_of(tail)


def test_the_kept_tails_bytes_after_live_adds(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder) as memory:
        for n, who in enumerate(["user", "assistant", "user"]):
            said = {"role": who, "content": f"turn {n} about the garden"}
            memory.add([said], user_id="ana", session_id="s1", allowed_roles=["ops"])
        kept = memory._tails._tails
        (key,) = tuple(kept.keys())
        tail = kept.get(key)
        assert tail is not None and len(tail) == 1
        assert kept.bytes == size_of(key) + size_of(tail) + ENTRY_OVERHEAD


class _CountingStore(SQLiteStore):
    """A real SQLite store that counts the ``list`` reads made of it."""

    lists = 0

    def list(self, *args: Any, **kwargs: Any) -> Page:
        self.lists += 1
        return super().list(*args, **kwargs)


def test_a_new_sessions_first_message_reads_the_store_once(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    store = _CountingStore(tmp_path / "m.db")
    with LongTermMemory(store, embedder) as memory:
        (first,) = memory.add(
            {"role": "user", "content": "I moved to Lisbon"}, user_id="ana", session_id="s1"
        )
        assert store.lists == 1
        assert first.context is not None and first.context.before is None


def _reply_in_a_new_process(
    path: Path, embedder: LocalEmbedder, store_type: type[S]
) -> tuple[MemoryRecord, S]:
    """A session's turn written in one process, then its reply three hours later through a
    new ``store_type`` on the same file (a new process: no tail is remembered, the earlier
    turn is found by reading the session's spans, the first narrow ones empty)."""
    start = datetime(2024, 5, 8, 9, 0, tzinfo=UTC)
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        memory.add(
            {"role": "user", "name": "Ana", "content": "I moved to Lisbon", "timestamp": start},
            user_id="ana",
            session_id="s1",
        )
    store = store_type(path)
    with LongTermMemory(store, embedder) as memory:
        (reply,) = memory.add(
            {"role": "assistant", "content": "How is it?", "timestamp": start + timedelta(hours=3)},
            user_id="ana",
            session_id="s1",
        )
    return reply, store


def test_a_session_found_again_in_the_store_gives_its_context(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    reply, store = _reply_in_a_new_process(tmp_path / "m.db", embedder, _CountingStore)
    assert reply.context is not None and reply.context.before == "Ana: I moved to Lisbon"
    assert store.lists == 1 + SESSION_LOOKBACK.index(timedelta(days=1)) + 1


class _RacedStore(SQLiteStore):
    """A real SQLite store whose first one-memory page comes back empty with a cursor, as a
    Milvus or Qdrant page does when the memory it picked is deleted or expires before its
    body is read."""

    raced = False

    def list(self, scope: Any, limit: int = 100, cursor: str | None = None) -> Page:
        page = super().list(scope, limit, cursor)
        if limit == 1 and not self.raced and page.records:
            self.raced = True
            return Page([], page.next_cursor or "more")
        return page


def test_an_empty_page_with_more_to_come_is_not_taken_for_an_empty_session(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    reply, store = _reply_in_a_new_process(tmp_path / "m.db", embedder, _RacedStore)
    assert store.raced
    assert reply.context is not None and reply.context.before == "Ana: I moved to Lisbon"
