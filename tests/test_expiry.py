"""A memory's TTL through the library: set by ``add`` and ``update``, honoured by every read
of ``LongTermMemory`` (and what reads through it), removed by the decay sweep."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chatmem import LocalEmbedder
from chatmem.errors import NotFoundError, ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.long_term.decay import EXPIRED_REASON, sweep_decay
from chatmem.records import Filter, HistoryEvent, utcnow


@pytest.fixture
def memory(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[LongTermMemory]:
    with LongTermMemory.open(f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder) as opened:
        yield opened


def _reads(memory: LongTermMemory, memory_id: str) -> dict[str, bool]:
    """Whether each read path returns ``memory_id``."""
    scope = Filter(user_id="alice")
    try:
        memory.get(memory_id, user_id="alice")
        got = True
    except NotFoundError:
        got = False
    out = io.StringIO()
    memory.export_jsonl(scope, out)
    return {
        "get": got,
        "search": any(r.record.id == memory_id for r in memory.search("voucher", user_id="alice")),
        "list": any(r.id == memory_id for r in memory.list(scope).records),
        "count": memory.count(scope) > 0,
        "export": memory_id in out.getvalue(),
    }


def test_an_expired_memory_is_never_read(memory: LongTermMemory) -> None:
    (gone,) = memory.add(
        "my voucher code is 1234", user_id="alice", expires_at=utcnow() - timedelta(seconds=1)
    )
    assert _reads(memory, gone.id) == dict.fromkeys(_reads(memory, gone.id), False)
    with pytest.raises(NotFoundError):
        memory.update(gone.id, "my voucher code is 5678", user_id="alice")


def test_a_memory_is_read_until_it_expires(memory: LongTermMemory) -> None:
    (soon,) = memory.add(
        "my voucher code is 1234",
        user_id="alice",
        expires_at=utcnow() + timedelta(milliseconds=800),
    )
    assert all(_reads(memory, soon.id).values())
    time.sleep(1.0)
    assert not any(_reads(memory, soon.id).values())


def test_update_sets_moves_and_removes_the_ttl(memory: LongTermMemory) -> None:
    (record,) = memory.add("my voucher code is 1234", user_id="alice")
    assert record.time.expires_at is None
    later = datetime(2100, 1, 1, 12, 0, 0, 123456)  # naive: UTC, cut to milliseconds
    changed = memory.update(record.id, user_id="alice", expires_at=later)
    assert changed.time.expires_at == datetime(2100, 1, 1, 12, 0, 0, 123000, tzinfo=UTC)
    cleared = memory.update(record.id, user_id="alice", expires_at="never")
    assert cleared.time.expires_at is None
    memory.update(record.id, user_id="alice", expires_at=utcnow() - timedelta(seconds=1))
    assert not any(_reads(memory, record.id).values())


def test_a_ttl_that_is_not_a_time_is_refused(memory: LongTermMemory) -> None:
    with pytest.raises(ValidationError) as raised:
        memory.add("x", user_id="alice", expires_at="soon")  # type: ignore[arg-type]
    assert (raised.value.field or "").startswith("time")


def test_the_decay_sweep_deletes_expired_memories_with_reason_expired(
    memory: LongTermMemory,
) -> None:
    past = utcnow() - timedelta(seconds=1)
    (gone,) = memory.add("my voucher code is 1234", user_id="alice", expires_at=past)
    (pinned,) = memory.add("pinned but expired", user_id="alice", tags=["pinned"], expires_at=past)
    (kept,) = memory.add("I like tea", user_id="alice")
    report = sweep_decay(memory)
    assert report.expired == 2
    for memory_id in (gone.id, pinned.id):
        last = memory.history(memory_id, user_id="alice")[-1]
        assert (last.event, last.reason) == (HistoryEvent.DELETE, EXPIRED_REASON)
    assert memory.get(kept.id, user_id="alice").id == kept.id


def test_forgetting_a_user_removes_the_expired_memories_too(memory: LongTermMemory) -> None:
    memory.add("old", user_id="alice", expires_at=utcnow() - timedelta(seconds=1))
    memory.add("new", user_id="alice")
    assert memory.delete_all(Filter(user_id="alice"), reason="forget") == 2
    assert memory.store.count(Filter(user_id="alice", expired=None)) == 0
