"""Times at the calendar's edges are times like any other (the class "an input gives a 500").

A message may be said at 9999-12-31T23:59:59.999Z or at 0001-01-01T00:00:00Z: both pass
validation, and each step that moves a time by a millisecond, a week or a day (a session's
earlier turns, the latest word on what a search found, "tomorrow" in a message, the
inspector's "until" day) must hold at the edge, not raise ``OverflowError``
(``records.shifted``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from chatmem import LongTermMemory
from chatmem.embeddings import LocalEmbedder
from chatmem.extraction import OfflineExtractor
from chatmem.extraction.dates import find_date
from chatmem.messages import Message
from chatmem.records import EARLIEST, LATEST, Filter, from_ms, shifted, to_ms
from chatmem.stores import MemoryStore
from tests.stores.conftest import (  # noqa: F401 (redis_url: the cached store's fixture)
    EVERY_BACKEND,
    opened_store,
    redis_url,
)

EDGES = [pytest.param(EARLIEST, id="first"), pytest.param(LATEST, id="last")]


@pytest.mark.parametrize("ms", [0, 1_700_000_000_123, 253_402_300_799_999, -62_135_596_800_000])
def test_milliseconds_since_the_epoch_convert_exactly_at_every_date(ms: int) -> None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    assert from_ms(ms) == moment and to_ms(moment) == ms


def test_a_shift_past_the_calendar_holds_at_its_edge() -> None:
    assert datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) == LATEST
    assert shifted(LATEST, timedelta(milliseconds=1)) == LATEST
    assert shifted(EARLIEST, -timedelta(days=7)) == EARLIEST
    assert shifted(LATEST, -timedelta(days=1)) == LATEST - timedelta(days=1)
    moment = datetime(2024, 5, 1, tzinfo=UTC)
    assert shifted(moment, timedelta(weeks=1)) == datetime(2024, 5, 8, tzinfo=UTC)


@pytest.fixture(params=EVERY_BACKEND)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from opened_store(request, tmp_path)


@pytest.mark.parametrize("said", EDGES)
def test_a_chat_said_at_an_edge_is_stored_and_found(
    any_store: MemoryStore, embedder: LocalEmbedder, said: datetime
) -> None:
    turns = ["I've lived in Lisbon for six years.", "I moved to Porto last week, I love it."]
    with LongTermMemory(any_store, embedder) as memory:
        for text in turns:  # a turn an add, as a live agent adds them: the second reads the first
            message = {"role": "user", "name": "Ana", "content": text, "timestamp": said}
            memory.add([message], user_id="u", session_id="s")
        stored = {r.text: r for r in memory.list(Filter(user_id="u")).records}
        assert sorted(stored) == sorted(turns)
        assert {r.time.created_at for r in stored.values()} == {said}
        # Said at the same moment, the second turn has the first as its context, as on any
        # other day (at the last moment too, where no time is past the bound).
        second = stored[turns[1]].context
        assert second is not None and turns[0] in (second.before or "")
        hits = memory.search("Where does Ana live now?", user_id="u", k=2, threshold=0.0)
        assert {h.record.text for h in hits} == set(turns)


@pytest.mark.parametrize(
    ("text", "anchor"),
    [
        ("see you tomorrow", date(9999, 12, 31)),
        ("next week then", date(9999, 12, 31)),
        ("in 5 months", date(9999, 10, 1)),
        ("it happened yesterday", date(1, 1, 1)),
        ("last month", date(1, 1, 5)),
        ("two weeks ago", date(1, 1, 3)),
    ],
)
def test_a_date_past_the_calendar_resolves_to_none(text: str, anchor: date) -> None:
    assert find_date(text, anchor) is None
    assert find_date(text, date(2024, 6, 12)) is not None  # the same words on a usual day


def test_the_offline_extractor_reads_a_message_said_on_the_last_day() -> None:
    """(A short-term ``Message`` is said at the epoch or after: the first edge is 1970.)"""
    said = LATEST
    message = Message(
        role="user",
        content="I'm moving to Berlin next week. My name is Ana and I love hiking.",
        id="m1",
        timestamp=to_ms(said),
    )
    facts = OfflineExtractor().extract([message])
    assert any("Ana" in fact.text for fact in facts)
