"""A question about the present is answered by the latest word on what it found first
(``RankingConfig.latest_word``, ``chatmem.long_term.latest``, issue 18): "What kind of food
does Hana like these days?" finds "I could eat Moroccan food every single day" by its
words, and what she said months later about it ("My taste has changed: Lebanese is my
go-to now, Moroccan just doesn't do it.") shares none of them. It goes right above it.

Only what the first memory's speaker said later, whose own nearest earlier memory is the
first, and which is nearer to it than anything else the search found, is moved; a filter,
and what a reader may not see, hold for it as for every other memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chatmem import LongTermMemory, RankingConfig
from chatmem.embeddings import LocalEmbedder
from chatmem.records import Filter
from chatmem.stores import MemoryStore
from chatmem.stores.sqlite import SQLiteStore
from tests.stores.conftest import (  # noqa: F401 (redis_url: the cached store's fixture)
    EVERY_BACKEND,
    opened_store,
    redis_url,
)

START = datetime(2024, 1, 5, 18, tzinfo=UTC)
#: (day, speaker, text). Hana's taste changes on day 20; Ben's on day 9.
CHAT = [
    (0, "Hana", "I could eat Moroccan food every single day, honestly."),
    (2, "Hana", "Zara from book club swears Indian food is the best in town."),
    (5, "Hana", "Ibrahim from book club swears Greek food is the best in town."),
    (9, "Ben", "Funny, I've gone off Moroccan food too; these days I only want Korean."),
    (20, "Hana", "My taste has changed: Lebanese is my go-to now, Moroccan just doesn't do it."),
    (25, "Hana", "Rosa from book club swears Thai food is the best in town."),
    (30, "Hana", "I finally fixed the leaking tap in the kitchen."),
]
OLD, NEW = CHAT[0][2], CHAT[4][2]
ASKED = "What kind of food does Hana like these days?"


def _store(
    memory: LongTermMemory, chat: Sequence[tuple[int, str, str]], roles: dict[str, list[str]]
) -> None:
    """``chat`` added a turn at a time, as a live agent adds it; ``roles``: the turns
    (by text) that only those roles may read."""
    for place, (day, speaker, text) in enumerate(chat):
        when = START + timedelta(days=day, minutes=place)
        memory.add(
            [{"role": "user", "name": speaker, "content": text, "timestamp": when}],
            user_id="u",
            session_id=f"day-{day}",
            allowed_roles=roles.get(text),
        )


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> Path:
    path = tmp_path / "chat.db"
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        _store(memory, CHAT, {})
    return path


def _texts(
    path: Path,
    embedder: LocalEmbedder,
    asked: str,
    *,
    on: bool,
    k: int = 3,
    filter: Filter | None = None,
) -> list[str]:
    ranking = RankingConfig(latest_word=on)
    with LongTermMemory(SQLiteStore(path), embedder, ranking_config=ranking) as memory:
        hits = memory.search(asked, user_id="u", k=k, threshold=0.0, filter=filter)
    return [h.record.text for h in hits]


def test_the_latest_word_on_what_was_found_first_comes_right_above_it(
    chat: Path, embedder: LocalEmbedder
) -> None:
    without = _texts(chat, embedder, ASKED, on=False)
    assert without[0] == OLD and NEW not in without  # by its words, only the old taste
    assert _texts(chat, embedder, ASKED, on=True) == [NEW, OLD, *without[1:2]]


def test_it_takes_the_place_and_score_of_what_it_updates(
    chat: Path, embedder: LocalEmbedder
) -> None:
    with LongTermMemory(SQLiteStore(chat), embedder) as memory:
        latest, old, *_ = memory.search(ASKED, user_id="u", k=3, threshold=0.0)
    assert (latest.record.text, old.record.text) == (NEW, OLD)
    assert latest.score == old.score
    # Ranked by the memory it updates, its own scores are what they were.
    assert latest.vector_score is not None and latest.vector_score < old.vector_score


def test_a_question_not_about_the_present_is_ranked_as_without_it(
    chat: Path, embedder: LocalEmbedder
) -> None:
    asked = "What kind of food does Hana like?"
    assert _texts(chat, embedder, asked, on=True, k=5) == _texts(
        chat, embedder, asked, on=False, k=5
    )


def test_what_someone_else_said_later_is_not_her_latest_word(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    path = tmp_path / "chat.db"
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        _store(memory, [turn for turn in CHAT if turn[2] != NEW], {})
    on = _texts(path, embedder, ASKED, on=True, k=5)
    assert on == _texts(path, embedder, ASKED, on=False, k=5)
    assert on[0] == OLD  # Ben's "gone off Moroccan food" stays where it ranks


def test_a_latest_word_already_first_moves_nothing(chat: Path, embedder: LocalEmbedder) -> None:
    """Asked by the new taste's words, the old one is earlier: nothing is later to move."""
    asked = "Is Lebanese food her go-to these days?"
    on = _texts(chat, embedder, asked, on=True, k=5)
    assert on[0] == NEW and on == _texts(chat, embedder, asked, on=False, k=5)


def test_a_filter_holds_for_the_latest_word(chat: Path, embedder: LocalEmbedder) -> None:
    before = Filter(created_before=START + timedelta(days=15))
    on = _texts(chat, embedder, ASKED, on=True, k=5, filter=before)
    assert NEW not in on and on == _texts(chat, embedder, ASKED, on=False, k=5, filter=before)


def test_a_reader_never_gets_a_latest_word_it_may_not_read(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    path = tmp_path / "chat.db"
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        _store(memory, CHAT, {NEW: ["hr"]})
    for roles in (frozenset(), frozenset({"sales"})):
        readers = Filter(reader_roles=roles)
        on = _texts(path, embedder, ASKED, on=True, k=len(CHAT), filter=readers)
        assert NEW not in on
        assert on == _texts(path, embedder, ASKED, on=False, k=len(CHAT), filter=readers)
    hr = _texts(path, embedder, ASKED, on=True, filter=Filter(reader_roles=frozenset({"hr"})))
    assert hr[:2] == [NEW, OLD]


@pytest.fixture(params=EVERY_BACKEND)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    yield from opened_store(request, tmp_path)


def test_every_backend_finds_the_latest_word(
    any_store: MemoryStore, embedder: LocalEmbedder
) -> None:
    """The same two store reads (a vector search among what was said after, one among what
    was said before) on each store: the order SQLite gives."""
    with LongTermMemory(any_store, embedder) as memory:
        _store(memory, CHAT, {})
        hits = memory.search(ASKED, user_id="u", k=3, threshold=0.0)
    assert [h.record.text for h in hits][:2] == [NEW, OLD]
